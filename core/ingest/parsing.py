"""Documents → blocks (per format, :mod:`core.ingest.formats`) → chunks, as pure functions.

Nothing here touches the database or the event loop: :func:`run_parse` is CPU-bound and
meant to run inside :class:`core.ingest.parse_pool.ParserPool`'s child processes, which add
the time and memory limits a pure function cannot enforce on itself. Its neighbours do
one job each: :mod:`core.ingest.sniffing` (what the bytes are, how text is encoded),
:mod:`core.ingest.chunker` (text → chunks) and :mod:`core.ingest.parser_warnings`
(counting a parse's warnings), :mod:`core.ingest.limits` (the safety limits every
format shares). All import only the standard library and :mod:`core.states` (each
format's library is imported on first use), so a parser child loads nothing else.

Failure vocabulary: every way a document can defeat the parser ends as
:class:`ParseFailure` with code ``parse_error`` (the file cannot be read, or it is over
a safety limit) or
``empty_document`` (it can be read but holds no indexable text); a parser process killed
from outside ends as :class:`ParserKilled` (``parser_killed``, retried automatically),
since nothing says the file was at fault. Other exceptions mean a caller bug (bad
arguments) or a broken installation (:class:`ParserUnavailable`), never a bad file.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.ingest.chunker import Chunk, chunk_page, chunk_section, chunk_table, validate_chunking
from core.ingest.failures import (
    OUT_OF_MEMORY_REASON,
    PARSE_FAILURE_CODES,
    PARSERS,
    ParseFailure,
    ParserKilled,
    ParserUnavailable,
    parser_info,
)
from core.ingest.formats import PageReading, Prose, format_for
from core.ingest.limits import LimitExceeded
from core.ingest.parser_warnings import WarningCollector, capture_parser_warnings
from core.states import DocumentKind, ErrorCode

if TYPE_CHECKING:
    from core.ingest.formats import Block

__all__ = [
    "DEFAULT_CHUNK_OVERLAP",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_PARSER",
    "OUT_OF_MEMORY_REASON",
    "PARSERS",
    "PARSE_FAILURE_CODES",
    "ParseFailure",
    "ParseRequest",
    "ParsedDocument",
    "ParserKilled",
    "ParserUnavailable",
    "chunk_blocks",
    "log_parser_warnings",
    "parse_document",
    "parser_info",
    "run_parse",
]

logger = logging.getLogger(__name__)

# --- tunables ---------------------------------------------------------------------------

# The defaults for how documents are parsed, in one place: PipelineOptions, ParseRequest,
# parse_document and ParserPool.parse all refer to these.
DEFAULT_PARSER = "pypdf"
DEFAULT_CHUNK_SIZE = 1000  # characters
DEFAULT_CHUNK_OVERLAP = 150  # characters

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
        readings: How each page was read (PDFs and images; empty for other formats).
    """

    pages: int
    chunks: tuple[Chunk, ...]
    warnings: int
    readings: tuple[PageReading, ...] = ()


# --- parsing ----------------------------------------------------------------------------


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
        # Text is our own code: no library warnings to capture, so no process-global
        # state is touched and text may be parsed on any thread (see Format).
        outcome = _parse(data, request, collector)
    except ParseFailure as failure:
        outcome = failure
    except LimitExceeded as exc:
        outcome = ParseFailure(ErrorCode.PARSE_ERROR, str(exc))
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


def _parse(data: bytes, request: ParseRequest, collector: WarningCollector) -> ParsedDocument:
    fmt = format_for(request.kind)
    if fmt.kind is DocumentKind.PDF:
        with capture_parser_warnings(collector):
            extracted = fmt.parse(data, request, collector)
    elif fmt.captures_warnings:
        with _library_warnings(collector):
            extracted = fmt.parse(data, request, collector)
    else:
        extracted = fmt.parse(data, request, collector)
    chunks = chunk_blocks(extracted.blocks, request, collector)
    if not chunks:
        raise ParseFailure(ErrorCode.EMPTY_DOCUMENT, fmt.empty_reason)
    return ParsedDocument(
        pages=max(1, extracted.units),
        chunks=chunks,
        warnings=collector.count,
        readings=tuple(extracted.readings),
    )


@contextlib.contextmanager
def _library_warnings(collector: WarningCollector) -> Iterator[None]:
    """Count every warning a format library issues (openpyxl's "unknown extension",
    python-docx's deprecations): they are about the file, never shown as Python
    warnings. Process-global like PDF's capture: one parse per parser process."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for warning in caught:
                collector.add(f"{warning.category.__name__}: {warning.message}")


def chunk_blocks(
    blocks: Iterable[Block], request: ParseRequest, collector: WarningCollector
) -> tuple[Chunk, ...]:
    """A format's blocks as chunks, numbered in document order: prose split at word
    boundaries, tables by whole rows under their header (see :mod:`core.ingest.chunker`).
    A chunk whose location says no more than its page (PDF pages, text) carries none."""
    chunks: list[Chunk] = []
    size, overlap = request.chunk_size, request.chunk_overlap
    for block in blocks:
        if isinstance(block, Prose):
            text = _strip_nul(block.text, collector)
            location = block.location
            if location.says_only_page():
                chunks.extend(chunk_page(text, location.page, len(chunks), size, overlap))
            else:
                chunks.extend(chunk_section(text, location, len(chunks), size, overlap))
        else:
            header = None if block.header is None else [_clean_cell(c) for c in block.header]
            rows = ((n, [_clean_cell(c) for c in cells]) for n, cells in block.rows)
            chunks.extend(chunk_table(header, rows, block.location, len(chunks), size, overlap))
    return tuple(chunks)


def _clean_cell(cell: str) -> str:
    # PostgreSQL text columns reject U+0000; a table's cells are never counted apart.
    return cell.replace("\x00", "")


def _strip_nul(text: str, collector: WarningCollector) -> str:
    # PostgreSQL text columns reject U+0000, and it never carries meaning in prose.
    if "\x00" not in text:
        return text
    collector.add(f"stripped {text.count(chr(0))} NUL characters")
    return text.replace("\x00", "")


def _reason(exc: MemoryError | RecursionError, *, page: None) -> str:
    if isinstance(exc, MemoryError):
        return OUT_OF_MEMORY_REASON
    return "document structure nested too deeply"
