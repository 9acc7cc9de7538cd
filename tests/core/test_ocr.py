"""OCR, page by page: scanned PDF pages and images read by Tesseract in the parser
process, each page with its recorded decision.

Real scans from public OCR corpora (tests/core/data/scans/README.md names them and
their licences), PDFs drawn around them by reportlab and by Pillow, pypdf's own
image-only sample files when the shared corpus is present, and generated hostile
images. Tests that need the engine skip, saying why, when its language data is not
installed (`apt-get install tesseract-ocr-eng`; .ci/run installs it).
"""

from __future__ import annotations

import io
import os
import re
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from PIL import Image
from reportlab.lib.pagesizes import A4
from reportlab.lib.utils import ImageReader
from reportlab.pdfgen import canvas

from core.ingest.formats import format_info, ocr
from core.ingest.formats.pdf import PageRenderer
from core.ingest.keys import processing_key
from core.ingest.limits import MAX_IMAGE_PIXELS
from core.ingest.parse_pool import ParserPool
from core.ingest.parse_progress import reporting
from core.ingest.parsing import ParsedDocument, ParseFailure, parse_document
from core.ingest.sniffing import sniff_kind
from core.states import DocumentKind, ErrorCode, PageDecision
from tests import hostile
from tests.core.test_formats_end_to_end import _cli

SCANS = Path(__file__).parent / "data" / "scans"
SAMPLE_FILES = Path("/work/shared/corpora/real-pdfs")
# pypdf's sample files that are pictures with no text at all (sample-files, CC-BY-SA-4.0).
IMAGE_ONLY_SAMPLES = [
    "007-imagemagick-images/imagemagick-ASCII85Decode.pdf",
    "007-imagemagick-images/imagemagick-CCITTFaxDecode.pdf",
    "007-imagemagick-images/imagemagick-lzw.pdf",
    "019-grayscale-image/grayscale-image.pdf",
    "023-cmyk-image/cmyk-image.pdf",
]

needs_engine = pytest.mark.skipif(
    ocr.unavailable_reason() is not None,
    reason=f"OCR cannot run here: {ocr.unavailable_reason()}",
)


def words(text: str) -> list[str]:
    return re.findall(r"[\w$%.,'-]+", text.lower())


def word_recall(found: str, truth: str) -> float:
    """The share of the ground truth's words the reading has, in any order."""
    got = set(words(found))
    expected = words(truth)
    return sum(w in got for w in expected) / len(expected)


def parsed(data: bytes, name: str) -> tuple[ParsedDocument, list[tuple[int, int]]]:
    """The document and the progress it reported, (done, total) per page."""
    kind = sniff_kind(data, name)
    assert kind is not None, name
    reports: list[tuple[int, int]] = []
    with reporting(lambda done, total: reports.append((done, total))):
        doc = parse_document(data, kind)
    return doc, reports


def page_text(doc: ParsedDocument, page: int) -> str:
    return " ".join(c.text for c in doc.chunks if c.page == page)


def decisions(doc: ParsedDocument) -> list[PageDecision]:
    return [r.decision for r in doc.readings]


def scan(name: str) -> bytes:
    return (SCANS / name).read_bytes()


def truth(name: str) -> str:
    return (SCANS / name).read_text(encoding="utf-8")


def text_and_scan_pdf(*, text: str) -> bytes:
    """Two A4 pages as an office scanner's "searchable" batch might be: page 1 typed
    with a text layer, page 2 the real scan phototest.tif placed at its own size
    (640 x 480 at 200 dpi) with no text layer."""
    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, pagesize=A4, invariant=1)
    lines = pdf.beginText(72, 760)
    lines.setFont("Helvetica", 11)
    for line in text.splitlines():
        lines.textLine(line)
    pdf.drawText(lines)
    pdf.showPage()
    pdf.drawImage(ImageReader(io.BytesIO(scan("phototest.tif"))), 72, 500, 640 * 0.36, 480 * 0.36)
    pdf.showPage()
    pdf.save()
    return buffer.getvalue()


def image_pdf(name: str, resolution: float) -> bytes:
    """A scan saved as a one-page PDF by Pillow, the way many scanning tools do."""
    buffer = io.BytesIO()
    Image.open(SCANS / name).save(buffer, "PDF", resolution=resolution)
    return buffer.getvalue()


