"""Drills: calls to a remote embedding provider that go wrong, against the real demo
provider process (``ingestdesk provider serve``) and real workers. Each drill
asserts the evidence left behind (the provider ledger, the task, the provider's own
counts) and the next step (reconcile, review), and that nothing was sent twice."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from sqlalchemy import text

from core import ErrorCode, Ledger, Settings, TaskStatus, sqlite_url
from core.ingest.http_provider import HttpProvider
from core.ingest.parse_pool import ParserPool
from core.ingest.providers import request_key
from core.ingest.reconcile import Answer, reconcile
from core.ingest.worker import Worker
from core.states import RequestState, Stage
from core.store import ObjectStore
from tests.core.test_worker import cli, start_cli

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="drives real processes with signals"
)

STARTUP_S = 20.0  # seconds a provider process may take to print its URL
PATIENT_BACKOFF_S = 600.0  # seconds; see patient()


@dataclass
class DemoProvider:
    url: str
    process: subprocess.Popen[str]

    def faults(self, **faults: Any) -> None:
        httpx.post(f"{self.url}/v1/faults", json=faults, timeout=5).raise_for_status()

    def info(self) -> dict[str, Any]:
        found: dict[str, Any] = httpx.get(f"{self.url}/v1/info", timeout=5).json()
        return found

    def stats(self) -> dict[str, int]:
        found: dict[str, int] = httpx.get(f"{self.url}/v1/stats", timeout=5).json()
        return found

    def stop(self) -> None:
        self.process.terminate()
        self.process.communicate(timeout=10)  # waits, and closes the pipes

    def submits_of(self, key: str) -> int:
        answer = httpx.get(f"{self.url}/v1/embeddings/{key}", timeout=5)
        return 0 if answer.status_code == 404 else int(answer.json()["submits"])


def start_provider(db: Path, *args: str) -> DemoProvider:
    command = [sys.executable, "-m", "core.cli", "provider", "serve", "--port", "0"]
    process = subprocess.Popen(
        [*command, "--db", str(db), "--seed", "7", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("provider listening on http://"), (line, process.stderr)
    return DemoProvider(line.split()[-1], process)


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[DemoProvider]:
    started = start_provider(tmp_path / "provider.sqlite3")
    yield started
    if started.process.poll() is None:
        started.stop()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    # Quick automatic retries and short leases: drills wait for them in real time.
    return Settings(
        db_url=sqlite_url(tmp_path / "ledger.db"),
        store_root=tmp_path / "store",
        backoff_base_s=0.05,
        backoff_max_s=0.2,
        lease_s=2.0,
    )


@pytest.fixture
async def ledger(settings: Settings) -> AsyncIterator[Ledger]:
    opened = await Ledger.open(settings)
    yield opened
    await opened.close()


@pytest.fixture
async def pool() -> AsyncIterator[ParserPool]:
    async with ParserPool(workers=1) as p:
        yield p


def note(i: int, paragraphs: int = 3) -> bytes:
    """A distinct text document (distinct texts: distinct provider requests)."""
    body = "\n\n".join(
        f"Note {i} paragraph {p}: ledger lease reconcile provider evidence {i * 31 + p}."
        for p in range(paragraphs)
    )
    return body.encode()


async def submit(ledger: Ledger, data: bytes, name: str) -> str:
    doc = await ledger.operator.upload(data, name)
    return (await ledger.operator.submit(doc.document_id)).task_id


def patient(ledger: Ledger) -> Ledger:
    """The drill's ledger with a retry backoff no burst run outlasts: a worker run until
    idle then stops after one attempt. With the drills' 0.05-0.2 s a loaded machine's
    worker found the retry due before it went idle and ran a second attempt, whose own
    look-up settled the request before the drill could."""
    slow = ledger.settings.with_(backoff_base_s=PATIENT_BACKOFF_S, backoff_max_s=PATIENT_BACKOFF_S)
    return Ledger(ledger.transactions, slow)


async def make_due(ledger: Ledger, task_id: str) -> None:
    """The task's automatic retry is due now (what a patient() ledger's backoff would
    reach in its own time)."""

    def due(conn: Any) -> None:
        conn.execute(
            text("UPDATE ingestion_tasks SET next_attempt_at = :now WHERE id = :id"),
            {"now": time.time(), "id": task_id},
        )

    await ledger.transactions.write(due)


async def run_worker(ledger: Ledger, pool: ParserPool, url: str) -> Worker:
    """One in-process worker with the remote provider, until nothing is claimable."""
    remote = await HttpProvider.connect(url)
    try:
        worker = Worker(ledger, "w-drill", pool=pool, embedder=remote)
        await worker.run(until_idle=True)
    finally:
        await remote.aclose()
    return worker


async def reconcile_now(ledger: Ledger, url: str | None = None) -> list[Any]:
    return await reconcile(
        ledger,
        ObjectStore(ledger.settings.store_root),
        HttpProvider.connect,
        endpoint=url,
        everything=True,
    )


async def the_request(ledger: Ledger, task_id: str) -> Any:
    found = await ledger.providers.for_task(task_id)
    assert len(found) == 1, found
    return found[0]


async def wait_claimable(ledger: Ledger, task_id: str) -> None:
    """Until the task's automatic retry is due."""
    for _ in range(100):
        task = await ledger.reads.get_task(task_id)
        if task.next_attempt_at is None or task.next_attempt_at <= time.time():
            return
        await asyncio.sleep(0.05)


