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
the last one seen, through ix_tasks_status_created) and deletes them CHUNK at a
time with their history (the DELETE repeats the condition, so a task retried since
it was picked stays), committing once BATCH_TARGET_S has passed: a batch holds the
lock that long plus one chunk's time. Between batches the pruner waits as long as
the last one held the lock, so writers get at least half of it.
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

BATCH_TARGET_S = 0.020  # seconds a batch's transaction holds the write lock, about
PICK = 2_000  # tasks a batch picks at most (by keyset: ~1 ms of index reading)
CHUNK = 20  # tasks deleted by one statement; the time is checked after each
PAUSE_MIN_S = 0.002  # seconds between batches, at least
PRUNE_CACHE_KIB = 65_536  # KiB of SQLite page cache on the pruning connection

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
    # The CPU time of that batch's thread: far less than its wall time means the
    # thread waited for a CPU (another process's turn), not for its own work.
    longest_batch_cpu_s: float = 0.0


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
    target_s: float,
) -> tuple[int, int, float, float]:
    """One batch under the write lock: (tasks, history rows, seconds held, CPU
    seconds of this thread meanwhile). Deletes
    CHUNK tasks at a time and commits once ``target_s`` has passed: how long a task
    takes to delete varies tenfold with what is cached (a batch sized from the last
    one's speed once held the lock 1.9 s), a chunk's time does not."""
    started, cpu = time.perf_counter(), time.thread_time()
    if conn.dialect.name == "sqlite":
        # A task's delete changes a dozen indexes at scattered places: with SQLite's
        # default 2 MB page cache most of those are reads from the OS (measured at
        # 1 000 000 tasks, loaded machine: 25 000 tasks in 40 s instead of 16 500).
        # Only this connection's, and a prune's process is short-lived.
        conn.exec_driver_sql(f"PRAGMA cache_size = -{PRUNE_CACHE_KIB}")
    pick = (
        select(TASKS.c.id, TASKS.c.created_at)
        .where(*_old(cursor.status, cutoff))
        .order_by(TASKS.c.created_at, TASKS.c.id)
        .limit(PICK)
    )
    if cursor.after is not None:
        pick = pick.where(tuple_(TASKS.c.created_at, TASKS.c.id) > tuple_(*cursor.after))
    picked = conn.execute(pick).all()
    tasks = events = 0
    for start in range(0, len(picked), CHUNK):
        chunk = picked[start : start + CHUNK]
        gone = (
            conn.execute(
                delete(TASKS)
                .where(TASKS.c.id.in_(bindparam("ids", expanding=True)))
                # Still finished before the cutoff (a retry since the pick changes
                # both). As an IN of every status pruned, which no index serves: an
                # equality (spelled or bound: SQLite plans with the bound value) lets
                # the planner read all of ix_tasks_status_created's range for that
                # status instead of seeking the ids (1.4 s for 200 at 1 000 000).
                .where(TASKS.c.status.in_([_spelled(s) for s in statuses]))
                .where(TASKS.c.updated_at < cutoff)
                .returning(TASKS.c.id),
                {"ids": [r.id for r in chunk]},
            )
            .scalars()
            .all()
        )
        if gone:
            events += int(
                conn.execute(
                    delete(EVENTS).where(EVENTS.c.task_id.in_(bindparam("gone", expanding=True))),
                    {"gone": list(gone)},
                ).rowcount
                or 0
            )
        tasks += len(gone)
        cursor.after = (chunk[-1].created_at, chunk[-1].id)
        if time.perf_counter() - started >= target_s:
            break
    else:
        cursor.done = len(picked) < PICK
    return tasks, events, time.perf_counter() - started, time.thread_time() - cpu


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
    batches, longest, longest_cpu = 0, 0.0, 0.0
    total_tasks = total_events = 0
    for status in statuses:
        cursor = _Cursor(status)
        while not cursor.done:

            def tx(conn: Connection, c: _Cursor = cursor) -> tuple[int, int, float, float]:
                return _batch(conn, c, statuses, cutoff, batch_target_s)

            tasks, events, held, cpu = await transactions.write(tx)
            batches += 1
            if held > longest:
                longest, longest_cpu = held, cpu
            total_tasks += tasks
            total_events += events
            if on_batch is not None and tasks:
                on_batch(tasks, events)
            # Writers get the lock at least as long as the pruner had it.
            await asyncio.sleep(max(PAUSE_MIN_S, held))
    return TaskPrune(total_tasks, total_events, batches, longest, False, longest_cpu)
