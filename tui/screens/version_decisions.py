"""The review desk's decisions on a document version: publish it, or reject it.

Like :mod:`tui.screens.provider_review`, each decision takes the desk's
:class:`~core.ledger.Versions` (so only a desk that has one, not read-only, can call
them), asks to confirm in a dialog, runs as a Textual worker of the app (the decision
outlives the screen that asked for it) and turns the ledger's refusals into a
notification. A publish names the row version the reviewer was shown
(``expected_version``): if the version changed meanwhile the ledger refuses it with a
Conflict, and its one line is what the notification says.

A version flagged for review (:mod:`core.ledger.pages`: pages read by OCR at low
confidence, or skipped) is published accepting its pages only when the dialog named
why it is flagged and the reviewer confirmed that; a screen that did not show the
flag publishes without accepting, and the ledger's refusal says why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from core import DocumentStatus, DocumentView, visible
from tui.desk import Desk, desk_of
from tui.screens.actions import notify_refusal

if TYPE_CHECKING:
    from textual.dom import DOMNode

    from core.ledger import Versions
    from core.ledger.pages import PageSummary

Done = Callable[[], None]  # what the asking screen does after a decision (a reload)


def describe_version(version: DocumentView) -> str:
    """``report.pdf v2 (ab12cd34)``, the name escaped (it is quoted in dialogs and
    notifications)."""
    return f"{visible(version.filename)} v{version.version_no} ({version.document_id[:8]})"


def request_publish(
    node: DOMNode,
    versions: Versions,
    version: DocumentView,
    *,
    published: DocumentView | None = None,
    pages: PageSummary | None = None,
    done: Done | None = None,
) -> None:
    """Ask to confirm (with an optional reason), then publish ``version`` as of its
    row version: it becomes what search finds for its document.

    Args:
        node: Where the request comes from (a screen); the work runs on its app.
        versions: The ledger's versions role.
        version: The version as the reviewer saw it (its row version is expected).
        published: The document's version that publishing retires (published now,
            or withdrawn), if the screen knows it: the dialog then names it.
        pages: The version's page summary as the screen showed it: if flagged, the
            dialog says why and confirming accepts those pages as read.
        done: Called after the ledger answered, whatever it answered.
    """
    from tui.screens.modals import ConfirmScreen

    accept = pages is not None and pages.flagged

    app, desk = node.app, desk_of(node)
    if published is None:
        retired = "Any version of the document published now is retired in the same step."
    elif published.status is DocumentStatus.WITHDRAWN:
        retired = (
            f"withdrawn v{published.version_no} (not searchable now) is retired in the same step."
        )
    else:
        retired = f"v{published.version_no}, published now, is retired in the same step."
    body = (
        f"Publish {describe_version(version)} as of row version {version.version}?\n\n"
        f"Search finds this version from now on; {retired} If the version changed "
        "since you looked, the ledger refuses and nothing changes."
    )
    if accept and pages is not None:
        body += (
            f"\n\nFlagged for review: {pages.reason}. Publishing accepts these pages as "
            "read; the history keeps that you did."
        )

    def confirmed(reason: str | None) -> None:
        if reason is not None:
            app.run_worker(
                _publish(desk, versions, version, reason or None, done, accept=accept),
                group="actions",
                exit_on_error=False,
                description="publish",
            )

    app.push_screen(
        ConfirmScreen(
            "Publish this flagged version?" if accept else "Publish this version?",
            body,
            confirm_label="Publish, accepting" if accept else "Publish",
            ask_reason=True,
            kept_in="the document's history",
        ),
        confirmed,
    )


async def _publish(
    desk: Desk,
    versions: Versions,
    version: DocumentView,
    reason: str | None,
    done: Done | None,
    *,
    accept: bool = False,
) -> None:
    try:
        after = await versions.publish(
            version.document_id,
            actor=desk.actor,
            expected_version=version.version,
            reason=reason,
            accept_low_confidence=accept,
        )
    except Exception as exc:
        notify_refusal(desk, "publish", exc)
    else:
        desk.notify(f"published {describe_version(after)}: search finds it now", timeout=4)
    if done is not None:
        done()


def request_reject(
    node: DOMNode, versions: Versions, version: DocumentView, *, done: Done | None = None
) -> None:
    """Ask for a reason (required), then reject ``version``: it goes back to draft,
    its chunks dropped, the reason in the document's history."""
    from tui.screens.modals import ConfirmScreen

    app, desk = node.app, desk_of(node)
    body = (
        f"Reject {describe_version(version)}?\n\n"
        "It goes back to draft and its chunks are dropped; search keeps finding the "
        "version published now. Your reason is kept in the document's history."
    )

    def confirmed(reason: str | None) -> None:
        if reason is not None:
            app.run_worker(
                _reject(desk, versions, version, reason, done),
                group="actions",
                exit_on_error=False,
                description="reject",
            )

    app.push_screen(
        ConfirmScreen(
            "Reject this version?",
            body,
            confirm_label="Reject",
            require_reason=True,
            kept_in="the document's history",
        ),
        confirmed,
    )


async def _reject(
    desk: Desk, versions: Versions, version: DocumentView, reason: str, done: Done | None
) -> None:
    try:
        after = await versions.reject(version.document_id, actor=desk.actor, reason=reason)
    except Exception as exc:
        notify_refusal(desk, "reject", exc)
    else:
        desk.notify(f"rejected {describe_version(after)}: it is a draft again", timeout=4)
    if done is not None:
        done()
