"""Word documents: what people put in them is read, each piece with its place.

Real files made by Word (tests/core/data/formats/README.md names them and their
licences): content controls, text boxes, headers and footers, footnotes, endnotes,
comments, tracked changes, nested tables. The shared corpus's larger files are read
too when it is present. The words asserted were read out of each file's XML.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from core.errors import BadInput
from core.ingest.chunker import Chunk, Location
from core.ingest.formats import format_info
from core.ingest.parsing import ParsedDocument, ParseFailure, parse_document
from core.ingest.sniffing import kind_misnamed_pdf, sniff_kind
from core.intake import check_upload
from core.states import DocumentKind
from core.store import HEAD_BYTES, StoredObject
from tests.core.test_cli import (
    EXIT_BAD_INPUT,
    Result,
    assert_nothing_written,
    ok,
    one_error_line,
    run,
    write,
)

DATA = Path(__file__).parent / "data" / "formats"
SHARED_CORPUS = Path("/work/shared/corpora/formats")
REFUSED = {"bug53475-password-is-pass.docx": "needs a password"}
needs_corpus = pytest.mark.skipif(
    not SHARED_CORPUS.is_dir(), reason="the shared corpus is not on this machine"
)


def parsed(data: bytes) -> ParsedDocument:
    assert sniff_kind(data, "upload.docx") is DocumentKind.DOCX
    return parse_document(data, DocumentKind.DOCX)


def read(name: str) -> Sequence[Chunk]:
    path = DATA / name if (DATA / name).exists() else SHARED_CORPUS / name
    return parsed(path.read_bytes()).chunks


def holding(chunks: Sequence[Chunk], words: str) -> list[Chunk]:
    """The chunks whose text, its whitespace collapsed, holds ``words``."""
    return [c for c in chunks if words in " ".join(c.text.split())]


def occurrences(chunks: Sequence[Chunk], words: str) -> int:
    """How often ``words`` is in the document's chunks (chunks do not overlap here:
    every text asserted on is shorter than one chunk)."""
    return sum(" ".join(c.text.split()).count(words) for c in chunks)


def place(chunks: Sequence[Chunk], words: str) -> Location | None:
    """The location of the one chunk holding ``words``."""
    found = holding(chunks, words)
    assert len(found) == 1, (words, [c.text[:80] for c in found])
    return found[0].location


# --- content controls, headers, footers, notes ---------------------------------------------


def test_content_controls_are_read_wherever_they_are() -> None:
    # POI's Bug54849.docx has a content control (w:sdt) around paragraphs, a table, a
    # table row, text in a cell, a drop-down, a date picker, and inside its header,
    # footer, footnote and endnote. python-docx alone reads 71 characters of it.
    chunks = read("Bug54849.docx")
    body = None  # prose before any heading has no place to name
    for words in (
        "Rich_text Blahdeblah1",
        "Plain_text_no_newlines",
        "Plain_text_with_newlines1 plain_text_with_newlines2",
        "Watermelon",  # a drop-down's chosen entry
        "Dirt",
        "4/16/2013",  # a date picker
        "Rich_text_post_table",
    ):
        assert place(chunks, words) == body, words
    cells = holding(chunks, "| Abc rich_text_in_paragraph_in_cell |")
    assert len(cells) == 1 and "Rich_text_in_cell" in cells[0].text
    assert holding(chunks, "| Rich_text_cell1 |")  # a table of one row is still read
    assert place(chunks, "header_rich_text") == Location(part="header")
    assert place(chunks, "Footer_rich_text") == Location(part="footer")
    assert place(chunks, "Footnote_sdt") == Location(part="footnote")
    assert place(chunks, "Endnote_sdt") == Location(part="endnote")


def test_first_page_and_default_headers_and_footers_are_read_once_each() -> None:
    chunks = read("docx_page_header_footer_first_page.docx")
    for words in ("FIRST PAGE HEADER (page 1 only)", "REGULAR HEADER (page 2 onward)"):
        assert place(chunks, words) == Location(part="header")
        assert occurrences(chunks, words) == 1
    for words in ("FIRST PAGE FOOTER (page 1 only)", "REGULAR FOOTER (page 2 onward)"):
        assert place(chunks, words) == Location(part="footer")
        assert occurrences(chunks, words) == 1
    # The body keeps its heading path and comes first, in document order.
    assert chunks[0].location == Location(headings=("Page header/footer regression fixture",))
    assert place(chunks, "This is body text on page 2.") == Location(
        headings=("Page header/footer regression fixture", "Page 2")
    )


def test_a_header_repeated_in_another_part_is_indexed_once() -> None:
    # Word gives every section whose header is unlinked its own copy of the header
    # part: make the first-page header a copy of the default one.
    original = (DATA / "docx_page_header_footer_first_page.docx").read_bytes()
    with zipfile.ZipFile(io.BytesIO(original)) as package:
        regular = package.read("word/header2.xml")
    chunks = parsed(_replaced(original, "word/header1.xml", regular)).chunks
    assert not holding(chunks, "FIRST PAGE HEADER")
    assert place(chunks, "REGULAR HEADER (page 2 onward)") == Location(part="header")
    assert occurrences(chunks, "REGULAR HEADER (page 2 onward)") == 1


def test_a_page_number_is_not_read_as_text() -> None:
    # The number a PAGE field shows is the page a footer was last drawn on ("2" in
    # FancyFoot.docx's footer): read, it would make each section's copy of one footer
    # a different text and put stray numbers in the index.
    chunks = read("FancyFoot.docx")
    (footer,) = [c for c in chunks if c.location == Location(part="footer")]
    assert footer.text == "This is a fancy alphabet footer, with page number and everything\tPage"
    assert place(chunks, "More on page one") == Location(headings=("HEADING TEXT",))


@needs_corpus
def test_a_page_number_field_in_a_real_footer_is_not_read() -> None:
    # Bug51170.docx's footer is "<PAGE field showing 7> Estatutos do Conselho ...".
    chunks = read("Bug51170.docx")
    (footer,) = [c for c in chunks if c.location == Location(part="footer")]
    assert footer.text == "Estatutos do Conselho Nacional da Ind\u00fastria do Golfe"


@needs_corpus
def test_footnotes_are_read_under_the_heading_they_are_anchored_at() -> None:
    chunks = read("handbook-872p.docx")
    notes = holding(chunks, "28 U.S.C. § 586(b), (c), d), (e).")
    assert notes and all(
        c.location
        == Location(
            headings=("CHAPTER 1 \u2013 INTRODUCTION", "B. ROLE OF THE UNITED STATES TRUSTEE"),
            part="footnote",
        )
        for c in notes
    )
    assert notes[0].location is not None
    assert notes[0].location.label() == (
        "footnote in CHAPTER 1 \u2013 INTRODUCTION > B. ROLE OF THE UNITED STATES TRUSTEE"
    )
    footers = [c for c in chunks if c.location == Location(part="footer")]
    assert footers and "Handbook for Chapter 13 Standing Trustees" in footers[0].text
    # 872 pages, 38 header parts (all empty) and 17 footer parts: each footer text once.
    footer_text = "\n".join(c.text for c in footers)
    assert footer_text.count("Page 3-") == 1


def test_comments_are_read_and_marked_as_comments() -> None:
    chunks = read("comments-rich-para.docx")
    comment = Location(part="comment")
    assert place(chunks, "Text with hyperlink https://google.com embedded.") == comment
    assert place(chunks, "Paragraph with Heading 2 paragraph style.") == comment
    assert place(chunks, "Some text worthy of note.") is None  # the body, no heading
    assert comment.label() == "comment"


# --- text boxes, tracked changes, tables ------------------------------------------------------


def test_text_boxes_are_read_once_after_the_text_they_are_anchored_in() -> None:
    # Word stores each text box twice (DrawingML, and VML for older readers) inside
    # mc:AlternateContent: 32 w:txbxContent in the XML hold 16 boxes.
    chunks = read("textbox.docx")
    box = Location(part="text box")
    for words in (
        "Student falls ill",  # split over runs in the XML ("il" "l")
        "Whether the epidemic has eased.",
        "Case closed.",
        "The Health Bureau will handle reporting and specimen collection.",
    ):
        assert occurrences(chunks, words) == 1, words
        assert place(chunks, words) == box, words
    assert chunks[0].location is None  # the body's title, before the boxes
    assert "Infectious Disease Reporting Procedure" in chunks[0].text


def test_tracked_insertions_are_read_and_deletions_are_not() -> None:
    # As Word shows the document with every change accepted. POI's delins.docx.
    chunks = read("delins.docx")
    assert holding(chunks, "Apache Tika 0.3 has been released.")
    assert holding(chunks, "Lucene will be extremely well represented at ApacheCon EU 2009")
    assert not holding(chunks, "A pendant worn in place of the red spot")
    assert not holding(chunks, "Tika Waylan, a major character in the DragonLance")


@needs_corpus
def test_tracked_changes_in_a_real_ordinance() -> None:
    chunks = read("stress023.docx")
    assert holding(chunks, "Within Existing Space (Single-Family) \u2013 ADUs and JADUs")
    assert not holding(chunks, "18.33.060 Converted parking.")
    assert not holding(chunks, "one hundred and twenty")
    assert place(chunks, "ATTACHMENT 2 EXHIBIT A") == Location(part="header")


def test_a_nested_table_is_a_table_of_its_own_and_merged_cells_are_read_once() -> None:
    chunks = read("docx-tables.docx")
    outer = holding(chunks, "| a | >b< | c |")
    assert len(outer) == 1 and "| j | k | l |" in outer[0].text
    inner = holding(chunks, "| e | f |")
    assert len(inner) == 1 and "| g&t | h |" in inner[0].text
    assert outer[0].ordinal < inner[0].ordinal
    merged = holding(chunks, "| a | b |")
    assert len(merged) == 1 and merged[0].text.count("| c |") <= 1


# --- what is refused, and how ---------------------------------------------------------------------


def test_strict_open_xml_is_read() -> None:
    # Strict.docx (docling): Word's "Strict Open XML Document", ISO 29500 Strict
    # namespaces (purl.oclc.org/ooxml) that python-docx does not know; its elements
    # are the ones read here, under other names.
    data = (DATA / "Strict.docx").read_bytes()
    with zipfile.ZipFile(io.BytesIO(data)) as package:
        body = package.read("word/document.xml")
    assert b"purl.oclc.org/ooxml/wordprocessingml/main" in body
    assert [c.text for c in parsed(data).chunks] == ["Some text"]


def test_the_location_of_a_part_is_stored_and_shown() -> None:
    note = Location(headings=("Setup", "Linux"), part="footnote")
    assert note.label() == "footnote in Setup > Linux"
    assert Location(part="header").label() == "header"
    stored = note.stored()
    assert stored is not None and json.loads(stored)["part"] == "footnote"
    assert Location.from_stored(None, stored) == note
    assert Location(headings=("Setup",)).stored() == '{"headings":["Setup"]}'  # as before


def test_the_reading_revision_is_in_the_processing_key() -> None:
    # Results are reused by processing key: one read by the old python-docx-only path
    # (no headers, notes, text boxes) must not be taken for one read now.
    info = format_info(DocumentKind.DOCX, "pypdf")
    assert info["parser"] == "python-docx" and info["revision"] == "2"
    assert "revision" not in format_info(DocumentKind.PPTX, "pypdf")  # keys unchanged


def test_a_word_document_named_pdf_is_refused_saying_what_it_is(tmp_path: Path) -> None:
    db_path, store = tmp_path / "ledger.db", tmp_path / "objects"

    def cli(*args: str) -> Result:
        return run(["--db", str(db_path), "--store", str(store), *args], cwd=tmp_path)

    docx = (DATA / "word_tables.docx").read_bytes()
    assert kind_misnamed_pdf(docx, "report.PDF") is DocumentKind.DOCX
    assert kind_misnamed_pdf(docx, "report.docx") is None
    path = write(tmp_path / "report.pdf", docx)
    result = cli("upload", str(path))
    assert result.code == EXIT_BAD_INPUT
    assert one_error_line(result) == (
        "ingestdesk: report.pdf: not a PDF: the content is a Word document (DOCX), "
        "but the name says .pdf; rename it to .docx to upload it"
    )
    html = write(tmp_path / "invoice.pdf", (DATA / "fake-html-cp1252.html").read_bytes())
    assert "the content is an HTML page" in one_error_line(cli("upload", str(html)))
    assert_nothing_written(db_path, store)
    # Under the name it asks for, the same bytes are accepted.
    answer = ok(cli("add", str(write(tmp_path / "report.docx", docx)), "--json"))
    assert [task["document_name"] for task in answer] == ["report.docx"]


def test_a_streamed_upload_judged_by_its_head_is_refused_saying_what_it_is() -> None:
    # An upload received as a stream (the HTTP API) is judged by its first 64 KiB,
    # which hold no zip directory for a bigger file: the entries' headers still say.
    for name, what in (
        ("winter-sports.epub", "an EPUB book"),
        ("Bug54849.docx", "a Word document (DOCX)"),
    ):
        data = (DATA / name).read_bytes()
        head = data[: min(HEAD_BYTES, len(data) // 2)]
        stored = StoredObject("key", "digest", len(data), head)
        with pytest.raises(BadInput, match=f"the content is {re.escape(what)}"):
            check_upload(stored, "manual.pdf", 10**9)
        assert check_upload(stored, f"manual{Path(name).suffix}", 10**9) is sniff_kind(data, name)
    # A zip that merely holds a word/ folder is no Word document, whole or cut short.
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as package:
        package.writestr("word/document.xml", "<w:document/>")
    for data in (archive.getvalue(), archive.getvalue()[:-22]):
        assert kind_misnamed_pdf(data, "x.pdf") is None


# --- the whole corpus -------------------------------------------------------------------------


@needs_corpus
@pytest.mark.parametrize(
    "path",
    sorted(SHARED_CORPUS.glob("*.docx")) if SHARED_CORPUS.is_dir() else [],
    ids=lambda p: p.name,
)
def test_every_corpus_docx_reads_more_than_python_docx_alone(path: Path) -> None:
    import docx

    data = path.read_bytes()
    if path.name in REFUSED:
        with pytest.raises(ParseFailure, match=REFUSED[path.name]):
            parsed(data)
        return
    chunks = parsed(data).chunks
    ours = {w for c in chunks for w in c.text.replace("|", " ").split()}
    assert ours
    if path.name == "Strict.docx":
        return  # python-docx cannot open Strict Open XML at all
    document = docx.Document(io.BytesIO(data))
    # Every word python-docx's own paragraphs show is still found: walking the XML
    # ourselves lost nothing it read. (Paragraphs with tracked changes aside: python-docx
    # drops the insertions and glues the words around them together.)
    tracked = "./w:ins|./w:del|./w:moveTo|./w:moveFrom"
    theirs = {w for p in document.paragraphs if not p._p.xpath(tracked) for w in p.text.split()}
    assert theirs <= ours, sorted(theirs - ours)[:10]


def _replaced(package: bytes, name: str, content: bytes) -> bytes:
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(package)) as source,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target,
    ):
        for item in source.infolist():
            target.writestr(item, content if item.filename == name else source.read(item))
    return out.getvalue()


def test_chunks_and_search_show_each_chunks_place_not_an_empty_page(
    db_url: str, tmp_path: Path
) -> None:
    # `chunks` printed `page=-` before a slide's or a header's place; a page is shown
    # only where there is one. (On each backend: the place is stored as JSON text.)
    store = tmp_path / "objects"

    def cli(*args: str) -> Result:
        return run(["--db", db_url, "--store", str(store), *args], cwd=tmp_path)

    files = [DATA / "Bug54849.docx", DATA / "powerpoint_sample.pptx"]
    added = ok(cli("add", *map(str, files), "--json"))
    ids = {task["document_name"]: task["document_id"] for task in added}
    ok(cli("worker", "--until-idle", "--json"))

    listing = cli("chunks", ids["Bug54849.docx"])
    assert listing.code == 0, listing
    lines = listing.stdout.splitlines()
    assert any("  [header] 'This is a header header_rich_text'" in line for line in lines)
    assert any("  [footnote] 'Footnote_sdt'" in line for line in lines)
    assert any("  [row 1] '| Rich_text_cell1 |" in line for line in lines)
    body = next(line for line in lines if "'Rich_text\\nBlahdeblah1" in line)
    assert "page=-" in body  # the body before any heading: no place beyond "no page"
    slides = cli("chunks", ids["powerpoint_sample.pptx"]).stdout.splitlines()
    assert any("  [slide 2 notes] " in line for line in slides), slides
    assert not any("page=" in line for line in slides)

    # Keyword search: the words are on exactly these chunks (hybrid would rank others too).
    hits = cli("search", "--mode", "keyword", "--all", "Endnote_sdt").stdout.splitlines()
    assert len(hits) == 1 and " [endnote] score=" in hits[0], hits
    assert "page=" not in hits[0]
