"""Text → chunks: overlapping spans that respect word boundaries, sized for embedding.

Pure functions on strings, standard library only, so a parser child can import this
without paying for anything else.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

# Chunking works on regular expressions because they scan in C; a per-character Python
# loop over a 2 MB line costs a noticeable fraction of a second.
_WHITESPACE_RUN = re.compile(r"\s*")
_WORD_RUN = re.compile(r"\S*")
# Searched in a reversed window: "whitespace then non-whitespace" reversed is a word end.
_REVERSED_WORD_END = re.compile(r"\s\S")


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
