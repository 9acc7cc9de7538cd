"""What every format module provides: one :class:`Format`, whose parser turns bytes
into :class:`Extracted` blocks of prose and tables, each with its location.

A format module imports only the standard library at import time and its library
inside its parser, so listing the formats (``ingestdesk formats``) or starting a
parser child costs no format library it does not use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from core.ingest.chunker import Location
from core.states import DocumentKind, PageDecision

if TYPE_CHECKING:
    from core.ingest.parser_warnings import WarningCollector


class ParseOptions(Protocol):
    """What a parser may read of the request (a :class:`core.ingest.parsing.ParseRequest`)."""

    @property
    def parser(self) -> str: ...


@dataclass(frozen=True)
class Prose:
    """Running text at one place (a page, a slide, the section under a heading)."""

    text: str
    location: Location


@dataclass(frozen=True)
class Table:
    """A table: its header row and its rows, numbered as the document numbers them."""

    header: Sequence[str] | None
    rows: Sequence[tuple[int, Sequence[str]]]
    location: Location


Block = Prose | Table


@dataclass(frozen=True)
class PageReading:
    """How one page was read (PDF pages and image frames; other formats have none).

    Attributes:
        page: The page number, from 1.
        decision: text layer, OCR, OCR that found nothing, or skipped.
        chars: Characters of text the page yielded.
        confidence: The OCR engine's mean word confidence, 0 to 100 (OCR pages only).
        ocr_seconds: Time spent rendering and reading the page (0 for ``text``).
        reason: Why a page was skipped, in one line (``skipped`` only).
    """

    page: int
    decision: PageDecision
    chars: int
    confidence: float | None = None
    ocr_seconds: float = 0.0
    reason: str | None = None


@dataclass
class Extracted:
    """What a format's parser found.

    Attributes:
        units: Pages, slides, sheets or chapters read (the parse's page count).
        blocks: Prose and tables in document order.
        readings: One per page for paged formats that may need OCR (PDF, images).
    """

    units: int = 0
    blocks: list[Block] = field(default_factory=list)
    readings: list[PageReading] = field(default_factory=list)


class Parser(Protocol):
    """A format's parser: the document's bytes → its blocks.

    Raises ParseFailure for a document it cannot read, LimitExceeded
    (:mod:`core.ingest.limits`) for one over a safety limit; both end as
    ``parse_error`` with their one-line message.
    """

    def __call__(
        self, data: bytes, request: ParseOptions, warnings: WarningCollector
    ) -> Extracted: ...


@dataclass(frozen=True)
class Format:
    """One accepted format.

    Attributes:
        kind: The document kind it is recognised as.
        name: What people call it.
        recognised_by: The content rule that recognises it, in one line.
        needs: The Python distributions its parser imports (installed by default).
        parse: Its parser.
        captures_warnings: Whether its library's ``warnings`` are counted (this
            touches process-global state, so only in the parser process).
        in_process: Whether a small document may be parsed in the worker itself
            (our own code on plain text; never a zip- or XML-based format).
        empty_reason: The ``empty_document`` detail when nothing indexable is found.
        revision: Our reading's own revision, in the processing key beside the
            library's version: bumped when the module reads the same bytes with the
            same library differently, so a result read the old way is not reused.
    """

    kind: DocumentKind
    name: str
    recognised_by: str
    needs: tuple[str, ...]
    parse: Parser
    captures_warnings: bool = True
    in_process: bool = False
    empty_reason: str = "document contains no text"
    revision: str | None = None