# --------------------------------------------------------------------- drills


async def test_a_lost_reply_leaves_the_request_unknown_then_reconcile_recovers_it(
    ledger: Ledger, pool: ParserPool, provider: DemoProvider
) -> None:
    task_id = await submit(ledger, note(1), "lost-reply.md")
    provider.faults(lose_reply=1.0)
    await run_worker(ledger, pool, provider.url)

    task = await ledger.reads.get_task(task_id)
    assert task.status in (TaskStatus.RETRY_WAIT, TaskStatus.FAILED)
    assert task.error_code is ErrorCode.OUTCOME_UNKNOWN
    request = await the_request(ledger, task_id)
    assert request.state is RequestState.UNKNOWN
    assert provider.submits_of(request.request_key) == 1  # the provider did receive it

    provider.faults(lose_reply=0.0)
    decisions = await reconcile_now(ledger)
    assert [(d.answer, d.state) for d in decisions] == [(Answer.FOUND, RequestState.RECOVERED)]

    await wait_claimable(ledger, task_id)
    await run_worker(ledger, pool, provider.url)
    task = await ledger.reads.get_task(task_id)
    assert task.status is TaskStatus.SUCCEEDED
    assert len(await ledger.reads.chunks(task.document_id)) > 0
    # The next run used the recovered result: still exactly one submit.
    assert provider.submits_of(request.request_key) == 1
    assert provider.stats()["submits"] == 1


async def test_a_damaged_reply_is_not_done_it_is_fetched_again_and_verified(
    ledger: Ledger, pool: ParserPool, provider: DemoProvider
) -> None:
    task_id = await submit(ledger, note(2), "truncated.md")
    provider.faults(truncate=1.0)
    await run_worker(ledger, pool, provider.url)

    task = await ledger.reads.get_task(task_id)
    assert task.status is TaskStatus.SUCCEEDED, task
    request = await the_request(ledger, task_id)
    assert request.state is RequestState.RECOVERED
    assert request.result_key and request.result_sha256
    stats = provider.stats()
    assert (stats["submits"], stats["truncated_replies"]) == (1, 1)
    assert stats["fetches"] >= 1


