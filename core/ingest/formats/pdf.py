"""PDF: the text layer, page by page, with pypdf (default) or PDFium (``--parser pdfium``);
a page whose layer is missing or negligible is rendered with PDFium and read by OCR.

Each page gets a :class:`~.base.PageReading` (the rules are :class:`core.ingest.formats.ocr.
PageReader`'s) and a progress report. A page with a text layer is never rendered, so
a text PDF costs no OCR time; a page with nothing drawn on it is known blank without
rendering. The document is ``empty_document`` only when the layers and OCR together
found nothing, and ``ocr_unavailable`` instead when pages needed an OCR engine that
is not installed.

Without the engine, a document that has text on some pages is still read: the pages
that needed OCR are ``skipped``, each with a reason naming what to install, and the
rest indexed. A blank separator page must not cost a book its index on a machine
without OCR, and the skipped pages stay visible for review.

Encrypted PDFs are opened with the empty password, which is how "protected" PDFs that
anyone can view are made. A page that cannot be read fails the document as a whole,
rather than indexing it with silent holes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from io import BytesIO
from typing import TYPE_CHECKING, Any

from core.ingest.chunker import Location
from core.ingest.formats.base import Extracted, Format, Prose
from core.ingest.parse_progress import report_units
from core.states import DocumentKind, ErrorCode

if TYPE_CHECKING:
    from PIL.Image import Image

    from core.ingest.formats.base import ParseOptions
    from core.ingest.formats.ocr import Drawn
    from core.ingest.parser_warnings import WarningCollector

# PDFium's FPDF_GetLastError codes that are about the file rather than a bug.
_PDFIUM_PASSWORD_ERROR = 4
_PDFIUM_SECURITY_ERROR = 5
POINTS_PER_INCH = 72  # PDF user space units
# Form XObjects nest; their objects are looked into this deep when judging whether a
# page shows more than text (pypdfium2's own default is 15).
MAX_FORM_DEPTH = 8  # levels


def parse(data: bytes, request: ParseOptions, warnings: WarningCollector) -> Extracted:
    from core.ingest.failures import ParseFailure
    from core.ingest.formats.ocr import PageReader

    count, layers = _pdfium_pages(data) if request.parser == "pdfium" else _pypdf_pages(data)
    if count == 0:
        raise ParseFailure(ErrorCode.EMPTY_DOCUMENT, "PDF has no pages")
    out = Extracted()
    reader = PageReader(pages=count)
    renderer = PageRenderer(data)
    try:
        for number, (layer, pypdf_page) in enumerate(layers, start=1):
            page = renderer.page(number - 1, pypdf_page)
            text, reading = reader.read(number, layer, page)
            out.units = number
            out.readings.append(reading)
            out.blocks.append(Prose(text, Location(page=number)))
            report_units(number, count)
    finally:
        renderer.close()
    if not any(reading.chars for reading in out.readings):
        raise ParseFailure(*reader.nothing_found(count, FORMAT.empty_reason))
    return out


FORMAT = Format(
    kind=DocumentKind.PDF,
    name="PDF",
    recognised_by="%PDF- within its first 1024 bytes",
    needs=("pypdf", "pypdfium2"),
    parse=parse,
    empty_reason="no extractable text (no text layer, and OCR found nothing legible)",
)


class PageRenderer:
    """The document's pages as PDFium sees them, for the pages whose text layer is
    thin: PDFium is opened on the first such page (a text PDF never opens it)."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._document: Any = None

    def page(self, index: int, pypdf_page: Any = None) -> PdfPage:
        """Page ``index`` (from 0); ``pypdf_page`` is pypdf's, when pypdf read it."""
        return PdfPage(self, index, pypdf_page)

    def document(self) -> Any:
        """The PDFium document, opened on first use.

        Raises:
            RenderFailed: PDFium is missing or cannot open the document.
        """
        from core.ingest.formats.ocr import RenderFailed

        if self._document is None:
            try:
                import pypdfium2 as pdfium
            except ImportError:
                raise RenderFailed(
                    "PDF pages cannot be rendered for OCR (pip install pypdfium2)"
                ) from None
            try:
                self._document = pdfium.PdfDocument(self._data)
            except Exception:
                raise RenderFailed("PDFium could not open the PDF to render it") from None
        return self._document

    def close(self) -> None:
        """Close the document, if it was opened."""
        if self._document is not None:
            self._document.close()
            self._document = None


