"""The main screen: counts, throughput, the live task table, running tasks, workers.

Below ``SIDE_PANEL_FROM`` (120) columns — an 80- or 100-column terminal — the side
panel is folded away and the table takes the whole width; ``i`` swaps between the
table and the panel.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual._context import NoActiveAppError
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Header, RichLog

from core import BadInput, Operator, TaskStatus, TaskView, visible
from core.ledger import TaskPosition
from tui import policy
from tui.desk import Desk, desk_of
from tui.filtering import TaskQuery, parse_query, status_query
from tui.format import failure_line, plain
from tui.messages import LedgerChanged, WorkersChanged
from tui.mirror import THROUGHPUT_BUCKET_S, THROUGHPUT_BUCKETS
from tui.widgets.counts import STATUS_KEYS, ProviderLine, StatusCounts
from tui.widgets.cursor_guard import moved_notice
from tui.widgets.filter_bar import FilterBar
from tui.widgets.footer import WholeKeysFooter
from tui.widgets.running import RunningNow
from tui.widgets.task_table import TaskTable
from tui.widgets.throughput import Throughput
from tui.widgets.workers import WorkersPanel

ROWS_REFRESH_S = 10.0  # seconds between re-renders of ages and stall marks (ages step by 10 s)
BACKFILL_AFTER_S = 2.0  # seconds a short window waits before it is reloaded
# Tasks a filter's count reads at most: past it the title says "over" (an exact count
# of a name filter reads every task, seconds at a million; this many, a few ms).
FILTER_COUNT_AT_MOST = 1000
# Rows the table grows to at most as the operator pages past its end (a page of
# window_rows older tasks at a time, read by keyset). Every row's age is re-rendered
# each ROWS_REFRESH_S: at 5 000 rows that put idle CPU at 1.9 % (200: 0.8 %), at
# 2 000 it stays near 1 %, with ~15 MB of rows. Past it, a filter finds older tasks.
WINDOW_MAX_ROWS = 2000
# A window read that takes longer than this says so in the table's title, with the
# filter being read: a filter that matches little of a million tasks can take a
# second, and the old rows under the old title looked like the answer.
READING_SIGN_AFTER_S = 0.25  # seconds
# Columns from which the side panel sits beside the table: the panel (40, app.tcss),
# the table's border and scrollbar (3) and the narrow layout's row (77) fit, so the
# error column stays whole. 120 columns is a common terminal width (and a common
# split of a wide screen): there the panel is shown. Below, it is folded away.
SIDE_PANEL_FROM = 120
# Columns from which each count gets its bordered box with big digits: beside the
# panel (40) and the table's border (2), seven boxes with their titles whole take 107
# ("─ 3 retry_wait ─" alone 18; app.tcss). Below, each count is a plain line, as on a
# narrow screen, rather than boxes with cut titles ("1 qu…").
COUNT_BOXES_FROM = 150


class DashboardScreen(Screen[None]):
    """Everything an operator needs at a glance, and the keys to act on it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        # First, so a narrow footer (where it is shown) still has room for it.
        # (i, not v: v opens the review desk.)
        Binding("i", "toggle_side", "Panel", tooltip="Swap the task table and the side panel"),
        Binding("s", "submit", "Submit"),
        Binding("c", "cancel", "Cancel"),
        Binding("r", "retry", "Retry"),
        Binding("f", "failures", "Failures"),
        Binding("v", "review", "Review", tooltip="Versions waiting for review: publish or reject"),
        # The app's own ^f comes after every key of this screen, past the end of an
        # 80-column footer: on a narrow screen this one shows it here instead (see
        # check_action; on a wide one the app's answers).
        Binding(
            "ctrl+f", "search", "Search", key_display="^f", tooltip="Search published documents"
        ),
        Binding("enter", "detail", "Detail"),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("b", "bulk", "Bulk", tooltip="Cancel or retry everything matching the filter"),
        # Not in the footer: each count box is labelled with its key ("4 failed").
        *(Binding(key, f"status_filter('{key}')", "0-6 status", show=False) for key in STATUS_KEYS),
    ]
    # The screen gets -narrow, -mid or -wide; app.tcss folds the side panel on
    # -narrow and draws the counts as plain lines on -narrow and -mid.
    HORIZONTAL_BREAKPOINTS = [
        (0, "-narrow"),
        (SIDE_PANEL_FROM, "-mid"),
        (COUNT_BOXES_FROM, "-wide"),
    ]

    def __init__(self) -> None:
        super().__init__()
        # The breakpoint class the first resize would give: set now, before anything
        # is styled, that resize changes no class and restyles nothing (the whole
        # screen, a second time, before the first frame).
        try:
            width = self.app.size.width
        except NoActiveAppError:  # constructed outside a running app
            width = 0
        self.set_class(True, *self._get_breakpoint_classes(width, self.HORIZONTAL_BREAKPOINTS))
        self.query_filter: TaskQuery = status_query(None)
        self._table_titles: tuple[str, str] | None = None
        self._reading_shown = False  # the title says a window read is under way
        # Monotonic times: throttles, not what is shown.
        self._rows_refreshed_at = float("-inf")
        self._short_since: float | None = None
        self._counted: int | None = None
        self._bar_closing = False  # a filter was applied: close the bar after its rows
        self._bar_opened = 0  # times the bar was opened
        self._loading_older = False  # a page past the window's end is being read

    @property
    def desk(self) -> Desk:
        return desk_of(self)

    def compose(self) -> ComposeResult:
        desk = self.desk
        yield Header()
        with Horizontal(id="main"):
            with Vertical(id="left"):
                yield StatusCounts(id="counts")
                yield ProviderLine(id="provider-line")
                yield TaskTable(
                    clock=desk.clock,
                    stall_after_s=desk.stall_after_s,
                    window=desk.window_rows,
                    id="tasks",
                )
                yield FilterBar(id="filter-bar")
            with Vertical(id="side"):
                yield Throughput(
                    bucket_s=THROUGHPUT_BUCKET_S, buckets=THROUGHPUT_BUCKETS, id="throughput"
                )
                yield RunningNow(id="running")
                yield WorkersPanel(id="workers")
                yield RichLog(id="activity", max_lines=500, wrap=True, markup=False, min_width=20)
        yield WholeKeysFooter()

    def on_mount(self) -> None:
        self.query_one("#activity", RichLog).border_title = "Worker log"
        self.query_one("#running", RunningNow).border_title = "Running now"
        self.query_one("#workers", WorkersPanel).border_title = "Workers"
        self.query_one(StatusCounts).set_active(None, filtered=False)
        self._title_table(0)
        self.query_one(TaskTable).focus()
        self.reload_window()

    # ------------------------------------------------------------------ state

    @property
    def table(self) -> TaskTable:
        return self.query_one(TaskTable)

    def _title_reading(self, text: str) -> None:
        self.table.border_title = plain(f"Tasks — {text or 'all'} · reading the ledger…")
        self._reading_shown = True

    def _end_reading(self) -> None:
        """The rows of the read under way are in: titles follow them again."""
        if self._reading_shown:
            self._reading_shown = False
            self._table_titles = None  # whatever comes next is drawn

    def _title_table(self, shown: int) -> None:
        if self._reading_shown:
            return  # the old rows are not the filter's answer: the sign stays
        table = self.table
        text = self.query_filter.text
        total = self._matching_total()
        of = f" of {total}" if total is not None else ""
        counted = not self.query_filter.empty and self.query_filter.status is None
        if counted and total is not None and total > FILTER_COUNT_AT_MOST:
            of = f" of over {FILTER_COUNT_AT_MOST}"
        title = f"Tasks — {text or 'all'}"
        subtitle = (
            f"newest {shown}{of} · sort: {table.sort_column}"
            f"{' ↑' if table.sort_reverse else ''} · o sorts"
        )
        if (title, subtitle) != self._table_titles:
            self._table_titles = (title, subtitle)
            # The filter is the operator's text: never markup ("name:[/x]" would raise).
            table.border_title, table.border_subtitle = plain(title), plain(subtitle)

    def _matching_total(self) -> int | None:
        # Counts for "all" and single-status filters are kept live by the mirror;
        # any other filter is counted once, when its window loads.
        counts = self.desk.mirror.counts
        if self.query_filter.empty:
            return sum(counts.values())
        status = self.query_filter.status
        if status is not None:
            return counts[status]
        return self._counted

    @work(exclusive=True, group="window", exit_on_error=False, description="load the task window")
    async def reload_window(self) -> None:
        """Load the newest matching tasks into the table: one screenful first, so a
        filter key is answered as fast as the ledger can read that much, then the
        rest of the window (rows below the fold, for scrolling)."""
        desk, query, table = self.desk, self.query_filter, self.table
        reads = desk.reads
        # A window the operator paged past its end is refilled as deep as it was.
        first = min(table.visible_rows + 1, table.window)
        keep = table.selected.task_id if table.selected is not None else None
        sign = self.set_timer(READING_SIGN_AFTER_S, lambda: self._title_reading(query.text))
        try:
            for limit in dict.fromkeys((first, table.window)):
                tasks = await query.window(reads, limit)
                table.load(tasks, desk.clock(), keep=keep)
                self._end_reading()
                self._close_bar_soon()
                # The count boxes show the new filter in the same frame as its rows:
                # a frame of its own would make the rows wait for the next one.
                self.query_one(StatusCounts).set_active(query.status, filtered=not query.empty)
                self._title_table(len(table.tasks))
                if len(tasks) < limit:
                    break  # that was every matching task
            if not query.empty and query.status is None:
                self._counted = await reads.count_tasks(query.filter, at_most=FILTER_COUNT_AT_MOST)
                self._title_table(len(table.tasks))
        except Exception as exc:  # the ledger's refusal, or a row it cannot read
            self._close_bar_soon()
            self.notify(failure_line(exc), severity="error", title="cannot load the tasks")
            return
        finally:
            sign.stop()
            if self._reading_shown:  # cut short: the title of the rows there are
                self._end_reading()
                self._title_table(len(table.tasks))
        self._short_since = None

    def on_task_table_wants_older(self, _message: TaskTable.WantsOlder) -> None:
        if self.table.window >= WINDOW_MAX_ROWS:
            self.notify(
                f"the table holds the newest {WINDOW_MAX_ROWS} tasks at most: "
                "a filter (/) finds older ones",
                severity="warning",
                timeout=4,
            )
            return
        if not self._loading_older:
            # A held End or PageDown asks again and again: one page at a time, each
            # read to its end (an exclusive worker would cancel every one but the last).
            self._loading_older = True
            self.load_older()

    @work(group="older", exit_on_error=False, description="load older tasks")
    async def load_older(self) -> None:
        """The page of tasks after the window's oldest row, below it (keyset: as fast
        at the millionth task as at the first)."""
        desk, query, table = self.desk, self.query_filter, self.table
        oldest = min(table.tasks.values(), key=lambda t: (t.created_at, t.task_id), default=None)
        limit = min(desk.window_rows, WINDOW_MAX_ROWS - table.window)
        try:
            if oldest is None:
                return
            older = await query.window(desk.reads, limit, before=TaskPosition.of(oldest))
        except Exception as exc:  # the ledger's refusal, or a row it cannot read
            self.notify(failure_line(exc), severity="error", title="cannot load older tasks")
            return
        finally:
            self._loading_older = False
        if query is not self.query_filter:
            return  # the filter changed meanwhile: these belong to the old one
        table.extend(older, desk.clock())
        self._title_table(len(table.tasks))

    def on_ledger_changed(self, message: LedgerChanged) -> None:
        desk, now = self.desk, message.now
        table, query = self.table, self.query_filter
        if query.filter.needs_ledger:
            # A page term (ocr:low): a task row does not carry its document's pages,
            # so only the ledger can say whether a task belongs. Rows shown are
            # updated in place, and a task that succeeded (the one write recording
            # pages) and is not shown reloads the window from the ledger.
            shown = [t for t in message.tasks if t.task_id in table.tasks]
            table.apply(shown, lambda _task: True, now)
            if any(
                t.status is TaskStatus.SUCCEEDED and t.task_id not in table.tasks
                for t in message.tasks
            ):
                self.reload_window()
        else:
            table.apply(message.tasks, query.matches, now)
        tick = time.monotonic()
        if tick - self._rows_refreshed_at >= ROWS_REFRESH_S:
            table.refresh_rows(now)
            self._rows_refreshed_at = tick
        mirror = desk.mirror
        self.query_one(StatusCounts).update_counts(mirror.counts)
        self.query_one(ProviderLine).update_counts(desk.provider_counts)
        self.query_one(Throughput).update_series(
            mirror.throughput(now), mirror.finished_within(now, 60)
        )
        stalled = {t for t, task in mirror.running.items() if mirror.is_stalled(task, now)}
        self.query_one(RunningNow).update_tasks(mirror.running, stalled)
        self._show_workers(now)
        if message.activity:
            log = self.query_one("#activity", RichLog)
            for line in message.activity:
                log.write(Text(visible(line)))
        if self._short_since is not None and tick - self._short_since >= BACKFILL_AFTER_S:
            self.reload_window()
        self._title_table(len(table.tasks))

    def _show_workers(self, now: float) -> None:
        desk = self.desk
        workforce = desk.workforce
        self.query_one(WorkersPanel).show(
            [] if workforce is None else workforce.local_workers(),
            desk.ledger_workers,
            now,
            paused=workforce is not None and workforce.paused,
        )

    def on_workers_changed(self, _message: WorkersChanged) -> None:
        self._show_workers(self.desk.clock())

    def on_task_table_window_short(self, _message: TaskTable.WindowShort) -> None:
        if self._short_since is None:
            self._short_since = time.monotonic()

    # --------------------------------------------------------------- filters

    def set_query(self, query: TaskQuery) -> None:
        self.query_filter = query
        self._counted = None
        # A new filter starts from its newest window, however deep the last was paged.
        self.table.window = self.desk.window_rows
        self.reload_window()

    def action_status_filter(self, key: str) -> None:
        status = STATUS_KEYS[key]
        query = status_query(status)
        self.query_one(FilterBar).value = query.text
        self.set_query(query)

    def action_toggle_side(self) -> None:
        """On a narrow screen, show the side panel in place of the table, or back."""
        if not self.has_class("-narrow"):
            return  # a wide screen shows both
        self.toggle_class("-side-open")
        if not self.has_class("-side-open"):
            self.table.focus()

    def action_filter(self) -> None:
        bar = self.query_one(FilterBar)
        self._bar_closing, self._bar_opened = False, self._bar_opened + 1
        bar.add_class("-open")
        bar.focus()

    @on(FilterBar.Applied)
    def _filter_applied(self, message: FilterBar.Applied) -> None:
        try:
            query = parse_query(message.text)
        except BadInput as exc:
            message.bar.add_class("-invalid")
            self.notify(exc.message, severity="error", title="filter")
            return
        message.bar.remove_class("-invalid")
        # The bar closes, and the table takes the focus, once the first screenful of
        # the filter's tasks is painted: either change restyles and lays out the
        # screen again, and the footer recomposes for the table's keys, which made
        # the rows wait their turn behind it (hundreds of ms on a loaded machine).
        self._bar_closing = True
        self.set_query(query)

    def _close_bar_soon(self) -> None:
        if self._bar_closing:
            self._bar_closing = False
            self.call_after_refresh(self._close_bar, self._bar_opened)

    def _close_bar(self, opened: int) -> None:
        bar = self.query_one(FilterBar)
        # Not if the operator opened the bar again meanwhile.
        if opened == self._bar_opened and bar.has_class("-open"):
            bar.remove_class("-open")
            if bar.has_focus:
                self.table.focus()

    @on(FilterBar.Dismissed)
    def _filter_dismissed(self, message: FilterBar.Dismissed) -> None:
        self._bar_closing = False
        message.bar.value = self.query_filter.text
        message.bar.remove_class("-invalid", "-open")
        self.table.focus()

    # --------------------------------------------------------------- actions

    def _selected(self) -> TaskView | None:
        task = self.table.selected
        if task is None:
            self.notify("no task selected", severity="warning")
        return task

    def action_detail(self) -> None:
        task = self._selected()
        if task is not None:
            self.open_detail(task.task_id)

    def open_detail(self, task_id: str) -> None:
        from tui.screens.task_detail import TaskDetailScreen

        self.app.push_screen(TaskDetailScreen(task_id))

    def on_task_table_task_selected(self, event: TaskTable.TaskSelected) -> None:
        event.stop()
        self.open_detail(event.task_id)

    def action_failures(self) -> None:
        from tui.screens.failures import FailuresScreen

        self.app.push_screen(FailuresScreen())

    def action_review(self) -> None:
        from tui.screens.review_desk import ReviewDeskScreen

        self.app.push_screen(ReviewDeskScreen())

    def action_cancel(self) -> None:
        operator = policy.operator_for(self.desk, "cancel")
        if operator is None:
            return
        task = self._selected()
        if task is not None:
            from tui.screens.actions import request_cancel

            self.table.cursor_guard.acting_on(task.task_id)
            request_cancel(self, operator, task)

    def action_retry(self) -> None:
        operator = policy.operator_for(self.desk, "retry")
        if operator is None:
            return
        task = self._selected()
        if task is None:
            return
        left = self.table.cursor_guard.just_left()
        if left is not None:
            self.notify(moved_notice(left, task.short_id, "r", "retry"), severity="warning")
            return
        from tui.screens.actions import retry_task

        self.table.cursor_guard.acting_on(task.task_id)
        retry_task(self, operator, task)

    def action_submit(self) -> None:
        operator = policy.operator_for(self.desk, "submit")
        if operator is None:
            return
        from tui.screens.submit import SubmitScreen

        def submit(text: str | None) -> None:
            self._submit_paths(operator, text)

        try:
            base = Path.cwd()
        except OSError:  # the folder the dashboard started in was removed
            self.notify(
                "the current folder no longer exists: type absolute paths", severity="warning"
            )
            base = Path("/")
        self.app.push_screen(SubmitScreen(base), submit)

    def _submit_paths(self, operator: Operator, text: str | None) -> None:
        if not text:
            return
        try:
            paths = shlex.split(text)
        except ValueError as exc:
            self.notify(f"cannot read the paths: {exc}", severity="error")
            return
        from tui.screens.actions import submit_paths

        submit_paths(self, operator, [Path(p).expanduser() for p in paths])

    def action_bulk(self) -> None:
        operator = policy.operator_for(self.desk, "bulk")
        if operator is None:
            return
        from tui.screens.bulk import BulkScreen

        self.app.push_screen(BulkScreen(self.query_filter, operator))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in {"toggle_side", "search"}:
            # Only a narrow screen folds the panel away; a wide one shows both. And
            # only a narrow one needs ^f early in the footer (False hands the key to
            # the app's binding).
            return self.has_class("-narrow")
        return policy.allows(self.desk, action)

    async def action_search(self) -> None:
        await self.app.run_action("app.search")

    def on_resize(self) -> None:
        # The breakpoint classes change with the width, and with them whether the
        # panel and search keys belong early in the footer. An 80-column footer has
        # room for the table's keys and ^f Search, not for the palette's hint too:
        # ^p still opens it, and the help screen lists it.
        self.refresh_bindings()
        self.query_one(WholeKeysFooter).show_command_palette = not self.has_class("-narrow")

    def palette_commands(self) -> list[tuple[str, str, str, Callable[[], object]]]:
        """(title, help, action, callback) for the command palette."""
        narrow: list[tuple[str, str, str, Callable[[], object]]] = [
            (
                "Side panel",
                "Swap the task table and the side panel (narrow screens)",
                "toggle_side",
                self.action_toggle_side,
            )
        ]
        return [
            *(narrow if self.has_class("-narrow") else []),
            (
                "Submit files",
                "Upload files and submit each for ingestion",
                "submit",
                self.action_submit,
            ),
            (
                "Cancel selected task",
                "Asks to confirm; the document goes back to draft",
                "cancel",
                self.action_cancel,
            ),
            ("Retry selected task", "Requeue a failed task", "retry", self.action_retry),
            (
                "Failures",
                "Failures grouped by error code and stage",
                "failures",
                self.action_failures,
            ),
            (
                "Review desk",
                "Versions waiting for review: what changed; publish or reject",
                "review",
                self.action_review,
            ),
            (
                "Task detail",
                "Fields, attempt history and chunks of the selected task",
                "detail",
                self.action_detail,
            ),
            (
                "Filter tasks",
                "Words and field:value terms, ! negates",
                "filter",
                self.action_filter,
            ),
            (
                "Bulk cancel / retry",
                "Act on every task matching the filter (dry run first)",
                "bulk",
                self.action_bulk,
            ),
            *(
                (
                    f"Show {'all tasks' if status is None else status.value + ' tasks'}",
                    f"Status filter (key {key})",
                    "status_filter",
                    (lambda k=key: self.action_status_filter(k)),
                )
                for key, status in STATUS_KEYS.items()
            ),
        ]
