"""Which actions may run: in read-only mode, none that changes the ledger.

Read-only is a missing object, not a flag checked in every handler: a read-only desk
has no :class:`~core.Operator`, no :class:`~core.ledger.ProviderReview`, no
:class:`~core.ledger.Versions`, no :class:`~core.ledger.Campaigns` and no
:class:`~tui.workforce.Workforce`. Code that changes the ledger asks
:func:`operator_for`, :func:`review_for`, :func:`versions_for`, :func:`campaigns_for`
or :func:`workforce_for` for them; the answer may be None, so the type checker makes
every caller handle "not here", and the refusal is said here, once, in one wording.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from textual.binding import Binding, BindingType

if TYPE_CHECKING:
    from core import Operator
    from core.ledger import Campaigns, ProviderReview, Versions
    from tui.desk import Desk
    from tui.workforce import Workforce

# Actions that change the ledger (through the operator, or by running workers), and
# what each would have done, as the refusal says it.
CHANGING_ACTIONS: dict[str, str] = {
    "submit": "submit files",
    "cancel": "cancel tasks",
    "retry": "retry tasks",
    "bulk": "change tasks in bulk",
    "add_worker": "add workers",
    "remove_worker": "stop workers",
    "restart_workers": "restart workers",
    "toggle_pause": "pause workers",
    "race": "run a claim race (it submits a task)",
    "resend": "resend provider requests",
    "mark_failed": "mark provider requests failed",
    "publish": "publish document versions",
    "reject": "reject document versions",
    "create_index": "create indexes",
    "activate_index": "activate indexes",
    "resume_index": "resume index campaigns",
    "cancel_campaign": "cancel index campaigns",
    "drop_index": "drop indexes",
}
# The changing actions that are a person's decision on provider requests: they need
# the desk's provider review, not its operator.
REVIEW_ACTIONS = frozenset({"resend", "mark_failed"})
# The changing actions that are the review desk's decisions on document versions:
# they need the desk's versions role.
VERSION_ACTIONS = frozenset({"publish", "reject"})
# The changing actions on vector indexes: they need the desk's campaigns role.
INDEX_ACTIONS = frozenset(
    {"create_index", "activate_index", "resume_index", "cancel_campaign", "drop_index"}
)
REFUSAL_TITLE = "read-only"


def refusal(action: str) -> str:
    """The one wording of a read-only refusal: ``read-only: cannot retry tasks``."""
    return f"read-only: cannot {CHANGING_ACTIONS[action]}"


def allows(desk: Desk, action: str) -> bool:
    """Whether ``action`` may run on ``desk``; what may not is hidden from the footer
    and the command palette, and refused when its key is pressed."""
    if action not in CHANGING_ACTIONS:
        return True
    if action in REVIEW_ACTIONS:
        return desk.provider_review is not None
    if action in VERSION_ACTIONS:
        return desk.versions is not None
    if action in INDEX_ACTIONS:
        return desk.campaigns is not None
    return desk.operator is not None


def refuse(desk: Desk, action: str) -> None:
    """Say that read-only mode does not allow ``action``."""
    desk.notify(refusal(action), severity="warning", title=REFUSAL_TITLE)


def operator_for(desk: Desk, action: str) -> Operator | None:
    """The desk's operator for ``action``, or None after refusing it (read-only)."""
    operator = desk.operator
    if operator is None:
        refuse(desk, action)
    return operator


def review_for(desk: Desk, action: str) -> ProviderReview | None:
    """The desk's provider review for ``action``, or None after refusing it
    (read-only)."""
    review = desk.provider_review
    if review is None:
        refuse(desk, action)
    return review


def versions_for(desk: Desk, action: str) -> Versions | None:
    """The desk's versions role (publish, reject) for ``action``, or None after
    refusing it (read-only)."""
    versions = desk.versions
    if versions is None:
        refuse(desk, action)
    return versions


def campaigns_for(desk: Desk, action: str) -> Campaigns | None:
    """The desk's index actions for ``action``, or None after refusing it (read-only)."""
    campaigns = desk.campaigns
    if campaigns is None:
        refuse(desk, action)
    return campaigns


def workforce_for(desk: Desk, action: str) -> Workforce | None:
    """The desk's in-process workers for ``action``, or None after refusing it
    (read-only)."""
    workforce = desk.workforce
    if workforce is None:
        refuse(desk, action)
    return workforce


def changing_keys(bindings: Iterable[BindingType]) -> dict[str, str]:
    """Each key among ``bindings`` that runs a ledger-changing action, with the action.

    Read-only mode hides those bindings, so their keys arrive unhandled; this is how
    a press is matched to its refusal, from the bindings themselves (no second table
    of keys to drift from them).
    """
    return {
        binding.key: binding.action
        for binding in Binding.make_bindings(bindings)
        if binding.action in CHANGING_ACTIONS
    }
