"""Pruning finished tasks and their history (core.ledger.retention): what goes, what
stays, a dry run that changes nothing, and a prune racing workers' claims on a real
ledger file (and PostgreSQL) that loses no live task."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import pytest
from sqlalchemy import text

from bench.million import SPAN_S, build
from core import Ledger, Settings, TaskStatus
from core.ledger.retention import prune_tasks
from tests.ledger.test_counters import assert_counted

DAY_S = 86_400.0
TASKS = 3_000  # 30 queued, 3 running, 27 waiting for a retry, 90 failed, 2 850 succeeded


async def _snapshot(ledger: Ledger) -> dict[str, tuple[object, ...]]:
    def tx(conn: object) -> dict[str, tuple[object, ...]]:
        from sqlalchemy.engine import Connection

        assert isinstance(conn, Connection)
        out = {}
        for table in ("ingestion_tasks", "task_events", "task_counters", "documents"):
            rows = conn.execute(text(f"SELECT * FROM {table}")).all()
            out[table] = tuple(sorted(map(repr, rows)))
        return out

    return await ledger.transactions.read(tx)


async def _tasks(ledger: Ledger) -> dict[str, tuple[str, float]]:
    rows = await ledger.transactions.read(
        lambda conn: conn.execute(text("SELECT id, status, updated_at FROM ingestion_tasks")).all()
    )
    return {r.id: (r.status, r.updated_at) for r in rows}


async def test_a_dry_run_changes_nothing(settings: Settings) -> None:
    await build(settings, 1_000)
    async with await Ledger.open(settings) as ledger:
        before = await _snapshot(ledger)
        dry = await prune_tasks(
            ledger.transactions,
            older_than_s=30 * DAY_S,
            now=time.time(),
            include_failed=True,
            dry_run=True,
        )
        assert dry.dry_run and dry.tasks > 0 and dry.events == 3 * dry.tasks
        assert await _snapshot(ledger) == before
        # ...and says what the real one removes.
        real = await prune_tasks(
            ledger.transactions, older_than_s=30 * DAY_S, now=time.time(), include_failed=True
        )
        assert (real.tasks, real.events) == (dry.tasks, dry.events)


async def test_prune_removes_old_finished_tasks_with_their_history_only(
    settings: Settings,
) -> None:
    now = time.time()
    await build(settings, TASKS, now=now)
    cutoff = now - 90 * DAY_S
    async with await Ledger.open(settings) as ledger:
        before = await _tasks(ledger)
        pruned = await prune_tasks(ledger.transactions, older_than_s=90 * DAY_S, now=now)
        after = await _tasks(ledger)
        gone = set(before) - set(after)
        assert len(gone) == pruned.tasks > 0
        assert pruned.batches > 1  # the first batch is smaller than what there was
        for task_id, (status, updated_at) in before.items():
            old_and_done = status in ("succeeded", "cancelled") and updated_at < cutoff
            assert (task_id in gone) == old_and_done, (task_id, status)
        orphans = await ledger.transactions.read(
            lambda conn: conn.execute(
                text(
                    "SELECT count(*) FROM task_events WHERE task_id NOT IN "
                    "(SELECT id FROM ingestion_tasks)"
                )
            ).scalar_one()
        )
        assert orphans == 0
        assert pruned.events == 3 * pruned.tasks
        await assert_counted(ledger)
        counts = await ledger.reads.counts()
        assert counts[TaskStatus.FAILED] == TASKS * 3 // 100  # failed kept unless asked

        with_failed = await prune_tasks(
            ledger.transactions, older_than_s=90 * DAY_S, now=now, include_failed=True
        )
        assert with_failed.tasks > 0
        assert 0 < (await ledger.reads.counts())[TaskStatus.FAILED] < TASKS * 3 // 100
        await assert_counted(ledger)


async def test_a_prune_racing_claims_loses_no_live_task(settings: Settings) -> None:
    """Two workers (ledgers of their own: connections, threads and locks of their
    own) claim and finish every queued task while the prune deletes in batches."""
    now = time.time()
    await build(settings, TASKS, now=now)
    async with await Ledger.open(settings) as pruner:
        before = await _tasks(pruner)
        live = {t for t, (status, _) in before.items() if status not in ("succeeded", "failed")}
        queued = sum(1 for status, _ in before.values() if status == "queued")
        batches: list[int] = []

        async def worker(name: str) -> int:
            done = 0
            async with await Ledger.open(settings) as ledger:
                while True:
                    claims = await ledger.queue.claim_next(name, limit=1)
                    if not claims:
                        return done
                    await ledger.queue.finish(claims[0], [])
                    done += 1

        async def prune() -> int:
            pruned = await prune_tasks(
                pruner.transactions,
                older_than_s=SPAN_S / 2,
                now=now,
                include_failed=True,
                batch_target_s=0.002,  # many small batches, interleaved with claims
                on_batch=lambda tasks, _events: batches.append(tasks),
            )
            return pruned.tasks

        done_a, done_b, removed = await asyncio.gather(worker("w-a"), worker("w-b"), prune())
        assert done_a + done_b == queued  # every queued task claimed once
        assert removed > 0 and len(batches) > 1
        after = await _tasks(pruner)
        assert live <= set(after)  # no live task lost
        for task_id in live:
            status, _ = after[task_id]
            assert status in ("succeeded", "running", "retry_wait"), (task_id, status)
        await assert_counted(pruner)


def _engine(ledger: Ledger) -> Any:
    """The synchronous engine either backend's runner has, where events are heard."""
    engine = vars(ledger.transactions)["engine"]
    return getattr(engine, "sync_engine", engine)


