"""Failures: failed tasks grouped by error code then stage, with what each code
means and what to do about it (the same table the README and ``ingestdesk errors``
print). Enter on a group lists its tasks; enter on a task opens its detail.

In the ``needs_review`` group (a provider request whose outcome is unknown and of
which the provider has no record) the advice lists the requests waiting for a
person, and ``s`` / ``x`` decide for the selected task: resend, or mark failed."""

from __future__ import annotations

import time
from typing import ClassVar

from rich.console import Group, RenderableType
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Header, Static

from core import (
    ERRORS,
    ErrorCode,
    FailureGroup,
    Stage,
    TaskStatus,
    TaskView,
    parse_filter,
    visible,
)
from core.ledger import ProviderRequestView
from tui import policy
from tui.desk import Desk, desk_of
from tui.format import age, clock_time, failure_line, shorten, when
from tui.messages import LedgerChanged
from tui.screens.provider_review import waits_for_review
from tui.widgets.cursor_guard import CursorGuard, moved_notice
from tui.widgets.data_table import DataTable
from tui.widgets.footer import WholeKeysFooter

GROUP_TASKS_MAX = 500  # tasks listed for one group
RELOAD_AFTER_S = 1.0  # seconds between reloads while failures keep arriving
MEANING_WIDTH = 70  # characters of an error code's meaning in the groups table
# Requests waiting for review listed in the advice: enough to see what waits and for
# how long, few enough that the tasks below keep rows in view. A terminal shorter than
# REVIEW_ROOMY_ROWS (80x24) lists only the oldest: the tasks table lists them all.
REVIEW_SHOWN_MAX = 3
REVIEW_ROOMY_ROWS = 30
REVIEW_ACTIONS = frozenset({"resend", "mark_failed"})


def group_key(code: ErrorCode, stage: Stage) -> str:
    return f"{code.value}|{stage.value}"


