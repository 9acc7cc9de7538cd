"""A person's decisions on provider requests waiting for review: resend them, or
mark them failed. Shared by the screens that offer them (the failures screen).

A request waits for review when its outcome was unknown and the provider has no
record of it: sending it again might do the work twice, so the ledger leaves the
choice to a person. Each decision takes the desk's
:class:`~core.ledger.ProviderReview` (so only a desk that has one, not read-only,
can call them), asks to confirm in a dialog, runs as a Textual worker of the app and
turns the ledger's refusals into a notification, like :mod:`tui.screens.actions`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core import ErrorCode, TaskView
from tui.desk import Desk, desk_of
from tui.screens.actions import describe, notify_refusal

if TYPE_CHECKING:
    from textual.dom import DOMNode

    from core.ledger import ProviderReview


def waits_for_review(task: TaskView) -> bool:
    """Whether ``task`` failed because a provider request waits for a person."""
    return task.error_code is ErrorCode.NEEDS_REVIEW


def request_resend(node: DOMNode, review: ProviderReview, task: TaskView) -> None:
    """Ask to confirm (with an optional reason), then allow the task's requests to be
    sent again; the task is queued again at once."""
    from tui.screens.modals import ConfirmScreen

    app, desk = node.app, desk_of(node)
    body = (
        f"Resend the provider requests of task {describe(task)}?\n\n"
        "Their outcome is unknown (no reply came back, or the worker stopped while "
        "sending) and the provider has no record of them: if it did the work after "
        "all, it is done twice. The task is queued again."
    )

    def confirmed(reason: str | None) -> None:
        if reason is not None:
            app.run_worker(
                _resend(desk, review, task, reason or None),
                group="actions",
                exit_on_error=False,
                description="resend",
            )

    app.push_screen(
        ConfirmScreen("Resend provider requests?", body, confirm_label="Resend", ask_reason=True),
        confirmed,
    )


async def _resend(desk: Desk, review: ProviderReview, task: TaskView, reason: str | None) -> None:
    try:
        after = await review.resend(task.task_id, actor=desk.actor, reason=reason)
    except Exception as exc:
        notify_refusal(desk, "resend", exc)
        return
    desk.notify(
        f"resend approved for {describe(task)}; the task is {after.status.value}", timeout=4
    )
    desk.poll_soon()


def request_mark_failed(node: DOMNode, review: ProviderReview, task: TaskView) -> None:
    """Ask for a reason (required), then mark the task's requests failed: nothing is
    sent again and the task's failure becomes ``provider_failed``."""
    from tui.screens.modals import ConfirmScreen

    app, desk = node.app, desk_of(node)
    body = (
        f"Mark the provider requests of task {describe(task)} failed?\n\n"
        "Nothing is sent again: the task stays failed, as provider_failed, with your "
        "reason (a retry would fail the same way)."
    )

    def confirmed(reason: str | None) -> None:
        if reason is not None:
            app.run_worker(
                _mark_failed(desk, review, task, reason),
                group="actions",
                exit_on_error=False,
                description="mark failed",
            )

    app.push_screen(
        ConfirmScreen(
            "Mark provider requests failed?",
            body,
            confirm_label="Mark failed",
            require_reason=True,
        ),
        confirmed,
    )


async def _mark_failed(desk: Desk, review: ProviderReview, task: TaskView, reason: str) -> None:
    try:
        after = await review.mark_failed(task.task_id, actor=desk.actor, reason=reason)
    except Exception as exc:
        notify_refusal(desk, "mark failed", exc)
        return
    code = after.error_code.value if after.error_code else after.status.value
    desk.notify(f"marked the requests of {describe(task)} failed: {code}", timeout=4)
    desk.poll_soon()
