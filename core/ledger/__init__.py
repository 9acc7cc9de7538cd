"""The ledger: tasks, documents, chunks and their history, on one SQLite file or a
PostgreSQL database, as a package of roles over one schema.

:class:`Ledger` opens and closes the database and hands the roles out:

* ``ledger.queue`` — the worker's side (:mod:`core.ledger.queue`): claim, heartbeat,
  progress, finish, fail, hand back, reap;
* ``ledger.operator`` — the operator's side (:mod:`core.ledger.actions`): upload,
  submit, cancel, retry, bulk actions;
* ``ledger.versions`` — document versions and the review desk's decisions
  (:mod:`core.ledger.versions`): replace, publish, reject, withdraw, delete;
* ``ledger.reads`` — lists, the revision feed, counts, history, chunks, search
  (:mod:`core.ledger.reads`);
* ``ledger.indexes`` — vector indexes and their vectors (:mod:`core.ledger.indexes`);
* ``ledger.campaigns`` — an operator's index actions: create (a re-embedding
  campaign), resume, cancel, activate, drop (:mod:`core.ledger.campaigns`);
* ``ledger.registry`` — workers seen in the ledger (:mod:`core.ledger.registry`);
* ``ledger.tokens`` — API tokens and their roles (:mod:`core.ledger.tokens`);
* ``ledger.idempotency`` — clients' idempotency keys (:mod:`core.ledger.idempotency`);
* ``ledger.providers`` — the provider ledger: evidence of every request to a remote
  embedding provider (:mod:`core.ledger.provider_requests`);
* ``ledger.provider_review`` — a person's decisions on the requests waiting for
  review (resend, mark failed).

Every state change is a conditional UPDATE whose WHERE clause *is* the transition
rule, so two writers racing on one row can never both win: the loser's statement
matches zero rows and the ledger answers ``None``/``False`` (claims, worker writes)
or raises :class:`~core.errors.Conflict` (operator actions). Reads return frozen
views (:mod:`core.ledger.views`), never ORM rows.
"""

from __future__ import annotations

import contextlib
import importlib
import time
import uuid
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from core.config import Settings
from core.errors import IngestDeskError

# Every role is imported when it is first used, and these names when first asked for:
# a read (`ingestdesk tasks`) imports the reads' modules only, not the operator's, the
# queue's, the campaigns' or the tokens' (with their tables' statements), and a worker
# not the reads' search and review modules (see tests/core/test_startup_imports.py).
if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from core.ledger.actions import Operator
    from core.ledger.campaigns import CampaignProgress, Campaigns
    from core.ledger.idempotency import IdempotencyKeys, Once
    from core.ledger.indexes import Indexes, IndexKey, IndexRevision, IndexView
    from core.ledger.provider_requests import Intent, IntentAnswer, ProviderLedger
    from core.ledger.provider_review import ProviderReview
    from core.ledger.queue import WorkQueue
    from core.ledger.reads import Reads
    from core.ledger.registry import WorkerRegistry
    from core.ledger.tokens import NewToken, TokenRegistry, TokenView
    from core.ledger.transactions import Transactions
    from core.ledger.versions import Versions
    from core.ledger.views import (
        BulkResult,
        ChunkRecord,
        ChunkView,
        Claim,
        DocumentView,
        FailureGroup,
        LedgerStats,
        ProviderRequestView,
        Reaped,
        ReusableResult,
        SearchHit,
        TaskDetail,
        TaskEventView,
        TaskPosition,
        TaskView,
        WorkerView,
    )
    from core.store import Store