class PdfPage:
    """One page, as :class:`core.ingest.formats.ocr.PageReader` asks about it."""

    def __init__(self, renderer: PageRenderer, index: int, pypdf_page: Any = None) -> None:
        self._renderer = renderer
        self._index = index
        self._pypdf_page = pypdf_page

    def drawn(self) -> Drawn:
        """What the page draws. From pypdf's reading of its content stream when pypdf
        read it: a text PDF's short pages then never load PDFium (its 10 MB would count
        against a parser's memory cap for nothing). Else PDFium's page objects (form
        XObjects looked into), stopping at the first that is not text."""
        from core.ingest.formats.ocr import Drawn, RenderFailed

        if self._pypdf_page is not None:
            return _drawn_by_operators(self._pypdf_page)
        import pypdfium2.raw as pdfium_c

        try:
            with self._loaded() as page:
                seen = Drawn.NOTHING
                for obj in page.get_objects(max_depth=MAX_FORM_DEPTH):
                    kind = obj.type
                    if kind == pdfium_c.FPDF_PAGEOBJ_FORM:
                        continue  # its contents are visited in turn
                    if kind != pdfium_c.FPDF_PAGEOBJ_TEXT:
                        return Drawn.PICTURES
                    seen = Drawn.TEXT_ONLY
                return seen
        except RenderFailed:
            raise
        except Exception as exc:
            raise RenderFailed(f"PDFium could not read the page ({type(exc).__name__})") from None

    def render(self) -> tuple[Image, int]:
        """The page as a grey image at ``OCR_DPI`` (less for a page so large it would
        exceed ``MAX_OCR_PIXELS``), with the resolution used."""
        from core.ingest.formats.ocr import MAX_OCR_PIXELS, OCR_DPI, RenderFailed, pixel_scale

        try:
            with self._loaded() as page:
                width, height = page.get_size()  # points
                scale = OCR_DPI / POINTS_PER_INCH
                scale *= pixel_scale(width * scale, height * scale, MAX_OCR_PIXELS)
                bitmap = page.render(scale=scale, grayscale=True)
                image = bitmap.to_pil().copy()  # to_pil shares the bitmap's buffer
                bitmap.close()
        except (RenderFailed, MemoryError):
            raise
        except Exception as exc:
            raise RenderFailed(f"PDFium could not render the page ({type(exc).__name__})") from None
        return image, max(1, round(POINTS_PER_INCH * scale))

    @contextlib.contextmanager
    def _loaded(self) -> Iterator[Any]:
        from core.ingest.formats.ocr import RenderFailed

        document = self._renderer.document()
        try:
            page = document[self._index]
        except Exception:
            raise RenderFailed("PDFium could not load the page") from None
        try:
            yield page
        finally:
            page.close()


def _pypdf_pages(data: bytes) -> tuple[int, Iterator[tuple[str, Any]]]:
    from pypdf import PasswordType, PdfReader

    from core.ingest.failures import ParseFailure

    try:
        reader = PdfReader(BytesIO(data), strict=False)
        if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
            raise ParseFailure(ErrorCode.PARSE_ERROR, "encrypted PDF needs a password")
        pages = reader.pages
        count = len(pages)
    except ParseFailure:
        raise
    except Exception as exc:
        raise ParseFailure(ErrorCode.PARSE_ERROR, reason(exc, page=None)) from None

    def layers() -> Iterator[tuple[str, Any]]:
        for index in range(count):
            try:
                page = pages[index]
                text = page.extract_text()
            except Exception as exc:
                raise ParseFailure(ErrorCode.PARSE_ERROR, reason(exc, page=index + 1)) from None
            yield text, page

    return count, layers()


