"""The live task table: a window of rows updated by row key.

The table never holds the whole ledger. It shows the newest ``window`` tasks that
match the current filter and is kept current from changed tasks only: a changed row
has just its changed cells rewritten (``update_cell``), a new matching task is added,
a task that stops matching is removed, and the oldest rows fall off the end. The
cursor stays on the same task through all of it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable
from textual.widgets.data_table import RowDoesNotExist

from core import TaskStatus, TaskView
from tui.format import (
    STALLED_THEME_VARIABLE,
    STATUS_LABEL,
    STATUS_THEME_VARIABLE,
    age,
    error_line,
    shorten,
    text_bar,
)

WINDOW_ROWS = 200  # rows held at most, the newest that match: several screens, and a
# filter switch rebuilds them all (DataTable adds rows at ~0.4 ms each)
BAR_WIDTH = 5  # characters of the text progress bar

# (key, label, width). Fixed widths: update_cell never has to re-measure a column.
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
_WIDTH = {key: width for key, _, width in COLUMNS}
_STATUS_ORDER = {status: n for n, status in enumerate(TaskStatus)}
_LIVE = frozenset({TaskStatus.RUNNING, TaskStatus.RETRY_WAIT})


def _cell(text: str, style: str | Style = "") -> Text:
    """One cell's text. ``no_wrap``: cells are cut to their column width already,
    and skipping Rich's line wrapping makes re-rendering the visible rows (which a
    DataTable does after any change) several times cheaper."""
    return Text(text, style=style, no_wrap=True, overflow="crop")


class _IdCell(Text):
    """The id cell remembers its full task id, so a sort key can find the task."""

    task_id: str


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


class TaskTable(DataTable[Text]):
    """Tasks, newest first by default; ``o`` changes the sort column.

    Args:
        clock: The dashboard's clock, for ages and stall marks.
        stall_after_s: Seconds without progress after which a running task is stalled.
        window: Most rows held.
    """

    BINDINGS = [
        # DataTable's own enter binding is hidden; this one names what enter does here.
        Binding("enter", "select_cursor", "Detail", tooltip="Open the selected task"),
        Binding("o", "sort_next", "Sort", tooltip="Sort by the next column"),
    ]

    @dataclass
    class WindowShort(Message):
        """Rows left the window (they stopped matching): it may be refilled."""

        table: TaskTable

    def __init__(
        self,
        *,
        clock: Callable[[], float],
        stall_after_s: float,
        window: int = WINDOW_ROWS,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes, cursor_type="row", zebra_stripes=True)
        self.clock = clock
        self.stall_after_s = stall_after_s
        self.window = window
        self.tasks: dict[str, TaskView] = {}
        self.sort_column = "age"
        self.sort_reverse = False
        self._cells: dict[str, tuple[tuple[str, str], ...]] = {}
        self._styles: dict[str, Style] = {}

    def on_mount(self) -> None:
        for key, label, width in COLUMNS:
            self.add_column(label, width=width, key=key)
        self._load_styles()
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self._restyle())

    # ----------------------------------------------------------------- styling

    def _load_styles(self) -> None:
        variables = self.app.get_css_variables()
        self._styles = {
            name: Style.parse(variables[name])
            for name in {*STATUS_THEME_VARIABLE.values(), STALLED_THEME_VARIABLE, "error"}
        }

    def _restyle(self) -> None:
        self._load_styles()
        # An empty signature differs from any real one: every cell is rewritten.
        self._cells = dict.fromkeys(self._cells, ())
        self.refresh_rows(self.clock())

    def _status_style(self, status: TaskStatus) -> Style:
        return self._styles.get(STATUS_THEME_VARIABLE[status], Style())

    # ------------------------------------------------------------------- cells

    def is_stalled(self, task: TaskView, now: float) -> bool:
        return (
            task.status is TaskStatus.RUNNING
            and task.progress_at is not None
            and now - task.progress_at > self.stall_after_s
        )

    def cells(self, task: TaskView, now: float) -> tuple[Text, ...]:
        """The row's cells for ``task`` at time ``now``."""
        ident = _IdCell(task.short_id, no_wrap=True)
        ident.task_id = task.task_id
        stalled = self.is_stalled(task, now)
        if stalled:
            status = _cell("⚠ stalled", style=self._styles.get(STALLED_THEME_VARIABLE, Style()))
        else:
            status = _cell(STATUS_LABEL[task.status], style=self._status_style(task.status))
        live = task.status in _LIVE or task.status is TaskStatus.FAILED
        stage = _cell(task.stage.value if live else "", style="" if live else "dim")
        if task.status in (TaskStatus.QUEUED, TaskStatus.CANCELLED):
            progress = _cell("")
        else:
            done = task.total if task.status is TaskStatus.SUCCEEDED else task.completed
            progress = _cell(
                f"{text_bar(done, task.total, BAR_WIDTH)} {done}/{task.total}",
                style=self._status_style(task.status),
            )
        return (
            ident,
            _cell(shorten(task.document_name or task.document_id[:8], _WIDTH["name"])),
            status,
            stage,
            progress,
            _cell(str(task.attempt) if task.attempt else ""),
            _cell(
                shorten(error_line(task.error_code), _WIDTH["error"]),
                style=self._styles.get("error", Style()),
            ),
            _cell(shorten(task.worker_id or "", _WIDTH["worker"])),
            _cell(age(now - task.created_at)),
        )

    @staticmethod
    def _signature(cells: Sequence[Text]) -> tuple[tuple[str, str], ...]:
        return tuple((c.plain, str(c.style)) for c in cells)

    # ------------------------------------------------------------------- rows

    @property
    def selected(self) -> TaskView | None:
        """The task under the cursor."""
        if not self.row_count:
            return None
        try:
            row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        except Exception:
            return None
        return self.tasks.get(str(row_key.value))

    def load(self, tasks: Iterable[TaskView], now: float) -> None:
        """Make the table hold exactly ``tasks`` (a fresh window), by key."""
        wanted = {t.task_id: t for t in tasks}
        stale = [k for k in self.tasks if k not in wanted]
        if len(stale) > len(self.tasks) // 2:
            # DataTable.remove_row costs more the bigger the table (profiled: ~1.4 ms
            # each, 0.7 s for a 500-row window), so a new window starts from empty.
            selected = self.selected
            self.clear()
            self.tasks.clear()
            self._cells.clear()
            for task in wanted.values():
                self._put(task, now)
            self._trim()
            self._resort()
            if selected is not None and selected.task_id in self.tasks:
                self.move_cursor(row=self.get_row_index(selected.task_id))
            return
        for task_id in stale:
            self._remove(task_id)
        for task in wanted.values():
            self._put(task, now)
        self._trim()
        self._resort()

    def apply(
        self, changes: Iterable[TaskView], matches: Callable[[TaskView], bool], now: float
    ) -> None:
        """Apply changed tasks: update, add or remove their rows."""
        added = removed = resort = False
        oldest = self._oldest()
        full = len(self.tasks) >= self.window
        for task in changes:
            present = task.task_id in self.tasks
            if not matches(task):
                if present:
                    self._remove(task.task_id)
                    removed = True
                continue
            if not present and full and oldest is not None and task.created_at < oldest:
                continue  # older than everything in a full window: not ours to show
            before = self.tasks.get(task.task_id)
            self._put(task, now)
            if before is None:
                added = True
            elif _sort_value(before, self.sort_column) != _sort_value(task, self.sort_column):
                resort = True
        if added:
            self._trim()
        if added or resort:
            self._resort()
        if removed and full:
            self.post_message(self.WindowShort(self))

    def refresh_rows(self, now: float) -> None:
        """Re-render every row for time ``now`` (ages, stall marks); only cells whose
        text changed are rewritten."""
        for task in list(self.tasks.values()):
            self._put(task, now)

    def _put(self, task: TaskView, now: float) -> None:
        cells = self.cells(task, now)
        signature = self._signature(cells)
        self.tasks[task.task_id] = task
        old = self._cells.get(task.task_id)
        if old is None:
            self.add_row(*cells, key=task.task_id)
        elif old != signature:
            for n, key in enumerate(COLUMN_KEYS):
                if not old or old[n] != signature[n]:
                    self.update_cell(task.task_id, key, cells[n])
        self._cells[task.task_id] = signature

    def _remove(self, task_id: str) -> None:
        self.tasks.pop(task_id, None)
        self._cells.pop(task_id, None)
        with contextlib.suppress(RowDoesNotExist):
            self.remove_row(task_id)

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
            self._remove(task.task_id)

    # ------------------------------------------------------------------ sorting

    def _resort(self) -> None:
        selected = self.selected
        column = self.sort_column

        def key(cells: tuple[Text, ...]) -> tuple[object, ...]:
            task = self.tasks[cells[0].task_id]  # type: ignore[attr-defined]
            return (*_sort_value(task, column), -task.created_at, task.task_id)

        self.sort(key=key, reverse=self.sort_reverse)
        if selected is not None and selected.task_id in self.tasks:
            self.move_cursor(row=self.get_row_index(selected.task_id), animate=False)

    def sort_by(self, column: str) -> None:
        """Sort by ``column``; choosing the current column again reverses the order."""
        if column == self.sort_column:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_column, self.sort_reverse = column, False
        self._resort()

    def action_sort_next(self) -> None:
        index = (COLUMN_KEYS.index(self.sort_column) + 1) % len(COLUMN_KEYS)
        self.sort_column, self.sort_reverse = COLUMN_KEYS[index], False
        self._resort()
        label = dict((k, lbl) for k, lbl, _ in COLUMNS)[self.sort_column]
        self.notify(f"sorted by {label.lower()}", timeout=1.5)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_by(str(event.column_key.value))
