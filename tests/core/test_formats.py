"""Reading the office and web formats: recognised by content, chunked with their
location in the document's own terms, tables kept as rows and cells.

Real files made by real producers (tests/core/data/formats/README.md names them and
their licences); the shared corpus is read too when it is present.
"""

from __future__ import annotations

import io
import itertools
import zipfile
from pathlib import Path

import pytest

from core.ingest.chunker import Chunk, Location
from core.ingest.formats import FORMATS, format_info
from core.ingest.parsing import ParsedDocument, ParseFailure, parse_document
from core.ingest.sniffing import sniff_kind
from core.states import DocumentKind, ErrorCode
from tests import hostile

DATA = Path(__file__).parent / "data" / "formats"
SHARED_CORPUS = Path("/work/shared/corpora/formats")


def parsed(name: str) -> ParsedDocument:
    data = (DATA / name).read_bytes()
    kind = sniff_kind(data, name)
    assert kind is not None, name
    return parse_document(data, kind)


def located(doc: ParsedDocument) -> list[tuple[str, str]]:
    return [(c.location.label() if c.location else "", c.text) for c in doc.chunks]


# --- recognised by content ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("word_tables.docx", DocumentKind.DOCX),
        ("powerpoint_sample.pptx", DocumentKind.PPTX),
        ("test.xlsx", DocumentKind.XLSX),
        ("winter-sports.epub", DocumentKind.EPUB),
        ("fake-html-cp1252.html", DocumentKind.HTML),
        ("raw_text.csv", DocumentKind.CSV),
        ("stanley-cups-utf-16.csv", DocumentKind.CSV),
        ("password_protected.xlsx", DocumentKind.XLSX),
        ("bug53475-password-is-pass.docx", DocumentKind.DOCX),
    ],
)
def test_each_format_is_recognised_by_its_content_whatever_its_name(
    name: str, kind: DocumentKind
) -> None:
    data = (DATA / name).read_bytes()
    assert sniff_kind(data, name) is kind
    if kind in (DocumentKind.CSV, DocumentKind.XLSX, DocumentKind.DOCX) and data.startswith(
        b"\xd0\xcf"
    ):
        return  # an encrypted package says nothing of its format: the name decides
    if kind is not DocumentKind.CSV or name == "raw_text.csv":
        assert sniff_kind(data, "upload.bin") is kind, "content, not the name, decides"


def test_a_docx_that_is_a_pdf_is_a_pdf_and_a_pdf_that_is_a_zip_is_refused() -> None:
    assert sniff_kind(hostile.make_pdf(["hello"]), "report.docx") is DocumentKind.PDF
    docx = (DATA / "word_tables.docx").read_bytes()
    assert sniff_kind(docx, "report.pdf") is None
    # A zip that is no Office file or book is still refused.
    assert sniff_kind(hostile.zip_as_pdf(), "archive.docx") is None


def test_macro_enabled_and_template_variants_read_as_their_format() -> None:
    original = zipfile.ZipFile(DATA / "test.xlsx")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as out:
        for item in original.infolist():
            data = original.read(item)
            if item.filename == "[Content_Types].xml":
                data = data.replace(
                    b"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml",
                    b"application/vnd.ms-excel.sheet.macroEnabled.main+xml",
                )
            out.writestr(item, data)
    xlsm = buffer.getvalue()
    assert sniff_kind(xlsm, "book.xlsm") is DocumentKind.XLSX
    doc = parse_document(xlsm, DocumentKind.XLSX)
    assert any("Alpha" in c.text for c in doc.chunks)


@pytest.mark.parametrize(
    ("text", "name", "kind"),
    [
        (b"<!DOCTYPE html><html><body><p>hi</p></body></html>", "page", DocumentKind.HTML),
        (b"<?xml version='1.0'?>\n<html xmlns='x'><p>hi</p></html>", "x.xhtml", DocumentKind.HTML),
        (b"<p>a fragment is not a page</p>", "frag", DocumentKind.TEXT),
        (b"<!DOCTYPE html><html>kept as asked</html>", "notes.md", DocumentKind.MARKDOWN),
        (b"a,b,c\n1,2,3\n4,5,6\n", "export", DocumentKind.CSV),
        (b"a\tb\n1\t2\n3\t4\n", "export.dat", DocumentKind.CSV),
        (b"name,age\n", "people.csv", DocumentKind.CSV),
        (b"Hello, world.\nA second line, with a comma.\nNo comma\n", "note", DocumentKind.TEXT),
        (b"a,b,c\n1,2,3\n4,5,6\n", "table.txt", DocumentKind.TEXT),
    ],
)
def test_html_and_csv_are_text_with_a_shape(text: bytes, name: str, kind: DocumentKind) -> None:
    assert sniff_kind(text, name) is kind


