"""Workers meeting faults that are not the document's: a cancel mid-parse, a worker
killed with ``kill -9``, a parser killed from outside, a broken log sink, an internal
error carrying a path, a hostile worker id. Real parser processes, real worker
processes, real files; parser processes are watched through /proc, as an operator
would with ``ps``."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from core import ERRORS, BadInput, DocumentStatus, ErrorCode, Ledger, Settings, Stage, TaskStatus
from core.ingest.embedder import HashingEmbedder
from core.ingest.parse_pool import ParserPool
from core.ingest.parsing import ParseFailure, ParserKilled
from core.ingest.worker import Worker, WorkerEvent
from tests import hostile
from tests.conftest import FakeClock
from tests.core.test_cli import (
    CLI_TIMEOUT_S,
    EXIT_OK,
    added,
    core_cli,
    json_records,
    start_core_cli,
    task_row,
    write,
)
from tests.core.test_worker import add, cli, start_cli
from tests.hostile import children_of, kill_busy_child, kill_busy_parser

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="watches processes through /proc"
)

# A valid PDF that keeps pypdf busy for several seconds (about 0.5 ms a page; 4 s on an
# idle core, more on a busy one), generated in about a second.
LONG_PDF_PAGES = 8000
STOPPED_WITHIN_S = 2.0  # seconds a parser may go on after its work was taken away


@functools.cache
def long_pdf() -> bytes:
    return hostile.make_pdf(
        [f"Page {i} ingestion ledger lease renewal" for i in range(LONG_PDF_PAGES)]
    )


def running(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie (it may be reparented to
    an init that never reaps it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def seconds_until_gone(pid: int, *, give_up_s: float = 15.0) -> float:
    started = time.monotonic()
    while running(pid) and time.monotonic() - started < give_up_s:
        time.sleep(0.01)
    return time.monotonic() - started


async def until_stage(
    ledger: Ledger, task_id: str, stage: Stage, timeout_s: float = hostile.BUSY_WAIT_S
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (await ledger.reads.get_task(task_id)).stage is stage:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"task never reached stage {stage}")


async def busy_parser(pool: ParserPool, timeout_s: float = hostile.BUSY_WAIT_S) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pool.child_pids:
            return pool.child_pids[0]
        await asyncio.sleep(0.01)
    raise AssertionError("no parser process started")


# ------------------------------------------------------------- cancel mid-parse


async def test_cancel_during_a_long_parse_kills_its_parser_and_the_worker_goes_on(
    ledger: Ledger,
) -> None:
    long_id = await add(ledger, long_pdf(), "long.pdf")
    async with ParserPool(workers=1) as pool:
        worker = Worker(ledger, "w-cancel", pool=pool)
        run = asyncio.create_task(worker.run(until_idle=True))
        await until_stage(ledger, long_id, Stage.PARSE)
        pid = await busy_parser(pool)
        assert running(pid)
        # Submitted now, so it is surely claimed after the long one.
        next_id = await add(ledger, hostile.make_pdf(["the next task"]), "next.pdf")

        await ledger.operator.cancel(long_id, actor="op")
        stopped_after = await asyncio.to_thread(seconds_until_gone, pid)

        stats = await asyncio.wait_for(run, hostile.LOADED_RUN_S)
        assert pool.children_started == 2  # the killed parser was replaced

    # The work stopped within about a second (the next heartbeat), not after the
    # parse's 4+ seconds, and not at the end of the lease.
    assert stopped_after < STOPPED_WITHIN_S
    assert stats.outcomes == {long_id: "lost", next_id: "succeeded"}
    cancelled = await ledger.reads.get_task(long_id)
    assert cancelled.status is TaskStatus.CANCELLED
    assert await ledger.reads.chunks(cancelled.document_id) == []
    assert (await ledger.reads.get_document(cancelled.document_id)).status is DocumentStatus.DRAFT
    assert (await ledger.reads.get_task(next_id)).status is TaskStatus.SUCCEEDED


# ------------------------------------------------------ kill -9 of a worker


def test_a_parser_dies_with_its_worker_killed_by_sigkill(
    settings: Settings, tmp_path: Path
) -> None:
    big = tmp_path / "long.pdf"
    big.write_bytes(long_pdf())
    task_id = json.loads(cli(settings, "add", str(big), "--json").stdout)[0]["task_id"]

    async def until_parsing() -> None:
        ledger = await Ledger.open(settings)
        try:
            await until_stage(ledger, task_id, Stage.PARSE)
        finally:
            await ledger.close()

    victim = start_cli(settings, "worker", task_id, "--worker-id", "victim")
    try:
        asyncio.run(until_parsing())
        deadline = time.monotonic() + hostile.BUSY_WAIT_S
        while not (parsers := children_of(victim.pid)) and time.monotonic() < deadline:
            time.sleep(0.01)
        (parser,) = parsers
        assert running(parser)

        victim.send_signal(signal.SIGKILL)  # no chance to stop its children
        victim.communicate(timeout=10)

        assert seconds_until_gone(parser) < STOPPED_WITHIN_S
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.communicate(timeout=10)


# ------------------------------------------- a parser killed from outside


async def test_a_parser_killed_from_outside_does_not_fail_a_good_document(ledger: Ledger) -> None:
    task_id = await add(ledger, long_pdf(), "long.pdf")
    async with ParserPool(workers=1) as pool:
        worker = Worker(ledger, "w-outside", pool=pool)
        run = asyncio.create_task(worker.run(until_idle=True))
        await until_stage(ledger, task_id, Stage.PARSE)
        os.kill(await busy_parser(pool), signal.SIGKILL)  # an operator's kill, the OOM killer

        stats = await asyncio.wait_for(run, hostile.LOADED_RUN_S)

    assert stats.outcomes == {task_id: "succeeded"}
    task = await ledger.reads.get_task(task_id)
    assert (task.status, task.attempt, task.error_code) == (TaskStatus.SUCCEEDED, 1, None)
    assert len(await ledger.reads.chunks(task.document_id)) == LONG_PDF_PAGES


# ------------------------------------------------------- a broken log sink


# The audit's drill, smaller: while a loop kill -9s the worker's parser processes every
# 0.1 to 0.3 s, no task fails for good and the worker does not stop (a child killed
# while it was starting read as "cannot start a parser process": exit 1, tasks back).
# The loop stops before any task can reach a third attempt (backoff: 1-2 s, then 2-4 s),
# so none uses up its attempts; test_a_parser_killed_on_every_attempt_ends_failed
# covers that. Its time runs from the first parser process seen, not from the worker's
# start: on a loaded machine the worker's own start-up took longer than the whole loop,
# which then killed nothing.
KILL_LOOP_S = 2.5  # seconds


# 60 valid PDFs, a loop kill -9-ing the parser child: 10 tasks ended
# `failed|parse_error|parser process died`. A signal ingestdesk did not send is not the
# document's fault: retry_wait with parser_killed, and the task succeeds once nothing
# kills its parser. (The death lines went to the terminal bare, too.)
def test_a_parser_killed_twice_from_outside_is_retried_not_failed(tmp_path: Path) -> None:
    (task,) = added(tmp_path, write(tmp_path / "long.pdf", long_pdf()))
    task_id = task["task_id"]
    proc = start_core_cli(
        tmp_path, "worker", "--until-idle", "--log-format", "json", "--json", "--worker-id", "w1"
    )
    try:
        first = kill_busy_child(proc.pid, signal.SIGKILL, not_before=set())
        second = kill_busy_child(proc.pid, signal.SIGKILL, not_before={first})
        out, err = proc.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)

    assert proc.returncode == EXIT_OK, err
    assert json.loads(out)["outcomes"] == {task_id: "retry_wait"}
    row = task_row(tmp_path, task_id)
    assert (row["status"], row["error_code"], row["attempt"]) == ("retry_wait", "parser_killed", 1)
    assert ERRORS[ErrorCode.PARSER_KILLED].transient
    records = json_records(err)
    deaths = [r for r in records if r["message"].startswith("parser process ")]
    assert [r["message"].split()[2] for r in deaths[:2]] == [str(first), str(second)]
    assert all((r["task_id"], r["level"]) == (task_id, "WARNING") for r in deaths)
    assert "SIGKILL" in deaths[0]["message"]

    # Once it is due (2 s of backoff, with jitter), the next worker finishes it.
    deadline = time.monotonic() + hostile.BUSY_WAIT_S
    while True:
        drained = core_cli(tmp_path, "worker", "--until-idle", "--json")
        assert drained.code == EXIT_OK, drained
        if drained.value["outcomes"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert drained.value["outcomes"] == {task_id: "succeeded"}


def test_a_kill_loop_on_the_parsers_fails_no_document(tmp_path: Path) -> None:
    pdfs = [
        write(tmp_path / f"doc{i}.pdf", hostile.make_pdf([f"page {p} of {i}" for p in range(300)]))
        for i in range(8)
    ]
    tasks = added(tmp_path, *pdfs)
    proc = start_core_cli(tmp_path, "worker", "--until-idle", "--json")
    kills = 0
    try:
        first_child = time.monotonic() + hostile.BUSY_WAIT_S
        while proc.poll() is None and not children_of(proc.pid):
            assert time.monotonic() < first_child, "the worker started no parser process"
            time.sleep(0.01)
        stop_killing = time.monotonic() + KILL_LOOP_S
        while proc.poll() is None and time.monotonic() < stop_killing:
            for pid in children_of(proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    kills += 1
            time.sleep(random.uniform(0.1, 0.3))
        out, err = proc.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)

    assert proc.returncode == EXIT_OK, err
    assert kills > 0
    outcomes = json.loads(out)["outcomes"]
    assert set(outcomes.values()) <= {"succeeded", "retry_wait"}, outcomes
    for task in tasks:
        row = task_row(tmp_path, task["task_id"])
        assert row["error_code"] in (None, "parser_killed"), row
    # Nothing kills them now: each is done by the next workers, once due.
    deadline = time.monotonic() + hostile.BUSY_WAIT_S
    while time.monotonic() < deadline:
        listed = core_cli(tmp_path, "tasks", "--json").value
        if all(t["status"] == "succeeded" for t in listed):
            break
        assert core_cli(tmp_path, "worker", "--until-idle").code == EXIT_OK
        time.sleep(0.5)
    assert {t["status"] for t in core_cli(tmp_path, "tasks", "--json").value} == {"succeeded"}


async def test_outside_kills_and_crashes_are_told_apart() -> None:
    async with ParserPool(workers=1) as pool:
        await pool.parse(b"warm up", "text")
        for sig, expected in (
            (
                signal.SIGKILL,
                (ErrorCode.PARSER_KILLED, "parser process killed from outside (SIGKILL)"),
            ),
            # A crash is the document's (a native parser's segfault, an abort): for good.
            (signal.SIGSEGV, (ErrorCode.PARSE_ERROR, "parser process died")),
            (signal.SIGABRT, (ErrorCode.PARSE_ERROR, "parser process died")),
        ):
            parsing = asyncio.create_task(pool.parse(long_pdf(), "pdf"))
            first = await kill_busy_parser(lambda: pool.child_pids, sig, not_before=set())
            await kill_busy_parser(lambda: pool.child_pids, sig, not_before={first})
            with pytest.raises(ParseFailure) as caught:
                await parsing
            assert (caught.value.code, caught.value.reason) == expected, sig
            assert isinstance(caught.value, ParserKilled) == (sig == signal.SIGKILL)
        doc = await pool.parse(b"still parsing", "text")
        assert doc.chunks[0].text == "still parsing"


# A document whose parser is killed on every attempt must not loop for ever: transient,
# so retried with backoff, and failed (parser_killed) once its attempts are used up.
async def test_a_parser_killed_on_every_attempt_ends_failed(
    ledger: Ledger, clock: FakeClock
) -> None:
    task_id = await add(ledger, long_pdf(), "long.pdf")
    async with ParserPool(workers=1) as pool:
        for attempt in (1, 2, 3):
            worker = Worker(ledger, f"w{attempt}", pool=pool)
            run_ = asyncio.create_task(worker.run(until_idle=True))
            first = await kill_busy_parser(
                lambda: pool.child_pids, signal.SIGKILL, not_before=set()
            )
            await kill_busy_parser(lambda: pool.child_pids, signal.SIGKILL, not_before={first})
            stats = await asyncio.wait_for(run_, hostile.LOADED_RUN_S)
            task = await ledger.reads.get_task(task_id)
            assert (task.attempt, task.error_code) == (attempt, ErrorCode.PARSER_KILLED)
            assert stats.outcomes == {task_id: "failed" if attempt == 3 else "retry_wait"}, attempt
            clock.advance(3600)  # past any backoff
    assert task.status is TaskStatus.FAILED
    document = await ledger.reads.get_document(task.document_id)
    assert document.status is DocumentStatus.FAILED


async def test_a_log_sink_that_breaks_does_not_fail_the_task(ledger: Ledger) -> None:
    # `ingestdesk worker | head -1`: once head exits, every print raises
    # BrokenPipeError. That used to fail the task as internal_error (BrokenPipeError).
    task_ids = [
        await add(ledger, hostile.make_pdf([f"document {i}"]), f"d{i}.pdf") for i in range(2)
    ]
    shown: list[str] = []

    def head_1(event: WorkerEvent) -> None:
        if shown:
            raise BrokenPipeError(32, "Broken pipe")
        shown.append(event.line)

    async with ParserPool(workers=1) as pool:
        stats = await Worker(ledger, "w-piped", pool=pool, on_event=head_1).run(until_idle=True)

    assert stats.outcomes == dict.fromkeys(task_ids, "succeeded")
    for task_id in task_ids:
        assert (await ledger.reads.get_task(task_id)).status is TaskStatus.SUCCEEDED


# ------------------------------------------- internal errors keep no message


class LeakyEmbedder(HashingEmbedder):
    """A bug in ingestdesk whose message carries a path."""

    async def embed(self, texts: Sequence[str]) -> list[bytes]:
        raise ValueError("/secret/path/to/file")


async def test_an_internal_error_records_its_type_and_never_its_message(ledger: Ledger) -> None:
    task_id = await add(ledger, b"# Runbook\n\nRestart the worker.\n", "note.md")
    events: list[WorkerEvent] = []
    async with ParserPool(workers=1) as pool:
        worker = Worker(
            ledger, "w-leak", pool=pool, embedder=LeakyEmbedder(), on_event=events.append
        )
        stats = await worker.run(until_idle=True)

    task = await ledger.reads.get_task(task_id)
    assert (task.status, task.error_code, task.error_detail) == (
        TaskStatus.FAILED,
        ErrorCode.INTERNAL_ERROR,
        "ValueError",
    )
    assert stats.outcomes == {task_id: "failed"}
    history = await ledger.reads.task_history(task_id)
    document = await ledger.reads.get_document(task.document_id)
    everything = repr(
        [
            dataclasses.asdict(task),
            [dataclasses.asdict(entry) for entry in history],
            dataclasses.asdict(document),
            [event.line for event in events],
        ]
    )
    assert "ValueError" in everything
    assert "/secret" not in everything


# -------------------------------------------------------- hostile worker ids


async def test_a_worker_id_with_control_characters_is_refused_when_the_worker_is_made(
    ledger: Ledger,
) -> None:
    task_id = await add(ledger, b"# Runbook\n", "note.md")

    with pytest.raises(BadInput, match="worker id"):
        Worker(ledger, "evil\x1b]0;pwned\x07")

    # Nothing was claimed or registered on its behalf.
    assert (await ledger.reads.get_task(task_id)).status is TaskStatus.QUEUED


# ------------------------------------------------ a parser process that cannot start


async def test_a_parser_that_cannot_start_hands_the_task_back_and_stops_the_worker(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No parser process can start (here: the interpreter they run is /bin/false): the
    document is not at fault, so its task goes back claimable and uncounted, and the
    worker stops saying why instead of failing every task it claims."""
    first = await add(ledger, hostile.make_pdf(["lighthouse keeper one"]), "one.pdf")
    second = await add(ledger, hostile.make_pdf(["lighthouse keeper two"]), "two.pdf")
    events: list[WorkerEvent] = []
    with monkeypatch.context() as broken:
        broken.setattr(sys, "executable", "/bin/false")
        async with ParserPool(workers=1) as pool:
            worker = Worker(ledger, "w-broken", pool=pool, on_event=events.append)
            await asyncio.wait_for(worker.run(until_idle=True), hostile.LOADED_RUN_S)
    assert worker.fault is not None and "failed to start" in worker.fault
    assert any(e.kind == "stopped" for e in events)
    for task_id in (first, second):
        task = await ledger.reads.get_task(task_id)
        assert task.status in (TaskStatus.QUEUED, TaskStatus.RETRY_WAIT), task
        assert (task.error_code, task.attempt < task.max_attempts) == (None, True)
    # A worker that can parse takes both over.
    async with ParserPool(workers=1) as pool:
        await Worker(ledger, "w-healthy", pool=pool).run(until_idle=True)
    for task_id in (first, second):
        assert (await ledger.reads.get_task(task_id)).status is TaskStatus.SUCCEEDED


def test_the_worker_command_stops_with_one_line_when_no_parser_can_start(
    settings: Settings,
) -> None:
    async def add_one() -> str:
        async with await Ledger.open(settings) as ledger:
            return await add(ledger, hostile.make_pdf(["lighthouse keeper"]), "one.pdf")

    task_id = asyncio.run(add_one())
    program = (
        "import runpy, sys\n"
        "sys.executable = '/bin/false'  # what every parser process would run\n"
        "sys.argv = ['ingestdesk', *sys.argv[1:]]\n"
        "runpy.run_module('core.cli', run_name='__main__')\n"
    )
    ledger_args = ["--db", settings.db_url, "--store", str(settings.store_root)]
    worker_args = ["worker", "--until-idle", "--worker-id", "w-broken"]
    done = subprocess.run(
        [sys.executable, "-c", program, *ledger_args, *worker_args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.splitlines()[-1] == (
        "ingestdesk: worker=w-broken stopped: parser process failed to start (exit code 1)"
    )

    async def status() -> TaskStatus:
        async with await Ledger.open(settings) as ledger:
            return (await ledger.reads.get_task(task_id)).status

    assert asyncio.run(status()) in (TaskStatus.QUEUED, TaskStatus.RETRY_WAIT)
