"""Pruning finished tasks and their history, a bounded batch at a time.

A ledger that keeps every task reaches a million of them; ``ingestdesk prune
--tasks-older-than DAYS`` deletes the ingestion tasks that finished (succeeded or
cancelled; failed ones only when asked, since a failure is what an operator still
has to act on) before the cutoff, with their history rows. Documents, their versions
and chunks stay: the knowledge base is not the task log. Re-embedding tasks (an
index's campaign) stay too: a campaign's progress is counted from them. A result of
a pruned task is no longer found for reuse by its processing key (a later upload of
the same bytes is processed again).

Workers keep claiming meanwhile, so no transaction holds the write lock long. The
next tasks are picked outside it (a read, in created order after the last one seen,
through ix_tasks_status_created); each batch is then one write transaction that
deletes them a chunk at a time with their history (the DELETE repeats the
condition, so a task retried since it was picked stays) and commits itself, so its
time is the lock's with COMMIT's call included. A chunk's size follows the time the
last one took a task (:class:`_Pace`): as many as fit in what is left of
BATCH_TARGET_S, and the batch commits when none does. Between batches the pruner
waits as long as the last one held the lock, so writers get at least half of it.

What a long batch is made of (measured at 100 000 tasks, 2 cores at load 5-14,
per-batch thread schedstat): mostly its thread waiting on a run queue for a CPU
another process had (70 % of all batch time before this design, about half after),
so each batch reports that wait beside its time; the fewer CPU-milliseconds a batch
needs, the less often it is preempted holding the lock. On SQLite the next longest
were COMMIT calls that ran the auto-checkpoint (a batch writes hundreds of WAL
pages; the threshold is 1 000), 80-360 ms with their fsyncs. SQLite releases the
write lock before it checkpoints (another writer got it 2 ms into a 40 ms COMMIT
call), so that time held no one up, but it hid the lock's. A batch now commits with
auto-checkpoint off and then checkpoints (PASSIVE), so COMMIT's call is the lock's,
and the checkpoints stay the pruner's: left to the workers' connections they went
into their claims (claim p99 31 -> 93 ms).
Python's garbage collector is paused while a batch holds the lock
(:func:`core.gc_tuning.collection_paused` says why).
The task counters follow every delete (their triggers, core.ledger.counters).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import String, any_, bindparam, delete, func, literal_column, select, tuple_
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from core.gc_tuning import collection_paused
from core.ledger.schema import EVENTS, TASKS
from core.ledger.transactions import Transactions
from core.states import TaskStatus

BATCH_TARGET_S = 0.020  # seconds a batch holds the write lock, COMMIT included, about
LOCK_BOUND_S = 0.050  # the bound on one hold; batches past it are counted
PICK = 500  # tasks picked (outside the lock) at a time
CHUNK_FIRST = 5  # tasks in the first chunk, before any is timed
CHUNK_MAX = 50  # tasks a DELETE names at most: a jump in their cost (cold pages) stays bounded
# Tasks a batch deletes at most: each dirties ~6 pages, which COMMIT writes to the
# WAL under the lock (500 made 3 000 pages, 12 MB, and COMMITs of 100-260 ms).
BATCH_MAX = 200
PAUSE_MIN_S = 0.002  # seconds between batches, at least
PRUNE_CACHE_KIB = 65_536  # KiB of SQLite page cache on the pruning connection
WAL_AUTOCHECKPOINT = 1_000  # SQLite's default, given back to the pruner's connection

KEPT_FAILED = (TaskStatus.SUCCEEDED, TaskStatus.CANCELLED)
WITH_FAILED = (TaskStatus.SUCCEEDED, TaskStatus.CANCELLED, TaskStatus.FAILED)


@dataclass(frozen=True)
class TaskPrune:
    """What a task prune removed (or, in a dry run, would remove)."""

    tasks: int
    events: int
    batches: int
    longest_batch_s: float  # the longest a batch held the write lock, COMMIT included
    dry_run: bool
    # That batch's thread: its CPU time, and its time waiting on a run queue (for a
    # CPU another process had; Linux only, else 0), and its COMMIT's call. Wall minus
    # that wait is the part of the hold that was the prune's own.
    longest_batch_cpu_s: float = 0.0
    longest_batch_wait_s: float = 0.0
    longest_batch_commit_s: float = 0.0
    longest_own_s: float = 0.0  # the longest hold less its thread's run-queue wait
    over_bound: int = 0  # batches that held the lock past LOCK_BOUND_S
    over_bound_own: int = 0  # ...even without their run-queue wait


def run_queue_wait_s() -> float:
    """Seconds this thread has spent runnable but waiting for a CPU (Linux's
    schedstat), 0.0 where the kernel does not say."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


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