class _TaskCost:
    """A clock that moves only when the pruner deletes tasks: ``per_task`` seconds a
    task, so how long a chunk takes is the test's to say, whatever the machine."""

    def __init__(self, per_task: float) -> None:
        self.now = 0.0
        self.per_task = per_task

    def clock(self) -> float:
        return self.now

    def listen(self, ledger: Ledger) -> None:
        from sqlalchemy import event

        @event.listens_for(_engine(ledger), "after_cursor_execute")
        def _deleted(_c: object, _cur: object, statement: str, params: object, *_: object) -> None:
            if statement.lstrip().upper().startswith("DELETE FROM INGESTION_TASKS"):
                # An expanding IN binds each id; PostgreSQL's = ANY binds one list.
                ids = [
                    i
                    for p in (params or ())  # type: ignore[attr-defined]
                    for i in (p if isinstance(p, list | tuple) else [p])
                    if isinstance(i, str)
                ]
                self.now += self.per_task * len(ids)


async def test_a_batch_follows_the_time_its_tasks_take(settings: Settings) -> None:
    """Fast deletes: a batch fills its target and no more. A slowdown: the chunk that
    meets it overshoots (no statement's time is known before it runs), then batches
    shrink to what fits. Fast again: they grow back, a chunk at most doubling."""
    now = time.time()
    await build(settings, 1_000, now=now)
    ms = 1 / 1024  # a "millisecond" that sums exactly in binary floating point
    target = 20 * ms
    cost = _TaskCost(per_task=ms)
    sizes: list[tuple[float, int]] = []

    def heard(tasks: int, _events: int) -> None:
        sizes.append((cost.per_task, tasks))
        if len(sizes) == 5:
            cost.per_task = 10 * ms  # ten times slower: cold pages, a preempted thread
        elif len(sizes) == 15:
            cost.per_task = ms / 8

    async with await Ledger.open(settings) as ledger:
        cost.listen(ledger)
        pruned = await prune_tasks(
            ledger.transactions,
            older_than_s=SPAN_S / 2,
            now=now,
            include_failed=True,
            batch_target_s=target,
            on_batch=heard,
            clock=cost.clock,
        )
        await assert_counted(ledger)
    fast = [n for per, n in sizes if per == ms]
    slow = [n for per, n in sizes if per == 10 * ms]
    faster = [n for per, n in sizes if per == ms / 8]
    assert fast == [20] * 5  # 1 ms a task: the 20 ms target, exactly
    assert slow[0] == 20  # the chunk sized at 1 ms a task that took 10 (200 ms)
    assert set(slow[1:]) == {2}  # then what fits: 20 ms / 10 ms a task
    assert faster[0] > 20  # 2, 4, 8, ... in one batch until the target is filled
    # The longest hold is that one chunk: a batch commits when no task more fits.
    assert pruned.longest_batch_s == pytest.approx(200 * ms)
    assert pruned.over_bound == 1
    assert pruned.tasks == sum(n for _, n in sizes)


