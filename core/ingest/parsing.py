"""PDF, Markdown and plain text → pages → chunks, as pure functions.

Nothing here touches the database or the event loop: ``parse_document`` is CPU-bound and
meant to run inside :class:`core.ingest.parse_pool.ParserPool`'s child processes, which add the
time and memory limits a pure function cannot enforce on itself.

Failure vocabulary: every way a document can defeat the parser ends as
:class:`ParseFailure` with code ``parse_error`` (the file cannot be read) or
``empty_document`` (it can be read but holds no indexable text). Other exceptions mean a
caller bug (bad arguments) or a broken installation (:class:`ParserUnavailable`), never a
bad file.
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import logging
import re
import threading
import warnings
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from io import BytesIO

from core.states import DocumentKind, ErrorCode

logger = logging.getLogger(__name__)

# --- tunables ---------------------------------------------------------------------------

# Parser warnings logged per parse, the summary line included; the rest are only counted.
# A hostile PDF can make pypdf log tens of thousands of lines.
MAX_LOGGED_WARNINGS = 20  # lines
# A PDF header must start within this many bytes; the same window Acrobat tolerates.
PDF_HEADER_WINDOW_BYTES = 1024  # bytes
# How much of an upload sniff_kind inspects to decide whether it is text.
TEXT_SNIFF_BYTES = 64 * 1024  # bytes
# Control characters (other than tab, newline, carriage return, form feed, vertical tab
# and escape) allowed in text before it is judged binary. Random bytes score about 13 %.
MAX_CONTROL_CHAR_RATIO = 0.01  # fraction of decoded characters
# Longest warning line kept, so one absurd message cannot bloat a log.
MAX_WARNING_LINE_CHARS = 300  # characters

PARSERS = ("pypdf", "pdfium")
OUT_OF_MEMORY_REASON = "parser exceeded memory limit"
MARKDOWN_SUFFIXES = (".md", ".markdown")
TEXT_SUFFIXES = (".txt", ".text", *MARKDOWN_SUFFIXES)

# Magic numbers of formats people upload by mistake that can pass as "mostly text" in
# their first bytes. Anything else binary is caught by the control-character ratio.
_BINARY_MAGICS: tuple[bytes, ...] = (
    b"PK\x03\x04",  # ZIP, DOCX, XLSX, ODT, EPUB
    b"PK\x05\x06",  # empty ZIP
    b"PK\x07\x08",  # spanned ZIP
    b"\x1f\x8b",  # gzip
    b"BZh",  # bzip2
    b"\xfd7zXZ\x00",  # xz
    b"7z\xbc\xaf\x27\x1c",  # 7-Zip
    b"Rar!\x1a\x07",  # RAR
    b"\x89PNG\r\n\x1a\n",  # PNG
    b"\xff\xd8\xff",  # JPEG
    b"GIF87a",
    b"GIF89a",
    b"II*\x00",  # TIFF, little-endian
    b"MM\x00*",  # TIFF, big-endian
    b"\x7fELF",
    b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1",  # OLE2: .doc, .xls, .msg
    b"%!PS",  # PostScript: text-like but not something we can index meaningfully
)
# C0 and C1 controls except tab, LF, VT, FF, CR and ESC (ANSI colours in logs).
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f-\x9f]")
# The endian-neutral codecs read the BOM, pick the byte order from it and drop it.
_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    # UTF-32 BOMs start with the UTF-16 ones, so they must be tested first.
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_PDF_MAGIC = b"%PDF-"

# Chunking works on regular expressions because they scan in C; a per-character Python
# loop over a 2 MB line costs a noticeable fraction of a second.
_WHITESPACE_RUN = re.compile(r"\s*")
_WORD_RUN = re.compile(r"\S*")
# Searched in a reversed window: "whitespace then non-whitespace" reversed is a word end.
_REVERSED_WORD_END = re.compile(r"\s\S")


# --- public values ----------------------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    """One piece of a document's text, sized for embedding.

    Attributes:
        ordinal: Position of the chunk in the document, from 0.
        text: The chunk's text, NUL-free.
        page: 1-based page number for PDFs, None for Markdown and text.
        char_start: Offset of the first character in the page's text (PDF) or in the
            whole decoded document (Markdown, text).
        char_end: Offset one past the last character, in the same text.
    """

    ordinal: int
    text: str
    page: int | None
    char_start: int
    char_end: int


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
            code: ``parse_error`` or ``empty_document``.
            reason: A short operator-facing reason, free of paths and stack traces.
                Defaults to this class's docstring.

        Raises:
            ValueError: ``code`` is neither of the two parse codes.
        """
        parsed = ErrorCode(code)
        if parsed not in (ErrorCode.PARSE_ERROR, ErrorCode.EMPTY_DOCUMENT):
            raise ValueError(f"not a parse failure code: {code!r}")
        self.code: ErrorCode = parsed
        self.reason: str = reason or (type(self).__doc__ or "").strip()
        super().__init__(self.code, self.reason)

    def __str__(self) -> str:
        return f"{self.code}: {self.reason}"


