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
back, reaped) or its lease ran out (its worker is presumed dead, whether or not a
worker has reaped the task yet), an ``unknown`` request is due for reconciling.

The row names only the last task that sent it, but several tasks can wait on one
request (twins make the same request keys). A task failing on a request names it in
its history line (:func:`waiting_reason`): that links every waiting task to it, so
the review lists each, a decision settles all, and reconcile's recovery requeues them.
A task that met a request another running attempt is sending waits for it instead
(handed back with its key, see :meth:`core.ledger.WorkQueue.hand_back`): it is due
again the moment the request is settled or that attempt ends.

A person's decisions on requests waiting for review are in
:mod:`core.ledger.provider_review`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from sqlalchemy import Select, Table, and_, exists, func, or_, select, update
from sqlalchemy.engine import Connection

from core.errors import Conflict
from core.ledger import rows
from core.ledger.requeue import requeue_failed
from core.ledger.schema import DOCUMENTS, EVENTS, PROVIDER_REQUESTS, TASKS
from core.ledger.statements import HELD, held_params, next_revision, wake_waiters
from core.ledger.transactions import Transactions
from core.ledger.views import Claim, ProviderRequestView
from core.safe_text import neutralise
from core.states import (
    REQUEST_RESULT_STATES,
    REQUEST_SENDABLE_STATES,
    ErrorCode,
    RequestState,
    TaskStatus,
)

DETAIL_MAX = 500  # characters of a request's last answer kept
DUE_LIMIT = 100  # unknown requests one reconcile pass looks up at most
RECONCILE_ACTOR = "reconcile"  # who requeues a task whose request reconcile settled
WAITS_PREFIX = "waits for provider request "  # a failure's history line: see waiting_reason

R = PROVIDER_REQUESTS.c
T = TASKS.c
# The request states a person decides on, and those in which work can go on.
DECIDABLE = frozenset({RequestState.NEEDS_REVIEW, RequestState.FAILED})
GOES_ON = REQUEST_RESULT_STATES | REQUEST_SENDABLE_STATES
# What a task that failed on a request (and is waiting on it) says.
WAITING_CODES = (ErrorCode.NEEDS_REVIEW, ErrorCode.PROVIDER_FAILED, ErrorCode.OUTCOME_UNKNOWN)


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
    # SEND for a request sent before (it was not_sent, or a person allowed a resend):
    # the provider may hold a failed execution of it, which this send is meant to
    # run again (see RemoteProvider.submit's retry_failed).
    again: bool = False


def _in_flight(now: float) -> Any:
    """The request's sending attempt is still running and its lease has not run out.
    A worker whose lease expired is presumed dead (any worker may reap its task): its
    request is due for reconciling now, not once a worker got round to reaping."""
    return exists(
        select(T.id)
        .where(T.id == R.task_id)
        .where(T.attempt == R.attempt)
        .where(T.status == TaskStatus.RUNNING.value)
        .where(T.lease_expires_at >= now)
    )


def request_in_flight(conn: Connection, request_key: str, now: float) -> bool:
    """Whether ``request_key`` is unknown and the attempt that sent it is still
    sending it (what :meth:`ProviderLedger.intend` answers ``IN_FLIGHT`` for)."""
    query = (
        select(R.request_key)
        .where(R.request_key == request_key)
        .where(R.state == RequestState.UNKNOWN.value)
        .where(_in_flight(now))
    )
    return conn.execute(query).first() is not None


def make_due(conn: Connection, task_id: str, now: float) -> None:
    """A task waiting for its next automatic attempt may start it ``now``."""
    conn.execute(
        update(TASKS)
        .where(T.id == task_id)
        .where(T.status == TaskStatus.RETRY_WAIT.value)
        .where(T.next_attempt_at > now)
        .values(next_attempt_at=now, updated_at=now, revision=next_revision())
    )


def waiting_reason(request_key: str) -> str:
    """The history line of a task's failure on ``request_key``: it links the task to
    the request (see the module docstring)."""
    return WAITS_PREFIX + request_key