async def test_no_garbage_collection_runs_while_a_batch_holds_the_lock(
    settings: Settings,
) -> None:
    """At 1 000 000 tasks the one batch of 3 000 past 50 ms (70-90 ms, with no wait
    for a CPU, on both backends) was Python's full collection run by the batch's
    thread. With collections due every 100 allocations, many would fall between a
    batch's first DELETE and its COMMIT; none may, and collecting resumes after."""
    from sqlalchemy import event

    await build(settings, 1_000)
    holding: list[bool] = [False]
    inside: list[int] = []
    outside: list[int] = []

    def collecting(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            (inside if holding[0] else outside).append(info["generation"])

    thresholds = gc.get_threshold()
    async with await Ledger.open(settings) as ledger:
        engine = _engine(ledger)

        @event.listens_for(engine, "before_cursor_execute")
        def _deleting(_c: object, _cur: object, statement: str, *_: object) -> None:
            if statement.lstrip().upper().startswith("DELETE"):
                holding[0] = True

        @event.listens_for(engine, "commit")
        def _committed(_conn: object) -> None:
            holding[0] = False

        gc.callbacks.append(collecting)
        gc.set_threshold(100, 10, 10)
        try:
            pruned = await prune_tasks(
                ledger.transactions, older_than_s=SPAN_S / 2, now=time.time(), include_failed=True
            )
        finally:
            gc.set_threshold(*thresholds)
            gc.callbacks.remove(collecting)
        assert gc.isenabled()
    assert pruned.batches > 1 and pruned.tasks > 0
    assert inside == []
    assert outside  # the collector ran, between the batches


async def test_on_postgresql_a_delete_is_one_statement_whatever_its_chunk(
    settings: Settings,
) -> None:
    """A chunk's size follows its pace, so an expanding IN was another statement for
    every size, each prepared by asyncpg (whose cache of 100 turned over): on
    PostgreSQL the ids go as one array, and each DELETE is one statement."""
    if not settings.db_url.startswith("postgresql"):
        pytest.skip("SQLite prepares in-process; an IN of each length costs no round trip")
    from sqlalchemy import event

    now = time.time()
    await build(settings, 1_000, now=now)
    ms = 1 / 1024
    cost = _TaskCost(per_task=ms)
    sizes: list[int] = []
    deletes: set[str] = set()

    def heard(tasks: int, _events: int) -> None:
        sizes.append(tasks)
        cost.per_task = ms * (1 + len(sizes) % 7)  # a pace that keeps changing

    async with await Ledger.open(settings) as ledger:
        cost.listen(ledger)
        engine = vars(ledger.transactions)["engine"].sync_engine

        @event.listens_for(engine, "before_cursor_execute")
        def _seen(_c: object, _cur: object, statement: str, *_: object) -> None:
            if statement.lstrip().upper().startswith("DELETE"):
                deletes.add(" ".join(statement.split()))

        pruned = await prune_tasks(
            ledger.transactions,
            older_than_s=SPAN_S / 2,
            now=now,
            include_failed=True,
            batch_target_s=20 * ms,
            on_batch=heard,
            clock=cost.clock,
        )
        await assert_counted(ledger)
    assert pruned.tasks > 0 and len(set(sizes)) >= 3  # chunks of many sizes...
    assert len(deletes) == 2, deletes  # ...in one DELETE of tasks and one of history


async def test_a_task_retried_after_the_pick_stays(settings: Settings) -> None:
    """The pick reads outside the write lock: a task put back in the queue between
    the pick and its batch is picked, and the batch's DELETE keeps it."""
    import sqlite3

    from sqlalchemy import event

    from core.ledger.transactions import sqlite_ledger_path

    path = sqlite_ledger_path(settings.db_url)
    if path is None:
        pytest.skip("a second writer inside the pick's read is a SQLite file's")
    now = time.time()
    await build(settings, 1_000, now=now)
    async with await Ledger.open(settings) as ledger:
        oldest = await ledger.transactions.read(
            lambda conn: conn.execute(
                text(
                    "SELECT id FROM ingestion_tasks WHERE status = 'succeeded' "
                    "ORDER BY created_at, id LIMIT 1"
                )
            ).scalar_one()
        )
        retried: list[str] = []

        @event.listens_for(vars(ledger.transactions)["engine"], "after_cursor_execute")
        def _after_pick(_c: object, _cur: object, statement: str, *_: object) -> None:
            if retried or "ORDER BY ingestion_tasks.created_at" not in statement:
                return
            # The pick's snapshot is taken; another writer puts the task back.
            with sqlite3.connect(path, isolation_level=None) as other:
                other.execute(
                    "UPDATE ingestion_tasks SET status = 'queued', updated_at = ? WHERE id = ?",
                    (time.time(), oldest),
                )
            retried.append(oldest)

        pruned = await prune_tasks(ledger.transactions, older_than_s=SPAN_S / 2, now=now)
        assert retried == [oldest] and pruned.tasks > 0
        status = await ledger.transactions.read(
            lambda conn: conn.execute(
                text("SELECT status FROM ingestion_tasks WHERE id = :id"), {"id": oldest}
            ).scalar_one_or_none()
        )
        assert status == "queued"
        await assert_counted(ledger)