async def test_lookup_unavailable_keeps_the_request_unknown_until_the_provider_answers(
    ledger: Ledger, pool: ParserPool, provider: DemoProvider
) -> None:
    task_id = await submit(ledger, note(3), "lookup.md")
    provider.faults(lose_reply=1.0)
    await run_worker(patient(ledger), pool, provider.url)
    provider.faults(lose_reply=0.0, fail_lookups=True)

    decisions = await reconcile_now(ledger)
    assert [(d.answer, d.state) for d in decisions] == [
        (Answer.LOOKUP_UNAVAILABLE, RequestState.UNKNOWN)
    ]
    request = await the_request(ledger, task_id)
    assert request.lookups == 1 and request.next_lookup_at is not None

    provider.faults(fail_lookups=False)
    decisions = await reconcile_now(ledger)
    assert [(d.answer, d.state) for d in decisions] == [(Answer.FOUND, RequestState.RECOVERED)]
    assert provider.stats()["submits"] == 1


async def test_a_worker_says_a_lookup_without_an_answer_settled_nothing(
    ledger: Ledger, pool: ParserPool, provider: DemoProvider
) -> None:
    """The worker's own look-up pass: with no answer it logged "reconciled ...
    answer=lookup_unavailable", as if something had been settled. It says the request
    is still unknown; once the provider answers, that it was reconciled."""
    task_id = await submit(ledger, note(9), "looked-up.md")
    provider.faults(lose_reply=1.0)
    await run_worker(patient(ledger), pool, provider.url)
    provider.faults(lose_reply=0.0, fail_lookups=True)
    lines: list[str] = []
    remote = await HttpProvider.connect(provider.url)
    try:
        worker = Worker(
            ledger, "w-lookup", pool=pool, embedder=remote, on_event=lambda e: lines.append(e.line)
        )
        await worker.reconcile_once()
        assert len(lines) == 1, lines
        assert lines[0].startswith("looked up request="), lines
        assert f"task={task_id[:8]}" in lines[0]
        assert "answer=lookup_unavailable -> still unknown" in lines[0], lines

        provider.faults(fail_lookups=False)

        def due(conn: Any) -> None:  # the look-up backoff has run out
            conn.execute(text("UPDATE provider_requests SET next_lookup_at = 0"))

        await ledger.transactions.write(due)
        lines.clear()
        await worker.reconcile_once()
        assert len(lines) == 1 and lines[0].startswith("reconciled request="), lines
        assert "answer=found -> recovered" in lines[0], lines
    finally:
        await remote.aclose()


async def test_the_cli_reconcile_prints_each_decision_as_json(
    ledger: Ledger, pool: ParserPool, provider: DemoProvider, settings: Settings
) -> None:
    task_id = await submit(ledger, note(4), "cli.md")
    provider.faults(lose_reply=1.0)
    await run_worker(ledger, pool, provider.url)
    provider.faults(lose_reply=0.0)

    done = cli(settings, "--json", "reconcile", "--all")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert [(d["task_id"], d["answer"], d["state"]) for d in answer["decisions"]] == [
        (task_id, "found", "recovered")
    ]
    assert answer["requests"]["recovered"] == 1
    again = cli(settings, "reconcile")
    assert again.returncode == 0
    assert "nothing to reconcile" in again.stdout


async def run_task(
    ledger: Ledger, pool: ParserPool, url: str, task_id: str, timeout_s: float = 30.0
) -> list[str]:
    """One attempt of one task by an in-process worker (no reap, no reconcile, no
    second attempt however quick its retry): the lines the worker logged."""
    lines: list[str] = []
    remote = await HttpProvider.connect(url, timeout_s=timeout_s)
    try:
        worker = Worker(
            ledger, "w-once", pool=pool, embedder=remote, on_event=lambda e: lines.append(e.line)
        )
        assert await worker.run_task(task_id)
    finally:
        await remote.aclose()
    return lines