class ParserUnavailable(RuntimeError):
    """The requested parser library is not installed."""


# --- content sniffing -------------------------------------------------------------------


def sniff_kind(data: bytes, filename: str) -> DocumentKind | None:
    """Judge an upload's kind from its content, using the name only to tell text apart.

    Rules, in order:

    1. ``%PDF-`` at offset 0 → PDF. ``%PDF-`` later but within the first 1024 bytes
       (junk before the header, which readers tolerate) → PDF too, unless the name
       claims Markdown or text: a note *about* PDF headers is still a note.
    2. A name ending in ``.pdf`` whose content is not PDF → None. The content
       contradicts the name (HTML error pages, ZIPs, renamed files), so the upload is
       refused as bad input rather than indexed as something the user did not mean.
    3. Known binary signatures (ZIP, images, ELF, …) → None.
    4. Text-like content → MARKDOWN for ``.md``/``.markdown`` names, TEXT otherwise.
       Text-like means it decodes (BOM-declared UTF-8/16/32, else strict UTF-8, else
       cp1252) and at most 1 % of the first 64 KiB are control characters. NUL bytes
       count as control characters: a stray NUL in a log is tolerated (and stripped on
       parse), a binary file is not. UTF-16 without a BOM is not recognised.
    5. Anything else → None.

    An empty upload is text by rule 4 (and later fails as ``empty_document``), except
    under a ``.pdf`` name (rule 2).

    Args:
        data: The upload's bytes.
        filename: The name it was uploaded under; only its suffix is used.

    Returns:
        The document kind, or None when ingestdesk does not support the content.
    """
    name = filename.lower()
    header_at = data.find(_PDF_MAGIC, 0, PDF_HEADER_WINDOW_BYTES)
    if header_at == 0 or (header_at > 0 and not name.endswith(TEXT_SUFFIXES)):
        return DocumentKind.PDF
    if name.endswith(".pdf"):
        return None
    if data.startswith(_BINARY_MAGICS):
        return None
    sample = _decode_text(data[:TEXT_SNIFF_BYTES], final=len(data) <= TEXT_SNIFF_BYTES)
    if sample is None or _control_ratio(sample[0]) > MAX_CONTROL_CHAR_RATIO:
        return None
    if name.endswith(MARKDOWN_SUFFIXES):
        return DocumentKind.MARKDOWN
    return DocumentKind.TEXT


def _control_ratio(text: str, *, count_nul: bool = True) -> float:
    """Fraction of ``text`` that is control characters a text file would not contain."""
    if not count_nul:
        text = text.replace("\x00", "")
    if not text:
        return 0.0
    # Deleting them with a regex runs in C; counting per character in Python would make
    # a 50 MB upload take seconds.
    return (len(text) - len(_CONTROL_CHARS.sub("", text))) / len(text)


def _decode_text(
    data: bytes, *, final: bool = True, count_nul: bool = True
) -> tuple[str, str] | None:
    """Decode text bytes the way a careful human would guess their encoding.

    BOM first (it is unambiguous), then strict UTF-8 (by far the commonest, and it
    almost never decodes non-UTF-8 text by accident), then cp1252 — which decodes nearly
    any byte string, so it is only believed if the result has few control characters.

    Args:
        data: The bytes.
        final: False when ``data`` is a prefix of a longer file, so a multi-byte
            character cut at the end is not held against it.
        count_nul: Whether NUL bytes count against cp1252. Sniffing counts them (they
            mark binaries); parsing, which strips them anyway, does not.

    Returns:
        ``(text, encoding)``, or None when no candidate encoding fits.
    """
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return _decode_with(data, encoding, final=final)
    decoded = _decode_with(data, "utf-8", final=final)
    if decoded is not None:
        return decoded
    decoded = _decode_with(data, "cp1252", final=final)
    if (
        decoded is not None
        and _control_ratio(decoded[0], count_nul=count_nul) <= MAX_CONTROL_CHAR_RATIO
    ):
        return decoded
    return None