def bilevel_png(width: int, height: int) -> bytes:
    """A white 1-bit PNG of ``width`` x ``height``, compressed as it is written (a
    gigapixel of it is a few hundred kilobytes: the shape of a decompression bomb)."""
    row = b"\x00" + b"\xff" * ((width + 7) // 8)
    packer = zlib.compressobj(9)
    body = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b"")
    )


def test_ci_has_the_ocr_engine() -> None:
    # .ci/run installs the language data: there, the tests above must run, not skip.
    if os.environ.get("CI") != "true":
        pytest.skip("only CI must have OCR installed")
    assert ocr.unavailable_reason() is None


# --- images -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("phototest.tif", DocumentKind.TIFF),
        ("phototest.png", DocumentKind.PNG),
        ("phototest.jpg", DocumentKind.JPEG),
        ("two-scans.tif", DocumentKind.TIFF),
    ],
)
def test_images_are_recognised_by_their_content_whatever_their_name(
    name: str, kind: DocumentKind
) -> None:
    data = scan(name)
    assert sniff_kind(data, name) is kind
    assert sniff_kind(data, "upload.bin") is kind
    assert sniff_kind(data, "scan.pdf") is None  # the name claims PDF; the content says not


def test_picture_signatures_without_a_picture_are_refused() -> None:
    assert sniff_kind(b"\x89PNG\r\n\x1a\n" + bytes(64), "cat.png") is None
    assert sniff_kind(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64), "cat.png") is None
    assert sniff_kind(b"II*\x00" + bytes(64), "fax.tif") is None
    assert sniff_kind(b"\xff\xd8\xff", "photo.jpg") is None


@needs_engine
@pytest.mark.parametrize("name", ["phototest.tif", "phototest.png", "phototest.jpg"])
def test_a_scanned_page_image_is_read_word_for_word(name: str) -> None:
    doc, reports = parsed(scan(name), name)

    (reading,) = doc.readings
    assert (reading.page, reading.decision) == (1, PageDecision.OCR)
    assert reading.confidence is not None and reading.confidence > 80
    assert reading.ocr_seconds > 0
    text = page_text(doc, 1)
    assert reading.chars == len("".join(text.split()))
    assert "the quick brown dog jumped over the lazy fox" in " ".join(words(text))
    assert word_recall(text, truth("phototest.txt")) >= 0.95
    # "0 done" before the engine reads the first page: the pool times it from there.
    assert reports == [(0, 1), (1, 1)]
    assert doc.pages == 1


@needs_engine
def test_a_transparent_image_is_read_as_if_on_white_paper() -> None:
    # The scan's ink as black pixels whose alpha is the ink's darkness, the paper
    # transparent: dropping the alpha would leave a black page.
    with Image.open(SCANS / "phototest.png") as page:
        ink = page.convert("L")
    transparent = Image.new("RGBA", ink.size, (0, 0, 0, 0))
    transparent.putalpha(ink.point(lambda grey: 255 - grey))
    buffer = io.BytesIO()
    transparent.save(buffer, "PNG")

    doc, _ = parsed(buffer.getvalue(), "logo.png")

    assert decisions(doc) == [PageDecision.OCR]
    assert word_recall(page_text(doc, 1), truth("phototest.txt")) >= 0.95


@needs_engine
def test_each_frame_of_a_multi_page_tiff_is_a_page() -> None:
    doc, reports = parsed(scan("two-scans.tif"), "two-scans.tif")

    assert [(r.page, r.decision) for r in doc.readings] == [
        (1, PageDecision.OCR),
        (2, PageDecision.OCR),
    ]
    assert doc.pages == 2
    assert reports == [(0, 2), (1, 2), (2, 2)]
    assert word_recall(page_text(doc, 1), truth("phototest.txt")) >= 0.95
    assert word_recall(page_text(doc, 2), truth("eurotext.txt")) >= 0.8
    assert "aspammer@website.com" in page_text(doc, 2)
    assert "lazy fox" not in page_text(doc, 2)  # each frame's words stay on its page