def _one_of(conn: Connection, column: ColumnElement[Any], name: str) -> ColumnElement[bool]:
    """``column`` is one of the list bound as ``name``. On PostgreSQL one array
    parameter (``= ANY``): an expanding IN is another statement for every length of
    list, and a chunk's length changes with its pace (1 to CHUNK_MAX), so asyncpg
    prepared one statement per length, a round trip each, and its cache of 100 turned
    over under the lock. SQLite has no arrays, and prepares in-process."""
    if conn.dialect.name == "postgresql":
        # Here, not at the top: a SQLite process (a worker imports this module through
        # the bulk actions) never loads the PostgreSQL dialect.
        from sqlalchemy.dialects.postgresql import ARRAY

        return column == any_(bindparam(name, type_=ARRAY(String)))
    return column.in_(bindparam(name, expanding=True))


def _count(conn: Connection, statuses: tuple[TaskStatus, ...], cutoff: float) -> tuple[int, int]:
    tasks = events = 0
    for status in statuses:
        old = select(TASKS.c.id).where(*_old(status, cutoff))
        tasks += _count_tasks(conn, status, cutoff)
        events += int(
            conn.execute(
                select(func.count()).where(EVENTS.c.task_id.in_(old.scalar_subquery()))
            ).scalar_one()
        )
    return tasks, events


def _count_tasks(conn: Connection, status: TaskStatus, cutoff: float) -> int:
    old = select(TASKS.c.id).where(*_old(status, cutoff))
    return int(conn.execute(select(func.count()).select_from(old.subquery())).scalar_one())


async def count_prunable(
    transactions: Transactions, *, older_than_s: float, now: float, include_failed: bool = False
) -> int:
    """How many tasks :func:`prune_tasks` would delete now (the tasks alone, in one read
    of the index it picks them by: a prune's progress says "N of TOTAL")."""
    cutoff = now - older_than_s
    statuses = WITH_FAILED if include_failed else KEPT_FAILED
    return await transactions.read(
        lambda conn: sum(_count_tasks(conn, status, cutoff) for status in statuses)
    )


def _pick(
    conn: Connection, status: TaskStatus, cutoff: float, after: tuple[float, str] | None
) -> list[tuple[float, str]]:
    pick = (
        select(TASKS.c.created_at, TASKS.c.id)
        .where(*_old(status, cutoff))
        .order_by(TASKS.c.created_at, TASKS.c.id)
        .limit(PICK)
    )
    if after is not None:
        pick = pick.where(tuple_(TASKS.c.created_at, TASKS.c.id) > tuple_(*after))
    return [(r.created_at, r.id) for r in conn.execute(pick)]


