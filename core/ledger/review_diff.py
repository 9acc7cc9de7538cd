"""What a reviewer sees of a candidate version: its chunks, and what changed against
the published version — chunk and page counts, and the lines of text added and
removed (a line diff of the two versions' chunk texts)."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field

from core.ledger.views import ChunkView, DocumentView

DIFF_LINES_MAX = 400  # added + removed lines kept for display


@dataclass(frozen=True)
class VersionDiff:
    """A candidate version against the version search finds now (None: first one)."""

    candidate: DocumentView
    published: DocumentView | None
    chunks_before: int
    chunks_after: int
    pages_before: int
    pages_after: int
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    diff: list[str] = field(default_factory=list)  # unified diff lines, +/- marked
    truncated: bool = False  # the diff had more than DIFF_LINES_MAX changed lines


def _lines(chunks: Sequence[ChunkView]) -> list[str]:
    """The text of a version as lines, put back together from its chunks first:
    chunks overlap, so only the part of each after the previous one's end is taken,
    and a line is split only where the text has a line break, never where a chunk
    boundary happens to fall (an edit that shifts the boundaries would otherwise show
    as lines removed and added again)."""
    pages: list[str] = []
    parts: list[str] = []
    page: int | None = None
    end = 0
    for c in chunks:
        if c.page != page or not parts:
            if parts:
                pages.append("".join(parts))
            parts, page, end = [], c.page, 0
        if c.char_start < end:
            parts.append(c.text[end - c.char_start :])
        else:
            # A gap between chunks held only what the chunker skips (white space);
            # taken as a line break, since a line's words are never split this way
            # when chunks overlap, as the pipeline's do.
            parts.append(("\n" if parts else "") + c.text)
        end = max(end, c.char_end)
    if parts:
        pages.append("".join(parts))
    return [line for text in pages for line in text.splitlines() if line.strip()]


def diff_versions(
    candidate: DocumentView,
    after: Sequence[ChunkView],
    pages_after: int,
    published: DocumentView | None = None,
    before: Sequence[ChunkView] = (),
    pages_before: int = 0,
) -> VersionDiff:
    """Compare a candidate's chunks with the published version's."""
    old, new = _lines(before), _lines(after)
    diff = [
        line
        for line in difflib.unified_diff(old, new, "published", "candidate", n=1, lineterm="")
        if not line.startswith(("---", "+++"))
    ]
    added = [line[1:] for line in diff if line.startswith("+")]
    removed = [line[1:] for line in diff if line.startswith("-")]
    truncated = len(added) + len(removed) > DIFF_LINES_MAX
    return VersionDiff(
        candidate=candidate,
        published=published,
        chunks_before=len(before),
        chunks_after=len(after),
        pages_before=pages_before,
        pages_after=pages_after,
        added=added[:DIFF_LINES_MAX],
        removed=removed[:DIFF_LINES_MAX],
        diff=diff[: DIFF_LINES_MAX * 2],
        truncated=truncated,
    )
