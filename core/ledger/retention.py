"""Pruning finished tasks and their history, a bounded batch at a time.

A ledger that keeps every task reaches a million of them; ``ingestdesk prune
--tasks-older-than DAYS`` deletes the ingestion tasks that finished (succeeded or
cancelled; failed ones only when asked, since a failure is what an operator still
has to act on) before the cutoff, with their history rows. Documents, their versions
and chunks stay: the knowledge base is not the task log. Re-embedding tasks (an
index's campaign) stay too: a campaign's progress is counted from them. A result of
a pruned task is no longer found for reuse by its processing key (a later upload of
the same bytes is processed again).

Workers keep claiming meanwhile, so no transaction holds the write lock long: each
batch is one write transaction that picks the next tasks (in created order, after
the last one seen, through ix_tasks_status_created), deletes them (the DELETE
repeats the condition, so a task retried since it was picked stays) and their
history, and measures itself; the batch grows while a transaction takes less than
half of BATCH_TARGET_S and halves when it takes more. Between batches the pruner
waits as long as the last one held the lock, so writers get at least half of it.
The task counters follow every delete (their triggers, core.ledger.counters).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import String, bindparam, delete, func, literal_column, select, tuple_
from sqlalchemy.engine import Connection

from core.ledger.schema import EVENTS, TASKS
from core.ledger.transactions import Transactions
from core.states import TaskStatus

BATCH_TARGET_S = 0.020  # seconds a batch's transaction should hold the write lock
BATCH_FIRST = 200  # tasks in the first batch
BATCH_MIN = 10  # tasks a batch never shrinks below
BATCH_MAX = 5_000  # tasks a batch never grows past
PAUSE_MIN_S = 0.002  # seconds between batches, at least

KEPT_FAILED = (TaskStatus.SUCCEEDED, TaskStatus.CANCELLED)
WITH_FAILED = (TaskStatus.SUCCEEDED, TaskStatus.CANCELLED, TaskStatus.FAILED)


@dataclass(frozen=True)
class TaskPrune:
    """What a task prune removed (or, in a dry run, would remove)."""

    tasks: int
    events: int
    batches: int
    longest_batch_s: float  # the longest a batch's statements held the write lock
    dry_run: bool


def _spelled(status: TaskStatus) -> Any:
    return literal_column(f"'{status.value}'", String)


def _old(status: TaskStatus, cutoff: float) -> list[Any]:
    # The status spelled literally (SQLite's partial index, see filter_sql.status_is);
    # created before the cutoff is implied by finished before it, and lets the
    # index's range do the work.
    return [
        TASKS.c.status == _spelled(status),
        TASKS.c.created_at < cutoff,
        TASKS.c.updated_at < cutoff,
        TASKS.c.index_id.is_(None),
    ]


def _count(conn: Connection, statuses: tuple[TaskStatus, ...], cutoff: float) -> tuple[int, int]:
    tasks = events = 0
    for status in statuses:
        old = select(TASKS.c.id).where(*_old(status, cutoff))
        tasks += int(conn.execute(select(func.count()).select_from(old.subquery())).scalar_one())
        events += int(
            conn.execute(
                select(func.count()).where(EVENTS.c.task_id.in_(old.scalar_subquery()))
            ).scalar_one()
        )
    return tasks, events


@dataclass
class _Cursor:
    status: TaskStatus
    after: tuple[float, str] | None = None
    done: bool = False


def _batch(
    conn: Connection,
    cursor: _Cursor,
    statuses: tuple[TaskStatus, ...],
    cutoff: float,
    size: int,
) -> tuple[int, int, float]:
    """One batch under the write lock: (tasks, history rows, seconds held)."""
    started = time.perf_counter()
    pick = (
        select(TASKS.c.id, TASKS.c.created_at)
        .where(*_old(cursor.status, cutoff))
        .order_by(TASKS.c.created_at, TASKS.c.id)
        .limit(size)
    )
    if cursor.after is not None:
        pick = pick.where(tuple_(TASKS.c.created_at, TASKS.c.id) > tuple_(*cursor.after))
    picked = conn.execute(pick).all()
    if len(picked) < size:
        cursor.done = True
    if not picked:
        return 0, 0, time.perf_counter() - started
    cursor.after = (picked[-1].created_at, picked[-1].id)
    ids = [r.id for r in picked]
    gone = (
        conn.execute(
            delete(TASKS)
            .where(TASKS.c.id.in_(bindparam("ids", expanding=True)))
            # Still finished before the cutoff (a retry since the pick changes both).
            # As an IN of every status pruned, which no index serves: an equality
            # (spelled or bound: SQLite plans with the bound value) lets the planner
            # read all of ix_tasks_status_created's range for that status instead of
            # seeking the ids (measured: 1.4 s for 200 tasks at 1 000 000).
            .where(TASKS.c.status.in_([_spelled(s) for s in statuses]))
            .where(TASKS.c.updated_at < cutoff)
            .returning(TASKS.c.id),
            {"ids": ids},
        )
        .scalars()
        .all()
    )
    events = 0
    if gone:
        events = conn.execute(
            delete(EVENTS).where(EVENTS.c.task_id.in_(bindparam("gone", expanding=True))),
            {"gone": list(gone)},
        ).rowcount
    return len(gone), int(events or 0), time.perf_counter() - started


async def prune_tasks(
    transactions: Transactions,
    *,
    older_than_s: float,
    now: float,
    include_failed: bool = False,
    dry_run: bool = False,
    batch_target_s: float = BATCH_TARGET_S,
    on_batch: Callable[[int, int], None] | None = None,
) -> TaskPrune:
    """Delete the ingestion tasks that finished more than ``older_than_s`` before
    ``now`` (failed ones only with ``include_failed``) and their history, in batches
    each holding the write lock about ``batch_target_s``. ``on_batch(tasks, events)``
    hears of each batch. A dry run counts them in one read and deletes nothing."""
    cutoff = now - older_than_s
    statuses = WITH_FAILED if include_failed else KEPT_FAILED
    if dry_run:
        tasks, events = await transactions.read(lambda conn: _count(conn, statuses, cutoff))
        return TaskPrune(tasks, events, 0, 0.0, True)
    size, batches, longest = BATCH_FIRST, 0, 0.0
    total_tasks = total_events = 0
    for status in statuses:
        cursor = _Cursor(status)
        while not cursor.done:

            def tx(conn: Connection, c: _Cursor = cursor, n: int = size) -> tuple[int, int, float]:
                return _batch(conn, c, statuses, cutoff, n)

            tasks, events, held = await transactions.write(tx)
            batches += 1
            longest = max(longest, held)
            total_tasks += tasks
            total_events += events
            if on_batch is not None and tasks:
                on_batch(tasks, events)
            if held > batch_target_s:
                size = max(BATCH_MIN, size // 2)
            elif held < batch_target_s / 2:
                size = min(BATCH_MAX, size + size // 2)
            # Writers get the lock at least as long as the pruner had it.
            await asyncio.sleep(max(PAUSE_MIN_S, held))
    return TaskPrune(total_tasks, total_events, batches, longest, False)