async def test_a_lookup_that_finds_the_request_is_counted_as_the_provider_counts_it(
    ledger: Ledger, pool: ParserPool, provider: DemoProvider
) -> None:
    # A recovered request said "lookups 0" while the provider had counted one.
    task_id = await submit(ledger, note(10), "counted.md")
    provider.faults(lose_reply=1.0)
    await run_task(ledger, pool, provider.url, task_id)
    provider.faults(lose_reply=0.0)
    decisions = await reconcile_now(ledger)
    assert [(d.answer, d.state) for d in decisions] == [(Answer.FOUND, RequestState.RECOVERED)]
    request = await the_request(ledger, task_id)
    assert request.lookups == provider.stats()["lookups"] == 1


async def test_a_call_that_timed_out_is_recorded_as_no_reply_not_as_a_lost_one(
    ledger: Ledger, pool: ParserPool, provider: DemoProvider
) -> None:
    # Every unusable reply was recorded as "sent; the reply was lost".
    task_id = await submit(ledger, note(14), "timed-out.md")
    provider.faults(slow_s=6.0)
    await run_task(ledger, pool, provider.url, task_id, timeout_s=1.5)
    request = await the_request(ledger, task_id)
    assert request.state is RequestState.UNKNOWN
    assert request.detail is not None and "lost" not in request.detail
    assert request.detail.startswith("sent; no usable reply: ")
    assert "no reply (ReadTimeout)" in request.detail


async def test_a_failure_in_the_provider_call_records_the_embedding_progress_it_reached(
    ledger: Ledger, pool: ParserPool, provider: DemoProvider
) -> None:
    # The worker logged embedding 0/9; the ledger kept the claim's download total: 0/1.
    task_id = await submit(ledger, note(11, paragraphs=120), "many-chunks.md")
    provider.faults(unavailable=True)
    lines = await run_task(ledger, pool, provider.url, task_id)
    task = await ledger.reads.get_task(task_id)
    assert task.error_code is ErrorCode.PROVIDER_UNAVAILABLE
    logged = [line for line in lines if line.startswith("stage=embedding")]
    assert logged == [f"stage=embedding {task.completed}/{task.total}"], (logged, task)
    assert task.stage is Stage.EMBEDDING and task.total > 1
    assert (await ledger.reads.task_history(task_id))[-1].stage is Stage.EMBEDDING


async def test_a_request_the_provider_never_saw_is_not_called_sent_again_before_it_is(
    ledger: Ledger, pool: ParserPool, tmp_path: Path
) -> None:
    safe = start_provider(tmp_path / "resend-safe.sqlite3", "--declare-resend-safe")
    try:
        task_id = await submit(ledger, note(12), "resend-safe.md")
        safe.faults(lose_request=1.0)
        await run_task(ledger, pool, safe.url, task_id)
        safe.faults(lose_request=0.0)
        (decision,) = await reconcile_now(ledger)
        assert (decision.answer, decision.state) == (Answer.NOT_FOUND, RequestState.RESEND)
        # Reconcile only made it sendable: it said "sent again" with nothing sent.
        assert safe.stats()["submits"] == 0
        assert "; sent again" not in decision.detail and "not sent yet" in decision.detail
        await wait_claimable(ledger, task_id)
        await run_task(ledger, pool, safe.url, task_id)
        assert (await ledger.reads.get_task(task_id)).status is TaskStatus.SUCCEEDED
        assert safe.stats()["submits"] == 1
    finally:
        safe.stop()