# Content stream operators that paint something other than text: paths (stroke, fill),
# shadings, XObjects (images, forms) and inline images. Text is shown by Tj TJ ' ".
_PAINTING_OPERATORS = frozenset(
    {b"S", b"s", b"f", b"F", b"f*", b"B", b"B*", b"b", b"b*", b"sh", b"Do", b"INLINE IMAGE"}
)
_TEXT_OPERATORS = frozenset({b"Tj", b"TJ", b"'", b'"'})


def _drawn_by_operators(page: Any) -> Drawn:
    from core.ingest.formats.ocr import Drawn

    try:
        contents = page.get_contents()
        operators = set() if contents is None else {op for _, op in contents.operations}
    except Exception:
        return Drawn.PICTURES  # unclear: let PDFium render it and the engine judge
    if operators & _PAINTING_OPERATORS:
        return Drawn.PICTURES
    return Drawn.TEXT_ONLY if operators & _TEXT_OPERATORS else Drawn.NOTHING


def _pdfium_pages(data: bytes) -> tuple[int, Iterator[tuple[str, Any]]]:
    from core.ingest.failures import ParseFailure, ParserUnavailable

    try:
        import pypdfium2 as pdfium
    except ImportError as exc:  # ParseRequest checks first; this is belt and braces
        raise ParserUnavailable("parser 'pdfium' needs pypdfium2, which is not installed") from exc

    try:
        document = pdfium.PdfDocument(data)  # no password: PDFium tries the empty one
        count = len(document)
    except Exception as exc:
        raise ParseFailure(ErrorCode.PARSE_ERROR, reason(exc, page=None)) from None
    return count, _pdfium_layers(document, count)


def _pdfium_layers(document: Any, count: int) -> Iterator[tuple[str, Any]]:
    from core.ingest.failures import ParseFailure

    try:
        for index in range(count):
            try:
                page = document[index]
                textpage = page.get_textpage()
                # PDFium separates lines with CRLF; pypdf with LF. Keep chunks alike.
                text = str(textpage.get_text_bounded()).replace("\r\n", "\n")
                textpage.close()
                page.close()
            except Exception as exc:
                raise ParseFailure(ErrorCode.PARSE_ERROR, reason(exc, page=index + 1)) from None
            yield text, None
    finally:
        document.close()


def reason(exc: BaseException, *, page: int | None) -> str:
    """A short, path-free reason for a PDF parser's exception, naming the page when known."""
    from core.ingest.failures import OUT_OF_MEMORY_REASON

    where = "" if page is None else f" (page {page})"
    if isinstance(exc, MemoryError):
        return OUT_OF_MEMORY_REASON
    if isinstance(exc, RecursionError):
        return f"document structure nested too deeply{where}"
    from pypdf import errors as pdf_errors

    if isinstance(exc, pdf_errors.LimitReachedError):
        return f"document exceeds a parser safety limit{where}"
    if isinstance(exc, pdf_errors.FileNotDecryptedError | pdf_errors.WrongPasswordError):
        return "encrypted PDF needs a password"
    if isinstance(exc, pdf_errors.DependencyError):
        # In practice: AES encryption without the ``cryptography`` package installed.
        return "PDF needs an optional decoder that is not installed (AES needs cryptography)"
    if isinstance(exc, pdf_errors.EmptyFileError):
        return "not a valid PDF (empty file)"
    code = getattr(exc, "err_code", None)  # pypdfium2.PdfiumError
    if code == _PDFIUM_PASSWORD_ERROR:
        return "encrypted PDF needs a password"
    if code == _PDFIUM_SECURITY_ERROR:
        return "PDF uses an unsupported security handler"
    if page is None:
        return "not a valid PDF"
    if isinstance(exc, pdf_errors.PyPdfError) or code is not None:
        return f"damaged PDF{where}"
    # The type name tells a developer where to look without leaking paths or content.
    return f"parser failed{where}: {type(exc).__name__}"
