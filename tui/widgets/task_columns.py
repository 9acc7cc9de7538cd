"""The task table's columns, in two layouts: wide (every column) and narrow.

A row is one cached strip built from fixed column widths, so a layout is just a set
of columns with their widths and padding. The wide layout needs about 100 cells to
show everything an operator triages by; in a narrower table (an 80-column terminal)
the narrow layout keeps those — status, stage, progress (as a count) and the error
code — whole and on screen, and drops the attempt, worker, age and the error's
meaning (the detail screen has them all). The table picks the layout from its own
width (:func:`layout_for`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from rich.cells import set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

# (key, label, width) of every column, in the wide layout's order and widths.
COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("id", "ID", 8),
    ("name", "Document", 19),
    ("status", "Status", 10),
    ("stage", "Stage", 10),
    ("progress", "Progress", 15),  # bar + "1228/1228": four-digit page counts fit
    ("attempt", "Try", 3),
    ("error", "Error", 20),
    ("worker", "Worker", 9),
    ("age", "Age", 4),
)
COLUMN_KEYS = tuple(key for key, _, _ in COLUMNS)
LABEL = {key: label for key, label, _ in COLUMNS}

# Each cell's segment carries its column as meta, so neighbouring cells of one style
# stay separate segments: exported screenshots then place every cell at its column
# (one merged run of text drifts where the SVG renderer's spaces are narrower).
_COLUMN_META = {key: Style.from_meta({"column": key}) for key in COLUMN_KEYS}


@dataclass(frozen=True)
class Layout:
    """Which columns a row shows, how wide each is, and how its cells read.

    Attributes:
        name: ``wide`` or ``narrow``.
        columns: (key, width) of each column shown, left to right.
        pad_left: Blank cells before each cell.
        pad_right: Blank cells after each cell.
        bar_width: Characters of the progress bar (0: the count alone).
        error_meaning: The error column adds the code's one-line meaning.
    """

    name: str
    columns: tuple[tuple[str, int], ...]
    pad_left: int
    pad_right: int
    bar_width: int
    error_meaning: bool

    @cached_property
    def keys(self) -> tuple[str, ...]:
        return tuple(key for key, _ in self.columns)

    @cached_property
    def width(self) -> dict[str, int]:
        """Characters of each column's text, by key."""
        return dict(self.columns)

    @cached_property
    def row_width(self) -> int:
        return sum(width + self.pad_left + self.pad_right for _, width in self.columns)

    @cached_property
    def picks(self) -> tuple[int, ...] | None:
        """Where each shown column sits among all of :data:`COLUMNS` (None: all of
        them, in order)."""
        if self.keys == COLUMN_KEYS:
            return None
        return tuple(COLUMN_KEYS.index(key) for key in self.keys)

    def end_of(self, key: str) -> int:
        """The cell just right of column ``key``."""
        edge = 0
        for column, width in self.columns:
            edge += width + self.pad_left + self.pad_right
            if column == key:
                return edge
        raise KeyError(key)

    def column_at(self, x: int) -> str | None:
        """The column under cell ``x`` of a row, if any."""
        edge = 0
        for key, width in self.columns:
            edge += width + self.pad_left + self.pad_right
            if x < edge:
                return key
        return None

    def strip(self, cells: Iterable[tuple[str, Style]]) -> Strip:
        """One row's strip from its cells, in this layout's column order."""
        left, right = " " * self.pad_left, " " * self.pad_right
        segments = [
            Segment(f"{left}{set_cell_size(text, width)}{right}", style + _COLUMN_META[key])
            for (text, style), (key, width) in zip(cells, self.columns, strict=True)
        ]
        return Strip(segments, self.row_width)

    def header(self) -> Strip:
        """The header row: each column's label."""
        return self.strip((LABEL[key], Style()) for key in self.keys)


WIDE = Layout(
    "wide",
    tuple((key, width) for key, _, width in COLUMNS),
    pad_left=1,
    pad_right=1,
    bar_width=5,
    error_meaning=True,
)
# 77 cells: an 80-column terminal less the table's border and scrollbar. One blank
# cell between columns; the widest status (retry_wait), stage (finalizing), count
# (1228/1228) and error code (provider_unavailable) fit whole.
NARROW = Layout(
    "narrow",
    (
        ("id", 8),
        ("name", 14),
        ("status", 10),
        ("stage", 10),
        ("progress", 9),
        ("error", 20),
    ),
    pad_left=1,
    pad_right=0,
    bar_width=0,
    error_meaning=False,
)
# Below this width the wide layout would push the error column out of view.
WIDE_FROM = WIDE.end_of("error")


def layout_for(width: int) -> Layout:
    """The layout for a table ``width`` cells wide (its scrollbar not counted)."""
    return WIDE if width >= WIDE_FROM else NARROW


__all__ = ["COLUMNS", "COLUMN_KEYS", "NARROW", "WIDE", "WIDE_FROM", "Layout", "layout_for"]
