"""PDF, Markdown and plain text → pages → chunks, as pure functions.

Nothing here touches the database or the event loop: :func:`run_parse` is CPU-bound and
meant to run inside :class:`core.ingest.parse_pool.ParserPool`'s child processes, which add
the time and memory limits a pure function cannot enforce on itself. Its neighbours do
one job each: :mod:`core.ingest.sniffing` (what the bytes are, how text is encoded),
:mod:`core.ingest.chunker` (text → chunks) and :mod:`core.ingest.parser_warnings`
(counting a parse's warnings). All four import only the standard library and
:mod:`core.states` (pypdf is imported on first use), so a parser child loads nothing else.

Failure vocabulary: every way a document can defeat the parser ends as
:class:`ParseFailure` with code ``parse_error`` (the file cannot be read) or
``empty_document`` (it can be read but holds no indexable text); a parser process killed
from outside ends as :class:`ParserKilled` (``parser_killed``, retried automatically),
since nothing says the file was at fault. Other exceptions mean a caller bug (bad
arguments) or a broken installation (:class:`ParserUnavailable`), never a bad file.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from io import BytesIO

from core.ingest.chunker import Chunk, chunk_page, validate_chunking
from core.ingest.parser_warnings import WarningCollector, capture_parser_warnings
from core.ingest.sniffing import decode_text
from core.states import DocumentKind, ErrorCode

logger = logging.getLogger(__name__)

# --- tunables ---------------------------------------------------------------------------

# The defaults for how documents are parsed, in one place: PipelineOptions, ParseRequest,
# parse_document and ParserPool.parse all refer to these.
DEFAULT_PARSER = "pypdf"
DEFAULT_CHUNK_SIZE = 1000  # characters
DEFAULT_CHUNK_OVERLAP = 150  # characters

PARSERS = ("pypdf", "pdfium")
OUT_OF_MEMORY_REASON = "parser exceeded memory limit"
# The codes a parse can fail with: the document's (parse_error, empty_document) and
# a parser killed from outside (parser_killed, see ParserKilled).
PARSE_FAILURE_CODES = frozenset(
    {ErrorCode.PARSE_ERROR, ErrorCode.EMPTY_DOCUMENT, ErrorCode.PARSER_KILLED}
)


# --- public values ----------------------------------------------------------------------


@dataclass(frozen=True)
class ParseRequest:
    """How to parse one document; checked once, when it is built.

    Options enter parsing at three edges, and each builds a request in the caller's
    process: :func:`parse_document`, :meth:`ParserPool.parse
    <core.ingest.parse_pool.ParserPool.parse>` (in the parent, before any byte goes to
    a child) and the pipeline's in-process text path. So a caller's bug is raised in
    the caller's process, with its traceback, before a parser process is started or
    spent. A parser child receives its requests pickled from the pool, and unpickling
    does not run ``__post_init__``: the child trusts the check its only sender made
    rather than repeating it.

    Attributes:
        kind: What the document is.
        parser: PDF parser, ``"pypdf"`` or ``"pdfium"``; ignored for text.
        chunk_size: Largest chunk, in characters.
        chunk_overlap: Characters shared by consecutive chunks on the same page.

    Raises:
        ValueError: Unknown parser, or chunk sizes out of range.
        ParserUnavailable: A PDF is to be parsed with pdfium, and pypdfium2 is not
            installed.
    """

    kind: DocumentKind
    parser: str = DEFAULT_PARSER
    chunk_size: int = DEFAULT_CHUNK_SIZE
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP

    def __post_init__(self) -> None:
        validate_chunking(self.chunk_size, self.chunk_overlap)
        if self.parser not in PARSERS:
            raise ValueError(f"unknown parser {self.parser!r}; expected one of {PARSERS}")
        if self.kind is DocumentKind.PDF and self.parser == "pdfium":
            parser_info(self.parser)  # raises ParserUnavailable when pypdfium2 is missing


@dataclass(frozen=True)
class ParsedDocument:
    """What a successful parse yields.

    Attributes:
        pages: Page count for PDFs; 1 for Markdown and text.
        chunks: The chunks in document order; never empty.
        warnings: Number of warnings the parser raised (repairs it made, suspicious
            structure, a fallback text encoding, stripped NUL bytes).
    """

    pages: int
    chunks: tuple[Chunk, ...]
    warnings: int


class ParseFailure(Exception):
    """The document could not be parsed."""

    def __init__(self, code: ErrorCode | str, reason: str | None = None) -> None:
        """Build a failure.

        Args:
            code: ``parse_error`` or ``empty_document`` (``parser_killed``: use
                :class:`ParserKilled`).
            reason: A short operator-facing reason, free of paths and stack traces.
                Defaults to this class's docstring.

        Raises:
            ValueError: ``code`` is not one of :data:`PARSE_FAILURE_CODES`.
        """
        parsed = ErrorCode(code)
        if parsed not in PARSE_FAILURE_CODES:
            raise ValueError(f"not a parse failure code: {code!r}")
        self.code: ErrorCode = parsed
        self.reason: str = reason or (type(self).__doc__ or "").strip()
        super().__init__(self.code, self.reason)

    def __str__(self) -> str:
        return f"{self.code}: {self.reason}"


class ParserKilled(ParseFailure):
    """parser process killed from outside"""

    def __init__(self, reason: str | None = None) -> None:
        """A parse cut short by a signal this worker did not send (an operator's
        ``kill -9``, the kernel's OOM killer), on the fresh process it was retried on
        too. Not the document's doing as far as anyone knows: its code,
        ``parser_killed``, is retried automatically, with backoff, until the task's
        attempts run out (so no document is retried for ever)."""
        super().__init__(ErrorCode.PARSER_KILLED, reason)

    def __reduce__(self) -> tuple[type[ParserKilled], tuple[str]]:
        # Pickled as what it is (an exception pickles its args, and these differ).
        return (ParserKilled, (self.reason,))


class ParserUnavailable(RuntimeError):
    """The requested parser library is not installed."""


# --- parsing ----------------------------------------------------------------------------


def parser_info(parser: str) -> dict[str, str]:
    """Name and version of a parser, as recorded on a task (a fresh dict each call).

    Args:
        parser: ``"pypdf"`` or ``"pdfium"``.

    Returns:
        ``{"parser": name, "version": library version}``.

    Raises:
        ValueError: Unknown parser name.
        ParserUnavailable: The parser's library is not installed.
    """
    return {"parser": parser, "version": _parser_version(parser)}


@functools.cache
def _parser_version(parser: str) -> str:
    # Cached: the worker records it on every task, and reading a distribution's
    # metadata parses its METADATA file (~0.3 ms). Only successes are cached.
    import importlib.metadata  # not at import time: parser processes never need it

    distribution = {"pypdf": "pypdf", "pdfium": "pypdfium2"}.get(parser)
    if distribution is None:
        raise ValueError(f"unknown parser {parser!r}; expected one of {PARSERS}")
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError as exc:
        raise ParserUnavailable(
            f"parser {parser!r} needs the {distribution} package, which is not installed"
        ) from exc


def parse_document(
    data: bytes,
    kind: DocumentKind | str,
    *,
    parser: str = DEFAULT_PARSER,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
) -> ParsedDocument:
    """Parse a document into page-tagged chunks.

    PDFs are read page by page (pypdf by default, PDFium with ``parser="pdfium"``);
    encrypted PDFs are opened with the empty password, which is how "protected" PDFs
    that anyone can view are made. A parse fails as a whole: if one page cannot be read
    the document fails, rather than being indexed with silent holes.

    Parser warnings are counted; at most ``MAX_LOGGED_WARNINGS`` lines
    (:mod:`core.ingest.parser_warnings`) are logged per parse. PDFs must not be parsed
    from several threads at once (the ``warnings`` module's capture is process-global);
    the parser pool runs one parse per process. Text and Markdown are safe on any thread.

    Args:
        data: The document's bytes.
        kind: What the bytes are, usually from :func:`core.ingest.sniffing.sniff_kind`.
        parser: PDF parser, ``"pypdf"`` or ``"pdfium"``; ignored for text.
        chunk_size: Largest chunk, in characters.
        chunk_overlap: Characters shared by consecutive chunks on the same page.

    Returns:
        The parsed document, with at least one chunk.

    Raises:
        ParseFailure: The document cannot be read (``parse_error``) or holds no
            indexable text (``empty_document``).
        ValueError: Unknown kind or parser, or chunk sizes out of range.
        ParserUnavailable: ``parser="pdfium"`` but pypdfium2 is not installed.
    """
    request = ParseRequest(DocumentKind(kind), parser, chunk_size, chunk_overlap)
    outcome, lines, count = run_parse(data, request)
    log_parser_warnings(lines, count)
    if isinstance(outcome, ParseFailure):
        raise outcome
    return outcome


def run_parse(
    data: bytes, request: ParseRequest
) -> tuple[ParsedDocument | ParseFailure, list[str], int]:
    """:func:`parse_document` without the logging, for the parser pool's children and
    the pipeline's in-process text path.

    The child process cannot log where the operator looks, so it ships the capped
    warning lines back and the pool logs them in the parent with
    :func:`log_parser_warnings`. The request was checked when it was built (see
    :class:`ParseRequest`), so nothing is checked again here.

    Returns:
        ``(document or failure, warning lines to log, total warnings)``.

    Raises:
        ParserUnavailable: As :func:`parse_document`.
    """
    collector = WarningCollector()
    outcome: ParsedDocument | ParseFailure
    try:
        if request.kind is DocumentKind.PDF:
            with capture_parser_warnings(collector):
                outcome = _parse_pdf(data, request, collector)
        else:
            # Our own code: no library warnings to capture, so no process-global
            # state is touched and text may be parsed on any thread.
            outcome = _parse_text(data, request, collector)
    except ParseFailure as failure:
        outcome = failure
    except (MemoryError, RecursionError) as exc:
        # Parser calls are wrapped where they happen; this catches the resource limits
        # that can strike anywhere, e.g. while decoding or chunking a huge text.
        outcome = ParseFailure(ErrorCode.PARSE_ERROR, _reason(exc, page=None))
    return outcome, collector.lines_to_log(), collector.count


def log_parser_warnings(lines: list[str], count: int) -> None:
    """Log a parse's capped warning lines, plus one line for the ones left out."""
    for line in lines:
        logger.warning("parser warning: %s", line)
    if count > len(lines):
        logger.warning("%d more parser warnings not logged", count - len(lines))


def _parse_text(data: bytes, request: ParseRequest, collector: WarningCollector) -> ParsedDocument:
    decoded = decode_text(data, count_nul=False)
    if decoded is None:
        raise ParseFailure(ErrorCode.PARSE_ERROR, "undecodable text")
    text, encoding = decoded
    if encoding == "cp1252":
        collector.add("text is not UTF-8; decoded as cp1252")
    text = _strip_nul(text, collector)
    chunks = tuple(chunk_page(text, None, 0, request.chunk_size, request.chunk_overlap))
    if not chunks:
        raise ParseFailure(ErrorCode.EMPTY_DOCUMENT, "document contains no text")
    return ParsedDocument(pages=1, chunks=chunks, warnings=collector.count)


def _parse_pdf(data: bytes, request: ParseRequest, collector: WarningCollector) -> ParsedDocument:
    page_texts = _pdfium_pages(data) if request.parser == "pdfium" else _pypdf_pages(data)
    chunks: list[Chunk] = []
    pages = 0
    for number, raw in enumerate(page_texts, start=1):
        pages = number
        text = _strip_nul(raw, collector)
        chunks.extend(
            chunk_page(text, number, len(chunks), request.chunk_size, request.chunk_overlap)
        )
    if pages == 0:
        raise ParseFailure(ErrorCode.EMPTY_DOCUMENT, "PDF has no pages")
    if not chunks:
        raise ParseFailure(
            ErrorCode.EMPTY_DOCUMENT, "no extractable text (image-only or blank pages)"
        )
    return ParsedDocument(pages=pages, chunks=tuple(chunks), warnings=collector.count)


def _strip_nul(text: str, collector: WarningCollector) -> str:
    # PostgreSQL text columns reject U+0000, and it never carries meaning in prose.
    if "\x00" not in text:
        return text
    collector.add(f"stripped {text.count(chr(0))} NUL characters")
    return text.replace("\x00", "")


def _pypdf_pages(data: bytes) -> Iterator[str]:
    from pypdf import PasswordType, PdfReader

    try:
        reader = PdfReader(BytesIO(data), strict=False)
        if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
            raise ParseFailure(ErrorCode.PARSE_ERROR, "encrypted PDF needs a password")
        pages = reader.pages
        count = len(pages)
    except ParseFailure:
        raise
    except Exception as exc:
        raise ParseFailure(ErrorCode.PARSE_ERROR, _reason(exc, page=None)) from None
    for index in range(count):
        try:
            text = pages[index].extract_text()
        except Exception as exc:
            raise ParseFailure(ErrorCode.PARSE_ERROR, _reason(exc, page=index + 1)) from None
        yield text


def _pdfium_pages(data: bytes) -> Iterator[str]:
    try:
        import pypdfium2 as pdfium
    except ImportError as exc:  # ParseRequest checks first; this is belt and braces
        raise ParserUnavailable("parser 'pdfium' needs pypdfium2, which is not installed") from exc

    try:
        document = pdfium.PdfDocument(data)  # no password: PDFium tries the empty one
    except Exception as exc:
        raise ParseFailure(ErrorCode.PARSE_ERROR, _reason(exc, page=None)) from None
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
                raise ParseFailure(ErrorCode.PARSE_ERROR, _reason(exc, page=index + 1)) from None
            yield text
    finally:
        document.close()


# PDFium's FPDF_GetLastError codes that are about the file rather than a bug.
_PDFIUM_PASSWORD_ERROR = 4
_PDFIUM_SECURITY_ERROR = 5


def _reason(exc: BaseException, *, page: int | None) -> str:
    """A short, path-free reason for a parser exception, naming the page when known."""
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