class FailuresScreen(Screen[None]):
    """Triage: which failures, how many, since when, and what to do."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("enter", "open", "Open"),
        Binding("r", "retry", "Retry task"),
        # Shown only in the needs_review group (check_action).
        Binding("s", "resend", "Resend", tooltip="Allow the task's provider requests again"),
        Binding("x", "mark_failed", "Mark failed", tooltip="Give up on its provider requests"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.groups: dict[str, FailureGroup] = {}
        self.tasks: dict[str, TaskView] = {}
        self.current_group: str | None = None
        self.cursor_guard = CursorGuard()
        self.awaiting: list[ProviderRequestView] = []  # as of the last read
        self._loaded_at = float("-inf")  # monotonic
        self._stale = False
        self._tasks_loading = False

    @property
    def desk(self) -> Desk:
        return desk_of(self)

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="failures"):
            yield DataTable(id="failure-groups", cursor_type="row", zebra_stripes=True)
            yield Static("", id="failure-advice")
            yield DataTable(id="failure-tasks", cursor_type="row", zebra_stripes=True)
        yield WholeKeysFooter()

    def on_mount(self) -> None:
        groups = self.query_one("#failure-groups", DataTable)
        groups.border_title = "Failed tasks by error code and stage"
        for key, label, width in (
            ("code", "Error code", 20),
            ("stage", "Stage", 10),
            ("count", "Count", 6),
            ("first", "First seen (UTC)", 19),
            ("last", "Last seen (UTC)", 19),
            ("meaning", "What it means", MEANING_WIDTH),
        ):
            groups.add_column(label, key=key, width=width)
        tasks = self.query_one("#failure-tasks", DataTable)
        tasks.border_title = "Tasks in this group (enter opens one)"
        for key, label, width in (
            ("id", "ID", 8),
            ("name", "Document", 30),
            ("attempt", "Try", 3),
            ("detail", "Detail", 40),
            ("updated", "Failed at", 9),
        ):
            tasks.add_column(label, key=key, width=width)
        self.query_one("#failure-advice").border_title = "What to do"
        groups.focus()
        self.load_groups()

    # ------------------------------------------------------------------ data

    @work(exclusive=True, group="failure-groups", exit_on_error=False, description="load failures")
    async def load_groups(self) -> None:
        # Marked when the read starts, not when it ends: a change polled while the read
        # runs may be missing from what it returns, and must leave the screen stale for
        # the next poll to reload (cleared afterwards, the resend test's reload never
        # came on a loaded machine).
        self._loaded_at = time.monotonic()
        self._stale = False
        try:
            groups = await self.desk.reads.failure_groups()
        except Exception as exc:  # the ledger's refusal, or a row it cannot read
            self.notify(failure_line(exc), severity="error", title="cannot load the failures")
            self._stale = True  # a later poll tries again
            return
        table = self.query_one("#failure-groups", DataTable)
        selected = self.current_group
        self.groups = {group_key(g.error_code, g.stage): g for g in groups}
        table.clear()
        for key, group in self.groups.items():
            table.add_row(
                Text(group.error_code.value, style="bold"),
                group.stage.value,
                str(group.count),
                when(group.first_seen),
                when(group.last_seen),
                Text(shorten(ERRORS[group.error_code].meaning, MEANING_WIDTH)),
                key=key,
            )
        if not self.groups:
            self.current_group = None
            self.query_one("#failure-advice", Static).update(Text("no failed tasks", style="dim"))
            self.query_one("#failure-tasks", DataTable).clear()
            return
        if selected in self.groups:
            table.move_cursor(row=table.get_row_index(selected), animate=False)
        self._show_group(selected if selected in self.groups else next(iter(self.groups)))

    def _show_group(self, key: str) -> None:
        group = self.groups.get(key)
        if group is None:
            return
        changed = key != self.current_group
        self.current_group = key
        if changed:
            self.refresh_bindings()  # s and x belong to the needs_review group only
        self._advise(group)
        if group.error_code is ErrorCode.NEEDS_REVIEW:
            self.load_awaiting(key)
        self.load_tasks(group, reset_cursor=changed)

    def _advise(self, group: FailureGroup) -> None:
        info = ERRORS[group.error_code]
        advice = Text()
        advice.append(f"{group.error_code.value}", style="bold")
        advice.append(f" at {group.stage.value}: {info.meaning}\n")
        advice.append("what to do: ", style="bold")
        advice.append(info.advice)
        advice.append(
            "\nretried automatically while attempts remain"
            if info.transient
            else "\nnot retried automatically",
            style="italic",
        )
        shown: RenderableType = advice
        if group.error_code is ErrorCode.NEEDS_REVIEW:
            shown = Group(advice, *self._awaiting_lines())
        self.query_one("#failure-advice", Static).update(shown)

    def _awaiting_lines(self) -> list[Text]:
        """The requests waiting for review, oldest first, one line each (cut at the
        edge, never wrapped: the tasks table below must keep its room)."""
        now = self.desk.clock()
        waiting = self.awaiting
        if not waiting:
            return [Text("no provider request is waiting for review", style="dim")]
        shown = REVIEW_SHOWN_MAX if self.size.height >= REVIEW_ROOMY_ROWS else 1
        head = Text(f"waiting for review: {len(waiting)} request", style="bold")
        if len(waiting) > 1:
            head.append("s")
        if len(waiting) > shown:
            head.append(", oldest first (ingestdesk review lists all)", style="")
        lines = [head]
        for request in waiting[:shown]:
            line = Text(no_wrap=True, overflow="ellipsis")
            line.append(f"  {request.task_id[:8]} ")
            name = request.document_name or (request.document_id or "")[:8]
            line.append(shorten(visible(name), 24))
            line.append(f"  waiting {age(now - request.updated_at)}", style="bold")
            line.append(f"  request {request.request_key[:12]}")
            if request.detail:
                line.append(f"  {visible(request.detail)}", style="italic")
            lines.append(line)
        return lines

    def on_resize(self) -> None:
        # How many waiting requests fit depends on the height.
        group = self.groups.get(self.current_group or "")
        if group is not None:
            self._advise(group)

    @work(exclusive=True, group="failure-review", exit_on_error=False, description="load review")
    async def load_awaiting(self, key: str) -> None:
        try:
            awaiting = await self.desk.providers.awaiting_review()
        except Exception as exc:
            self.notify(failure_line(exc), severity="error", title="cannot load the review list")
            return
        self.awaiting = awaiting
        group = self.groups.get(key)
        # The operator may have moved to another group while this was read.
        if group is not None and self.current_group == key:
            self._advise(group)

    @work(exclusive=True, group="failure-tasks", exit_on_error=False, description="load group")
    async def load_tasks(self, group: FailureGroup, reset_cursor: bool) -> None:
        self._tasks_loading = True
        try:
            # The stage in the read, not after it: a code failing at two stages must
            # not have one stage's newer tasks fill the page meant for the other's.
            tasks = await self.desk.reads.list_tasks(
                status=TaskStatus.FAILED,
                error_code=group.error_code,
                filter=parse_filter(f"stage:{group.stage.value}"),
                limit=GROUP_TASKS_MAX,
            )
        except Exception as exc:
            self.notify(failure_line(exc), severity="error", title="cannot load the group")
            self._stale = True
            return
        finally:
            self._tasks_loading = False
        table = self.query_one("#failure-tasks", DataTable)
        keep = None if reset_cursor else table.cursor_row
        kept = None if reset_cursor else self._selected_task()
        self.tasks = {t.task_id: t for t in tasks}
        now = self.desk.clock()
        table.clear()
        for task in self.tasks.values():
            table.add_row(
                Text(task.short_id),
                Text(shorten(visible(task.document_name or task.document_id[:8]), 30)),
                str(task.attempt),
                Text(shorten(visible(task.error_detail or ""), 40)),
                clock_time(task.updated_at, now),
                key=task.task_id,
            )
        table.border_subtitle = f"{len(self.tasks)} of {group.count}"
        if keep is not None and self.tasks:
            # The cursor stays on its task; if that one left, on its row, and a key
            # meant for the task that left is asked again (CursorGuard).
            if kept is not None and kept.task_id in self.tasks:
                keep = table.get_row_index(kept.task_id)
            elif kept is not None:
                self.cursor_guard.left(kept.task_id, kept.short_id)
            table.move_cursor(row=min(keep, len(self.tasks) - 1), animate=False)

    def on_ledger_changed(self, message: LedgerChanged) -> None:
        # Polls arrive even when nothing changed, so a reload held back by the
        # throttle still happens on a later one.
        # While the group's tasks are being read, which tasks it shows is not known
        # yet: any change may be one of them leaving (a resend right after the group
        # opened left the group on screen for good on a loaded machine).
        shown_may_change = bool(message.tasks) and self._tasks_loading
        if shown_may_change or any(
            t.status is TaskStatus.FAILED or t.task_id in self.tasks for t in message.tasks
        ):
            self._stale = True
        if self._stale and time.monotonic() - self._loaded_at >= RELOAD_AFTER_S:
            self._stale = False
            self.load_groups()

    # ------------------------------------------------------------- navigation

    @on(DataTable.RowHighlighted, "#failure-groups")
    def _group_highlighted(self, event: DataTable.RowHighlighted) -> None:
        # A reload clears the table (the cursor to row 0) and then moves the cursor
        # back to its group: the highlight of row 0 arrives after, and acted on, it
        # showed another group for a moment and reset the tasks' cursor to the top.
        if event.cursor_row != event.data_table.cursor_row:
            return
        if event.row_key.value is not None:
            self._show_group(str(event.row_key.value))

    @on(DataTable.RowSelected, "#failure-groups")
    def _group_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self._show_group(str(event.row_key.value))
        self.query_one("#failure-tasks", DataTable).focus()

    @on(DataTable.RowSelected, "#failure-tasks")
    def _task_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self._open_task(str(event.row_key.value))

    def _open_task(self, task_id: str) -> None:
        from tui.screens.task_detail import TaskDetailScreen

        self.app.push_screen(TaskDetailScreen(task_id))

    def _selected_task(self) -> TaskView | None:
        table = self.query_one("#failure-tasks", DataTable)
        if not table.row_count:
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return self.tasks.get(str(row_key.value))

    def action_open(self) -> None:
        if self.focused is self.query_one("#failure-tasks", DataTable):
            task = self._selected_task()
            if task is not None:
                self._open_task(task.task_id)
        elif self.current_group is not None:
            self.query_one("#failure-tasks", DataTable).focus()

    def action_retry(self) -> None:
        operator = policy.operator_for(self.desk, "retry")
        if operator is None:
            return
        task = self._selected_task()
        if task is None:
            self.notify("no failed task selected", severity="warning")
            return
        left = self.cursor_guard.just_left()
        if left is not None:
            self.notify(moved_notice(left, task.short_id, "r", "retry"), severity="warning")
            return
        from tui.screens.actions import retry_task

        self.cursor_guard.acting_on(task.task_id)
        retry_task(self, operator, task)

    def _task_for_review(self) -> TaskView | None:
        task = self._selected_task()
        if task is None:
            self.notify("no failed task selected", severity="warning")
            return None
        if not waits_for_review(task):
            self.notify(
                "only a task whose provider request waits for review (needs_review) "
                "can be resent or marked failed",
                severity="warning",
            )
            return None
        return task

    def action_resend(self) -> None:
        review = policy.review_for(self.desk, "resend")
        if review is None:
            return
        task = self._task_for_review()
        if task is not None:
            from tui.screens.provider_review import request_resend

            request_resend(self, review, task)

    def action_mark_failed(self) -> None:
        review = policy.review_for(self.desk, "mark_failed")
        if review is None:
            return
        task = self._task_for_review()
        if task is not None:
            from tui.screens.provider_review import request_mark_failed

            request_mark_failed(self, review, task)

    def action_back(self) -> None:
        if self.focused is self.query_one("#failure-tasks", DataTable):
            self.query_one("#failure-groups", DataTable).focus()
            return
        self.dismiss(None)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not policy.allows(self.desk, action):
            return False
        if action in REVIEW_ACTIONS:
            group = self.groups.get(self.current_group or "")
            return group is not None and group.error_code is ErrorCode.NEEDS_REVIEW
        return True
