"""Claims raced by real OS processes on one ledger.

Threads or coroutines in one process share a connection pool and the GIL, which hides
exactly the locking behaviour that matters. Here every worker is its own Python process
with its own engine, started together through a file barrier, hammering one SQLite file
(or one PostgreSQL database). Every task must be claimed exactly once, and no process
may see an exception — in particular no "database is locked".
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from core import DocumentStatus, Ledger, Settings, TaskStatus, sqlite_url

RACE_TIMEOUT_S = 60.0  # seconds a racing process may run before the test fails
READY_TIMEOUT_S = 30.0  # seconds to wait for every process to reach the barrier
# Simulated work per claimed task. Without it a process in a tight claim/complete loop
# re-takes the SQLite write lock before a waiting process wakes from its busy-timeout
# sleep, and with 4 racers on 2 CPUs one of them can end up claiming nothing at all.
WORK_S = 0.002  # seconds

# Each racer: open the ledger (schema check included) *before* the barrier, so the
# race itself measures claims, not start-up. Every exception is reported on stdout
# in the one JSON answer rather than lost in a traceback.
RACER = r"""
import asyncio, json, os, sys, time
from pathlib import Path

from core import Ledger, Settings

ARGS = json.loads(sys.argv[1])


async def wait_for(path: Path) -> None:
    deadline = time.monotonic() + ARGS["timeout"]
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"barrier {path} never appeared")
        await asyncio.sleep(0.001)


async def drain(ledger, me):
    claimed, errors = [], []
    while True:
        claims = await ledger.queue.claim_next(me, limit=ARGS["limit"])
        if not claims:
            return claimed, errors
        for claim in claims:
            claimed.append(claim.task_id)
            # Stand-in for the pipeline: a real worker holds no lock while it works.
            await asyncio.sleep(ARGS["work_s"])
            if claim.attempt != 1:
                errors.append(f"{claim.task_id} claimed with attempt {claim.attempt}")
            if not await ledger.queue.finish(claim, []):
                errors.append(f"complete({claim.task_id}) lost the task")


async def duel(ledger, me):
    won, lost, errors = [], [], []
    for i, task_id in enumerate(ARGS["task_ids"]):
        # One barrier per task so the two processes really collide on each one.
        Path(ARGS["rounds"], f"{i}.{me}").touch()
        for other in ARGS["workers"]:
            await wait_for(Path(ARGS["rounds"], f"{i}.{other}"))
        claim = await ledger.queue.claim(task_id, me)
        if claim is None:
            lost.append(task_id)
        elif claim.task_id != task_id or claim.worker_id != me:
            errors.append(f"claim of {task_id} answered {claim}")
        else:
            won.append(task_id)
    return won, lost, errors


async def main() -> None:
    me = ARGS["worker"]
    answer = {"worker": me, "errors": []}
    ledger = None
    try:
        ledger = await Ledger.open(
            Settings(db_url=ARGS["db_url"], store_root=Path(ARGS["store"]))
        )
        Path(ARGS["ready"]).touch()
        await wait_for(Path(ARGS["go"]))
        if ARGS["mode"] == "drain":
            answer["claimed"], answer["errors"] = await drain(ledger, me)
        else:
            answer["won"], answer["lost"], answer["errors"] = await duel(ledger, me)
    except BaseException as exc:
        answer["errors"].append(f"{type(exc).__name__}: {exc}")
    finally:
        if ledger is not None:
            await ledger.close()
    print(json.dumps(answer))