@pytest.mark.parametrize("sender", ["succeeds", "loses its reply"])
async def test_a_task_waiting_on_a_request_another_task_sent_goes_on_when_the_sender_ends(
    ledger: Ledger, pool: ParserPool, provider: DemoProvider, sender: str
) -> None:
    # Other bytes, the same chunks: no twin by processing key, one provider request.
    # The second task meets it in flight and waits; it waited the whole KEY_WAIT_S, so
    # a burst worker (--until-idle) ended with it still pending.
    first = await submit(ledger, note(13), "shared-a.md")
    second = await submit(ledger, note(13) + b"\n", "shared-b.md")
    provider.faults(slow_s=3.0, lose_reply=1.0 if sender == "loses its reply" else 0.0)
    remote = await HttpProvider.connect(provider.url)
    try:
        worker = Worker(ledger, "w-share", pool=pool, embedder=remote, concurrency=2)
        await worker.run(until_idle=True)
    finally:
        await remote.aclose()
    tasks = [await ledger.reads.get_task(t) for t in (first, second)]
    assert [t.status for t in tasks] == [TaskStatus.SUCCEEDED] * 2, tasks
    assert provider.stats()["submits"] == 1
    reasons = [e.reason or "" for t in (first, second) for e in await ledger.reads.task_history(t)]
    assert sum("which sent the same provider request" in r for r in reasons) == 1


class Blackhole:
    """A provider front that answers ``/v1/info`` like the real one and swallows
    every submit without a reply: a worker killed while waiting on it has committed
    its intent, and the real provider never received anything."""

    def __init__(self, info: dict[str, Any]) -> None:
        self.info = json.dumps(info).encode()
        self.listener = socket.socket()
        # The drill starts the provider on this port once the hole is closed: its
        # connections, still closing then, must not keep the port.
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            request = conn.recv(65536)
            if request.startswith(b"GET /v1/info"):
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(self.info)}\r\nConnection: close\r\n\r\n".encode()
                    + self.info
                )
                conn.close()
            else:
                self.held.append(conn)  # never answered

    def close(self) -> None:
        # Wakes the accept() above: a listener closed under a blocked accept keeps
        # its port, and the drill starts the provider on it.
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for conn in self.held:
            conn.close()


async def test_a_crash_after_the_intent_and_before_sending_goes_to_review_not_resent(
    ledger: Ledger, pool: ParserPool, provider: DemoProvider, settings: Settings
) -> None:
    task_id = await submit(ledger, note(5), "crash-before-send.md")
    hole = Blackhole(provider.info())
    try:
        worker = start_cli(settings, "worker", task_id, "--provider", hole.url, "--lease", "2")
        for _ in range(200):  # until the intent is committed and the call hangs
            if await ledger.providers.for_task(task_id):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        worker.send_signal(signal.SIGKILL)
        worker.communicate(timeout=10)
    finally:
        hole.close()
    request = await the_request(ledger, task_id)
    assert request.state is RequestState.UNKNOWN
    # The provider answers where the request was sent (a request is only ever looked
    # up there), and it never received it.
    provider.stop()
    behind = Path(settings.store_root).parent / "behind-the-hole.sqlite3"
    provider = start_provider(behind, "--port", hole.url.rsplit(":", 1)[1])
    try:
        await the_drill_goes_on(ledger, pool, provider, settings, task_id)
    finally:
        provider.stop()


async def the_drill_goes_on(
    ledger: Ledger, pool: ParserPool, provider: DemoProvider, settings: Settings, task_id: str
) -> None:
    await asyncio.sleep(settings.lease_s + 0.2)  # the dead worker's lease runs out
    await ledger.queue.reap()
    decisions = await reconcile_now(ledger, provider.url)
    assert [(d.answer, d.state) for d in decisions] == [
        (Answer.NOT_FOUND, RequestState.NEEDS_REVIEW)
    ]
    assert provider.stats()["submits"] == 0

    # The next attempt meets the decision-less request: failed, needs_review.
    await wait_claimable(ledger, task_id)
    await run_worker(ledger, pool, provider.url)
    task = await ledger.reads.get_task(task_id)
    assert (task.status, task.error_code) == (TaskStatus.FAILED, ErrorCode.NEEDS_REVIEW)
    assert provider.stats()["submits"] == 0

    shown = cli(settings, "task", task_id)
    assert "provider  1 needs_review" in shown.stdout, shown.stdout
    assert "not found at the provider" in shown.stdout
    listed = cli(settings, "--json", "review")
    assert [r["task_id"] for r in json.loads(listed.stdout)] == [task_id]
    decided = cli(settings, "--actor", "ana", "review", "resend", task_id[:8], "--reason", "seen")
    assert decided.returncode == 0, decided.stderr
    await run_worker(ledger, pool, provider.url)
    task = await ledger.reads.get_task(task_id)
    assert task.status is TaskStatus.SUCCEEDED
    assert provider.stats()["submits"] == 1
    history = await ledger.reads.task_history(task_id)
    assert any(e.actor == "ana" and "resend approved" in (e.reason or "") for e in history)


