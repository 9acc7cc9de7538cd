"""Text → chunks: overlapping spans that respect word boundaries, sized for embedding,
each with its :class:`Location` in the document.

Pure functions on strings, standard library only, so a parser child can import this
without paying for anything else. Prose is split by :func:`chunk_text`; tables by
:func:`chunk_table`, which packs whole rows and repeats the header row in every chunk,
so a table chunk still reads as rows and cells.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

# Chunking works on regular expressions because they scan in C; a per-character Python
# loop over a 2 MB line costs a noticeable fraction of a second.
_WHITESPACE_RUN = re.compile(r"\s*")
_WORD_RUN = re.compile(r"\S*")
# Searched in a reversed window: "whitespace then non-whitespace" reversed is a word end.
_REVERSED_WORD_END = re.compile(r"\s\S")


@dataclass(frozen=True)
class Location:
    """Where a chunk came from, in the document's own terms.

    Attributes:
        page: 1-based page (PDF).
        slide: 1-based slide (PPTX).
        notes: The chunk is the slide's speaker notes, not what the slide shows.
        sheet: Sheet name (XLSX).
        rows: First and last row the chunk holds (sheets, CSV, tables in documents),
            1-based as a spreadsheet numbers them, the header row excluded.
        headings: The headings above the chunk, outermost first (DOCX, HTML, EPUB;
            an EPUB's first entry is its chapter).
        part: Which part of the document outside its running text the chunk is
            (DOCX: ``header``, ``footer``, ``footnote``, ``endnote``, ``comment``,
            ``text box``); ``headings`` then say where it is anchored, if known.
    """

    page: int | None = None
    slide: int | None = None
    notes: bool = False
    sheet: str | None = None
    rows: tuple[int, int] | None = None
    headings: tuple[str, ...] = ()
    part: str | None = None

    def label(self) -> str:
        """One line for people: ``p. 3``, ``slide 4 notes``, ``sheet Q1 rows 2-41``,
        ``Setup > Linux``, ``footnote in Setup > Linux``, ``header``; empty when
        nothing is known."""
        parts: list[str] = []
        if self.page is not None:
            parts.append(f"p. {self.page}")
        if self.slide is not None:
            parts.append(f"slide {self.slide}" + (" notes" if self.notes else ""))
        if self.part is not None:
            parts.append(f"{self.part} in" if self.headings else self.part)
        if self.headings:
            parts.append(" > ".join(self.headings))
        if self.sheet is not None:
            parts.append(f"sheet {self.sheet}")
        if self.rows is not None:
            first, last = self.rows
            parts.append(f"row {first}" if first == last else f"rows {first}-{last}")
        return " ".join(parts)

    def as_dict(self) -> dict[str, object]:
        """The fields that are set, as JSON-ready values (what the API shows)."""
        out: dict[str, object] = {}
        if self.page is not None:
            out["page"] = self.page
        if self.slide is not None:
            out["slide"] = self.slide
        if self.notes:
            out["notes"] = True
        if self.sheet is not None:
            out["sheet"] = self.sheet
        if self.rows is not None:
            out["rows"] = list(self.rows)
        if self.headings:
            out["headings"] = list(self.headings)
        if self.part is not None:
            out["part"] = self.part
        return out

    def says_only_page(self) -> bool:
        """Whether :meth:`stored` is None, without writing the JSON to find out (the
        chunking of every block asks)."""
        return self == Location(page=self.page)

    def stored(self) -> str | None:
        """As stored in ``chunks.location``: None when the page column says it all
        (PDF pages, text), so those rows and their result checksums stay as before."""
        fields = self.as_dict()
        fields.pop("page", None)
        if not fields:
            return None
        return json.dumps(self.as_dict(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_stored(cls, page: int | None, stored: str | None) -> Location:
        """The location of a stored chunk, from its ``page`` and ``location`` columns."""
        if not stored:
            return cls(page=page)
        fields = json.loads(stored)
        rows = fields.get("rows")
        return cls(
            page=fields.get("page", page),
            slide=fields.get("slide"),
            notes=bool(fields.get("notes", False)),
            sheet=fields.get("sheet"),
            rows=(int(rows[0]), int(rows[1])) if rows else None,
            headings=tuple(fields.get("headings", ())),
            part=fields.get("part"),
        )


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
        location: Where in the document, when the format knows more than a page
            (a slide, a sheet's rows, a heading path); None for PDF pages and text.
            A table chunk's offsets are within its own rendering.
    """

    ordinal: int
    text: str
    page: int | None
    char_start: int
    char_end: int
    location: Location | None = None

    @property
    def stored_location(self) -> str | None:
        """The ``chunks.location`` column's value."""
        return None if self.location is None else self.location.stored()


def chunk_page(
    text: str, page: int | None, first_ordinal: int, chunk_size: int, chunk_overlap: int
) -> Iterator[Chunk]:
    """The chunks of one page's text (or a whole text document's), numbered on from
    ``first_ordinal``; see :func:`chunk_text` for where they start and end.

    Args:
        text: The page's text, already NUL-free.
        page: Its 1-based page number, or None for Markdown and text.
        first_ordinal: The ordinal of this page's first chunk in the document.
        chunk_size: Largest chunk, in characters.
        chunk_overlap: Characters shared with the previous chunk on the same page.

    Raises:
        ValueError: The sizes are out of range.
    """
    spans = chunk_text(text, chunk_size=chunk_size, overlap=chunk_overlap)
    for offset, (start, end) in enumerate(spans):
        yield Chunk(first_ordinal + offset, text[start:end], page, start, end)


def chunk_section(
    text: str, location: Location, first_ordinal: int, chunk_size: int, chunk_overlap: int
) -> Iterator[Chunk]:
    """:func:`chunk_page` for a section of prose at ``location`` (a slide, a heading's
    section): offsets are within ``text``."""
    spans = chunk_text(text, chunk_size=chunk_size, overlap=chunk_overlap)
    page = location.page
    for offset, (start, end) in enumerate(spans):
        yield Chunk(first_ordinal + offset, text[start:end], page, start, end, location)


def markdown_row(cells: Sequence[str]) -> str:
    """One table row as a Markdown table row; pipes and line breaks in cells escaped."""
    escaped = (" ".join(c.split()).replace("|", "\\|") for c in cells)
    return "| " + " | ".join(escaped) + " |"


def chunk_table(
    header: Sequence[str] | None,
    rows: Iterable[tuple[int, Sequence[str]]],
    location: Location,
    first_ordinal: int,
    chunk_size: int,
    chunk_overlap: int,
) -> Iterator[Chunk]:
    """A table's chunks: whole rows as Markdown table rows, packed up to ``chunk_size``,
    each chunk starting with the header row, its location naming the rows it holds.

    A row too long to fit beside the header is split like prose (each piece keeps the
    header line first). A header taking more than half of ``chunk_size`` (a wide
    table) is not repeated: each row is written ``header: value``, one cell a line,
    so every cell still carries its column's name and no chunk is over ``chunk_size``.

    Args:
        header: The header row's cells, or None for a table without one.
        rows: ``(row number, cells)`` in order; the numbers go into the location.
        location: Where the table is (sheet, heading path); ``rows`` is filled in.
        first_ordinal: The ordinal of the first chunk.
        chunk_size: Largest chunk, in characters.
        chunk_overlap: Overlap for rows split like prose.
    """
    validate_chunking(chunk_size, chunk_overlap)
    head = ""
    render = markdown_row
    if header is not None and any(cell.strip() for cell in header):
        head = markdown_row(header) + "\n" + markdown_row(["---"] * len(header)) + "\n"
        if len(head) > chunk_size // 2:
            # Repeating it would leave no room for rows (and copy it into every one).
            head, render = "", functools.partial(_labelled_row, header)
    ordinal = first_ordinal
    lines: list[str] = []
    size = len(head)
    span: tuple[int, int] | None = None

    def flush() -> Chunk:
        text = head + "\n".join(lines)
        assert span is not None
        return Chunk(ordinal, text, location.page, 0, len(text), replace(location, rows=span))

    for number, cells in rows:
        line = render(cells)
        if len(line.strip("| ")) == 0:
            continue  # an empty row carries nothing to find
        if lines and size + len(line) + 1 > chunk_size:
            yield flush()
            ordinal += 1
            lines, size, span = [], len(head), None
        if len(head) + len(line) > chunk_size:
            # One row alone is too long: split it, each piece under the header.
            room = max(chunk_size - len(head), chunk_overlap + 1)
            for start, end in chunk_text(line, chunk_size=room, overlap=chunk_overlap):
                text = head + line[start:end]
                yield Chunk(
                    ordinal, text, location.page, 0, len(text),
                    replace(location, rows=(number, number)),
                )  # fmt: skip
                ordinal += 1
            continue
        lines.append(line)
        size += len(line) + 1
        span = (number, number) if span is None else (span[0], number)
    if lines:
        yield flush()


def _labelled_row(header: Sequence[str], cells: Sequence[str]) -> str:
    """A row of a wide table as ``header: value`` lines, empty cells left out."""
    names = [" ".join(h.split()) for h in header]
    return "\n".join(
        f"{names[i] if i < len(names) else f'column {i + 1}'}: {' '.join(cell.split())}"
        for i, cell in enumerate(cells)
        if cell.strip()
    )


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
    validate_chunking(chunk_size, overlap)
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


def validate_chunking(chunk_size: int, overlap: int) -> None:
    """The one rule for chunk sizes: ``chunk_size > 0`` and ``0 <= overlap < chunk_size``.

    Raises:
        ValueError: The sizes are out of range.
    """
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