# --- where each chunk came from ------------------------------------------------------------


def test_docx_chunks_carry_their_heading_path_and_tables_stay_rows() -> None:
    lists = located(parsed("docx_lists.docx"))
    assert ("Test Document > Test 2:", "Test 2:\nList item a\nList item b\nList item c") in lists
    tables = parsed("word_tables.docx")
    first_table = next(c for c in tables.chunks if c.text.startswith("| Header 0.0"))
    assert first_table.text.splitlines()[:3] == [
        "| Header 0.0 | Header 0.1 | Header 0.2 |",
        "| --- | --- | --- |",
        "| Cell 1.0 | Cell 1.1 | Cell 1.2 |",
    ]
    assert first_table.location == Location(headings=("Test with tables",), rows=(1, 2))


def test_pptx_chunks_name_their_slide_and_notes_are_marked() -> None:
    doc = parsed("powerpoint_sample.pptx")
    assert doc.pages == 3
    labels = located(doc)
    assert ("slide 2 notes", "Some notes on the second slide.") in labels
    slide_two = [text for label, text in labels if label == "slide 2"]
    assert slide_two and slide_two[0].startswith("Second slide title")
    table = next(c for c in doc.chunks if c.text.startswith("|"))
    assert table.location is not None and table.location.slide == 1


def test_xlsx_chunks_name_sheet_and_rows_and_keep_the_header() -> None:
    doc = parsed("test.xlsx")
    assert doc.pages == 2
    first = doc.chunks[0]
    assert first.location == Location(sheet="Sheet1", rows=(2, 24))
    lines = first.text.splitlines()
    assert lines[0] == "| Alpha | Beta | Gamma | Delta |"
    assert lines[2] == "| 89 | 82 | 100 | 12 |"


def test_a_long_table_is_cut_between_rows_and_every_piece_keeps_its_header() -> None:
    data = (DATA / "raw_text.csv").read_bytes()
    doc = parse_document(data, DocumentKind.CSV, chunk_size=1000, chunk_overlap=100)
    header = doc.chunks[0].text.splitlines()[0]
    assert header.startswith("| CREATION DATE | STATUS |")
    spans = []
    for chunk in doc.chunks:
        assert chunk.text.splitlines()[0] == header
        assert len(chunk.text) <= 1000 or chunk.location is None
        assert chunk.location is not None and chunk.location.rows is not None
        spans.append(chunk.location.rows)
    # Rows run on without a gap or an overlap, from the first data row (2).
    assert spans[0][0] == 2
    for (_, last), (first, _) in itertools.pairwise(spans):
        assert first == last + 1


def test_a_wide_table_names_each_cell_instead_of_repeating_a_huge_header() -> None:
    header = ",".join(f"measurement {n} in millimetres" for n in range(60))
    rows = "\n".join(",".join(str(r * 100 + c) for c in range(60)) for r in range(50))
    doc = parse_document(f"{header}\n{rows}\n".encode(), DocumentKind.CSV)
    assert all(len(c.text) <= 1000 for c in doc.chunks)
    first = doc.chunks[0]
    assert first.text.splitlines()[:2] == [
        "measurement 0 in millimetres: 0",
        "measurement 1 in millimetres: 1",
    ]
    assert first.location is not None and first.location.rows is not None
    assert first.location.rows[0] == 2
    # Every cell is there once: nothing is lost, and the header is not copied 50 times.
    text = "\n".join(c.text for c in doc.chunks)
    assert text.count("measurement 7 in millimetres: ") == 50


def test_utf16_csv_reads_as_rows() -> None:
    doc = parsed("stanley-cups-utf-16.csv")
    lines = doc.chunks[0].text.splitlines()
    assert lines[0].startswith("| Stanley Cups |")
    assert doc.chunks[0].location == Location(rows=(2, 5))


def test_html_sections_follow_headings_in_the_charset_the_page_names() -> None:
    doc = parsed("fake-html-cp1252.html")
    chunk = doc.chunks[0]
    assert chunk.location == Location(headings=("My First Heading",))
    assert "Die schöne Frau hat einen Kaffee mit Kuchen gegessen" in chunk.text


def test_html_tables_scripts_and_nested_headings() -> None:
    page = (
        b"<!doctype html><html><head><title>T</title><script>var x = 1;</script></head>"
        b"<body><h1>Guide</h1><p>Intro text.</p><h2>Prices</h2>"
        b"<table><tr><th>Item</th><th>Price</th></tr><tr><td>Tea</td><td>3</td></tr>"
        b"<tr><td>Cake</td><td>4</td></tr></table><h2>Hours</h2><p>Open daily"
        b"</body></html>"
    )
    chunks = parse_document(page, DocumentKind.HTML).chunks
    assert [(c.location.label() if c.location else "", c.text) for c in chunks] == [
        ("Guide", "Guide\nIntro text."),
        ("Guide > Prices", "Prices"),
        (
            "Guide > Prices rows 1-2",
            "| Item | Price |\n| --- | --- |\n| Tea | 3 |\n| Cake | 4 |",
        ),
        ("Guide > Hours", "Hours\nOpen daily"),
    ]