def test_a_decompression_bomb_image_is_refused_before_it_is_decoded() -> None:
    # Over the limit (Pillow would only warn) and far over it (Pillow refuses itself).
    for width, height in ((10_000, 10_000), (40_000, 40_000)):
        assert width * height > MAX_IMAGE_PIXELS
        bomb = bilevel_png(width, height)
        assert len(bomb) < 1 << 20  # a megabyte declaring up to 1.6 gigapixels
        assert sniff_kind(bomb, "bomb.png") is DocumentKind.PNG
        started = time.process_time()  # CPU seconds: the cost, not the machine's load
        with pytest.raises(ParseFailure) as caught:
            parse_document(bomb, DocumentKind.PNG)
        assert caught.value.code is ErrorCode.PARSE_ERROR
        assert "decompression bomb" in caught.value.reason
        assert "\n" not in caught.value.reason and "/" not in caught.value.reason
        assert time.process_time() - started < 5  # refused from its header, not decoded


def tiny_tiff(frames: int) -> bytes:
    buffer = io.BytesIO()
    pages = [Image.new("1", (8, 8), 1) for _ in range(frames)]
    pages[0].save(buffer, "TIFF", save_all=True, append_images=pages[1:])
    return buffer.getvalue()


def with_frame_size(tiff: bytes, frame: int, width: int, height: int) -> bytes:
    """``tiff`` (little-endian) with frame ``frame``'s declared size changed: the
    pixels stay 8 x 8, the directory claims more."""
    data = bytearray(tiff)
    (offset,) = struct.unpack_from("<I", data, 4)
    for _ in range(frame):
        (entries,) = struct.unpack_from("<H", data, offset)
        (offset,) = struct.unpack_from("<I", data, offset + 2 + 12 * entries)
    (entries,) = struct.unpack_from("<H", data, offset)
    for n in range(entries):
        at = offset + 2 + 12 * n
        (tag,) = struct.unpack_from("<H", data, at)
        if tag in (256, 257):  # ImageWidth, ImageLength, as LONG
            struct.pack_into("<HHII", data, at, tag, 4, 1, width if tag == 256 else height)
    return bytes(data)


def test_a_tiff_of_too_many_frames_is_refused() -> None:
    with pytest.raises(ParseFailure) as caught:
        parse_document(tiny_tiff(1_001), DocumentKind.TIFF)

    assert caught.value.code is ErrorCode.PARSE_ERROR
    assert caught.value.reason == "TIFF has 1001 frames (limit 1000)"


def test_a_bomb_in_a_later_tiff_frame_is_refused_before_it_is_decoded() -> None:
    # Pillow checks a file's first frame when it opens it; this one's second frame
    # claims 400 megapixels.
    bomb = with_frame_size(tiny_tiff(2), 1, 20_000, 20_000)

    with pytest.raises(ParseFailure) as caught:
        parse_document(bomb, DocumentKind.TIFF)

    assert caught.value.code is ErrorCode.PARSE_ERROR
    assert "decompression bomb" in caught.value.reason


@pytest.mark.parametrize(("name", "keep"), [("phototest.png", 0.5), ("phototest.jpg", 0.5)])
def test_a_truncated_image_is_a_parse_error(name: str, keep: float) -> None:
    data = scan(name)
    cut = data[: int(len(data) * keep)]
    kind = sniff_kind(cut, name)
    assert kind is not None  # its header is whole: it is taken for what it claims

    with pytest.raises(ParseFailure) as caught:
        parse_document(cut, kind)

    assert caught.value.code is ErrorCode.PARSE_ERROR
    assert caught.value.reason.startswith("damaged image")
    assert "\n" not in caught.value.reason


def test_a_tiff_cut_inside_its_second_frame_is_a_parse_error_naming_the_page() -> None:
    data = scan("two-scans.tif")
    # tiffcp writes each frame's data before its directory: keep the first frame and
    # its directory, then cut the second frame's strips short.
    cut = data[: len(data) - 2_000]

    with pytest.raises(ParseFailure) as caught:
        parse_document(cut, DocumentKind.TIFF)

    assert caught.value.code is ErrorCode.PARSE_ERROR
    assert caught.value.reason.startswith("damaged image")


