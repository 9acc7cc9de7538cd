"""Bulk cancel / retry of every task matching the filter (not just the visible rows).

A dry run first says how many tasks are eligible and why the others are not; the
operator then confirms, optionally with a reason for the audit log. The ledger
re-checks each task with the same conditional update when it executes, so tasks
that changed in between are refused, not clobbered; the action's line says how far it
got while it runs (a million tasks' retry takes minutes), and a summary follows.

An empty filter names no task (the ledger refuses it): the screen says so in one
line and offers only an explicit "Every task" choice, which dry-runs
:data:`core.EVERY_TASK` before anything can be changed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from core import EVERY_TASK, BulkResult, Operator, TaskFilter, visible
from tui.desk import Desk, desk_of
from tui.filtering import TaskQuery
from tui.format import failure_line
from tui.widgets.plain_input import PlainInput

ACTIONS = ("cancel", "retry")
NO_FILTER = (
    "No filter: a bulk action needs one. Set it with / on the dashboard, "
    "or choose Every task to dry-run every task in the ledger."
)


def explain(result: BulkResult) -> str:
    """``12 of 15 matching are eligible; 3 are not: succeeded 2, failed 1``."""
    text = f"{result.eligible} of {result.matched} matching are eligible"
    blocked = sum(result.ineligible.values())
    if blocked:
        reasons = "; ".join(f"{why} ({n})" for why, n in sorted(result.ineligible.items()))
        text += f"; {blocked} are not — {reasons}"
    return text


class BulkScreen(ModalScreen[None]):
    """Dry run both bulk actions for a filter, then run the one the operator picks.

    Args:
        query: The filter whose every matching task is acted on.
        operator: The ledger's operator role (the screen is not opened read-only).
    """

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "back", "Back")]

    def __init__(self, query: TaskQuery, operator: Operator) -> None:
        super().__init__()
        self.task_query = query
        self.operator = operator
        self.results: dict[str, BulkResult] = {}
        # None until the tasks are named: by a filter, or by choosing every task.
        self.task_filter: TaskFilter | None = query.filter if query.filter.names_tasks else None

    @property
    def desk(self) -> Desk:
        return desk_of(self)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide"):
            yield Label("Bulk action on every matching task", classes="dialog-title")
            yield Static(self._scope(), id="bulk-scope", classes="dialog-body", markup=False)
            for action in ACTIONS:
                dry = Static("dry run…", id=f"dry-{action}", classes="dialog-body", markup=False)
                dry.display = self.task_filter is not None
                yield dry
            yield PlainInput(placeholder="reason (optional, kept in the audit log)", id="reason")
            with Horizontal(classes="dialog-buttons"):
                if self.task_filter is None:
                    yield Button("Every task", id="every-task")
                yield Button("Cancel matching", variant="error", id="do-cancel", disabled=True)
                yield Button("Retry matching", variant="warning", id="do-retry", disabled=True)
                yield Button("Back", id="back")
            yield Label("tab moves between buttons · esc goes back", classes="dialog-hint")

    def _scope(self) -> str:
        if self.task_filter is None:
            return NO_FILTER
        if self.task_filter.everything:
            return "every task in the ledger"
        return f"filter: {visible(self.task_query.text)}"

    def on_mount(self) -> None:
        if self.task_filter is None:
            # Nothing is named yet: the safe key is the one that goes back.
            self.query_one("#back", Button).focus()
            return
        self.query_one("#reason", Input).focus()
        self.dry_run()

    def _bulk(self, action: str) -> Callable[..., Awaitable[BulkResult]]:
        operator = self.operator
        return operator.bulk_cancel if action == "cancel" else operator.bulk_retry

    @on(Button.Pressed, "#every-task")
    def _every_task(self) -> None:
        """The operator says so explicitly: every task, dry-run first like a filter."""
        self.task_filter = EVERY_TASK
        self.query_one("#every-task", Button).remove()
        self.query_one("#bulk-scope", Static).update(self._scope())
        for action in ACTIONS:
            self.query_one(f"#dry-{action}", Static).display = True
        self.query_one("#reason", Input).focus()
        self.dry_run()

    @work(exclusive=True, group="bulk-dry-run", exit_on_error=False, description="bulk dry run")
    async def dry_run(self) -> None:
        task_filter = self.task_filter
        if task_filter is None:
            return
        for action in ACTIONS:
            label = self.query_one(f"#dry-{action}", Static)
            try:
                result = await self._bulk(action)(
                    task_filter, actor=self.desk.actor, reason=None, dry_run=True
                )
            except Exception as exc:
                label.update(f"{action}: dry run failed: {failure_line(exc)}")
                continue
            self.results[action] = result
            label.update(f"{action}: {explain(result)}")
            button = self.query_one(f"#do-{action}", Button)
            button.label = f"{action.capitalize()} {result.eligible} matching"
            button.disabled = result.eligible == 0

    @on(Button.Pressed, "#do-cancel")
    def _cancel(self) -> None:
        self.execute("cancel")

    @on(Button.Pressed, "#do-retry")
    def _retry(self) -> None:
        self.execute("retry")

    @work(exclusive=True, group="bulk-run", exit_on_error=False, description="bulk action")
    async def execute(self, action: str) -> None:
        desk, task_filter = self.desk, self.task_filter
        if task_filter is None:
            return  # the buttons stay disabled until the tasks are named
        reason = self.query_one("#reason", Input).value.strip() or None
        for button in self.query(Button):
            button.disabled = True
        label = self.query_one(f"#dry-{action}", Static)
        doing = "cancelling" if action == "cancel" else "requeueing"

        def on_batch(so_far: BulkResult) -> None:
            # A million tasks' bulk action takes minutes: say how far it is.
            label.update(f"{action}: {doing} {so_far.done + so_far.refused} of {so_far.eligible}…")

        try:
            result = await self._bulk(action)(
                task_filter, actor=desk.actor, reason=reason, dry_run=False, on_batch=on_batch
            )
        except Exception as exc:
            desk.notify(
                failure_line(exc), title=f"bulk {action} refused", severity="error", timeout=8
            )
            self.dismiss(None)
            return
        verb = "cancelled" if action == "cancel" else "requeued"
        summary = f"{verb} {result.done} task{'s' if result.done != 1 else ''}"
        if result.refused:
            summary += f"; {result.refused} changed meanwhile and were left alone"
        blocked = sum(result.ineligible.values())
        if blocked:
            summary += f"; {blocked} were not eligible"
        desk.notify(summary, title=f"bulk {action}", timeout=8)
        desk.poll_soon()
        self.dismiss(None)

    @on(Button.Pressed, "#back")
    def action_back(self) -> None:
        self.dismiss(None)