def _linked(key: str) -> Any:
    """Tasks whose current attempt failed waiting on request ``key``."""
    return exists(
        select(EVENTS.c.id)
        .where(EVENTS.c.task_id == T.id)
        .where(EVENTS.c.attempt == T.attempt)
        .where(EVENTS.c.reason == waiting_reason(key))
    )


def waiting_on(conn: Connection, key: str, statuses: tuple[TaskStatus, ...]) -> list[Any]:
    """Tasks in ``statuses`` waiting on ``key``: failed (or failing) on it, or the one
    that sent it, at the attempt that sent it; with their document's name."""
    row = conn.execute(select(R.task_id, R.attempt).where(R.request_key == key)).first()
    sender = and_(T.id == row.task_id, T.attempt == row.attempt) if row else None
    query = (
        rows.tasks_with_names()
        .where(T.status.in_([s.value for s in statuses]))
        .where(T.error_code.in_([c.value for c in WAITING_CODES]))
        .where(_linked(key) if sender is None else or_(_linked(key), sender))
        .order_by(T.created_at, T.id)
    )
    return list(conn.execute(query))


def requests_waited_on(conn: Connection, task_id: str, attempt: int) -> set[str]:
    """The requests ``task_id`` failed waiting on in attempt ``attempt``."""
    reasons = conn.execute(
        select(EVENTS.c.reason)
        .where(EVENTS.c.task_id == task_id)
        .where(EVENTS.c.attempt == attempt)
        .where(EVENTS.c.reason.startswith(WAITS_PREFIX, autoescape=True))
    ).scalars()
    return {r.removeprefix(WAITS_PREFIX) for r in reasons}


def request_goes_on(conn: Connection, request_key: str) -> bool:
    """Whether work waiting on the request can go on: its result is stored, or it
    may be sent."""
    state = conn.execute(select(R.state).where(R.request_key == request_key)).scalar()
    return state is not None and RequestState(state) in GOES_ON


def detail_of(text: str | None) -> str | None:
    return None if text is None else neutralise(text)[:DETAIL_MAX]