def _decode_with(data: bytes, encoding: str, *, final: bool) -> tuple[str, str] | None:
    decoder = codecs.getincrementaldecoder(encoding)("strict")
    try:
        return decoder.decode(data, final=final), encoding
    except UnicodeDecodeError:
        return None


# --- chunking ---------------------------------------------------------------------------


def chunk_text(text: str, *, chunk_size: int, overlap: int) -> list[tuple[int, int]]:
    """Split text into overlapping ``(start, end)`` spans that respect word boundaries.

    Each span is at most ``chunk_size`` characters, starts at a word start and ends at a
    word end, and shares up to ``overlap`` characters with the previous span: the next
    span starts at the first word beginning at or after ``end - overlap``. A word longer
    than ``chunk_size`` cannot fit anywhere, so it — and only it — is cut hard into
    ``chunk_size`` pieces; those pieces do not overlap. Whitespace between spans is never
    a span of its own and text that is all whitespace yields no spans.

    Every span ends strictly after the previous one and the scan looks at each character
    a bounded number of times, so the work is O(len(text) * chunk_size / (chunk_size -
    overlap)), i.e. linear for fixed settings, and a 2 MB line without spaces is fine.

    Args:
        text: The text to split.
        chunk_size: Largest span, in characters; must be positive.
        overlap: Characters shared with the previous span; ``0 <= overlap < chunk_size``.

    Returns:
        The spans in order; ``text[start:end]`` is each chunk's text.

    Raises:
        ValueError: The sizes are out of range.
    """
    _validate_chunking(chunk_size, overlap)
    n = len(text)
    # Trailing whitespace never belongs to a chunk; trimming it once keeps the last
    # span honest. Only the trailing run is visited.
    while n and text[n - 1].isspace():
        n -= 1
    spans: list[tuple[int, int]] = []
    start = _skip_whitespace(text, 0, n)
    prev_end = 0
    while start < n:
        limit = start + chunk_size
        if limit >= n:
            spans.append((start, n))
            break
        end = _last_word_end(text, max(start + 1, prev_end + 1), limit)
        if end < 0:
            if start < prev_end:
                # Only overlap fits before the next (long) word: drop the overlap and
                # start at that word, so the word is not cut needlessly.
                start = _skip_whitespace(text, prev_end, n)
                continue
            # A single word longer than chunk_size: the only unavoidable mid-word cut.
            end = limit
        spans.append((start, end))
        prev_end = end
        start = _next_start(text, start, end, overlap, n)
    return spans


def _validate_chunking(chunk_size: int, overlap: int) -> None:
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    if not 0 <= overlap < chunk_size:
        raise ValueError(f"overlap must be in [0, chunk_size), got {overlap} for {chunk_size}")


def _skip_whitespace(text: str, pos: int, end: int) -> int:
    match = _WHITESPACE_RUN.match(text, pos, end)
    return match.end() if match else pos


def _last_word_end(text: str, lo: int, hi: int) -> int:
    """Largest ``i`` in ``[lo, hi]`` with ``text[i-1]`` a word character and ``text[i]``
    whitespace, or -1. Requires ``hi < len(text)``."""
    if lo > hi:
        return -1
    # Reversed, "non-whitespace then whitespace" becomes "whitespace then non-whitespace",
    # and the first match in the reversed window is the last word end in the original.
    window = text[lo - 1 : hi + 1][::-1]
    match = _REVERSED_WORD_END.search(window)
    return -1 if match is None else hi - match.start()