async def test_a_request_lost_on_its_way_in_is_not_found_and_waits_for_a_person(
    ledger: Ledger, pool: ParserPool, provider: DemoProvider
) -> None:
    task_id = await submit(ledger, note(9), "lost-request.md")
    provider.faults(lose_request=1.0)
    await run_worker(patient(ledger), pool, provider.url)
    task = await ledger.reads.get_task(task_id)
    assert task.error_code is ErrorCode.OUTCOME_UNKNOWN  # the worker cannot tell yet
    provider.faults(lose_request=0.0)
    decisions = await reconcile_now(ledger)
    assert [(d.answer, d.state) for d in decisions] == [
        (Answer.NOT_FOUND, RequestState.NEEDS_REVIEW)
    ]
    stats = provider.stats()
    assert (stats["submits"], stats["lost_requests"]) == (0, 1)


async def test_marking_a_reviewed_request_failed_keeps_it_from_being_sent(
    ledger: Ledger, pool: ParserPool, provider: DemoProvider, settings: Settings
) -> None:
    task_id = await submit(ledger, note(6), "mark-failed.md")
    provider.faults(lose_reply=1.0)
    await run_worker(ledger, pool, provider.url)
    request = await the_request(ledger, task_id)
    # The provider loses its record (a restart without its database, at the same
    # address: a request is only ever looked up where it was sent): not found.
    provider.stop()
    fresh = start_provider(
        Path(settings.store_root).parent / "fresh-provider.sqlite3",
        "--port",
        provider.url.rsplit(":", 1)[1],
    )
    try:
        decisions = await reconcile_now(ledger, fresh.url)
        assert [d.state for d in decisions] == [RequestState.NEEDS_REVIEW]
        refused = cli(settings, "review", "fail", task_id)
        assert refused.returncode == 2 and "reason" in refused.stderr
        await wait_claimable(ledger, task_id)
        await run_worker(ledger, pool, fresh.url)
        marked = cli(settings, "review", "fail", task_id, "--reason", "model retired")
        assert marked.returncode == 0, marked.stderr
        task = await ledger.reads.get_task(task_id)
        assert (task.status, task.error_code) == (TaskStatus.FAILED, ErrorCode.PROVIDER_FAILED)
        # An operator's plain retry does not send a request marked failed.
        await ledger.operator.retry(task_id)
        await run_worker(ledger, pool, fresh.url)
        task = await ledger.reads.get_task(task_id)
        assert task.error_code is ErrorCode.PROVIDER_FAILED
        assert fresh.submits_of(request.request_key) == 0
        again = cli(settings, "review", "fail", task_id, "--reason", "twice")
        assert again.returncode == 3  # nothing waits for review any more
    finally:
        fresh.stop()


