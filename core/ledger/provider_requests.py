"""The provider ledger: evidence of every request to a remote embedding provider.

A request is known by its request key (the input, provider, model and options; see
:func:`core.ingest.providers.request_key`). Its row is written *before* the call, as
``unknown``, so whatever happens next — a crash, a timeout, a lost reply — the ledger
knows a call may have gone out. Only a verified reply (``done``), a look-up that
found it (``recovered``), a provable non-send or an answer from the provider
(``failed``) or a person (``resend``) moves it on. ``unknown`` is never resolved by
sending again: :mod:`core.ingest.reconcile` looks it up.

While the task attempt that wrote the intent still runs, the request is *in flight*
and nobody else looks it up or sends it; once that attempt ended (failed, handed
back, reaped), an ``unknown`` request is due for reconciling.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import Select, Table, exists, func, or_, select, update
from sqlalchemy.engine import Connection

from core.errors import BadInput, Conflict
from core.ledger import rows
from core.ledger.actions import REASON_MAX, requeue_failed
from core.ledger.schema import DOCUMENTS, PROVIDER_REQUESTS, TASKS
from core.ledger.statements import HELD, TASK_COLUMNS, held_params, next_revision
from core.ledger.transactions import Transactions
from core.ledger.views import Claim, ProviderRequestView, TaskView
from core.safe_text import check_identifier, neutralise
from core.states import (
    REQUEST_RESULT_STATES,
    REQUEST_SENDABLE_STATES,
    ErrorCode,
    RequestState,
    TaskStatus,
)

DETAIL_MAX = 500  # characters of a request's last answer kept
DUE_LIMIT = 100  # unknown requests one reconcile pass looks up at most

R = PROVIDER_REQUESTS.c


class Intent(StrEnum):
    """What the worker may do with a request after recording its intent."""

    SEND = "send"  # recorded as unknown: call the provider now
    USE = "use"  # a verified result is stored: use it, do not call
    IN_FLIGHT = "in_flight"  # another running attempt sent it: wait for that one
    UNKNOWN = "unknown"  # sent earlier, outcome unknown: look it up first
    NEEDS_REVIEW = "needs_review"  # a person must decide
    FAILED = "failed"  # the provider (or a person) said it failed
    LOST = "lost"  # this worker no longer holds its task: stop


@dataclass(frozen=True)
class IntentAnswer:
    intent: Intent
    request: ProviderRequestView | None = None


def _in_flight() -> Any:
    """The request's sending attempt is still running."""
    return exists(
        select(TASKS.c.id)
        .where(TASKS.c.id == R.task_id)
        .where(TASKS.c.attempt == R.attempt)
        .where(TASKS.c.status == TaskStatus.RUNNING.value)
    )


def _detail(text: str | None) -> str | None:
    return None if text is None else neutralise(text)[:DETAIL_MAX]


