"""The live task table: a window of rows drawn with Textual's line API.

The table never holds the whole ledger. It shows the newest ``window`` tasks that
match the current filter and is kept current from changed tasks only. Each task's row
is rendered once into a cached strip and re-rendered only when its text changes; a
frame draws just the visible lines from those strips, adding the zebra or cursor
background. So a filter switch that replaces the whole window costs building ~200
small strips (no widget per row or per cell), and a changed task repaints one line.
Textual's DataTable, which this replaced, drops every cached line on any change and
took ~0.4 ms per added row, which put a filter switch at 170-240 ms (p99).

The cursor stays on the same task through updates, re-sorts and window reloads.
A table narrower than every column draws the narrow layout
(:mod:`tui.widgets.task_columns`); switching rebuilds each row's strip once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from core import TaskStatus, TaskView, visible
from tui.format import (
    STALLED_THEME_VARIABLE,
    STATUS_LABEL,
    STATUS_THEME_VARIABLE,
    age,
    error_line,
    shorten,
    text_bar,
)
from tui.widgets.cursor_guard import CursorGuard
from tui.widgets.task_columns import COLUMN_KEYS, COLUMNS, LABEL, WIDE, Layout, layout_for

WINDOW_ROWS = 200  # rows held at most, the newest that match: several screens
FIRST_SCREEN_GUESS = 60  # rows of a screenful, until the table has been laid out
# Strips kept by their row's look, shown or not: a status key and back (4, 0, 4)
# reloads windows that share most rows, and a row drawn before is not built again.
STRIP_CACHE_ROWS = 4 * WINDOW_ROWS

_STATUS_ORDER = {status: n for n, status in enumerate(TaskStatus)}
_LIVE = frozenset({TaskStatus.RUNNING, TaskStatus.RETRY_WAIT})

# A row's look: the text and style of each cell. Equal signatures draw equal strips.
Signature = tuple[tuple[str, Style], ...]
_NO_STYLE = Style()
_DIM = Style(dim=True)


def _sort_value(task: TaskView, column: str) -> tuple[object, ...]:
    if column == "status":
        return (_STATUS_ORDER[task.status],)
    if column == "progress":
        return (task.completed / task.total if task.total else 0.0,)
    if column == "attempt":
        return (task.attempt,)
    if column == "age":
        return (-task.created_at,)
    if column == "name":
        return ((task.document_name or "").lower(),)
    if column == "error":
        return (task.error_code.value if task.error_code else "~",)
    if column == "worker":
        return (task.worker_id or "~",)
    if column == "stage":
        return (task.stage.value,)
    return (task.task_id,)


class TaskTable(ScrollView, can_focus=True):
    """Tasks, newest first by default; ``o`` (or a click on a header) changes the sort.

    Args:
        clock: The dashboard's clock, for ages and stall marks.
        stall_after_s: Seconds without progress after which a running task is stalled.
        window: Most rows held.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Open", tooltip="Open the selected task's detail"),
        # Not in the footer: the table's subtitle says "o sorts", and the footer's
        # room goes to keys said nowhere else.
        Binding("o", "sort_next", "Sort", tooltip="Sort by the next column", show=False),
        Binding("up", "cursor_up", "Cursor up", show=False),
        Binding("down", "cursor_down", "Cursor down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home,ctrl+home", "cursor_first", "First row", show=False),
        Binding("end,ctrl+end", "cursor_last", "Last row", show=False),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "task-table--header",
        "task-table--cursor",
        "task-table--even-row",
        "task-table--odd-row",
    }

    # DataTable's look, so the dashboard matches the other screens' tables.
    DEFAULT_CSS = """
    TaskTable {
        background: $surface;
        color: $foreground;
        &:focus {
            background-tint: $foreground 5%;
            & > .task-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .task-table--header {
                background-tint: $foreground 5%;
            }
        }
        &:dark {
            & > .task-table--even-row {
                background: $surface-darken-1 40%;
            }
        }
        & > .task-table--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        & > .task-table--even-row {
            background: $surface-lighten-1 50%;
        }
        & > .task-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
    }
    """

    @dataclass
    class WindowShort(Message):
        """Rows left the window (they stopped matching): it may be refilled."""

        table: TaskTable

    @dataclass
    class WantsOlder(Message):
        """The cursor was asked past the last row of a full window: the next older
        tasks may be loaded below it (:meth:`extend`)."""

        table: TaskTable

    @dataclass
    class TaskSelected(Message):
        """Enter, or a click on the cursor row: open this task."""

        table: TaskTable
        task_id: str

    def __init__(
        self,
        *,
        clock: Callable[[], float],
        stall_after_s: float,
        window: int = WINDOW_ROWS,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.clock = clock
        self.stall_after_s = stall_after_s
        self.window = window
        self.tasks: dict[str, TaskView] = {}
        self.sort_column = "age"
        self.sort_reverse = False
        self._cursor = 0
        self.cursor_guard = CursorGuard()
        self._order: list[str] = []  # task ids, top row first
        self._index: dict[str, int] = {}  # task id -> row
        self._rows: dict[str, tuple[Signature, Strip]] = {}
        self._strips: dict[Signature, Strip] = {}  # oldest first
        self._styles: dict[str, Style] = {}
        self._frame_styles: dict[str, Style] = {}
        self.column_layout: Layout = WIDE
        self._header = WIDE.header()
        self.virtual_size = Size(WIDE.row_width, 1)

    def on_mount(self) -> None:
        self._load_styles()
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self._restyle())

    def on_resize(self, _event: events.Resize) -> None:
        # The scrollbar's width is left out, so rows coming and going (and with them
        # the scrollbar) cannot flip the layout back and forth.
        self.set_layout(layout_for(self.size.width - self.styles.scrollbar_size_vertical))

    def set_layout(self, layout: Layout) -> None:
        """Draw rows in ``layout`` from now on (every row is rebuilt once)."""
        if layout == self.column_layout:
            return
        self.column_layout = layout
        self._header = layout.header()
        self._rows.clear()
        self._strips.clear()
        self.refresh_rows(self.clock())
        self.virtual_size = Size(layout.row_width, len(self._order) + 1)
        self.refresh()

    # ----------------------------------------------------------------- styling

    def _load_styles(self) -> None:
        variables = self.app.get_css_variables()
        self._styles = {
            name: Style.parse(variables[name])
            for name in {*STATUS_THEME_VARIABLE.values(), STALLED_THEME_VARIABLE, "error"}
        }

    def _restyle(self) -> None:
        self._load_styles()
        self._rows.clear()
        self._strips.clear()
        self.refresh_rows(self.clock())
        self.refresh()

    def _status_style(self, status: TaskStatus) -> Style:
        return self._styles.get(STATUS_THEME_VARIABLE[status], Style())

    # ------------------------------------------------------------------- cells

    def signature(self, task: TaskView, now: float) -> Signature:
        """The row's cells for ``task`` at time ``now`` as (text, style), in the
        layout's column order. Built without Rich objects: a window load builds ~200
        of them. Names and worker ids are escaped here, once per changed row: the
        strip built from them is cached, so drawing a frame escapes nothing."""
        layout, styles, none = self.column_layout, self._styles, _NO_STYLE
        width = layout.width
        if task.is_stalled(now, self.stall_after_s):
            status = ("⚠ stalled", styles.get(STALLED_THEME_VARIABLE, none))
        else:
            status = (STATUS_LABEL[task.status], self._status_style(task.status))
        live = task.status in _LIVE or task.status is TaskStatus.FAILED
        stage = (task.stage.value, none) if live else ("", _DIM)
        if task.status in (TaskStatus.QUEUED, TaskStatus.CANCELLED):
            progress = ("", none)
        else:
            done = task.total if task.status is TaskStatus.SUCCEEDED else task.completed
            count = f"{done}/{task.total}"
            progress = (
                f"{text_bar(done, task.total, layout.bar_width)} {count}"
                if layout.bar_width
                else count,
                self._status_style(task.status),
            )
        code = task.error_code
        error = error_line(code) if layout.error_meaning else (code.value if code else "")
        cells = (
            (task.short_id, none),
            (shorten(visible(task.document_name or task.document_id[:8]), width["name"]), none),
            status,
            stage,
            progress,
            (str(task.attempt) if task.attempt else "", none),
            (shorten(error, width["error"]), styles.get("error", none)),
            (shorten(visible(task.worker_id or ""), width.get("worker", 0)), none),
            (age(now - task.created_at), none),
        )
        picks = layout.picks
        return cells if picks is None else tuple(cells[n] for n in picks)

    def cell(self, task_id: str, column: str) -> Text:
        """What the row of ``task_id`` shows in ``column`` now (a column of the
        current layout)."""
        signature, _ = self._rows[task_id]
        text, style = signature[self.column_layout.keys.index(column)]
        return Text(text, style=style)

    # -------------------------------------------------------------- the rows

    @property
    def row_count(self) -> int:
        return len(self._order)

    @property
    def cursor_row(self) -> int:
        return self._cursor

    @property
    def selected(self) -> TaskView | None:
        """The task under the cursor."""
        if not self._order:
            return None
        return self.tasks.get(self._order[self._cursor])

    def task_id_at(self, row: int) -> str:
        """The task shown in ``row`` (0 is the top row)."""
        return self._order[row]

    def get_row_index(self, task_id: str) -> int:
        """The row showing ``task_id``. Raises KeyError if it is not in the window."""
        return self._index[task_id]

    def load(self, tasks: Iterable[TaskView], now: float, *, keep: str | None = None) -> None:
        """Make the table hold exactly ``tasks`` (a fresh window); the cursor goes to
        task ``keep`` (default: the selected one) if it is among them. A window
        loaded in steps passes the task selected before the first: a first screenful
        without it must not move the cursor for the steps after."""
        if keep is None and self.selected is not None:
            keep = self.selected.task_id
        wanted = {t.task_id: t for t in tasks}
        for task_id in [k for k in self.tasks if k not in wanted]:
            self._forget(task_id)
        for task in wanted.values():
            self._put(task, now)
        self._trim()
        self._resort(keep=keep)

    def extend(self, older: Iterable[TaskView], now: float) -> int:
        """Add ``older`` tasks (the page after the oldest row) below the window,
        which grows by as many; the cursor stays on its task. How many were added."""
        added = [t for t in older if t.task_id not in self.tasks]
        if not added:
            return 0
        selected = self.selected
        self.window += len(added)
        for task in added:
            self._put(task, now)
        self._resort(keep=selected.task_id if selected else None)
        return len(added)

    def apply(
        self, changes: Iterable[TaskView], matches: Callable[[TaskView], bool], now: float
    ) -> None:
        """Apply changed tasks: update, add or remove their rows."""
        reorder = removed = False
        oldest = self._oldest()
        full = len(self.tasks) >= self.window
        selected = self.selected
        for task in changes:
            present = task.task_id in self.tasks
            if not matches(task):
                if present:
                    self._forget(task.task_id)
                    reorder = removed = True
                continue
            if not present and full and oldest is not None and task.created_at < oldest:
                continue  # older than everything in a full window: not ours to show
            before = self.tasks.get(task.task_id)
            self._put(task, now)
            if before is None or _sort_value(before, self.sort_column) != _sort_value(
                task, self.sort_column
            ):
                reorder = True
        if reorder:
            self._trim()
            self._resort(keep=selected.task_id if selected else None)
        if removed and selected is not None and selected.task_id not in self.tasks:
            self.cursor_guard.left(selected.task_id, selected.short_id)
        if removed and full:
            self.post_message(self.WindowShort(self))

    def refresh_rows(self, now: float) -> None:
        """Re-render every row for time ``now`` (ages, stall marks); only rows whose
        text changed are redrawn."""
        for task in list(self.tasks.values()):
            self._put(task, now)

    def _put(self, task: TaskView, now: float) -> None:
        signature = self.signature(task, now)
        self.tasks[task.task_id] = task
        cached = self._rows.get(task.task_id)
        if cached is not None and cached[0] == signature:
            return
        strip = self._strips.get(signature)
        if strip is None:
            strip = self.column_layout.strip(signature)
            if len(self._strips) >= STRIP_CACHE_ROWS:
                del self._strips[next(iter(self._strips))]
            self._strips[signature] = strip
        self._rows[task.task_id] = (signature, strip)
        row = self._index.get(task.task_id)
        if row is not None:
            self._refresh_row(row)

    def _forget(self, task_id: str) -> None:
        self.tasks.pop(task_id, None)
        self._rows.pop(task_id, None)

    def _oldest(self) -> float | None:
        if not self.tasks:
            return None
        return min(t.created_at for t in self.tasks.values())

    def _trim(self) -> None:
        extra = len(self.tasks) - self.window
        if extra <= 0:
            return
        by_age = sorted(self.tasks.values(), key=lambda t: (t.created_at, t.task_id))
        for task in by_age[:extra]:
            self._forget(task.task_id)

    # ------------------------------------------------------------------ sorting

    def _resort(self, keep: str | None = None) -> None:
        """Order the rows by the sort column; the cursor stays on task ``keep``
        (default: the selected task) if it is still shown, else on its row number."""
        if keep is None and self.selected is not None:
            keep = self.selected.task_id
        column, tasks = self.sort_column, self.tasks
        order = sorted(
            tasks,
            key=lambda task_id: (
                *_sort_value(tasks[task_id], column),
                -tasks[task_id].created_at,
                task_id,
            ),
            reverse=self.sort_reverse,
        )
        self._set_order(order)
        if keep is not None and keep in self._index:
            self.move_cursor(row=self._index[keep])
        else:
            self.move_cursor(row=self._cursor)

    def _set_order(self, order: list[str]) -> None:
        self._order = order
        self._index = {task_id: n for n, task_id in enumerate(order)}
        self.virtual_size = Size(self.column_layout.row_width, len(order) + 1)
        self.refresh()

    def sort_by(self, column: str) -> None:
        """Sort by ``column``; choosing the current column again reverses the order."""
        if column == self.sort_column:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_column, self.sort_reverse = column, False
        self._resort()

    def action_sort_next(self) -> None:
        # The columns shown; from one the layout hides (age, the default), the first.
        keys = self.column_layout.keys
        index = keys.index(self.sort_column) + 1 if self.sort_column in keys else 0
        self.sort_column, self.sort_reverse = keys[index % len(keys)], False
        self._resort()
        self.notify(f"sorted by {LABEL[self.sort_column].lower()}", timeout=1.5)

    # ------------------------------------------------------------------- cursor

    @property
    def _page(self) -> int:
        """Rows visible below the header."""
        return max(1, self.scrollable_content_region.height - 1)

    @property
    def visible_rows(self) -> int:
        """How many rows one screenful shows (before the first layout: a guess)."""
        height = self.scrollable_content_region.height
        return height - 1 if height > 1 else FIRST_SCREEN_GUESS

    def move_cursor(self, *, row: int, scroll: bool = True) -> None:
        """Put the cursor on ``row`` (clamped to the rows there are)."""
        row = max(0, min(row, len(self._order) - 1)) if self._order else 0
        if row != self._cursor:
            self._refresh_row(self._cursor)
            self._cursor = row
            self._refresh_row(row)
        if scroll:
            self._scroll_to_cursor()

    def _scroll_to_cursor(self) -> None:
        top = round(self.scroll_y)
        if self._cursor < top:
            self.scroll_to(y=self._cursor, animate=False)
        elif self._cursor >= top + self._page:
            self.scroll_to(y=self._cursor - self._page + 1, animate=False)

    def action_cursor_up(self) -> None:
        self.move_cursor(row=self._cursor - 1)

    def _past_the_end(self) -> None:
        # On the last row of a full window there may be older tasks: ask for them.
        if self._order and self._cursor == len(self._order) - 1 and len(self.tasks) >= self.window:
            self.post_message(self.WantsOlder(self))

    def action_cursor_down(self) -> None:
        self._past_the_end()
        self.move_cursor(row=self._cursor + 1)

    def action_page_up(self) -> None:
        self.move_cursor(row=self._cursor - self._page)

    def action_page_down(self) -> None:
        self._past_the_end()
        self.move_cursor(row=self._cursor + self._page)

    def action_cursor_first(self) -> None:
        self.move_cursor(row=0)

    def action_cursor_last(self) -> None:
        self._past_the_end()
        self.move_cursor(row=len(self._order) - 1)

    def action_select_cursor(self) -> None:
        selected = self.selected
        if selected is not None:
            self.post_message(self.TaskSelected(self, selected.task_id))

    async def _on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        event.stop()
        if offset.y == 0:
            key = self.column_layout.column_at(offset.x + round(self.scroll_x))
            if key is not None:
                self.sort_by(key)
            return
        row = round(self.scroll_y) + offset.y - 1
        if row >= len(self._order):
            return
        if row == self._cursor:
            self.action_select_cursor()
        else:
            self.move_cursor(row=row)

    # ------------------------------------------------------------------ drawing

    def _refresh_row(self, row: int) -> None:
        top = round(self.scroll_y)
        if top <= row < top + self._page:
            # Screen line of the row: below the header, less what is scrolled away.
            self.refresh(Region(0, row - top + 1, self.size.width, 1))

    def render_lines(self, crop: Region) -> list[Strip]:
        # The component styles depend on focus and theme: read them once per frame.
        base = self.rich_style
        self._frame_styles = {
            name: base + self.get_component_styles(name).rich_style
            for name in self.COMPONENT_CLASSES
        }
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        scroll_x = round(self.scroll_x)
        styles = self._frame_styles
        if y == 0:
            strip, style = self._header, styles["task-table--header"]
        else:
            row = round(self.scroll_y) + y - 1
            if row >= len(self._order):
                return Strip.blank(width, self.rich_style)
            strip = self._rows[self._order[row]][1]
            if row == self._cursor:
                # The cursor's colours win over the cells' own, as in a DataTable:
                # status colours would be unreadable on the cursor's background.
                style = styles["task-table--cursor"]
                line = strip.crop_extend(scroll_x, scroll_x + width, style)
                return Strip(Segment.apply_style(line, post_style=style), line.cell_length)
            style = styles["task-table--odd-row" if row % 2 else "task-table--even-row"]
        return strip.crop_extend(scroll_x, scroll_x + width, style).apply_style(style)


__all__ = ["COLUMNS", "COLUMN_KEYS", "WINDOW_ROWS", "TaskTable"]