@needs_engine
def test_a_blank_image_is_an_empty_document_without_reading() -> None:
    buffer = io.BytesIO()
    Image.new("L", (2480, 3508), 255).save(buffer, "PNG")

    with pytest.raises(ParseFailure) as caught:
        parse_document(buffer.getvalue(), DocumentKind.PNG)

    assert caught.value.code is ErrorCode.EMPTY_DOCUMENT
    assert caught.value.reason == "OCR found no legible text in the image"


# --- PDF pages ------------------------------------------------------------------------

TYPED = (
    "Minutes of the board meeting, 3 March.\n"
    "The board approved the budget for the new archive room.\n"
)


@needs_engine
@pytest.mark.parametrize("parser", ["pypdf", "pdfium"])
def test_a_pdf_with_a_typed_page_and_a_scanned_page_reads_each_its_own_way(parser: str) -> None:
    reports: list[tuple[int, int]] = []
    with reporting(lambda done, total: reports.append((done, total))):
        doc = parse_document(text_and_scan_pdf(text=TYPED), DocumentKind.PDF, parser=parser)

    typed, scanned = doc.readings
    assert (typed.page, typed.decision, typed.ocr_seconds) == (1, PageDecision.TEXT, 0.0)
    assert typed.confidence is None and typed.chars > 50
    assert (scanned.page, scanned.decision) == (2, PageDecision.OCR)
    assert scanned.confidence is not None and scanned.confidence > 80
    assert scanned.ocr_seconds > 0
    assert "archive room" in page_text(doc, 1)
    assert word_recall(page_text(doc, 2), truth("phototest.txt")) >= 0.95
    assert reports == [(1, 2), (2, 2)]


@needs_engine
def test_a_scan_saved_as_pdf_by_pillow_is_read() -> None:
    doc, _ = parsed(image_pdf("eurotext.tif", resolution=300), "scan.pdf")

    (reading,) = doc.readings
    assert reading.decision is PageDecision.OCR
    assert word_recall(page_text(doc, 1), truth("eurotext.txt")) >= 0.8


def test_a_text_pdf_costs_no_ocr_time_and_renders_nothing(tmp_path: Path) -> None:
    # In a fresh interpreter: neither PDFium nor the OCR engine is ever loaded for a
    # PDF whose pages all have their text layer. (pypdf itself imports Pillow.)
    pages = [f"Page {n}: the quarterly report's text layer, as typed." for n in range(1, 41)]
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(hostile.make_pdf(pages))
    program = (
        "import sys\n"
        "from core.ingest.parsing import parse_document\n"
        f"doc = parse_document(open({str(pdf)!r}, 'rb').read(), 'pdf')\n"
        "print(sorted({r.decision.value for r in doc.readings}), len(doc.readings),\n"
        "      sum(r.ocr_seconds for r in doc.readings), len(doc.chunks),\n"
        "      [m for m in ('pypdfium2', 'tesserocr') if m in sys.modules])\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", program],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert out.stdout.split("\n")[0] == "['text'] 40 0.0 40 []"


@pytest.mark.parametrize("parser", ["pypdf", "pdfium"])
def test_a_short_page_that_shows_only_text_is_not_rendered(parser: str) -> None:
    doc = parse_document(hostile.make_pdf(["Yes.", "hello"]), DocumentKind.PDF, parser=parser)

    assert decisions(doc) == [PageDecision.TEXT, PageDecision.TEXT]
    assert [c.text for c in doc.chunks] == ["Yes.", "hello"]
    assert all(r.ocr_seconds == 0 for r in doc.readings)


def test_blank_pages_are_empty_without_rendering() -> None:
    started = time.perf_counter()
    with pytest.raises(ParseFailure) as caught:
        parse_document(hostile.blank_pages_pdf(pages=500), DocumentKind.PDF)

    assert caught.value.code is ErrorCode.EMPTY_DOCUMENT
    assert caught.value.reason.startswith("no extractable text")
    assert time.perf_counter() - started < 30  # no page was rendered (that is ~0.1 s each)