class _Pace:
    """How many tasks the next chunk deletes: as many as the time the last chunk took
    a task says fit in what is left of the target, less a commit as long as the last;
    none (commit now) when not one fits. A task's delete costs ten times more when its
    pages are not cached or its thread is preempted, so the last chunk is the guess of
    the next, and a chunk at most doubles the last (a batch sized once from an early
    speed held the lock 1.9 s at 1 000 000 tasks). A statement's own cost (a round
    trip to PostgreSQL: 5-15 ms under load) is shared by a chunk's tasks, so a chunk
    that is slow for that reason grows rather than shrinks."""

    def __init__(self, target_s: float) -> None:
        self.target_s = target_s
        self.per_task_s: float | None = None
        self.last = CHUNK_FIRST
        self.commit_s = 0.0

    def next_chunk(self, elapsed_s: float) -> int:
        if self.per_task_s is None:
            return CHUNK_FIRST
        room = self.target_s - elapsed_s - self.commit_s
        fits = CHUNK_MAX if self.per_task_s <= 0 else int(room / self.per_task_s)
        return max(0, min(CHUNK_MAX, 2 * self.last, fits))

    def took(self, tasks: int, seconds: float) -> None:
        self.per_task_s = seconds / max(1, tasks)
        self.last = max(1, tasks)


@dataclass(frozen=True)
class _Held:
    tasks: int
    events: int
    deleted_upto: int  # picked tasks this batch went through
    seconds: float  # from the transaction's start (the lock taken) to COMMIT's return
    cpu_s: float
    wait_s: float  # the thread's run-queue wait meanwhile
    commit_s: float  # of which COMMIT's call
    checkpoint_s: float  # SQLite's checkpoint after it, the lock released


def _batch(
    conn: Connection,
    picked: Sequence[tuple[float, str]],
    statuses: tuple[TaskStatus, ...],
    cutoff: float,
    pace: _Pace,
    clock: Callable[[], float],
) -> _Held:
    try:
        with collection_paused():  # a collection would hold the lock with it
            return _held_batch(conn, picked, statuses, cutoff, pace, clock)
    except BaseException:
        if conn.dialect.name == "sqlite":
            # A batch cut short goes back to the pool checkpointing as it came.
            raw = conn.connection.dbapi_connection
            if raw is not None:
                raw.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT}").fetchall()
        raise


def _held_batch(
    conn: Connection,
    picked: Sequence[tuple[float, str]],
    statuses: tuple[TaskStatus, ...],
    cutoff: float,
    pace: _Pace,
    clock: Callable[[], float],
) -> _Held:
    """One batch under the write lock, from ``picked``'s start, committed here."""
    started, cpu, wait = clock(), time.thread_time(), run_queue_wait_s()
    if conn.dialect.name == "sqlite":
        # A task's delete changes a dozen indexes at scattered places: with SQLite's
        # default 2 MB page cache most of those are reads from the OS (measured at
        # 1 000 000 tasks, loaded machine: 25 000 tasks in 40 s instead of 16 500).
        # Only this connection's, and a prune's process is short-lived.
        conn.exec_driver_sql(f"PRAGMA cache_size = -{PRUNE_CACHE_KIB}")
        # COMMIT without SQLite's auto-checkpoint: it would run in COMMIT's call after
        # the lock is released, and the batch could not tell its lock from it (see
        # the module); the pruner checkpoints itself after the batch.
        conn.exec_driver_sql("PRAGMA wal_autocheckpoint = 0")
    tasks = events = done = 0
    size = max(1, pace.next_chunk(0.0))  # a batch deletes one task at least
    while done < len(picked) and size > 0:
        chunk = picked[done : done + size]
        chunk_started = clock()
        gone = (
            conn.execute(
                delete(TASKS)
                .where(_one_of(conn, TASKS.c.id, "ids"))
                # Still finished before the cutoff (a retry since the pick changes
                # both). As an IN of every status pruned, which no index serves: an
                # equality (spelled or bound: SQLite plans with the bound value) lets
                # the planner read all of ix_tasks_status_created's range for that
                # status instead of seeking the ids (1.4 s for 200 at 1 000 000).
                # Not index_id again: a task gets it only when made, and its IS NULL
                # sent SQLite down ix_tasks_index_status (87 tasks/s, not 2 000).
                .where(TASKS.c.status.in_([_spelled(s) for s in statuses]))
                .where(TASKS.c.updated_at < cutoff)
                .returning(TASKS.c.id),
                {"ids": [task_id for _, task_id in chunk]},
            )
            .scalars()
            .all()
        )
        if gone:
            events += int(
                conn.execute(
                    delete(EVENTS).where(_one_of(conn, EVENTS.c.task_id, "gone")),
                    {"gone": list(gone)},
                ).rowcount
                or 0
            )
        tasks += len(gone)
        done += len(chunk)
        pace.took(len(chunk), clock() - chunk_started)
        size = pace.next_chunk(clock() - started)
    committing = clock()
    conn.commit()
    ended = clock()
    pace.commit_s = ended - committing
    cpu_s, wait_s = time.thread_time() - cpu, run_queue_wait_s() - wait
    checkpoint_s = 0.0
    if conn.dialect.name == "sqlite":
        # Straight to the driver: through SQLAlchemy a statement would begin (and
        # take the lock) again. PASSIVE waits for no one and no writer waits for it;
        # the connection goes back to the pool checkpointing as it came.
        raw = conn.connection.dbapi_connection
        assert raw is not None
        raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        raw.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT}").fetchall()
        checkpoint_s = clock() - ended
    return _Held(tasks, events, done, ended - started, cpu_s, wait_s, pace.commit_s, checkpoint_s)


