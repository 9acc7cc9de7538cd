"""PDF: the text layer, page by page, with pypdf (default) or PDFium (``--parser pdfium``).

Encrypted PDFs are opened with the empty password, which is how "protected" PDFs that
anyone can view are made. A parse fails as a whole: if one page cannot be read the
document fails, rather than being indexed with silent holes.
"""

from __future__ import annotations

from collections.abc import Iterator
from io import BytesIO
from typing import TYPE_CHECKING

from core.ingest.chunker import Location
from core.ingest.formats.base import Extracted, Format, PageReading, Prose
from core.ingest.parse_progress import report_units
from core.states import DocumentKind, ErrorCode, PageDecision

if TYPE_CHECKING:
    from core.ingest.formats.base import ParseOptions
    from core.ingest.parser_warnings import WarningCollector

# PDFium's FPDF_GetLastError codes that are about the file rather than a bug.
_PDFIUM_PASSWORD_ERROR = 4
_PDFIUM_SECURITY_ERROR = 5


def parse(data: bytes, request: ParseOptions, warnings: WarningCollector) -> Extracted:
    from core.ingest.failures import ParseFailure

    pages = _pdfium_pages(data) if request.parser == "pdfium" else _pypdf_pages(data)
    out = Extracted()
    for number, text in enumerate(pages, start=1):
        out.units = number
        out.blocks.append(Prose(text, Location(page=number)))
        # Every page is read from its text layer until OCR decides per page (i20-ocr).
        out.readings.append(PageReading(number, PageDecision.TEXT, len(text)))
    if out.units == 0:
        raise ParseFailure(ErrorCode.EMPTY_DOCUMENT, "PDF has no pages")
    return out


FORMAT = Format(
    kind=DocumentKind.PDF,
    name="PDF",
    recognised_by="%PDF- within its first 1024 bytes",
    needs=("pypdf",),
    parse=parse,
    empty_reason="no extractable text (image-only or blank pages)",
)


def _pypdf_pages(data: bytes) -> Iterator[str]:
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
    for index in range(count):
        try:
            text = pages[index].extract_text()
        except Exception as exc:
            raise ParseFailure(ErrorCode.PARSE_ERROR, reason(exc, page=index + 1)) from None
        report_units(index + 1, count)
        yield text


def _pdfium_pages(data: bytes) -> Iterator[str]:
    from core.ingest.failures import ParseFailure, ParserUnavailable

    try:
        import pypdfium2 as pdfium
    except ImportError as exc:  # ParseRequest checks first; this is belt and braces
        raise ParserUnavailable("parser 'pdfium' needs pypdfium2, which is not installed") from exc

    try:
        document = pdfium.PdfDocument(data)  # no password: PDFium tries the empty one
    except Exception as exc:
        raise ParseFailure(ErrorCode.PARSE_ERROR, reason(exc, page=None)) from None
    try:
        for index in range(len(document)):
            try:
                page = document[index]
                textpage = page.get_textpage()
                # PDFium separates lines with CRLF; pypdf with LF. Keep chunks alike.
                text = str(textpage.get_text_bounded()).replace("\r\n", "\n")
                textpage.close()
                page.close()
            except Exception as exc:
                raise ParseFailure(ErrorCode.PARSE_ERROR, reason(exc, page=index + 1)) from None
            yield text
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