def _next_start(text: str, start: int, end: int, overlap: int, n: int) -> int:
    """Where the span after ``[start, end)`` begins: the first word start at or after
    ``end - overlap``, strictly after ``start`` and never past the word after ``end``."""
    pos = max(end - overlap, start + 1)
    if 0 < pos < end and not text[pos - 1].isspace():
        # Inside a word: move to its end (bounded by ``end`` so a hard-cut giant word is
        # not scanned here) rather than back, which keeps progress guaranteed.
        match = _WORD_RUN.match(text, pos, end)
        pos = match.end() if match else pos
    return _skip_whitespace(text, pos, n)


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
    parser: str = "pypdf",
    chunk_size: int = 1000,
    chunk_overlap: int = 150,
) -> ParsedDocument:
    """Parse a document into page-tagged chunks.

    PDFs are read page by page (pypdf by default, PDFium with ``parser="pdfium"``);
    encrypted PDFs are opened with the empty password, which is how "protected" PDFs
    that anyone can view are made. A parse fails as a whole: if one page cannot be read
    the document fails, rather than being indexed with silent holes.

    Parser warnings are counted; at most ``MAX_LOGGED_WARNINGS`` lines are logged per
    parse. PDFs must not be parsed from several threads at once (the ``warnings``
    module's capture is process-global); the parser pool runs one parse per process.
    Text and Markdown are safe on any thread.

    Args:
        data: The document's bytes.
        kind: What the bytes are, usually from :func:`sniff_kind`.
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
    outcome, lines, count = run_parse(
        data, kind, parser=parser, chunk_size=chunk_size, chunk_overlap=chunk_overlap
    )
    log_parser_warnings(lines, count)
    if isinstance(outcome, ParseFailure):
        raise outcome
    return outcome


def run_parse(
    data: bytes,
    kind: DocumentKind | str,
    *,
    parser: str = "pypdf",
    chunk_size: int = 1000,
    chunk_overlap: int = 150,
) -> tuple[ParsedDocument | ParseFailure, list[str], int]:
    """:func:`parse_document` without the logging, for the parser pool's children.

    The child process cannot log where the operator looks, so it ships the capped
    warning lines back and the pool logs them in the parent with
    :func:`log_parser_warnings`.

    Returns:
        ``(document or failure, warning lines to log, total warnings)``.

    Raises:
        ValueError, ParserUnavailable: As :func:`parse_document`.
    """
    doc_kind = DocumentKind(kind)
    validate_request(doc_kind, parser, chunk_size, chunk_overlap)
    collector = _WarningCollector()
    outcome: ParsedDocument | ParseFailure
    try:
        if doc_kind is DocumentKind.PDF:
            with _capture_parser_warnings(collector):
                outcome = _parse_pdf(data, parser, chunk_size, chunk_overlap, collector)
        else:
            # Our own code: no library warnings to capture, so no process-global
            # state is touched and text may be parsed on any thread.
            outcome = _parse_text(data, chunk_size, chunk_overlap, collector)
    except ParseFailure as failure:
        outcome = failure
    except (MemoryError, RecursionError) as exc:
        # Parser calls are wrapped where they happen; this catches the resource limits
        # that can strike anywhere, e.g. while decoding or chunking a huge text.
        outcome = ParseFailure(ErrorCode.PARSE_ERROR, _reason(exc, page=None))
    return outcome, collector.lines_to_log(), collector.count


def validate_request(kind: DocumentKind, parser: str, chunk_size: int, chunk_overlap: int) -> None:
    """Reject arguments that are caller bugs, before any work (or process hop) is spent.

    Raises:
        ValueError: Unknown parser, or chunk sizes out of range.
        ParserUnavailable: The PDF parser's library is not installed.
    """
    _validate_chunking(chunk_size, chunk_overlap)
    if parser not in PARSERS:
        raise ValueError(f"unknown parser {parser!r}; expected one of {PARSERS}")
    if kind is DocumentKind.PDF and parser == "pdfium":
        parser_info(parser)  # raises ParserUnavailable when pypdfium2 is missing


def log_parser_warnings(lines: list[str], count: int) -> None:
    """Log a parse's capped warning lines, plus one line for the ones left out."""
    for line in lines:
        logger.warning("parser warning: %s", line)
    if count > len(lines):
        logger.warning("%d more parser warnings not logged", count - len(lines))


def _parse_text(
    data: bytes, chunk_size: int, chunk_overlap: int, collector: _WarningCollector
) -> ParsedDocument:
    decoded = _decode_text(data, count_nul=False)
    if decoded is None:
        raise ParseFailure(ErrorCode.PARSE_ERROR, "undecodable text")
    text, encoding = decoded
    if encoding == "cp1252":
        collector.add("text is not UTF-8; decoded as cp1252")
    text = _strip_nul(text, collector)
    chunks = tuple(_chunks(text, None, 0, chunk_size, chunk_overlap))
    if not chunks:
        raise ParseFailure(ErrorCode.EMPTY_DOCUMENT, "document contains no text")
    return ParsedDocument(pages=1, chunks=chunks, warnings=collector.count)