class ProviderLedger:
    """Requests to remote providers: the worker's intents and replies, reconcile's
    look-ups, and what is shown of them (the review list, a task's requests)."""

    def __init__(self, transactions: Transactions, clock: Callable[[], float]) -> None:
        self._tx = transactions
        self.clock = clock
        # Each backend's INSERT ... ON CONFLICT, imported for the one in use: the
        # PostgreSQL dialect (and asyncpg's) costs a SQLite worker ~35 ms of start-up.
        self._insert: Callable[[Table], Any]
        if transactions.backend == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as postgresql_insert

            self._insert = postgresql_insert
        else:
            from sqlalchemy.dialects.sqlite import insert as sqlite_insert

            self._insert = sqlite_insert

    # ------------------------------------------------------------ the worker

    async def intend(
        self,
        claim: Claim,
        request_key: str,
        *,
        provider: str,
        model: str,
        endpoint: str | None,
        texts: int,
    ) -> IntentAnswer:
        """Record the intent to send ``request_key`` for the held attempt, unless the
        ledger already knows the request: then say what to do instead.

        One transaction: the insert does nothing if the key exists (writers are
        serialised, so two workers can never both be told to send).
        """
        now = self.clock()
        fresh = (
            self._insert(PROVIDER_REQUESTS)
            .values(
                request_key=request_key,
                provider=provider,
                model=model,
                endpoint=endpoint,
                task_id=claim.task_id,
                attempt=claim.attempt,
                state=RequestState.UNKNOWN.value,
                texts=texts,
                sends=1,
                lookups=0,
                created_at=now,
                updated_at=now,
            )
            .on_conflict_do_nothing(index_elements=["request_key"])
        )
        again = (
            update(PROVIDER_REQUESTS)
            .where(R.request_key == request_key)
            .where(R.state.in_([s.value for s in REQUEST_SENDABLE_STATES]))
            .values(
                state=RequestState.UNKNOWN.value,
                task_id=claim.task_id,
                attempt=claim.attempt,
                endpoint=endpoint,
                sends=R.sends + 1,
                next_lookup_at=None,
                updated_at=now,
            )
        )

        def tx(conn: Connection) -> IntentAnswer:
            if conn.execute(select(TASKS.c.id).where(HELD), held_params(claim)).first() is None:
                return IntentAnswer(Intent.LOST)
            if conn.execute(fresh).rowcount:
                return IntentAnswer(Intent.SEND)
            if conn.execute(again).rowcount:
                return IntentAnswer(Intent.SEND)
            row = conn.execute(
                select(PROVIDER_REQUESTS, _in_flight().label("in_flight")).where(
                    R.request_key == request_key
                )
            ).one()
            view = ProviderRequestView.from_row(row)
            if view.state in REQUEST_RESULT_STATES:
                return IntentAnswer(Intent.USE, view)
            if view.state is RequestState.NEEDS_REVIEW:
                return IntentAnswer(Intent.NEEDS_REVIEW, view)
            if view.state is RequestState.FAILED:
                return IntentAnswer(Intent.FAILED, view)
            mine = (view.task_id, view.attempt) == (claim.task_id, claim.attempt)
            if row.in_flight and not mine:
                return IntentAnswer(Intent.IN_FLIGHT, view)
            return IntentAnswer(Intent.UNKNOWN, view)

        return await self._tx.write(tx)

    async def settle(
        self,
        request_key: str,
        state: RequestState,
        *,
        detail: str | None = None,
        request_id: str | None = None,
        result_key: str | None = None,
        result_sha256: str | None = None,
        dimensions: int | None = None,
        usage: Mapping[str, int] | None = None,
        looked_up: bool = False,
        next_lookup_at: float | None = None,
        expect: frozenset[RequestState] = frozenset({RequestState.UNKNOWN}),
    ) -> bool:
        """Move a request on from one of the ``expect`` states (evidence is recorded
        whoever holds the task now: the provider did what it did). False if the
        request was not in one of them (someone else settled it first)."""
        values: dict[str, Any] = {
            "state": state.value,
            "detail": _detail(detail),
            "next_lookup_at": next_lookup_at,
            "updated_at": self.clock(),
        }
        if request_id is not None:
            values["request_id"] = request_id[:128]
        if result_key is not None:
            values |= {
                "result_key": result_key,
                "result_sha256": result_sha256,
                "dimensions": dimensions,
                "usage": json.dumps(dict(usage or {}), sort_keys=True),
            }
        if looked_up:
            values["lookups"] = R.lookups + 1
        statement = (
            update(PROVIDER_REQUESTS)
            .where(R.request_key == request_key)
            .where(R.state.in_([s.value for s in expect]))
            .values(**values)
        )
        return await self._tx.write(lambda conn: bool(conn.execute(statement).rowcount))

    # ------------------------------------------------------------- reconcile

    async def due(
        self, *, endpoint: str | None = None, limit: int = DUE_LIMIT, now: float | None = None
    ) -> list[ProviderRequestView]:
        """Unknown requests no running attempt is sending, whose next look-up is due,
        oldest first (of one endpoint, if given)."""
        at = self.clock() if now is None else now
        query = (
            select(PROVIDER_REQUESTS)
            .where(R.state == RequestState.UNKNOWN.value)
            .where(or_(R.next_lookup_at.is_(None), R.next_lookup_at <= at))
            .where(~_in_flight())
            .order_by(R.created_at, R.request_key)
            .limit(limit)
        )
        if endpoint is not None:
            query = query.where(R.endpoint == endpoint)
        return await self._tx.read(
            lambda conn: [ProviderRequestView.from_row(r) for r in conn.execute(query)]
        )

    # ----------------------------------------------------------------- reads

    async def get(self, request_key: str) -> ProviderRequestView | None:
        query = select(PROVIDER_REQUESTS).where(R.request_key == request_key)

        def tx(conn: Connection) -> ProviderRequestView | None:
            found = conn.execute(query).first()
            return None if found is None else ProviderRequestView.from_row(found)

        return await self._tx.read(tx)

    async def for_task(self, task_id: str) -> list[ProviderRequestView]:
        """The requests a task has sent, oldest first."""
        query = select(PROVIDER_REQUESTS).where(R.task_id == task_id).order_by(R.created_at)
        return await self._tx.read(
            lambda conn: [ProviderRequestView.from_row(r) for r in conn.execute(query)]
        )

    async def counts(self) -> dict[RequestState, int]:
        """Requests by state (every state present, zero if none)."""
        query = select(R.state, func.count()).group_by(R.state)

        def tx(conn: Connection) -> dict[RequestState, int]:
            found = {RequestState(s): int(n) for s, n in conn.execute(query)}
            return {s: found.get(s, 0) for s in RequestState}

        return await self._tx.read(tx)

    async def awaiting_review(self) -> list[ProviderRequestView]:
        """Requests waiting for a person, oldest first, with their task and document."""
        return await self._tx.read(
            lambda conn: [
                ProviderRequestView.from_row(r)
                for r in conn.execute(
                    _with_task().where(R.state == RequestState.NEEDS_REVIEW.value)
                )
            ]
        )