@needs_engine
@pytest.mark.skipif(not SAMPLE_FILES.is_dir(), reason="pypdf's sample files are not here")
@pytest.mark.parametrize("path", IMAGE_ONLY_SAMPLES, ids=lambda p: p.split("/")[-1])
def test_pypdf_image_only_samples_end_empty_quickly(path: str) -> None:
    data = (SAMPLE_FILES / path).read_bytes()
    started = time.perf_counter()

    with pytest.raises(ParseFailure) as caught:
        parse_document(data, DocumentKind.PDF)

    assert caught.value.code is ErrorCode.EMPTY_DOCUMENT, caught.value
    assert time.perf_counter() - started < 30  # one page: a few seconds at most


@needs_engine
@pytest.mark.skipif(not SAMPLE_FILES.is_dir(), reason="pypdf's sample files are not here")
def test_pypdf_sample_with_thin_layers_over_pictures_keeps_its_layers() -> None:
    # Six tiny pages (4 x 4 pt) of ImageMagick images, four of them labelled
    # "Background": the labels are kept, nothing is made up for the pictures.
    data = (SAMPLE_FILES / "007-imagemagick-images/imagemagick-images.pdf").read_bytes()

    doc = parse_document(data, DocumentKind.PDF)

    assert decisions(doc) == [PageDecision.OCR_EMPTY] * 6
    assert {c.text for c in doc.chunks} == {"Background"}


@needs_engine
def test_a_page_a_metre_wide_is_rendered_within_the_pixel_cap() -> None:
    buffer = io.BytesIO()
    side = 14_400  # points: 200 inches, the largest page PDF allows
    pdf = canvas.Canvas(buffer, pagesize=(side, side), invariant=1)
    pdf.drawImage(ImageReader(io.BytesIO(scan("phototest.tif"))), 0, 0, side, side * 0.75)
    pdf.showPage()
    pdf.save()
    data = buffer.getvalue()

    renderer = PageRenderer(data)
    try:
        image, dpi = renderer.page(0).render()
    finally:
        renderer.close()
    assert image.width * image.height <= ocr.MAX_OCR_PIXELS
    assert image.width == pytest.approx(side * dpi / 72, rel=0.03)  # dpi is whole
    assert dpi < ocr.OCR_DPI

    doc = parse_document(data, DocumentKind.PDF)  # read, scaled down, without a crash
    assert decisions(doc) == [PageDecision.OCR]
    assert "lazy fox" in page_text(doc, 1)


@needs_engine
def test_pages_over_the_ocr_budget_are_skipped_with_why() -> None:
    from core.ingest.formats.image import ImagePage

    reader = ocr.PageReader(ocr.OcrBudget(seconds=0.0))
    with Image.open(SCANS / "phototest.tif") as scanned:
        image = scanned.copy()

    text, reading = reader.read(1, "", ImagePage(image, 200))

    assert text == ""
    assert reading.decision is PageDecision.SKIPPED
    assert reading.reason == "over the document's OCR budget (0 s spent)"
    assert reader.nothing_found(1, "nothing") == (
        ErrorCode.EMPTY_DOCUMENT,
        "nothing; 1 page not read: over the document's OCR budget (0 s spent)",
    )
    # A page with its text layer costs no budget, so it is read even then.
    _, typed = reader.read(2, TYPED, ImagePage(image, 200))
    assert typed.decision is PageDecision.TEXT


@needs_engine
def test_a_page_over_its_time_is_abandoned_and_skipped_with_why() -> None:
    from core.ingest.formats.image import ImagePage

    # What is left of the budget bounds the page: a millisecond, which no page fits.
    reader = ocr.PageReader(ocr.OcrBudget(seconds=0.001))
    with Image.open(SCANS / "eurotext.tif") as scanned:
        image = scanned.copy()

    text, reading = reader.read(1, "", ImagePage(image, 300))

    assert text == ""
    assert reading.decision is PageDecision.SKIPPED
    assert reading.reason == "OCR of the page took over 0 s"
    assert reading.ocr_seconds > 0
    # The engine is left ready for the next page.
    again = ocr.PageReader()
    _, next_page = again.read(2, "", ImagePage(image, 300))
    assert next_page.decision is PageDecision.OCR


@needs_engine
async def test_the_parser_process_reads_a_scan_under_its_memory_cap() -> None:
    async with ParserPool(workers=1) as pool:
        doc = await pool.parse(scan("two-scans.tif"), DocumentKind.TIFF)
        assert decisions(doc) == [PageDecision.OCR, PageDecision.OCR]
        assert "lazy fox" in page_text(doc, 1)

        mixed = await pool.parse(text_and_scan_pdf(text=TYPED), DocumentKind.PDF)
        assert decisions(mixed) == [PageDecision.TEXT, PageDecision.OCR]