async def test_a_worker_killed_between_the_providers_success_and_its_commit_is_not_resent(
    ledger: Ledger, pool: ParserPool, provider: DemoProvider, settings: Settings
) -> None:
    task_id = await submit(ledger, note(7), "killed-mid-call.md")
    provider.faults(slow_s=3.0)
    worker = start_cli(settings, "worker", task_id, "--provider", provider.url, "--lease", "2")
    for _ in range(200):  # until the provider has the request (and sleeps on it)
        if provider.stats()["submits"] == 1:
            break
        await asyncio.sleep(0.05)
    worker.send_signal(signal.SIGKILL)
    worker.communicate(timeout=10)
    provider.faults(slow_s=0.0)
    assert (await the_request(ledger, task_id)).state is RequestState.UNKNOWN

    await asyncio.sleep(3.5)  # the provider finishes; the dead worker's lease runs out
    ran = await run_worker(ledger, pool, provider.url)  # reaps, reconciles, runs
    task = await ledger.reads.get_task(task_id)
    assert task.status is TaskStatus.SUCCEEDED, (task, ran.stats)
    # The reap records the stage the dead attempt was in (it said download: the
    # coalesced progress had not been written before the call).
    reaped = [e for e in await ledger.reads.task_history(task_id) if e.actor == "reaper"]
    assert [e.stage for e in reaped] == [Stage.EMBEDDING]
    assert (await the_request(ledger, task_id)).state is RequestState.RECOVERED
    assert provider.stats()["submits"] == 1


async def test_two_workers_on_one_task_one_claims_and_the_provider_sees_one_submit(
    ledger: Ledger, provider: DemoProvider, settings: Settings
) -> None:
    task_id = await submit(ledger, note(8), "race.md")
    workers = [
        start_cli(settings, "--json", "worker", task_id, "--provider", provider.url)
        for _ in range(2)
    ]
    answers = [json.loads(w.communicate(timeout=60)[0]) for w in workers]
    assert sorted(len(a["claimed"]) for a in answers) == [0, 1]
    assert sorted(len(a["missed"]) for a in answers) == [0, 1]
    assert (await ledger.reads.get_task(task_id)).status is TaskStatus.SUCCEEDED
    assert provider.stats()["submits"] == provider.stats()["distinct_keys"] == 1


@dataclass
class Model:
    """What a request key reads of a provider."""

    name: str = "demo-provider"
    version: str = "m1"
    dimensions: int = 256


TEXTS = st.lists(st.text(max_size=40), min_size=1, max_size=8)


@given(texts=TEXTS)
def test_the_same_texts_for_the_same_model_make_the_same_request_key(texts: list[str]) -> None:
    assert request_key(Model(), texts) == request_key(Model(), list(texts))  # type: ignore[arg-type]


@given(texts=TEXTS, other=TEXTS)
def test_other_texts_or_another_split_make_another_request_key(
    texts: list[str], other: list[str]
) -> None:
    assume(texts != other)
    assert request_key(Model(), texts) != request_key(Model(), other)  # type: ignore[arg-type]


@given(texts=TEXTS, version=st.text(min_size=1, max_size=8), dims=st.integers(1, 4096))
def test_another_model_or_dimensions_make_another_request_key(
    texts: list[str], version: str, dims: int
) -> None:
    key = request_key(Model(), texts)  # type: ignore[arg-type]
    if version != "m1":
        assert key != request_key(Model(version=version), texts)  # type: ignore[arg-type]
    if dims != 256:
        assert key != request_key(Model(dimensions=dims), texts)  # type: ignore[arg-type]


CHAOS_DEADLINE_S = 300.0  # seconds; about 30 s on an idle 2-core machine


