"""The desk: what a screen may use of the dashboard it runs on.

Screens are typed against this Protocol, not against the app class, so no screen
imports the app (which imports the screens) and none can reach past the ledger's
public roles. :class:`~tui.app.IngestDeskApp` implements it; ``IngestDeskApp.desk``
makes the type checker prove that.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from textual.dom import DOMNode
    from textual.notifications import SeverityLevel

    from core import Operator, Reads, WorkerView
    from core.ledger import (
        CampaignProgress,
        Campaigns,
        Indexes,
        ProviderLedger,
        ProviderReview,
        Versions,
    )
    from core.states import RequestState
    from tui.mirror import LedgerMirror
    from tui.workforce import Workforce


class Desk(Protocol):
    """The dashboard as its screens see it.

    ``operator``, ``provider_review``, ``versions``, ``campaigns`` and ``workforce``
    are None in read-only mode: ask :func:`tui.policy.operator_for` / :func:`tui.policy.review_for`
    / :func:`tui.policy.versions_for` / :func:`tui.policy.campaigns_for` /
    :func:`tui.policy.workforce_for` for them,
    which say the refusal when they are missing.
    """

    @property
    def reads(self) -> Reads:
        """The ledger's read role: lists, counts, history, the revision feed."""
        ...

    @property
    def operator(self) -> Operator | None:
        """The ledger's operator role; None in read-only mode."""
        ...

    @property
    def providers(self) -> ProviderLedger:
        """The provider ledger's reads: a task's requests, counts, the review list."""
        ...

    @property
    def provider_review(self) -> ProviderReview | None:
        """A person's decisions on provider requests; None in read-only mode."""
        ...

    @property
    def versions(self) -> Versions | None:
        """Document versions' decisions (publish, reject); None in read-only mode."""
        ...

    @property
    def indexes(self) -> Indexes:
        """The ledger's vector indexes (reads)."""
        ...

    @property
    def index_progress(self) -> Callable[[str | int], Awaitable[CampaignProgress]]:
        """An index's campaign progress, by name or id (a read: read-only has it)."""
        ...

    @property
    def campaigns(self) -> Campaigns | None:
        """Index actions: create, resume, cancel, activate, drop; None in read-only
        mode."""
        ...

    @property
    def workforce(self) -> Workforce | None:
        """The in-process workers; None in read-only mode."""
        ...

    @property
    def actor(self) -> str:
        """Name recorded in the audit log for operator actions."""
        ...

    @property
    def clock(self) -> Callable[[], float]:
        """The clock for what is shown: ages, stalls, throughput (tests freeze it)."""
        ...

    @property
    def stall_after_s(self) -> float:
        """Seconds without progress after which a running task is shown stalled."""
        ...

    @property
    def window_rows(self) -> int:
        """Most rows the task table holds (the newest that match)."""
        ...

    @property
    def mirror(self) -> LedgerMirror:
        """Counts, running tasks and throughput, kept current by the poller."""
        ...

    @property
    def ledger_workers(self) -> Sequence[WorkerView]:
        """Workers the ledger has seen (read every few seconds by the poller)."""
        ...

    @property
    def provider_counts(self) -> Mapping[RequestState, int]:
        """Provider requests by state (read as often as the worker registry)."""
        ...

    def poll_soon(self) -> None:
        """Read the ledger's changes now (after an action) instead of at the next tick."""
        ...

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
    ) -> None:
        """Show a notification."""
        ...


def desk_of(node: DOMNode) -> Desk:
    """The desk ``node`` runs on (its app, seen only as a :class:`Desk`)."""
    return cast("Desk", node.app)
