"""Reconcile and the review of provider requests, against the real demo provider
process and real worker and CLI processes (the ledger's own roles set a scene only
where a race would otherwise decide it): a request is looked up only where it was
sent; twins on one request are reviewed together; lost replies do not use up a
task's attempts; a resend after a failure runs; a dead worker's request is due once
its lease ran out. Nothing is ever executed twice."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import random
import signal
import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from core import ErrorCode, Ledger, Settings, TaskStatus
from core.ingest.parse_pool import ParserPool
from core.ledger.provider_requests import RECONCILE_ACTOR, requests_waited_on
from core.states import RequestState
from tests.core import test_provider_drills as drills
from tests.core.test_provider_drills import (
    DemoProvider,
    make_due,
    note,
    patient,
    reconcile_now,
    run_worker,
    start_provider,
    submit,
    wait_claimable,
)
from tests.core.test_worker import cli, start_cli

DEAD_LEASE_S = 30  # seconds of the killed worker's lease
LOADED_WAIT_S = 120.0  # seconds a drill waits for its condition on a loaded machine
pytestmark = drills.pytestmark  # real processes and signals: Linux

# The drills' ledger: quick automatic retries and short leases, in real time.
settings, ledger, pool, provider = drills.settings, drills.ledger, drills.pool, drills.provider


def port_of(url: str) -> str:
    return url.rsplit(":", 1)[1]


async def requests_of(ledger: Ledger, task_id: str) -> list[RequestState]:
    return [r.state for r in await ledger.providers.for_task(task_id)]


async def test_a_request_is_never_looked_up_at_a_provider_that_did_not_receive_it(
    ledger: Ledger, pool: ParserPool, provider: DemoProvider, settings: Settings, tmp_path: Path
) -> None:
    """Provider B (its own database, the same name and model: the same request keys)
    never saw the request sent to A: neither ``reconcile --provider B`` nor a worker
    on B may take its "not found" for an answer (that led to a second submit)."""
    task_id = await submit(ledger, note(11), "w.md")
    provider.faults(lose_reply=1.0)
    await run_worker(ledger, pool, provider.url)
    (request,) = await ledger.providers.for_task(task_id)
    assert request.state is RequestState.UNKNOWN and request.endpoint == provider.url
    other = start_provider(tmp_path / "other-provider.sqlite3")
    try:
        elsewhere = cli(settings, "reconcile", "--all", "--provider", other.url)
        assert elsewhere.returncode == 0, elsewhere.stderr
        assert "not_looked_up -> unknown" in elsewhere.stdout, elsewhere.stdout
        assert "sent to another endpoint" in elsewhere.stdout
        assert "not_found" not in elsewhere.stdout and "needs_review" not in elsewhere.stdout
        (still,) = await ledger.providers.for_task(task_id)
        assert (still.state, still.lookups) == (RequestState.UNKNOWN, 0)

        # A worker on B meets the request: not looked up there either, not sent.
        await wait_claimable(ledger, task_id)
        await run_worker(ledger, pool, other.url)
        task = await ledger.reads.get_task(task_id)
        assert task.error_code is ErrorCode.OUTCOME_UNKNOWN, task
        assert "another endpoint" in (task.error_detail or "")
        assert await requests_of(ledger, task_id) == [RequestState.UNKNOWN]
        assert (other.stats()["lookups"], other.stats()["submits"]) == (0, 0)
        assert other.submits_of(request.request_key) == 0
    finally:
        other.stop()

    # Where it was sent, it is found; the task goes on, and A saw one submit.
    provider.faults(lose_reply=0.0)
    decisions = await reconcile_now(ledger)
    assert [d.state for d in decisions] == [RequestState.RECOVERED]
    await wait_claimable(ledger, task_id)
    await run_worker(ledger, pool, provider.url)
    assert (await ledger.reads.get_task(task_id)).status is TaskStatus.SUCCEEDED
    assert provider.submits_of(request.request_key) == 1


async def twins_waiting_for_review(
    ledger: Ledger, pool: ParserPool, provider: DemoProvider
) -> tuple[str, str, str]:
    """Two tasks of the same content (different names), both failed needs_review on
    the one request the first sent (lost on its way in, so not found). Returns the
    first's id, the twin's, and the request key."""
    first = await submit(ledger, note(21), "first.md")
    provider.faults(lose_request=1.0)
    await run_worker(ledger, pool, provider.url)
    provider.faults(lose_request=0.0)
    await reconcile_now(ledger)  # unless the worker's next attempt looked it up itself
    (request,) = await ledger.providers.for_task(first)
    assert request.state is RequestState.NEEDS_REVIEW
    twin = await submit(ledger, note(21), "twin.md")
    await wait_claimable(ledger, first)
    for _ in range(10):
        tasks = [await ledger.reads.get_task(t) for t in (first, twin)]
        if all(t.status is TaskStatus.FAILED for t in tasks):
            break
        await run_worker(ledger, pool, provider.url)
        await asyncio.sleep(0.2)
    assert [(t.status, t.error_code) for t in tasks] == [
        (TaskStatus.FAILED, ErrorCode.NEEDS_REVIEW)
    ] * 2
    row = await ledger.providers.get(request.request_key)
    assert row is not None and row.task_id == first  # the row names only the first
    return first, twin, request.request_key


async def test_both_twins_waiting_on_one_request_are_listed_and_a_resend_settles_both(
    ledger: Ledger, pool: ParserPool, provider: DemoProvider, settings: Settings
) -> None:
    first, twin, key = await twins_waiting_for_review(ledger, pool, provider)
    listed = cli(settings, "--json", "review")
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)
    assert sorted(e["task_id"] for e in entries) == sorted([first, twin])
    assert {e["request_key"] for e in entries} == {key}
    assert twin[:8] in cli(settings, "review").stdout

    decided = cli(settings, "--actor", "ana", "review", "resend", twin[:8], "--reason", "seen")
    assert decided.returncode == 0, decided.stderr
    for task_id in (first, twin):
        assert (await ledger.reads.get_task(task_id)).status is TaskStatus.QUEUED
        lines = [e for e in await ledger.reads.task_history(task_id) if e.actor == "ana"]
        assert len(lines) == 1 and "resend approved after review: seen" in (lines[0].reason or "")
    history = await ledger.reads.task_history(first)
    assert f"decided on task {twin[:8]}" in (history[-1].reason or "")
    assert cli(settings, "--json", "review").stdout.strip() == "[]"

    for _ in range(10):
        await run_worker(ledger, pool, provider.url)
        tasks = [await ledger.reads.get_task(t) for t in (first, twin)]
        if all(t.status is TaskStatus.SUCCEEDED for t in tasks):
            break
        await asyncio.sleep(0.2)
    assert [t.status for t in tasks] == [TaskStatus.SUCCEEDED] * 2
    # The person allowed one more send, and one is what the provider got.
    assert provider.submits_of(key) == 1


async def test_marking_a_shared_request_failed_from_the_twin_fails_both(
    ledger: Ledger, pool: ParserPool, provider: DemoProvider, settings: Settings
) -> None:
    first, twin, key = await twins_waiting_for_review(ledger, pool, provider)
    marked = cli(settings, "--actor", "ana", "review", "fail", twin, "--reason", "model retired")
    assert marked.returncode == 0, marked.stderr
    for task_id in (first, twin):
        task = await ledger.reads.get_task(task_id)
        assert (task.status, task.error_code, task.error_detail) == (
            TaskStatus.FAILED,
            ErrorCode.PROVIDER_FAILED,
            "model retired",
        )
        lines = [e for e in await ledger.reads.task_history(task_id) if e.actor == "ana"]
        assert len(lines) == 1 and "marked failed after review" in (lines[0].reason or "")
    request = await ledger.providers.get(key)
    assert request is not None and request.state is RequestState.FAILED
    assert cli(settings, "review", "fail", first, "--reason", "again").returncode == 3
    assert provider.submits_of(key) == 0


async def test_lost_replies_recovered_by_reconcile_do_not_leave_the_task_failed(
    ledger: Ledger, pool: ParserPool, provider: DemoProvider, settings: Settings
) -> None:
    """A document of four embedding batches, every reply lost: each attempt loses
    one more batch, so the third ends failed outcome_unknown. Once reconcile recovers
    what the task waits on, the task goes on (requeued by reconcile) instead of
    staying failed with every request recovered."""
    data = note(40, paragraphs=2500)
    task_id = await submit(ledger, data, "big.md")
    provider.faults(lose_reply=1.0)
    for _ in range(3):  # one attempt a run, however slow the machine (see patient())
        await make_due(ledger, task_id)
        await run_worker(patient(ledger), pool, provider.url)
    task = await ledger.reads.get_task(task_id)
    assert (task.status, task.error_code, task.attempt) == (
        TaskStatus.FAILED,
        ErrorCode.OUTCOME_UNKNOWN,
        3,
    )

    reconciled = cli(settings, "reconcile", "--all")
    assert reconciled.returncode == 0, reconciled.stderr
    assert "found -> recovered" in reconciled.stdout
    states = await requests_of(ledger, task_id)
    assert set(states) <= {RequestState.DONE, RequestState.RECOVERED}, states
    task = await ledger.reads.get_task(task_id)
    assert task.status is TaskStatus.QUEUED, task
    last = (await ledger.reads.task_history(task_id))[-1]
    assert last.actor == RECONCILE_ACTOR and "goes on" in (last.reason or "")

    provider.faults(lose_reply=0.0)
    await run_worker(ledger, pool, provider.url)
    task = await ledger.reads.get_task(task_id)
    assert task.status is TaskStatus.SUCCEEDED, task
    stats = provider.stats()
    assert stats["submits"] == stats["distinct_keys"] == 4


async def test_an_outcome_unknown_on_a_request_settled_meanwhile_is_not_a_failure(
    ledger: Ledger, pool: ParserPool, provider: DemoProvider
) -> None:
    """The race beside the requeue: another process recovered the request while this
    attempt was looking it up and failing on it. That failure counts for nothing."""
    task_id = await submit(ledger, note(41), "race.md")
    provider.faults(lose_reply=1.0)
    await run_worker(patient(ledger), pool, provider.url)  # one attempt only
    (request,) = await ledger.providers.for_task(task_id)
    assert request.state is RequestState.UNKNOWN
    provider.faults(lose_reply=0.0)
    await make_due(ledger, task_id)
    # The next attempt is about to look the request up (a worker's claim) ...
    (claim,) = await ledger.queue.claim_next("w-race")
    # ... while a reconcile elsewhere recovers it (not in flight: sent by attempt 1).
    assert [d.state for d in await reconcile_now(ledger)] == [RequestState.RECOVERED]
    failed = await ledger.queue.fail(
        claim, ErrorCode.OUTCOME_UNKNOWN, "lookup failed", waits_for_request=request.request_key
    )
    assert failed is not None and failed.status is TaskStatus.RETRY_WAIT
    assert failed.max_attempts == claim.max_attempts + 1  # not counted


@pytest.mark.slow
async def test_chaos_leaves_no_task_failed_outcome_unknown_with_its_requests_recovered(
    ledger: Ledger, settings: Settings, provider: DemoProvider
) -> None:
    """Documents of three to five batches, 60% of replies lost, workers killed at random: at the
    end, no task is failed outcome_unknown while every request it waits on was
    recovered; nothing was executed twice."""
    task_ids = [
        await submit(ledger, note(300 + i, paragraphs=1800 + 200 * i), f"c{i}.md")
        for i in range(10)
    ]
    provider.faults(lose_reply=0.6, slow_s=0.02)
    chaos = random.Random(5)
    args = ("worker", "--loop", "--provider", provider.url, "--lease", "2")
    workers = [start_cli(settings, *args) for _ in range(2)]
    settled = {TaskStatus.SUCCEEDED, TaskStatus.FAILED}
    deadline = time.monotonic() + 150
    try:
        kills = 0
        while time.monotonic() < deadline:
            tasks = [await ledger.reads.get_task(t) for t in task_ids]
            if all(t.status in settled for t in tasks):
                break
            await asyncio.sleep(chaos.uniform(0.3, 1.0))
            if kills < 6:
                victim = chaos.randrange(len(workers))
                workers[victim].send_signal(signal.SIGKILL)
                workers[victim].communicate(timeout=10)
                workers[victim] = start_cli(settings, *args)
                kills += 1
            else:
                await reconcile_now(ledger)
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            w.communicate(timeout=30)
    await reconcile_now(ledger)  # whatever is still unknown is looked up once more
    for task_id in task_ids:
        task = await ledger.reads.get_task(task_id)
        if (task.status, task.error_code) != (TaskStatus.FAILED, ErrorCode.OUTCOME_UNKNOWN):
            continue
        keys = await ledger.transactions.read(
            functools.partial(requests_waited_on, task_id=task.task_id, attempt=task.attempt)
        )
        states = [r.state for k in keys if (r := await ledger.providers.get(k)) is not None]
        # Failed outcome_unknown only while what it waits on is still unknown.
        assert RequestState.UNKNOWN in states, (task, states)
    stats = provider.stats()
    assert stats["lost_replies"] > 0
    assert stats["submits"] == stats["distinct_keys"] == stats["executions"]


async def test_a_resend_after_the_provider_failed_the_request_runs_it_once_more(
    ledger: Ledger, settings: Settings, tmp_path: Path
) -> None:
    """The provider died while running the request (so it is failed there), reconcile
    settled it failed, a person resent it: it runs again, once."""
    task_id = await submit(ledger, note(50), "slow.md")
    db = tmp_path / "slow-provider.sqlite3"
    slow = start_provider(db, "--slow", "30")
    port = port_of(slow.url)
    worker = start_cli(settings, "worker", "--until-idle", "--provider", slow.url)
    try:
        for _ in range(200):  # until the provider is working on it
            if slow.stats()["executions"] == 1:
                break
            await asyncio.sleep(0.05)
        slow.process.send_signal(signal.SIGKILL)
        slow.process.communicate(timeout=10)
        worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert (await ledger.reads.get_task(task_id)).error_code is ErrorCode.OUTCOME_UNKNOWN
    # Restarted on its database and address: what was running there has failed.
    again = start_provider(db, "--port", port)
    try:
        reconciled = cli(settings, "reconcile", "--all")
        assert "failed -> failed" in reconciled.stdout, reconciled.stdout
        await wait_claimable(ledger, task_id)
        ran = cli(settings, "worker", "--until-idle", "--provider", again.url)
        assert ran.returncode == 0, ran.stderr
        task = await ledger.reads.get_task(task_id)
        assert (task.status, task.error_code) == (TaskStatus.FAILED, ErrorCode.PROVIDER_FAILED)
        resent = cli(settings, "review", "resend", task_id, "--reason", "provider fixed")
        assert resent.returncode == 0, resent.stderr
        ran = cli(settings, "worker", "--until-idle", "--provider", again.url)
        assert ran.returncode == 0, ran.stderr
        task = await ledger.reads.get_task(task_id)
        assert task.status is TaskStatus.SUCCEEDED, (task, ran.stdout)
        stats = again.stats()
        assert (stats["submits"], stats["executions"], stats["distinct_keys"]) == (2, 2, 1)
        # Done now: a repeat, whatever it asks, is answered from that execution.
        async with httpx.AsyncClient(base_url=again.url) as http:
            (request,) = await ledger.providers.for_task(task_id)
            body = {"request_key": request.request_key, "texts": ["x"], "retry_failed": True}
            assert (await http.post("/v1/embeddings", json=body)).status_code == 200
        assert again.stats()["executions"] == 2
    finally:
        again.stop()


def provider_running(database: Path) -> int:
    """How many requests the demo provider is still executing (read from its file)."""
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as conn:
        query = "SELECT COUNT(*) FROM requests WHERE status = 'running'"
        (running,) = conn.execute(query).fetchone()
    return int(running)


async def test_a_dead_workers_request_is_due_once_its_lease_ran_out(
    ledger: Ledger, provider: DemoProvider, settings: Settings, tmp_path: Path
) -> None:
    """The worker is killed mid-call and nobody reaps its task: once the lease ran
    out, ``reconcile --all`` looks the request up (it is no longer in flight)."""
    task_id = await submit(ledger, note(90), "killed.md")
    provider.faults(slow_s=2.0)
    # A lease long enough that the first reconcile surely runs inside it, on a loaded
    # machine too (3 s ran out before a loaded reconcile process had started).
    worker = start_cli(
        settings, "worker", task_id, "--provider", provider.url, "--lease", str(DEAD_LEASE_S)
    )
    deadline = time.monotonic() + LOADED_WAIT_S
    while time.monotonic() < deadline:
        if provider.stats()["submits"] >= 1:
            break
        await asyncio.sleep(0.05)
    worker.send_signal(signal.SIGKILL)
    worker.communicate(timeout=10)
    assert (await ledger.reads.get_task(task_id)).status is TaskStatus.RUNNING
    in_flight = cli(settings, "reconcile", "--all")
    assert "nothing to reconcile" in in_flight.stdout  # its lease still runs

    # The lease runs out and the provider finishes the call (waited for, not slept:
    # on a loaded machine the provider can take longer than the 2 s it is set to).
    lease_ends = (await ledger.reads.get_task(task_id)).lease_expires_at
    assert lease_ends is not None
    deadline = time.monotonic() + LOADED_WAIT_S
    while time.monotonic() < deadline:
        if time.time() > lease_ends and not provider_running(tmp_path / "provider.sqlite3"):
            break
        await asyncio.sleep(0.1)
    assert (await ledger.reads.get_task(task_id)).status is TaskStatus.RUNNING  # not reaped
    reconciled = cli(settings, "reconcile", "--all")
    assert reconciled.returncode == 0, reconciled.stderr
    assert "found -> recovered" in reconciled.stdout, reconciled.stdout
    assert provider.stats()["submits"] == 1