@dataclass(frozen=True)
class NotDue:
    """Unknown requests a reconcile pass leaves alone now, and why."""

    in_flight: int  # the attempt that sent each still runs (its lease too)
    backing_off: int  # looked up before; the next look-up is not due yet
    next_lookup_at: float | None  # the soonest of those next look-ups


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
            if conn.execute(select(T.id).where(HELD), held_params(claim)).first() is None:
                return IntentAnswer(Intent.LOST)
            if conn.execute(fresh).rowcount:
                return IntentAnswer(Intent.SEND)
            if conn.execute(again).rowcount:
                return IntentAnswer(Intent.SEND, again=True)
            row = conn.execute(
                select(PROVIDER_REQUESTS, _in_flight(now).label("in_flight")).where(
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
        requeue: Requeue | None = None,
    ) -> bool:
        """Move a request on from one of the ``expect`` states (evidence is recorded
        whoever holds the task now: the provider did what it did). False if the
        request was not in one of them (someone else settled it first).

        With ``requeue`` (reconcile's settling), a request that moves to a state in
        which work can go on takes the tasks waiting on it along, in the same
        transaction: a task that failed outcome_unknown on it (its automatic attempts
        used up while the request was unknown) is requeued with a fresh budget, one
        waiting for its next automatic attempt is due at once. Only progress earns a
        requeue (a request that was unknown is settled), so it cannot loop.

        A request settled (moved to any state but unknown) makes the tasks that wait
        for it while another attempt sent it due at once, with or without ``requeue``.
        """
        now = self.clock()
        values: dict[str, Any] = {
            "state": state.value,
            "detail": detail_of(detail),
            "next_lookup_at": next_lookup_at,
            "updated_at": now,
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

        def tx(conn: Connection) -> bool:
            if not conn.execute(statement).rowcount:
                return False
            if state is not RequestState.UNKNOWN:
                # Settled: the tasks waiting for it while another attempt sent it go on
                # now (one still unknown is waited for until its attempt ends).
                wake_waiters(conn, request_key, now)
            if requeue is not None and state in GOES_ON:
                _go_on(conn, request_key, state, requeue, now)
            return True

        return await self._tx.write(tx)

    # ------------------------------------------------------------- reconcile

    async def due(
        self, *, endpoint: str | None = None, limit: int = DUE_LIMIT, now: float | None = None
    ) -> list[ProviderRequestView]:
        """Unknown requests no running attempt is sending, whose next look-up is due
        by ``now`` (default: the clock), oldest first (of one endpoint, if given)."""
        clock = self.clock()
        at = clock if now is None else now
        query = (
            select(PROVIDER_REQUESTS)
            .where(R.state == RequestState.UNKNOWN.value)
            .where(or_(R.next_lookup_at.is_(None), R.next_lookup_at <= at))
            .where(~_in_flight(clock))
            .order_by(R.created_at, R.request_key)
            .limit(limit)
        )
        if endpoint is not None:
            query = query.where(R.endpoint == endpoint)
        return await self._tx.read(
            lambda conn: [ProviderRequestView.from_row(r) for r in conn.execute(query)]
        )

    async def not_due(self) -> NotDue:
        """The unknown requests :meth:`due` leaves out now: in flight, or waiting for
        their next look-up (what a pass that finds nothing due says)."""
        now = self.clock()
        flying = _in_flight(now)
        unknown = select(func.count()).where(R.state == RequestState.UNKNOWN.value)
        later = (
            select(func.count(), func.min(R.next_lookup_at))
            .where(R.state == RequestState.UNKNOWN.value)
            .where(R.next_lookup_at > now)
            .where(~flying)
        )

        def tx(conn: Connection) -> NotDue:
            in_flight = int(conn.execute(unknown.where(flying)).scalar_one())
            backing_off, soonest = conn.execute(later).one()
            return NotDue(in_flight, int(backing_off), soonest)

        return await self._tx.read(tx)

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
        """Requests waiting for a person, oldest first, with their task and document:
        one entry for the task that sent each, then one for every other task that
        failed waiting on it (either may be named in a decision)."""

        def tx(conn: Connection) -> list[ProviderRequestView]:
            found: list[ProviderRequestView] = []
            query = _with_task().where(R.state == RequestState.NEEDS_REVIEW.value)
            for r in conn.execute(query).all():
                view = ProviderRequestView.from_row(r)
                found.append(view)
                for t in waiting_on(conn, view.request_key, (TaskStatus.FAILED,)):
                    if t.id != view.task_id:
                        found.append(
                            replace(
                                view,
                                task_id=t.id,
                                task_status=TaskStatus(t.status),
                                document_id=t.document_id,
                                document_name=t.filename,
                            )
                        )
            return found

        return await self._tx.read(tx)


@dataclass(frozen=True)
class Requeue:
    """Who requeues the tasks waiting on a request settled so that work can go on,
    with how many automatic attempts afresh."""

    max_attempts: int
    actor: str = RECONCILE_ACTOR


def _go_on(conn: Connection, key: str, state: RequestState, requeue: Requeue, now: float) -> None:
    """The tasks waiting on ``key``, now settled as ``state``, go on (see settle)."""
    why = f"provider request {key[:12]} is {state.value}: the task goes on"
    for task in waiting_on(conn, key, (TaskStatus.FAILED, TaskStatus.RETRY_WAIT)):
        if task.error_code != ErrorCode.OUTCOME_UNKNOWN.value:
            continue  # a person's decision (review) or the provider's answer: not ours
        blocked = conn.execute(
            select(R.request_key)
            .where(R.task_id == task.id)
            .where(R.request_key != key)
            .where(R.state.in_([s.value for s in (RequestState.UNKNOWN, *DECIDABLE)]))
            .limit(1)
        ).first()
        if blocked is not None:
            continue  # another of its requests still keeps it from going on
        if task.status == TaskStatus.RETRY_WAIT.value:
            make_due(conn, task.id, now)
            continue
        with contextlib.suppress(Conflict):  # its document moved on: nothing to requeue
            requeue_failed(
                conn,
                task.id,
                now=now,
                max_attempts=requeue.max_attempts,
                actor=requeue.actor,
                reason=why,
            )


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
