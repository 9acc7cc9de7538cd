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
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from sqlalchemy import Select, Table, and_, exists, func, or_, select, update
from sqlalchemy.engine import Connection

from core.errors import BadInput, Conflict
from core.ledger import rows
from core.ledger.actions import REASON_MAX, requeue_failed
from core.ledger.schema import DOCUMENTS, EVENTS, PROVIDER_REQUESTS, TASKS
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


def _waiting_on(conn: Connection, key: str, statuses: tuple[TaskStatus, ...]) -> list[Any]:
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
        """
        now = self.clock()
        values: dict[str, Any] = {
            "state": state.value,
            "detail": _detail(detail),
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
                for t in _waiting_on(conn, view.request_key, (TaskStatus.FAILED,)):
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


class ProviderReview:
    """A person's decisions on requests waiting for review (the operator's side: a
    read-only process has none). A decision is on the requests the named task waits
    on, and settles every task waiting on them (twins share requests), each with its
    own line in its history."""

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
        """A person decides the requests the task waits on (waiting for review, or
        failed) may be sent again; every failed task waiting on them is requeued at
        once. Recorded in each task's history."""
        check_identifier(actor, "actor")
        why = "resend approved after review" + (f": {neutralise(reason)}" if reason else "")
        why = why[:REASON_MAX]
        now = self.clock()
        requeue = functools.partial(requeue_failed, now=now, max_attempts=self.max_attempts)

        def tx(conn: Connection) -> TaskView:
            resolved, keys = _decided(conn, task_id, DECIDABLE)
            conn.execute(
                update(PROVIDER_REQUESTS)
                .where(R.request_key.in_(keys))
                .where(R.state.in_([s.value for s in DECIDABLE]))
                .values(state=RequestState.RESEND.value, detail=_detail(why), updated_at=now)
            )
            for task, said in _settled_tasks(conn, resolved, keys, why):
                try:
                    if task.status == TaskStatus.FAILED.value:
                        requeue(conn, task.id, actor=actor, reason=said)
                        continue
                except Conflict:
                    if task.id == resolved:
                        raise  # (a twin whose document moved on stays failed: noted)
                # Still active: its next attempt finds the request sendable.
                _note(conn, task, actor=actor, at=now, reason=said)
            view = rows.task_view(conn, resolved)
            assert view is not None
            return view

        return await self._tx.write(tx)

    async def mark_failed(self, task_id: str, *, actor: str, reason: str) -> TaskView:
        """A person decides the requests the task waits on failed: nothing is sent
        again, and every failed task waiting on them says ``provider_failed`` with the
        reason. Recorded in each task's history."""
        check_identifier(actor, "actor")
        if not reason or not reason.strip():
            raise BadInput("marking a request failed needs a reason (--reason)")
        why = f"marked failed after review: {neutralise(reason)}"[:REASON_MAX]
        now = self.clock()
        waiting = (ErrorCode.NEEDS_REVIEW.value, ErrorCode.OUTCOME_UNKNOWN.value)

        def tx(conn: Connection) -> TaskView:
            resolved, keys = _decided(conn, task_id, frozenset({RequestState.NEEDS_REVIEW}))
            conn.execute(
                update(PROVIDER_REQUESTS)
                .where(R.request_key.in_(keys))
                .where(R.state == RequestState.NEEDS_REVIEW.value)
                .values(state=RequestState.FAILED.value, detail=_detail(why), updated_at=now)
            )
            for task, said in _settled_tasks(conn, resolved, keys, why):
                row = conn.execute(
                    update(TASKS)
                    .where(T.id == task.id)
                    .where(T.status == TaskStatus.FAILED.value)
                    .where(T.error_code.in_(waiting))
                    .values(
                        previous_status=T.status,
                        error_code=ErrorCode.PROVIDER_FAILED.value,
                        error_detail=_detail(reason),
                        updated_at=now,
                        revision=next_revision(),
                    )
                    .returning(*TASK_COLUMNS, T.previous_status)
                ).first()
                if row is not None:
                    rows.record_events(conn, [row._mapping], actor=actor, at=now, reason=said)
                else:  # still active: its next attempt finds the request failed
                    _note(conn, task, actor=actor, at=now, reason=said)
            view = rows.task_view(conn, resolved)
            assert view is not None
            return view

        return await self._tx.write(tx)


@dataclass(frozen=True)
class Requeue:
    """Who requeues the tasks waiting on a request settled so that work can go on,
    with how many automatic attempts afresh."""

    max_attempts: int
    actor: str = RECONCILE_ACTOR


def _decided(
    conn: Connection, task_id: str, states: frozenset[RequestState]
) -> tuple[str, list[str]]:
    """The named task's full id and the requests in ``states`` it waits on: those it
    sent, and the one its current attempt failed on (sent by a twin, perhaps).

    Raises:
        Conflict: It waits on none.
    """
    resolved = rows.resolve_id(conn, TASKS, task_id, "task")
    task = rows.task_row(conn, resolved)
    linked = requests_waited_on(conn, resolved, task.attempt)
    keys = conn.execute(
        select(R.request_key)
        .where(or_(R.task_id == resolved, R.request_key.in_(linked)))
        .where(R.state.in_([s.value for s in states]))
        .order_by(R.created_at, R.request_key)
    ).scalars()
    found = list(keys)
    if not found:
        raise Conflict(f"task {resolved[:8]} has no provider request waiting for review")
    return resolved, found


def _settled_tasks(
    conn: Connection, resolved: str, keys: list[str], why: str
) -> list[tuple[Any, str]]:
    """The tasks a decision on ``keys`` settles, each with its history line: the named
    task first, then every other task waiting on them (failed on them, or the one
    that sent them, if still active), saying which task the decision was made on."""
    statuses = (TaskStatus.FAILED, TaskStatus.QUEUED, TaskStatus.RETRY_WAIT, TaskStatus.RUNNING)
    settled: list[tuple[Any, str]] = [(rows.task_row(conn, resolved), why)]
    seen = {resolved}
    also = f"{why} (decided on task {resolved[:8]}, which waits on the same request)"
    for key in keys:
        sender = conn.execute(select(R.task_id).where(R.request_key == key)).scalar()
        waiting = [t.id for t in _waiting_on(conn, key, statuses)]
        for other in [*waiting, sender]:
            if other is None or other in seen:
                continue
            seen.add(other)
            task = conn.execute(select(TASKS).where(T.id == other)).first()
            if task is not None and TaskStatus(task.status) in statuses:
                settled.append((task, also[:REASON_MAX]))
    return settled


def _go_on(conn: Connection, key: str, state: RequestState, requeue: Requeue, now: float) -> None:
    """The tasks waiting on ``key``, now settled as ``state``, go on (see settle)."""
    why = f"provider request {key[:12]} is {state.value}: the task goes on"
    for task in _waiting_on(conn, key, (TaskStatus.FAILED, TaskStatus.RETRY_WAIT)):
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
            conn.execute(
                update(TASKS)
                .where(T.id == task.id)
                .where(T.status == TaskStatus.RETRY_WAIT.value)
                .where(T.next_attempt_at > now)
                .values(next_attempt_at=now, updated_at=now, revision=next_revision())
            )
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


def _note(conn: Connection, task: Any, *, actor: str, at: float, reason: str) -> None:
    """A history line for a decision that does not change the task's status."""
    event = {**task._mapping, "previous_status": task.status}
    rows.record_events(conn, [event], actor=actor, at=at, reason=reason)
