"""Workers end to end: real parser processes, real worker processes, real files."""

from __future__ import annotations

import asyncio
import functools
import json
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from core import (
    DocumentStatus,
    ErrorCode,
    Ledger,
    Settings,
    Stage,
    TaskStatus,
)
from core.ingest.embedder import HashingEmbedder, ProviderUnavailable
from core.ingest.parse_pool import ParserPool
from core.ingest.parsing import DEFAULT_PARSER
from core.ingest.worker import Worker, WorkerEvent
from tests import hostile
from tests.conftest import FakeClock
from tests.core.test_cli import (
    CLI_TIMEOUT_S,
    EXIT_INTERRUPTED,
    EXIT_OK,
    added,
    start_core_cli,
    task_row,
    write,
)
from tests.hostile import kill_busy_child

STARTUP_WAIT_S = 120.0  # seconds a worker process may take to start on a loaded machine
MARKDOWN = b"# Runbook\n\nRestart the ingestion worker when the lease expires.\n"


def cli(settings: Settings, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "core.cli",
            "--db",
            settings.db_url,
            "--store",
            str(settings.store_root),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_cli(settings: Settings, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "core.cli",
            "--db",
            settings.db_url,
            "--store",
            str(settings.store_root),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
async def pool() -> AsyncIterator[ParserPool]:
    async with ParserPool(workers=1) as p:
        yield p


async def add(ledger: Ledger, data: bytes, name: str) -> str:
    doc = await ledger.operator.upload(data, name)
    return (await ledger.operator.submit(doc.document_id)).task_id


async def drain(ledger: Ledger, pool: ParserPool, **kw: object) -> list[WorkerEvent]:
    events: list[WorkerEvent] = []
    worker = Worker(ledger, "w-test", pool=pool, on_event=events.append, **kw)  # type: ignore[arg-type]
    await worker.run(until_idle=True)
    return events


# ----------------------------------------------------------- seed checks


async def test_corrupt_pdf_fails_with_parse_error_and_retry_fails_again_on_attempt_2(
    ledger: Ledger, pool: ParserPool
) -> None:
    task_id = await add(ledger, hostile.truncated_pdf(), "broken.pdf")
    await drain(ledger, pool)
    task = await ledger.reads.get_task(task_id)
    assert (task.status, task.error_code, task.attempt) == (
        TaskStatus.FAILED,
        ErrorCode.PARSE_ERROR,
        1,
    )
    assert (await ledger.reads.get_document(task.document_id)).status is DocumentStatus.FAILED
    # Progress writes are coalesced, but a failure records the stage really reached
    # (the failures screen groups by it).
    assert task.stage is Stage.PARSE
    requeued = await ledger.operator.retry(task_id, actor="op")
    assert (requeued.status, requeued.attempt) == (TaskStatus.QUEUED, 1)
    await drain(ledger, pool)
    again = await ledger.reads.get_task(task_id)
    assert (again.status, again.error_code, again.attempt) == (
        TaskStatus.FAILED,
        ErrorCode.PARSE_ERROR,
        2,
    )


async def test_success_is_review_pending_and_not_searchable_until_published(
    ledger: Ledger, pool: ParserPool
) -> None:
    pdf = hostile.make_pdf(["Quarterly revenue grew.", "Leases expire after thirty seconds."])
    task_id = await add(ledger, pdf, "report.pdf")
    events = await drain(ledger, pool)
    task = await ledger.reads.get_task(task_id)
    assert task.status is TaskStatus.SUCCEEDED
    assert task.options["parser"] == DEFAULT_PARSER
    doc = await ledger.reads.get_document(task.document_id)
    assert doc.status is DocumentStatus.REVIEW_PENDING
    chunks = await ledger.reads.chunks(doc.document_id)
    assert {c.page for c in chunks} == {1, 2}
    assert await ledger.reads.search("leases") == []
    assert len(await ledger.reads.search("leases", include_unpublished=True)) == 1
    await ledger.versions.publish(doc.document_id)
    hits = await ledger.reads.search("leases")
    assert [(h.document_id, h.page) for h in hits] == [(doc.document_id, 2)]
    lines = [e.line for e in events]
    assert any(line.startswith("claimed task=") for line in lines)
    assert any(line.startswith("stage=parse") for line in lines)
    assert any(line.startswith("succeeded task=") for line in lines)


def test_api_can_answer_after_a_separate_worker_persists_chunks(
    settings: Settings, tmp_path: Path
) -> None:
    note = tmp_path / "runbook.md"
    note.write_bytes(MARKDOWN)
    added = cli(settings, "add", str(note), "--json")
    assert added.returncode == 0, added.stderr
    task = json.loads(added.stdout)[0]
    worked = cli(settings, "worker", task["task_id"])
    assert worked.returncode == 0, worked.stderr
    assert "claimed task=" in worked.stdout

    async def read() -> list[str]:
        ledger = await Ledger.open(settings)
        try:
            return [c.text for c in await ledger.reads.chunks(task["document_id"])]
        finally:
            await ledger.close()

    texts = asyncio.run(read())
    assert texts and "lease expires" in texts[0]


def test_two_worker_processes_race_for_one_task_and_exactly_one_claims(
    settings: Settings, tmp_path: Path
) -> None:
    note = tmp_path / "note.txt"
    note.write_bytes(b"one task, two workers, one winner\n")
    task_id = json.loads(cli(settings, "add", str(note), "--json").stdout)[0]["task_id"]
    procs = [
        start_cli(settings, "worker", task_id, "--worker-id", name)
        for name in ("worker-one", "worker-two")
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    stdout = "".join(out for out, _ in outputs)
    assert stdout.count("claimed task=") == 1
    assert stdout.count("claim missed task=") == 1
    shown = json.loads(cli(settings, "task", task_id, "--json").stdout)
    assert shown["status"] == "succeeded" and shown["attempt"] == 1


def test_a_worker_killed_mid_parse_is_reclaimed_after_its_lease(
    settings: Settings, tmp_path: Path
) -> None:
    # Enough pages that the parse outlasts the first coalesced progress write
    # (0.5 s): 600 of these parsed in 0.4 s, and the watcher never saw "parse".
    PAGES = 3000
    pages = [f"Page {i} " + "ingestion ledger lease " * 40 for i in range(PAGES)]
    big = tmp_path / "big.pdf"
    big.write_bytes(hostile.make_pdf(pages))
    task_id = json.loads(cli(settings, "add", str(big), "--json").stdout)[0]["task_id"]

    async def watch_until_parsing() -> str:
        ledger = await Ledger.open(settings)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                task = await ledger.reads.get_task(task_id)
                if task.stage is Stage.PARSE:
                    break
                await asyncio.sleep(0.02)
            return f"{task.status}/{task.stage}"
        finally:
            await ledger.close()

    victim = start_cli(settings, "worker", task_id, "--worker-id", "victim", "--lease", "2")
    assert asyncio.run(watch_until_parsing()) == "running/parse"
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=10)
    assert json.loads(cli(settings, "task", task_id, "--json").stdout)["status"] == "running"
    time.sleep(2.5)  # the victim's lease runs out
    rescuer = cli(settings, "worker", "--until-idle", "--worker-id", "rescuer", timeout=120)
    assert rescuer.returncode == 0, rescuer.stderr
    assert "reaped task=" in rescuer.stdout
    final = json.loads(cli(settings, "task", task_id, "--json").stdout)
    assert (final["status"], final["attempt"], final["worker_id"]) == ("succeeded", 2, "rescuer")
    chunks = json.loads(cli(settings, "chunks", final["document_id"], "--json").stdout)
    ordinals = [c["ordinal"] for c in chunks]
    assert ordinals == list(range(len(ordinals)))
    assert {c["page"] for c in chunks} == set(range(1, PAGES + 1))


async def test_a_hanging_parse_is_cut_off_and_the_worker_goes_on(ledger: Ledger) -> None:
    hang = await add(ledger, hostile.slow_pdf(pages=20), "hang.pdf")
    fine = await add(ledger, MARKDOWN, "after.md")
    async with ParserPool(workers=1, base_timeout_s=1.5, per_page_timeout_s=0.0) as tight:
        started = time.monotonic()
        await drain(ledger, tight)
        elapsed = time.monotonic() - started
    hung = await ledger.reads.get_task(hang)
    assert (hung.status, hung.error_code) == (TaskStatus.FAILED, ErrorCode.PARSE_ERROR)
    assert hung.error_detail is not None and "timed out" in hung.error_detail
    assert (await ledger.reads.get_task(fine)).status is TaskStatus.SUCCEEDED
    assert elapsed < 20


# --------------------------------------------------------- failure codes


class UnavailableEmbedder(HashingEmbedder):
    """A provider that is down."""

    async def embed(self, texts: Sequence[str]) -> list[bytes]:
        raise ProviderUnavailable


async def test_provider_outage_backs_off_then_fails(
    ledger: Ledger, pool: ParserPool, clock: FakeClock
) -> None:
    task_id = await add(ledger, MARKDOWN, "note.md")
    worker = Worker(ledger, "w", pool=pool, embedder=UnavailableEmbedder())
    await worker.run(until_idle=True)
    task = await ledger.reads.get_task(task_id)
    assert (task.status, task.error_code) == (TaskStatus.RETRY_WAIT, ErrorCode.PROVIDER_UNAVAILABLE)
    assert task.next_attempt_at is not None and task.next_attempt_at > clock.now
    for _ in range(ledger.settings.max_attempts):
        clock.advance(ledger.settings.backoff_max_s + 1)
        await Worker(ledger, "w", pool=pool, embedder=UnavailableEmbedder()).run(until_idle=True)
    task = await ledger.reads.get_task(task_id)
    assert (task.status, task.error_code, task.attempt) == (
        TaskStatus.FAILED,
        ErrorCode.PROVIDER_UNAVAILABLE,
        ledger.settings.max_attempts,
    )


async def test_missing_object_is_an_object_read_error(ledger: Ledger, pool: ParserPool) -> None:
    doc = await ledger.operator.upload(MARKDOWN, "gone.md")
    (ledger.operator.store.root / doc.object_key).unlink()
    task = await ledger.operator.submit(doc.document_id)
    await drain(ledger, pool)
    view = await ledger.reads.get_task(task.task_id)
    assert (view.status, view.error_code) == (TaskStatus.RETRY_WAIT, ErrorCode.OBJECT_READ_ERROR)


async def test_deleted_document_is_document_not_found(ledger: Ledger, pool: ParserPool) -> None:
    # A document with a queued task may be deleted (one with a running task may not):
    # the worker that claims the task finds the document gone.
    task_id = await add(ledger, MARKDOWN, "gone.md")
    document_id = (await ledger.reads.get_task(task_id)).document_id
    await ledger.versions.delete(document_id)
    claim = await ledger.queue.claim(task_id, "w")
    assert claim is not None
    worker = Worker(ledger, "w", pool=pool)
    outcome = await worker.pipeline.run(claim)
    assert outcome.error_code is ErrorCode.DOCUMENT_NOT_FOUND
    view = await ledger.reads.get_task(task_id)
    assert (view.status, view.error_code) == (TaskStatus.FAILED, ErrorCode.DOCUMENT_NOT_FOUND)


async def test_image_only_pdf_is_an_empty_document(ledger: Ledger, pool: ParserPool) -> None:
    task_id = await add(ledger, hostile.image_only_pdf(), "scan.pdf")
    await drain(ledger, pool)
    view = await ledger.reads.get_task(task_id)
    assert (view.status, view.error_code) == (TaskStatus.FAILED, ErrorCode.EMPTY_DOCUMENT)
    assert view.stage is Stage.PARSE
    groups = await ledger.reads.failure_groups()
    assert [(g.error_code, g.stage) for g in groups] == [(ErrorCode.EMPTY_DOCUMENT, Stage.PARSE)]


# ------------------------------------------------------- quick documents


async def test_small_text_is_parsed_in_process_and_pdfs_in_the_parser(
    ledger: Ledger, pool: ParserPool
) -> None:
    text_id = await add(ledger, MARKDOWN, "note.md")
    await drain(ledger, pool)
    assert (await ledger.reads.get_task(text_id)).status is TaskStatus.SUCCEEDED
    assert pool.children_started == 0  # no parser process for a small Markdown note

    pdf_id = await add(ledger, hostile.make_pdf(["parsed behind the process wall"]), "a.pdf")
    await drain(ledger, pool)
    assert (await ledger.reads.get_task(pdf_id)).status is TaskStatus.SUCCEEDED
    assert pool.children_started == 1


async def test_quick_tasks_are_claimed_ahead_in_batches(
    ledger: Ledger, pool: ParserPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_ids = [await add(ledger, f"note number {i}\n".encode(), f"n{i}.md") for i in range(12)]
    limits: list[int] = []
    claim_next = ledger.queue.claim_next

    async def counted(*args: Any, **kwargs: Any) -> Any:
        limits.append(kwargs["limit"])
        return await claim_next(*args, **kwargs)

    monkeypatch.setattr(ledger.queue, "claim_next", counted)
    worker = Worker(ledger, "w-batch", pool=pool, concurrency=1)
    worker._task_s = 0.005  # as if the last tasks took 5 ms each

    await worker.run(until_idle=True)

    assert [(await ledger.reads.get_task(t)).status for t in task_ids] == [
        TaskStatus.SUCCEEDED
    ] * 12
    assert limits[0] > 1
    assert len(limits) < len(task_ids) / 2


async def test_claims_taken_ahead_are_handed_back_on_stop(ledger: Ledger, pool: ParserPool) -> None:
    task_ids = [await add(ledger, f"note number {i}\n".encode(), f"n{i}.md") for i in range(6)]
    started: list[str] = []

    def stop_at_first_claim(event: WorkerEvent) -> None:
        if event.kind == "claimed" and event.task_id is not None:
            started.append(event.task_id)
            worker.stop()

    worker = Worker(ledger, "w-stop", pool=pool, concurrency=1, on_event=stop_at_first_claim)
    worker._task_s = 0.005
    await worker.run(until_idle=True)

    assert 1 <= len(started) < len(task_ids)  # the others were claimed ahead, not started
    for task_id in task_ids:
        task = await ledger.reads.get_task(task_id)
        if task_id in started:  # it may have finished before the stop landed
            assert task.status in (TaskStatus.RETRY_WAIT, TaskStatus.SUCCEEDED)
            continue
        assert task.status is TaskStatus.RETRY_WAIT
        assert (await ledger.reads.task_history(task_id))[-1].reason == "handed back on shutdown"
    await drain(ledger, pool)  # and anyone can take them at once
    assert [(await ledger.reads.get_task(t)).status for t in task_ids] == [TaskStatus.SUCCEEDED] * 6


async def test_a_claim_held_ahead_too_long_is_handed_back_unstarted(
    ledger: Ledger, pool: ParserPool, clock: FakeClock
) -> None:
    task_ids = [await add(ledger, f"note number {i}\n".encode(), f"n{i}.md") for i in range(4)]
    started: list[str] = []

    def slow_first_task(event: WorkerEvent) -> None:
        if event.kind == "claimed" and event.task_id is not None:
            if not started:
                clock.advance(ledger.settings.lease_s * 0.6)  # the others wait, leases run
            started.append(event.task_id)

    worker = Worker(ledger, "w-slow", pool=pool, concurrency=1, on_event=slow_first_task)
    worker._task_s = 0.005
    await worker.run(until_idle=True)

    assert [(await ledger.reads.get_task(t)).status for t in task_ids] == [TaskStatus.SUCCEEDED] * 4
    # The claim held behind the slow start went back, was claimed again with a fresh
    # lease and ran.
    reasons = [e.reason for t in task_ids for e in await ledger.reads.task_history(t)]
    assert "handed back unstarted" in reasons


# ------------------------------------------------------ cancel mid-flight


class GatedEmbedder(HashingEmbedder):
    """An embedder that waits for the test to let it answer."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def embed(self, texts: Sequence[str]) -> list[bytes]:
        self.entered.set()
        await self.release.wait()
        return await super().embed(texts)


async def test_cancel_during_embedding_leaves_no_chunks(ledger: Ledger, pool: ParserPool) -> None:
    task_id = await add(ledger, MARKDOWN, "note.md")
    gate = GatedEmbedder()
    worker = Worker(ledger, "w", pool=pool, embedder=gate)
    run = asyncio.create_task(worker.run(until_idle=True))
    await asyncio.wait_for(gate.entered.wait(), 30)
    # Progress is coalesced: the embedding stage reaches the ledger within a
    # reporting interval, not at once.
    for _ in range(40):
        running = await ledger.reads.get_task(task_id)
        if running.stage is Stage.EMBEDDING:
            break
        await asyncio.sleep(0.05)
    assert (running.status, running.stage) == (TaskStatus.RUNNING, Stage.EMBEDDING)
    await ledger.operator.cancel(task_id, actor="op")
    gate.release.set()
    stats = await asyncio.wait_for(run, 30)
    assert stats.outcomes[task_id] == "lost"
    view = await ledger.reads.get_task(task_id)
    assert view.status is TaskStatus.CANCELLED
    assert await ledger.reads.chunks(view.document_id) == []
    assert (await ledger.reads.get_document(view.document_id)).status is DocumentStatus.DRAFT


async def test_stop_hands_back_running_tasks(ledger: Ledger, pool: ParserPool) -> None:
    task_id = await add(ledger, MARKDOWN, "note.md")
    gate = GatedEmbedder()
    worker = Worker(ledger, "w", pool=pool, embedder=gate)
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(gate.entered.wait(), 30)
    worker.stop()
    await asyncio.wait_for(run, 30)
    view = await ledger.reads.get_task(task_id)
    assert view.status is TaskStatus.RETRY_WAIT
    assert view.next_attempt_at is not None and view.next_attempt_at <= ledger.clock()
    history = await ledger.reads.task_history(task_id)
    assert history[-1].reason == "handed back on shutdown"


@functools.cache
def slow_pdf() -> bytes:
    """A PDF whose parse outlasts a stopping worker's 10 s of grace: handed back."""
    # 400 pages of about 3 s each: its budget (10 s + 0.5 s a page, so 210 s) outlasts
    # a loaded machine's wait for the parse to start; 20 pages (20 s) did not.
    return hostile.slow_pdf(pages=400)


# `timeout -s INT 3 ingestdesk worker --json` exited 0, its JSON without a sign of the
# interruption or of the task it handed back; the README says 130 for interrupted.
@pytest.mark.parametrize("mode", [[], ["--loop"]])
def test_a_worker_interrupted_by_sigint_exits_130_and_says_what_it_handed_back(
    tmp_path: Path, mode: list[str]
) -> None:
    (task,) = added(tmp_path, write(tmp_path / "slow.pdf", slow_pdf()))
    proc = start_core_cli(tmp_path, "worker", *mode, "--json", "--worker-id", "w1")
    try:
        kill_busy_child(proc.pid, 0, not_before=set())  # signal 0: wait until it parses
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)

    assert proc.returncode == EXIT_INTERRUPTED, err
    summary = json.loads(out)
    assert (summary["interrupted"], summary["stopped_by"]) == (True, "SIGINT")
    assert summary["handed_back"] == [task["task_id"]]
    assert task_row(tmp_path, task["task_id"])["status"] == "retry_wait"


def test_a_worker_stopped_by_sigterm_still_exits_0_and_says_so(tmp_path: Path) -> None:
    (task,) = added(tmp_path, write(tmp_path / "slow.pdf", slow_pdf()))
    proc = start_core_cli(tmp_path, "worker", "--loop", "--worker-id", "w1")
    try:
        kill_busy_child(proc.pid, 0, not_before=set())  # signal 0: wait until it parses
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)

    assert proc.returncode == EXIT_OK, err
    assert (
        f"worker=w1 stopped by SIGTERM; handed back to the queue: task={task['task_id']}"
        in out.decode()
    )


def wait_registered(settings: Settings, worker_id: str, proc: subprocess.Popen[str]) -> None:
    """Until the worker process has registered in the ledger: its signal handlers are
    in place by then (a SIGTERM before them kills it, exit -15, as it should)."""

    async def registered() -> bool:
        async with await Ledger.open(settings) as ledger:
            return worker_id in {w.worker_id for w in await ledger.registry.workers()}

    deadline = time.monotonic() + STARTUP_WAIT_S
    while time.monotonic() < deadline and proc.poll() is None:
        if asyncio.run(registered()):
            return
        time.sleep(0.1)
    raise AssertionError(f"worker {worker_id} did not register within {STARTUP_WAIT_S}s")


def test_sigterm_stops_a_looping_worker_cleanly(settings: Settings, tmp_path: Path) -> None:
    proc = start_cli(settings, "worker", "--loop", "--worker-id", "looper")
    wait_registered(settings, "looper", proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "worker=looper stopped" in out