def _parse_pdf(
    data: bytes, parser: str, chunk_size: int, chunk_overlap: int, collector: _WarningCollector
) -> ParsedDocument:
    page_texts = _pdfium_pages(data) if parser == "pdfium" else _pypdf_pages(data)
    chunks: list[Chunk] = []
    pages = 0
    for number, raw in enumerate(page_texts, start=1):
        pages = number
        text = _strip_nul(raw, collector)
        chunks.extend(_chunks(text, number, len(chunks), chunk_size, chunk_overlap))
    if pages == 0:
        raise ParseFailure(ErrorCode.EMPTY_DOCUMENT, "PDF has no pages")
    if not chunks:
        raise ParseFailure(
            ErrorCode.EMPTY_DOCUMENT, "no extractable text (image-only or blank pages)"
        )
    return ParsedDocument(pages=pages, chunks=tuple(chunks), warnings=collector.count)


def _chunks(
    text: str, page: int | None, first_ordinal: int, chunk_size: int, chunk_overlap: int
) -> Iterator[Chunk]:
    spans = chunk_text(text, chunk_size=chunk_size, overlap=chunk_overlap)
    for offset, (start, end) in enumerate(spans):
        yield Chunk(first_ordinal + offset, text[start:end], page, start, end)


def _strip_nul(text: str, collector: _WarningCollector) -> str:
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
    except ImportError as exc:  # validate_request checks first; this is belt and braces
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


# --- warning capture --------------------------------------------------------------------


class _WarningCollector:
    """Counts one parse's warnings and keeps the first few lines for the log."""

    def __init__(self) -> None:
        self.count = 0
        self._lines: list[str] = []

    def add(self, line: str) -> None:
        self.count += 1
        if len(self._lines) < MAX_LOGGED_WARNINGS:
            self._lines.append(line[:MAX_WARNING_LINE_CHARS])

    def lines_to_log(self) -> list[str]:
        # Leave room for the "N more" summary so a parse never logs more than the cap.
        if self.count > MAX_LOGGED_WARNINGS:
            return self._lines[: MAX_LOGGED_WARNINGS - 1]
        return list(self._lines)


_active_collector: ContextVar[_WarningCollector | None] = ContextVar(
    "ingestdesk_parse_warnings", default=None
)


class _PypdfLogRouter(logging.Handler):
    """Sends pypdf's log records to the running parse's collector.

    Installed on the ``pypdf`` logger (with propagation off) only while some parse is
    running, so a flood of warnings never reaches the application's handlers. Records
    emitted outside a parse (another thread using pypdf meanwhile) are passed on to the
    root logger as if the router were not there.
    """

    def emit(self, record: logging.LogRecord) -> None:
        collector = _active_collector.get()
        if collector is None or record.levelno < logging.WARNING:
            root = logging.getLogger()
            if record.levelno >= root.getEffectiveLevel():
                root.handle(record)
            return
        collector.add(f"{record.name}: {record.getMessage()}")


_router = _PypdfLogRouter()
_router_lock = threading.Lock()
_router_users = 0
_saved_logger_state: tuple[bool, int] = (True, logging.NOTSET)


@contextlib.contextmanager
def _capture_parser_warnings(collector: _WarningCollector) -> Iterator[None]:
    """Count pypdf's log warnings and ``PdfReadWarning``s into ``collector``.

    Other Python warnings (a ``DeprecationWarning`` about how *we* call pypdf) are
    re-issued untouched afterwards, so test suites that turn warnings into errors still
    see them.
    """
    global _router_users, _saved_logger_state
    from pypdf.errors import PdfReadWarning

    pypdf_logger = logging.getLogger("pypdf")
    token = _active_collector.set(collector)
    with _router_lock:
        if _router_users == 0:
            _saved_logger_state = (pypdf_logger.propagate, pypdf_logger.level)
            pypdf_logger.addHandler(_router)
            pypdf_logger.propagate = False
            # The app may run its root logger at ERROR; warnings must still be counted.
            pypdf_logger.setLevel(logging.WARNING)
        _router_users += 1
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as recorded:
            warnings.simplefilter("always", PdfReadWarning)
            try:
                yield
            finally:
                caught = list(recorded)
    finally:
        with _router_lock:
            _router_users -= 1
            if _router_users == 0:
                pypdf_logger.removeHandler(_router)
                pypdf_logger.propagate, level = _saved_logger_state
                pypdf_logger.setLevel(level)
        _active_collector.reset(token)
        for item in caught:
            if issubclass(item.category, PdfReadWarning):
                collector.add(f"{item.category.__name__}: {item.message}")
            else:
                warnings.warn_explicit(
                    item.message, item.category, item.filename, item.lineno, source=item.source
                )