async def prune_tasks(
    transactions: Transactions,
    *,
    older_than_s: float,
    now: float,
    include_failed: bool = False,
    dry_run: bool = False,
    batch_target_s: float = BATCH_TARGET_S,
    on_batch: Callable[[int, int], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> TaskPrune:
    """Delete the ingestion tasks that finished more than ``older_than_s`` before
    ``now`` (failed ones only with ``include_failed``) and their history, in batches
    each holding the write lock about ``batch_target_s`` (by ``clock``, seconds).
    ``on_batch(tasks, events)`` hears of each batch. A dry run counts them in one
    read and deletes nothing."""
    cutoff = now - older_than_s
    statuses = WITH_FAILED if include_failed else KEPT_FAILED
    if dry_run:
        tasks, events = await transactions.read(lambda conn: _count(conn, statuses, cutoff))
        return TaskPrune(tasks, events, 0, 0.0, True)
    pace = _Pace(batch_target_s)
    batches = total_tasks = total_events = over = over_own = 0
    longest: _Held | None = None
    longest_own = 0.0
    for status in statuses:
        after: tuple[float, str] | None = None
        while True:

            def pick(conn: Connection, s: TaskStatus = status, a: Any = after) -> Any:
                return _pick(conn, s, cutoff, a)

            picked = await transactions.read(pick)
            done = 0
            while done < len(picked):

                def tx(conn: Connection, rest: Any = picked[done : done + BATCH_MAX]) -> _Held:
                    return _batch(conn, rest, statuses, cutoff, pace, clock)

                held = await transactions.write(tx)
                done += held.deleted_upto
                batches += 1
                total_tasks += held.tasks
                total_events += held.events
                if longest is None or held.seconds > longest.seconds:
                    longest = held
                own = held.seconds - held.wait_s
                longest_own = max(longest_own, own)
                over += held.seconds > LOCK_BOUND_S
                over_own += own > LOCK_BOUND_S
                if on_batch is not None and held.tasks:
                    on_batch(held.tasks, held.events)
                # Writers get the lock at least as long as the pruner had it.
                await asyncio.sleep(max(PAUSE_MIN_S, held.seconds))
            if len(picked) < PICK:
                break
            after = picked[-1]
    return TaskPrune(
        total_tasks,
        total_events,
        batches,
        longest.seconds if longest else 0.0,
        False,
        longest_batch_cpu_s=longest.cpu_s if longest else 0.0,
        longest_batch_wait_s=longest.wait_s if longest else 0.0,
        longest_batch_commit_s=longest.commit_s if longest else 0.0,
        longest_own_s=longest_own,
        over_bound=over,
        over_bound_own=over_own,
    )