_VIEWS = (
    "BulkResult",
    "ChunkRecord",
    "ChunkView",
    "Claim",
    "DocumentView",
    "FailureGroup",
    "LedgerStats",
    "ProviderRequestView",
    "Reaped",
    "ReusableResult",
    "SearchHit",
    "TaskDetail",
    "TaskEventView",
    "TaskPosition",
    "TaskView",
    "WorkerView",
)
# Where each re-exported name lives (`from core.ledger import X` imports its module).
_LAZY: dict[str, str] = {
    **dict.fromkeys(_VIEWS, "core.ledger.views"),
    "Operator": "core.ledger.actions",
    "CampaignProgress": "core.ledger.campaigns",
    "Campaigns": "core.ledger.campaigns",
    "IdempotencyKeys": "core.ledger.idempotency",
    "Once": "core.ledger.idempotency",
    "IndexKey": "core.ledger.indexes",
    "IndexRevision": "core.ledger.indexes",
    "IndexView": "core.ledger.indexes",
    "Indexes": "core.ledger.indexes",
    "Intent": "core.ledger.provider_requests",
    "IntentAnswer": "core.ledger.provider_requests",
    "ProviderLedger": "core.ledger.provider_requests",
    "ProviderReview": "core.ledger.provider_review",
    "WorkQueue": "core.ledger.queue",
    "Reads": "core.ledger.reads",
    "WorkerRegistry": "core.ledger.registry",
    "NewToken": "core.ledger.tokens",
    "TokenRegistry": "core.ledger.tokens",
    "TokenView": "core.ledger.tokens",
    "Versions": "core.ledger.versions",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'core.ledger' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def new_id() -> str:
    """A new task or document id: 32 lowercase hex characters."""
    return uuid.uuid4().hex


class Ledger:
    """One open ledger and its roles. Safe to use from many coroutines: each call
    of a role is its own transaction."""

    def __init__(
        self,
        transactions: Transactions,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
        ids: Callable[[], str] = new_id,
    ) -> None:
        self.transactions = transactions
        self.settings = settings
        self.clock = clock
        self._ids = ids
        # Opened here, not with the operator: Ledger.open checks it for every command.
        from core.store import open_store

        self._store: Store = open_store(settings)

    # Each role is built (and its module imported) when first used: a command uses a
    # few of them, and importing all of them was ~a third of a read's start-up.

    @cached_property
    def reads(self) -> Reads:
        from core.ledger.hybrid import Searcher
        from core.ledger.reads import Reads

        reads = Reads(self.transactions, review_below=self.settings.ocr_review_below)
        # Search answers from the active index's vectors (core.ledger.hybrid).
        reads.searcher = Searcher(self.transactions, self.indexes)
        return reads

    @cached_property
    def queue(self) -> WorkQueue:
        from core.ledger.queue import WorkQueue

        return WorkQueue(self.transactions, self.settings, self.clock)

    @cached_property
    def operator(self) -> Operator:
        from core.ledger.actions import Operator

        return Operator(
            self.transactions, self.settings, self._store, self.reads, self.clock, self._ids
        )

    @cached_property
    def versions(self) -> Versions:
        from core.ledger.versions import Versions

        return Versions(
            self.transactions,
            self.operator,
            self.clock,
            review_below=self.settings.ocr_review_below,
        )

    @cached_property
    def registry(self) -> WorkerRegistry:
        from core.ledger.registry import WorkerRegistry

        return WorkerRegistry(self.transactions, self.clock)

    @cached_property
    def indexes(self) -> Indexes:
        from core.ledger.indexes import Indexes

        return Indexes(self.transactions, self.clock)

    @cached_property
    def campaigns(self) -> Campaigns:
        from core.ledger.campaigns import Campaigns

        campaigns = Campaigns(self.transactions, self.settings, self.clock, self._ids)
        # A search process loads an index's vectors before it becomes the active one
        # (through whichever searcher the reads hold then).
        campaigns.before_activate = lambda index: self.reads.searcher.warm_before_activation(index)
        return campaigns

    @cached_property
    def tokens(self) -> TokenRegistry:
        from core.ledger.tokens import TokenRegistry

        return TokenRegistry(self.transactions, self.clock, self._ids)

    @cached_property
    def idempotency(self) -> IdempotencyKeys:
        from core.ledger.idempotency import IdempotencyKeys

        return IdempotencyKeys(self.transactions, self.clock)

    @cached_property
    def providers(self) -> ProviderLedger:
        from core.ledger.provider_requests import ProviderLedger

        return ProviderLedger(self.transactions, self.clock)

    @cached_property
    def provider_review(self) -> ProviderReview:
        from core.ledger.provider_review import ProviderReview

        return ProviderReview(
            self.transactions, self.clock, max_attempts=self.settings.max_attempts
        )

    @classmethod
    async def open(
        cls,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
        ids: Callable[[], str] = new_id,
        create: bool = True,
    ) -> Ledger:
        """Open (creating or upgrading) the ledger the settings point at.

        ``create=False`` refuses a SQLite ledger that does not exist yet instead of
        creating it (for commands that only read).
        """
        import asyncio

        from core.ledger.transactions import open_transactions

        transactions = open_transactions(settings, create=create)
        try:
            await transactions.prepare()
            ledger = cls(transactions, settings, clock=clock, ids=ids)
            # A bucket that is missing or refuses access is one line now, not a
            # failure per task later (a store merely unreachable is ridden out).
            await asyncio.to_thread(ledger._store.check)
        except BaseException:
            await transactions.close()
            raise
        return ledger

    async def close(self) -> None:
        # Search's query embedders first: a remote one holds an HTTP client. Reads
        # never asked for have none (and are not built just to be closed).
        reads: Reads | None = self.__dict__.get("reads")
        try:
            if reads is not None:
                await reads.searcher.close()
        finally:
            await self.transactions.close()

    async def take_back(self, created: list[str]) -> None:
        """Remove the objects a refused or interrupted request stored (``created``: new
        to the store, not found there) that no document references, so it leaves no
        orphan behind. Objects are content-addressed and shared: only objects this
        request wrote are candidates, and the check and the removal run in one write
        transaction, whose write lock keeps another upload of the same bytes from
        committing its reference in between. (One that found the object stored just
        before, and commits just after, would meet object_read_error, whose advice,
        upload again, restores it: the window is this one transaction, only for bytes
        written moments ago.) Best effort: an object left behind is harmless (``ingestdesk
        prune`` removes it later), and the refusal itself is what the caller must see."""
        if not created:
            return
        from core.ledger.reads import unreferenced_objects

        store = self.operator.store

        def tx(conn: Connection) -> None:
            for key in unreferenced_objects(conn, created):
                store.remove(key)

        with contextlib.suppress(IngestDeskError, OSError):
            await self.transactions.write(tx)

    async def __aenter__(self) -> Ledger:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def schema_revision(self) -> str | None:
        """The schema revision the database is at now (another process may have
        upgraded it since this one opened)."""
        from core.ledger.migrate import current_revision

        return await self.transactions.read(current_revision)

    async def task_detail(self, task: TaskView, *, history: bool = True) -> TaskDetail:
        """``task`` in full: whether it is stalled, its provider requests and (with
        ``history``) its history; what ``task ID`` and the API's task read show."""
        from core.ledger.views import TaskDetail

        return TaskDetail(
            task,
            task.is_stalled(self.clock(), self.settings.stall_after_s),
            await self.providers.for_task(task.task_id),
            await self.reads.task_history(task.task_id) if history else None,
        )

    @property
    def backend(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.transactions.backend


__all__ = [
    "BulkResult",
    "CampaignProgress",
    "Campaigns",
    "ChunkRecord",
    "ChunkView",
    "Claim",
    "DocumentView",
    "FailureGroup",
    "IndexKey",
    "IndexRevision",
    "IndexView",
    "Indexes",
    "Intent",
    "IntentAnswer",
    "Ledger",
    "LedgerStats",
    "NewToken",
    "Once",
    "Operator",
    "ProviderLedger",
    "ProviderRequestView",
    "ProviderReview",
    "Reads",
    "Reaped",
    "ReusableResult",
    "SearchHit",
    "TaskDetail",
    "TaskEventView",
    "TaskPosition",
    "TaskView",
    "TokenRegistry",
    "TokenView",
    "Versions",
    "WorkQueue",
    "WorkerRegistry",
    "WorkerView",
    "new_id",
]