class ProviderReview:
    """A person's decisions on requests waiting for review (the operator's side: a
    read-only process has none). Each decision goes into the task's history."""

    def __init__(
        self,
        transactions: Transactions,
        clock: Callable[[], float],
        *,
        max_attempts: int,
    ) -> None:
        self._tx = transactions
        self.clock = clock
        self.max_attempts = max_attempts

    async def resend(self, task_id: str, *, actor: str, reason: str | None = None) -> TaskView:
        """A person decides the task's requests waiting for review (or failed) may be
        sent again; a failed task is requeued at once. Recorded in its history."""
        check_identifier(actor, "actor")
        why = "resend approved after review" + (f": {neutralise(reason)}" if reason else "")
        why = why[:REASON_MAX]
        now = self.clock()

        def tx(conn: Connection) -> TaskView:
            resolved = rows.resolve_id(conn, TASKS, task_id, "task")
            decided = conn.execute(
                update(PROVIDER_REQUESTS)
                .where(R.task_id == resolved)
                .where(R.state.in_([RequestState.NEEDS_REVIEW.value, RequestState.FAILED.value]))
                .values(state=RequestState.RESEND.value, detail=_detail(why), updated_at=now)
            ).rowcount
            if not decided:
                raise Conflict(f"task {resolved[:8]} has no provider request waiting for review")
            task = rows.task_row(conn, resolved)
            if task.status == TaskStatus.FAILED.value:
                return requeue_failed(
                    conn,
                    resolved,
                    now=now,
                    max_attempts=self.max_attempts,
                    actor=actor,
                    reason=why,
                )
            # Still active: its next attempt finds the request sendable.
            _note(conn, task, actor=actor, at=now, reason=why)
            view = rows.task_view(conn, resolved)
            assert view is not None
            return view

        return await self._tx.write(tx)

    async def mark_failed(self, task_id: str, *, actor: str, reason: str) -> TaskView:
        """A person decides the task's requests waiting for review failed: nothing is
        sent again, the task's failure says ``provider_failed`` with the reason."""
        check_identifier(actor, "actor")
        if not reason or not reason.strip():
            raise BadInput("marking a request failed needs a reason (--reason)")
        why = f"marked failed after review: {neutralise(reason)}"[:REASON_MAX]
        now = self.clock()

        def tx(conn: Connection) -> TaskView:
            resolved = rows.resolve_id(conn, TASKS, task_id, "task")
            decided = conn.execute(
                update(PROVIDER_REQUESTS)
                .where(R.task_id == resolved)
                .where(R.state == RequestState.NEEDS_REVIEW.value)
                .values(state=RequestState.FAILED.value, detail=_detail(why), updated_at=now)
            ).rowcount
            if not decided:
                raise Conflict(f"task {resolved[:8]} has no provider request waiting for review")
            row = conn.execute(
                update(TASKS)
                .where(TASKS.c.id == resolved)
                .where(TASKS.c.status == TaskStatus.FAILED.value)
                .where(TASKS.c.error_code == ErrorCode.NEEDS_REVIEW.value)
                .values(
                    previous_status=TASKS.c.status,
                    error_code=ErrorCode.PROVIDER_FAILED.value,
                    error_detail=_detail(reason),
                    updated_at=now,
                    revision=next_revision(),
                )
                .returning(*TASK_COLUMNS, TASKS.c.previous_status)
            ).first()
            if row is not None:
                rows.record_events(conn, [row._mapping], actor=actor, at=now, reason=why)
            else:  # still active: its next attempt finds the request failed
                _note(conn, rows.task_row(conn, resolved), actor=actor, at=now, reason=why)
            view = rows.task_view(conn, resolved)
            assert view is not None
            return view

        return await self._tx.write(tx)


def _with_task() -> Select[Any]:
    return (
        select(
            PROVIDER_REQUESTS,
            TASKS.c.status.label("task_status"),
            TASKS.c.document_id.label("document_id"),
            DOCUMENTS.c.filename.label("document_name"),
        )
        .select_from(
            PROVIDER_REQUESTS.outerjoin(TASKS, TASKS.c.id == R.task_id).outerjoin(
                DOCUMENTS, DOCUMENTS.c.id == TASKS.c.document_id
            )
        )
        .order_by(R.updated_at, R.request_key)
    )


def _note(conn: Connection, task: Any, *, actor: str, at: float, reason: str) -> None:
    """A history line for a decision that does not change the task's status."""
    rows.record_events(
        conn,
        [{**task._mapping, "previous_status": task.status}],
        actor=actor,
        at=at,
        reason=reason,
    )