def test_epub_chapters_are_read_in_spine_order_under_their_titles() -> None:
    doc = parsed("winter-sports.epub")
    assert doc.pages == 10
    headings = [c.location.headings for c in doc.chunks if c.location is not None]
    assert all(h for h in headings)
    text = "\n".join(c.text for c in doc.chunks)
    assert 0 < text.index("WINTER SPORTS IN SWITZERLAND") < text.index("Project Gutenberg Literary")


def test_pdf_and_text_chunks_are_as_before() -> None:
    # Their location is the page (or nothing): no stored location, so their rows and
    # result checksums are what they were before formats had modules.
    text = parse_document(b"plain words here", DocumentKind.TEXT)
    assert text.chunks == (Chunk(0, "plain words here", None, 0, 16),)
    pdf = parse_document(hostile.make_pdf(["page one", "page two"]), DocumentKind.PDF)
    assert [(c.page, c.stored_location) for c in pdf.chunks] == [(1, None), (2, None)]
    assert format_info(DocumentKind.TEXT, "pypdf") == {"parser": "text"}


def test_location_round_trips_through_its_stored_form() -> None:
    for location in (
        Location(slide=3, notes=True),
        Location(sheet="Q1 \u2013 EMEA", rows=(2, 41)),
        Location(headings=("Chapter 1", "Setup")),
    ):
        stored = location.stored()
        assert stored is not None
        assert Location.from_stored(None, stored) == location
    assert Location(page=4).stored() is None
    assert Location.from_stored(4, None).label() == "p. 4"


def test_a_location_says_only_its_page_exactly_when_none_is_stored() -> None:
    for location in (
        Location(),
        Location(page=4),
        Location(page=4, slide=1),
        Location(notes=True),
        Location(sheet="Q1"),
        Location(rows=(1, 1)),
        Location(page=2, headings=("A",)),
        Location(part="footer"),
    ):
        assert location.says_only_page() == (location.stored() is None), location


# --- failures are the document's, with a stable code -----------------------------------------


@pytest.mark.parametrize("name", ["password_protected.xlsx", "bug53475-password-is-pass.docx"])
def test_encrypted_office_files_need_a_password(name: str) -> None:
    with pytest.raises(ParseFailure) as failure:
        parsed(name)
    assert failure.value.code is ErrorCode.PARSE_ERROR
    assert "needs a password" in failure.value.reason


def test_strict_open_xml_is_refused_by_name() -> None:
    # SimpleStrict.xlsx (POI) is Excel's "Strict Open XML Spreadsheet": its namespaces
    # are not the ones openpyxl reads, and saying so beats "a part is missing". (A
    # Strict DOCX is read: tests/core/test_formats_docx.py.)
    data = (DATA / "SimpleStrict.xlsx").read_bytes()
    with pytest.raises(ParseFailure, match="Strict Open XML, which is not supported"):
        parse_document(data, sniff_kind(data, "SimpleStrict.xlsx") or DocumentKind.XLSX)


def test_every_format_says_what_it_needs_and_it_is_installed() -> None:
    assert set(FORMATS) == set(DocumentKind)
    for fmt in FORMATS.values():
        info = format_info(fmt.kind, "pypdf")
        assert info.get("version") != "missing", fmt.kind


@pytest.mark.skipif(not SHARED_CORPUS.is_dir(), reason="the shared corpus is not on this machine")
@pytest.mark.parametrize(
    "path",
    sorted(SHARED_CORPUS.iterdir()) if SHARED_CORPUS.is_dir() else [],
    ids=lambda p: p.name,
)
def test_every_corpus_file_ends_in_chunks_or_a_stable_failure(path: Path) -> None:
    data = path.read_bytes()
    kind = sniff_kind(data, path.name)
    if kind is None:
        pytest.skip("not accepted at upload (refused with a clear message)")
    try:
        doc = parse_document(data, kind)
    except ParseFailure as failure:
        caught = failure
    else:
        caught = None
    if caught is not None:
        assert caught.code in (ErrorCode.PARSE_ERROR, ErrorCode.EMPTY_DOCUMENT)
        assert "\n" not in caught.reason and len(caught.reason) < 200
        return
    assert doc.chunks
    if kind in (DocumentKind.PPTX, DocumentKind.XLSX, DocumentKind.CSV, DocumentKind.EPUB):
        # (Prose before a DOCX's or a page's first heading has no place to name.)
        assert all(c.location is not None for c in doc.chunks)