# --- without the engine's data ------------------------------------------------------


@pytest.fixture
def no_language_data(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """This machine as one without tesseract-ocr-eng: nowhere holds eng.traineddata."""
    monkeypatch.delenv("TESSDATA_PREFIX", raising=False)
    monkeypatch.setattr(ocr, "DEBIAN_TESSDATA_GLOB", str(tmp_path / "*" / "tessdata"))
    assert ocr.unavailable_reason() is not None


@pytest.mark.usefixtures("no_language_data")
def test_without_language_data_a_scan_fails_with_its_own_code_naming_the_package() -> None:
    for data, kind in (
        (scan("phototest.png"), DocumentKind.PNG),
        (image_pdf("phototest.tif", resolution=200), DocumentKind.PDF),
    ):
        with pytest.raises(ParseFailure) as caught:
            parse_document(data, kind)
        assert caught.value.code is ErrorCode.OCR_UNAVAILABLE
        assert caught.value.reason == (
            "1 page needs OCR, and the OCR engine's eng language data is not installed "
            "(apt-get install tesseract-ocr-eng)"
        )


@pytest.mark.usefixtures("no_language_data")
def test_without_language_data_a_mixed_pdf_keeps_its_text_and_skips_the_scan() -> None:
    doc = parse_document(text_and_scan_pdf(text=TYPED), DocumentKind.PDF)

    typed, scanned = doc.readings
    assert typed.decision is PageDecision.TEXT
    assert scanned.decision is PageDecision.SKIPPED
    assert scanned.reason is not None and "apt-get install tesseract-ocr-eng" in scanned.reason
    assert [c.page for c in doc.chunks] == [1]


@pytest.mark.usefixtures("no_language_data")
def test_without_language_data_blank_pages_are_still_just_empty() -> None:
    with pytest.raises(ParseFailure) as caught:
        parse_document(hostile.blank_pages_pdf(pages=3), DocumentKind.PDF)

    assert caught.value.code is ErrorCode.EMPTY_DOCUMENT


@pytest.mark.usefixtures("no_language_data")
def test_without_language_data_the_status_says_what_to_install() -> None:
    assert ocr.ocr_status() == (
        "OCR unavailable: the OCR engine's eng language data is not installed "
        "(apt-get install tesseract-ocr-eng)"
    )
    assert format_info(DocumentKind.PNG, "pypdf")["ocr"] == "unavailable"


# --- what is installed, and the processing key ------------------------------------------


@needs_engine
def test_formats_lists_the_ocr_engine_and_its_data() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "core.cli", "formats"], capture_output=True, text=True, check=True
    )
    (line,) = [line for line in out.stdout.splitlines() if line.startswith("ocr ")]
    assert "tesserocr" in line and "eng data" in line and f"{ocr.OCR_DPI} dpi" in line
    assert re.search(r"^tiff .*needs pillow \S+, tesserocr \S+$", out.stdout, re.MULTILINE)


