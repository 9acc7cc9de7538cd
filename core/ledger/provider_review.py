"""A person's decisions on provider requests waiting for review: resend, or mark
failed. A decision is on the requests the named task waits on and settles every task
waiting on them (twins share requests; see :mod:`core.ledger.provider_requests`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.engine import Connection

from core.errors import BadInput, Conflict
from core.ledger import rows
from core.ledger.actions import REASON_MAX
from core.ledger.provider_requests import (
    DECIDABLE,
    R,
    T,
    detail_of,
    make_due,
    requests_waited_on,
    waiting_on,
)
from core.ledger.requeue import requeue_failed
from core.ledger.schema import PROVIDER_REQUESTS, TASKS
from core.ledger.statements import TASK_COLUMNS, next_revision
from core.ledger.transactions import Transactions
from core.ledger.views import TaskView
from core.safe_text import check_identifier, neutralise
from core.states import ErrorCode, RequestState, TaskStatus


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
                .values(state=RequestState.RESEND.value, detail=detail_of(why), updated_at=now)
            )
            for task, said in _settled_tasks(conn, resolved, keys, why):
                try:
                    if task.status == TaskStatus.FAILED.value:
                        requeue(conn, task.id, actor=actor, reason=said)
                        continue
                except Conflict:
                    if task.id == resolved:
                        raise  # (a twin whose document moved on stays failed: noted)
                # Still active: its next attempt finds the request sendable, and one
                # waiting for its automatic retry may make it now.
                make_due(conn, task.id, now)
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
                .values(state=RequestState.FAILED.value, detail=detail_of(why), updated_at=now)
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
                        error_detail=detail_of(reason),
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
        waiting = [t.id for t in waiting_on(conn, key, statuses)]
        for other in [*waiting, sender]:
            if other is None or other in seen:
                continue
            seen.add(other)
            task = conn.execute(select(TASKS).where(T.id == other)).first()
            if task is not None and TaskStatus(task.status) in statuses:
                settled.append((task, also[:REASON_MAX]))
    return settled


def _note(conn: Connection, task: Any, *, actor: str, at: float, reason: str) -> None:
    """A history line for a decision that does not change the task's status."""
    event = {**task._mapping, "previous_status": task.status}
    rows.record_events(conn, [event], actor=actor, at=at, reason=reason)