@pytest.mark.slow
async def test_a_batch_with_workers_killed_and_replies_lost_ends_settled_and_never_twice(
    ledger: Ledger, settings: Settings, provider: DemoProvider
) -> None:
    documents = 50
    task_ids = [
        await submit(ledger, note(100 + i, paragraphs=1 + i % 4), f"n{i}.md")
        for i in range(documents)
    ]
    provider.faults(lose_reply=0.2, slow_s=0.05)
    chaos = random.Random(11)
    args = ("worker", "--loop", "--provider", provider.url, "--lease", "2", "--concurrency", "2")
    workers = [start_cli(settings, *args) for _ in range(2)]
    deadline = time.monotonic() + CHAOS_DEADLINE_S
    settled = {TaskStatus.SUCCEEDED, TaskStatus.FAILED}
    try:
        kills = 0
        while time.monotonic() < deadline:
            tasks = [await ledger.reads.get_task(t) for t in task_ids]
            if all(t.status in settled for t in tasks):
                break
            await asyncio.sleep(chaos.uniform(0.3, 1.2))
            if kills < 8:
                victim = chaos.randrange(len(workers))
                workers[victim].send_signal(signal.SIGKILL)
                workers[victim].communicate(timeout=10)
                workers[victim] = start_cli(settings, *args)
                kills += 1
            elif provider.stats()["lost_replies"] == 0:
                # On a loaded machine the kills can all land before a worker has sent
                # anything: the faults stay on until the provider has lost a reply.
                continue
            else:
                # Chaos over: unknown requests are looked up, as a worker's periodic
                # reconcile would, without waiting its period out.
                provider.faults(lose_reply=0.0)
                await reconcile_now(ledger)
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            w.communicate(timeout=30)

    tasks = [await ledger.reads.get_task(t) for t in task_ids]
    assert all(t.status in settled for t in tasks), [(t.status, t.error_code) for t in tasks]
    for t in tasks:
        if t.status is TaskStatus.FAILED:
            assert t.error_code is not None
        if t.error_code is ErrorCode.NEEDS_REVIEW:  # the evidence says why
            states = {r.state for r in await ledger.providers.for_task(t.task_id)}
            assert RequestState.NEEDS_REVIEW in states
    succeeded = [t for t in tasks if t.status is TaskStatus.SUCCEEDED]
    assert len(succeeded) >= documents // 2
    for t in succeeded:
        chunks = await ledger.reads.chunks(t.document_id)
        ordinals = [c.ordinal for c in chunks]
        assert ordinals == sorted(set(ordinals)), "duplicate chunks"
    stats = provider.stats()
    assert stats["lost_replies"] > 0  # the chaos really happened
    # Never twice: every request key the provider saw, it saw once.
    assert stats["submits"] == stats["distinct_keys"]


def test_credentials_in_the_provider_url_never_reach_the_ledger(
    tmp_path: Path, provider: DemoProvider
) -> None:
    """A worker given ``http://user:secret@host`` records the bare endpoint, neither the
    worker's log nor ``reconcile`` shows the secret, and a URL with a query (which
    would not travel with the requests) is refused without echoing it."""
    url = provider.url.replace("http://", "http://ops:hunter2@")
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "s")

    async def add() -> None:
        async with await Ledger.open(settings) as ledger:
            await submit(ledger, note(7), "with-credentials.md")

    asyncio.run(add())
    base = [sys.executable, "-m", "core.cli", "--db", settings.db_url, "--store"]
    base.append(str(settings.store_root))
    worker = subprocess.run(
        [*base, "worker", "--until-idle", "--provider", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert worker.returncode == 0, worker.stderr
    with_query = subprocess.run(
        [*base, "worker", "--until-idle", "--provider", f"{url}/?api_key=k3y-s3cret"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert with_query.returncode == 2
    assert "takes no query" in with_query.stderr
    reconciled = subprocess.run(
        [*base, "reconcile", "--all"], capture_output=True, text=True, timeout=60
    )
    assert reconciled.returncode == 0, reconciled.stderr
    with sqlite3.connect(tmp_path / "ledger.db") as conn:
        rows = conn.execute("SELECT endpoint, state FROM provider_requests").fetchall()
        options = conn.execute("SELECT options FROM ingestion_tasks").fetchall()
    conn.close()
    assert rows == [(provider.url, "done")]
    seen = [*map(str, rows), *map(str, options), worker.stdout, worker.stderr]
    seen += [reconciled.stdout, reconciled.stderr, with_query.stderr]
    assert not [text for text in seen if "hunter2" in text or "k3y-s3cret" in text]