@needs_engine
@pytest.mark.parametrize("kind", [DocumentKind.PDF, DocumentKind.PNG, DocumentKind.TIFF])
def test_the_processing_key_changes_with_the_ocr_engine_language_data_and_dpi(
    kind: DocumentKind, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = scan("phototest.png")

    def key() -> str:
        return processing_key(data, format_info(kind, "pypdf"))

    info = format_info(kind, "pypdf")
    assert {"ocr", "ocr_language", "ocr_data", "ocr_dpi", "ocr_rules"} <= set(info)
    before = key()
    with monkeypatch.context() as m:
        m.setattr(ocr, "OCR_DPI", 200)
        assert key() != before
    with monkeypatch.context() as m:
        m.setattr(ocr, "OCR_RULES_VERSION", "changed")
        assert key() != before
    # Other language data (the same language, another model) is another key.
    other = tmp_path / "tessdata"
    other.mkdir()
    (other / "eng.traineddata").write_bytes(b"another model")
    with monkeypatch.context() as m:
        m.setenv("TESSDATA_PREFIX", str(tmp_path))
        assert key() != before
    assert key() == before
    # Documents of other kinds keep their keys: OCR does not touch them.
    assert "ocr" not in format_info(DocumentKind.DOCX, "pypdf")


@needs_engine
def test_data_installed_while_a_worker_runs_counts_within_seconds_not_looked_up_per_pdf(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A worker makes a processing key for every PDF; what is installed is looked up
    again every INSTALLED_TRUSTED_S, so language data installed meanwhile counts from
    a PDF taken a few seconds later, and the PDFs in between cost no look-up."""
    now = [1_000.0]
    monkeypatch.setattr(ocr, "_clock", lambda: now[0])
    monkeypatch.setattr(ocr, "_recent", None)
    monkeypatch.delenv("TESSDATA_PREFIX", raising=False)
    monkeypatch.setattr(ocr, "DEBIAN_TESSDATA_GLOB", str(tmp_path / "*" / "tessdata"))
    looked: list[float] = []
    real = ocr._installed

    def counted() -> tuple[bool, Path | None]:
        looked.append(now[0])
        return real()

    monkeypatch.setattr(ocr, "_installed", counted)
    assert format_info(DocumentKind.PDF, "pypdf")["ocr"] == "unavailable"
    data = tmp_path / "5.00" / "tessdata"
    data.mkdir(parents=True)
    (data / "eng.traineddata").write_bytes(b"a model")
    now[0] += ocr.INSTALLED_TRUSTED_S / 2
    for _ in range(100):
        assert format_info(DocumentKind.PDF, "pypdf")["ocr"] == "unavailable"
    now[0] += ocr.INSTALLED_TRUSTED_S
    assert format_info(DocumentKind.PDF, "pypdf")["ocr"].startswith("tesserocr ")
    assert len(looked) == 2
    # TESSDATA_PREFIX is read each time: another data directory counts at once.
    other = tmp_path / "other"
    other.mkdir()
    (other / "eng.traineddata").write_bytes(b"another model")
    before = format_info(DocumentKind.PDF, "pypdf")["ocr_data"]
    monkeypatch.setenv("TESSDATA_PREFIX", str(other))
    assert format_info(DocumentKind.PDF, "pypdf")["ocr_data"] != before


# --- through a worker -----------------------------------------------------------------


@needs_engine
def test_scans_are_ingested_by_a_worker_and_found_by_search(db_url: str, tmp_path: Path) -> None:
    # One page to read per document: the parse budget (10 s and 0.5 s a page) is the
    # parser pool's, and a page takes seconds on a loaded machine.
    store = tmp_path / "objects"
    (tmp_path / "minutes.pdf").write_bytes(text_and_scan_pdf(text=TYPED))
    (tmp_path / "bomb.png").write_bytes(bilevel_png(10_000, 10_000))
    files = [SCANS / "phototest.png", tmp_path / "minutes.pdf", tmp_path / "bomb.png"]
    added = _cli(db_url, store, "add", *map(str, files))
    assert isinstance(added, list)
    ids = {task["document_name"]: task["document_id"] for task in added}

    _cli(db_url, store, "worker", "--until-idle")

    tasks = _cli(db_url, store, "tasks")
    assert isinstance(tasks, list)
    outcome = {t["document_name"]: (t["status"], t["error_code"]) for t in tasks}
    assert outcome == {
        "phototest.png": ("succeeded", None),
        "minutes.pdf": ("succeeded", None),
        "bomb.png": ("failed", "parse_error"),
    }, [t["error_detail"] for t in tasks]
    pages = _cli(db_url, store, "chunks", ids["minutes.pdf"])
    assert isinstance(pages, list)
    assert sorted({c["page"] for c in pages}) == [1, 2]
    hits = _cli(db_url, store, "search", "--mode", "keyword", "--all", "archive room")
    assert isinstance(hits, list)
    assert [(h["filename"], h["page"]) for h in hits] == [("minutes.pdf", 1)]
    hits = _cli(db_url, store, "search", "--mode", "keyword", "--all", "lazy fox")
    assert isinstance(hits, list)
    assert {(h["filename"], h["page"]) for h in hits} == {
        ("phototest.png", 1),
        ("minutes.pdf", 2),
    }
