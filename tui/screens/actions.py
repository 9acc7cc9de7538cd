"""Operator actions shared by every screen: cancel, retry, submit.

Each takes the operator, so only a desk that has one (not read-only) can call them,
and runs as a Textual worker of the app, so the screen keeps answering keys while the
ledger works and the action outlives the screen that started it. Each turns the
ledger's refusals (``Conflict``, ``NotFound``, ``BadInput``) into a notification in
plain words; nothing here can crash the app.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from core import BadInput, Conflict, IngestDeskError, NotFound, TaskStatus, TaskView, visible
from core.states import CANCELLABLE
from tui.desk import Desk, desk_of
from tui.format import failure_line

if TYPE_CHECKING:
    from textual.dom import DOMNode

    from core import Operator

# Statuses worth asking "are you sure?" about: the ledger refuses the rest, and
# saying why at once beats a confirmation that ends in a refusal.
ASK_BEFORE_CANCEL = CANCELLABLE


def describe(task: TaskView) -> str:
    """``ab12cd34 (report.pdf)``, the name escaped (it is quoted in dialogs and
    notifications)."""
    name = visible(task.document_name or "document " + task.document_id[:8])
    return f"{task.short_id} ({name})"


def notify_refusal(desk: Desk, action: str, exc: Exception) -> None:
    """A refusal from the ledger (or a fault reaching it), as a notification an
    operator can act on."""
    if not isinstance(exc, IngestDeskError):
        # Not a rule of the ledger: the database or the disk failed. Still words,
        # never a traceback, and the dashboard carries on.
        desk.notify(
            failure_line(exc),
            title=f"could not {action}",
            severity="error",
            timeout=10,
        )
        return
    if isinstance(exc, Conflict):
        title = f"cannot {action}"
    elif isinstance(exc, NotFound):
        title = f"cannot {action}: not found"
    elif isinstance(exc, BadInput):
        title = f"cannot {action}: bad input"
    else:
        title = f"could not {action}"
    desk.notify(failure_line(exc), title=title, severity="error", timeout=8)


def request_cancel(node: DOMNode, operator: Operator, task: TaskView) -> None:
    """Ask to confirm (with an optional reason), then cancel ``task``.

    Args:
        node: Where the request comes from (a screen); the work runs on its app.
        operator: The ledger's operator role.
        task: The task to cancel.
    """
    app, desk = node.app, desk_of(node)
    if task.status not in ASK_BEFORE_CANCEL:
        app.run_worker(
            _cancel(desk, operator, task, None),
            group="actions",
            exit_on_error=False,
            description="cancel",
        )
        return
    from tui.screens.modals import ConfirmScreen

    where = f" at stage {task.stage.value}" if task.status is TaskStatus.RUNNING else ""
    body = (
        f"Cancel task {describe(task)}, now {task.status.value}{where}?\n\n"
        "Its document goes back to draft (it can be submitted again) and loses any "
        "chunks this run already wrote."
    )

    def confirmed(reason: str | None) -> None:
        if reason is not None:
            app.run_worker(
                _cancel(desk, operator, task, reason or None),
                group="actions",
                exit_on_error=False,
                description="cancel",
            )

    app.push_screen(
        ConfirmScreen("Cancel task?", body, confirm_label="Cancel task", ask_reason=True),
        confirmed,
    )


async def _cancel(desk: Desk, operator: Operator, task: TaskView, reason: str | None) -> None:
    try:
        await operator.cancel(task.task_id, actor=desk.actor, reason=reason)
    except Exception as exc:
        notify_refusal(desk, "cancel", exc)
        return
    desk.notify(f"cancelled {describe(task)}; its document is a draft again", timeout=4)
    desk.poll_soon()


def retry_task(
    node: DOMNode, operator: Operator, task: TaskView, reason: str | None = None
) -> None:
    """Requeue a failed task; the ledger explains when its rules refuse."""
    node.app.run_worker(
        _retry(desk_of(node), operator, task, reason),
        group="actions",
        exit_on_error=False,
        description="retry",
    )


async def _retry(desk: Desk, operator: Operator, task: TaskView, reason: str | None) -> None:
    try:
        await operator.retry(task.task_id, actor=desk.actor, reason=reason)
    except Exception as exc:
        notify_refusal(desk, "retry", exc)
        return
    desk.notify(f"requeued {describe(task)}", timeout=4)
    desk.poll_soon()


def submit_paths(node: DOMNode, operator: Operator, paths: Sequence[Path]) -> None:
    """Upload each file and submit it; bad files are reported, good ones go ahead."""
    node.app.run_worker(
        _submit(desk_of(node), operator, list(paths)),
        group="actions",
        exit_on_error=False,
        description="submit",
    )


async def _submit(desk: Desk, operator: Operator, paths: list[Path]) -> None:
    submitted: list[str] = []
    refused: list[str] = []
    for path in paths:
        try:
            document = await operator.upload_path(path, actor=desk.actor)
            await operator.submit(document.document_id, actor=desk.actor)
        except IngestDeskError as exc:
            refused.append(failure_line(exc))  # one line per file, whatever it quotes
            continue
        except Exception as exc:  # the disk or the database, not the file
            refused.append(visible(f"{path}: ") + failure_line(exc))
            continue
        submitted.append(visible(document.filename))
    if submitted:
        names = ", ".join(submitted[:5]) + (
            f" and {len(submitted) - 5} more" if len(submitted) > 5 else ""
        )
        desk.notify(f"submitted {len(submitted)}: {names}", timeout=4)
        desk.poll_soon()
    if refused:
        desk.notify(
            "\n".join(refused),
            title=f"{len(refused)} file{'s' if len(refused) > 1 else ''} not submitted",
            severity="error",
            timeout=10,
        )