asyncio.run(main())
"""


async def submit_many(settings: Settings, n: int) -> list[str]:
    """n submitted (queued) tasks, through the public API."""
    async with await Ledger.open(settings) as ledger:
        task_ids = []
        for i in range(n):
            doc = await ledger.operator.upload(f"document number {i}\n".encode(), f"doc-{i}.txt")
            task_ids.append((await ledger.operator.submit(doc.document_id)).task_id)
    return task_ids


def race(
    settings: Settings, tmp_path: Path, workers: list[str], **args: Any
) -> dict[str, dict[str, Any]]:
    """Start one process per worker, release them together, return their answers."""
    go = tmp_path / "go"
    rounds = tmp_path / "rounds"
    rounds.mkdir(exist_ok=True)
    procs = {}
    for worker in workers:
        spec = {
            "db_url": settings.db_url,
            "store": str(settings.store_root),
            "worker": worker,
            "workers": workers,
            "ready": str(tmp_path / f"ready.{worker}"),
            "go": str(go),
            "rounds": str(rounds),
            "timeout": RACE_TIMEOUT_S,
            **args,
        }
        procs[worker] = subprocess.Popen(
            [sys.executable, "-c", RACER, json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not all((tmp_path / f"ready.{w}").exists() for w in workers):
            crashed = [w for w, p in procs.items() if p.poll() is not None]
            assert not crashed, f"{crashed} exited before the barrier"
            assert time.monotonic() < deadline, "racers never became ready"
            time.sleep(0.01)
        go.touch()
        answers = {}
        for worker, proc in procs.items():
            out, err = proc.communicate(timeout=RACE_TIMEOUT_S)
            assert proc.returncode == 0, err.decode()
            assert err.decode() == "", err.decode()
            answers[worker] = json.loads(out)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for worker, answer in answers.items():
        assert answer["worker"] == worker
        assert answer["errors"] == [], answer["errors"]
    return answers


async def assert_all_succeeded_once(settings: Settings, task_ids: list[str]) -> None:
    async with await Ledger.open(settings) as ledger:
        tasks = {t.task_id: t for t in await ledger.reads.list_tasks(limit=None)}
        assert set(tasks) == set(task_ids)
        assert {t.status for t in tasks.values()} == {TaskStatus.SUCCEEDED}
        assert {t.attempt for t in tasks.values()} == {1}
        docs = await ledger.reads.list_documents(limit=None)
        assert {d.status for d in docs} == {DocumentStatus.REVIEW_PENDING}
        # One claim event per task: a loser never left a trace in the history.
        for task_id in task_ids[:: max(1, len(task_ids) // 25)]:
            history = await ledger.reads.task_history(task_id)
            assert [e.to_status for e in history] == [
                TaskStatus.QUEUED,
                TaskStatus.RUNNING,
                TaskStatus.SUCCEEDED,
            ]
            assert history[1].actor == tasks[task_id].worker_id


async def drain_race(settings: Settings, tmp_path: Path, n_tasks: int, n_workers: int) -> None:
    task_ids = await submit_many(settings, n_tasks)
    workers = [f"racer-{i}" for i in range(n_workers)]
    answers = await asyncio.to_thread(
        race, settings, tmp_path, workers, mode="drain", limit=3, work_s=WORK_S
    )
    claimed = Counter(t for a in answers.values() for t in a["claimed"])
    twice = [t for t, n in claimed.items() if n > 1]
    assert twice == [], f"{len(twice)} tasks claimed more than once"
    assert set(claimed) == set(task_ids)
    assert sum(claimed.values()) == n_tasks
    for worker, answer in answers.items():
        assert answer["claimed"], f"{worker} claimed nothing: the race did not happen"
    await assert_all_succeeded_once(settings, task_ids)
    # Whoever claimed a task is the worker the ledger recorded.
    async with await Ledger.open(settings) as ledger:
        owner = {t.task_id: t.worker_id for t in await ledger.reads.list_tasks(limit=None)}
    for worker, answer in answers.items():
        assert {owner[t] for t in answer["claimed"]} == {worker}


@pytest.fixture
def sqlite_settings(tmp_path: Path) -> Settings:
    return Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "objects")


@pytest.mark.slow
async def test_two_processes_drain_one_sqlite_file_without_double_claims(
    sqlite_settings: Settings, tmp_path: Path
) -> None:
    await drain_race(sqlite_settings, tmp_path, n_tasks=300, n_workers=2)


@pytest.mark.slow
async def test_four_processes_drain_one_sqlite_file_without_double_claims(
    sqlite_settings: Settings, tmp_path: Path
) -> None:
    await drain_race(sqlite_settings, tmp_path, n_tasks=300, n_workers=4)


@pytest.mark.slow
@pytest.mark.postgres
async def test_two_processes_drain_one_postgresql_database_without_double_claims(
    pg_url: str, tmp_path: Path
) -> None:
    settings = Settings(db_url=pg_url, store_root=tmp_path / "objects")
    await drain_race(settings, tmp_path, n_tasks=300, n_workers=2)


@pytest.mark.slow
async def test_two_processes_claiming_the_same_task_have_exactly_one_winner(
    sqlite_settings: Settings, tmp_path: Path
) -> None:
    task_ids = await submit_many(sqlite_settings, 50)
    workers = ["left", "right"]
    answers = await asyncio.to_thread(
        race, sqlite_settings, tmp_path, workers, mode="duel", task_ids=task_ids
    )
    left, right = answers["left"], answers["right"]
    for task_id in task_ids:
        winners = [w for w in workers if task_id in answers[w]["won"]]
        losers = [w for w in workers if task_id in answers[w]["lost"]]
        assert len(winners) == 1, (task_id, winners)
        assert len(losers) == 1, (task_id, losers)
    assert len(left["won"]) + len(right["won"]) == len(task_ids)
    # Both processes won some: the duels were real races, not one process running ahead.
    assert left["won"], "left never won"
    assert right["won"], "right never won"
    async with await Ledger.open(sqlite_settings) as ledger:
        for task_id in task_ids:
            task = await ledger.reads.get_task(task_id)
            winner = "left" if task_id in left["won"] else "right"
            assert (task.status, task.attempt, task.worker_id) == (
                TaskStatus.RUNNING,
                1,
                winner,
            )
            history = await ledger.reads.task_history(task_id)
            assert [(e.to_status, e.actor) for e in history[1:]] == [(TaskStatus.RUNNING, winner)]
