"""What a worker writes to its log: every line formatted (text or JSON), with the time,
level and task, parser warnings included, and nothing in it a terminal would obey."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import queue
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.cli.logs import JsonFormatter, TextFormatter, _utc, worker_log
from core.ingest.worker_story import WorkerEvent
from tests import hostile
from tests.core.test_cli import (
    CLI_TIMEOUT_S,
    EXIT_OK,
    added,
    clean_env,
    json_records,
    start_core_cli,
    write,
)

# What a terminal obeys: ESC, BEL and the C1 controls (U+0080 to U+009F, two bytes in UTF-8).
TERMINAL_CONTROLS = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


LOG_LINE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (INFO|WARNING|ERROR) +task=([0-9a-f]{8}|-) +(.+)$"
)


# A name pypdf quotes in a warning when a page dictionary repeats it: ESC ] 0 ; … BEL
# retitles the terminal, ESC [ 31 m paints it red, and C2 9B is the C1 CSI.
HOSTILE_KEY = b"/X#1B#5D0;PWNED#07#1B#5B31mRED#C2#9B"


def hostile_key_pdf() -> bytes:
    """A readable page whose dictionary repeats a key holding terminal controls."""
    return hostile.one_page_pdf(
        hostile.stream(b"BT /F1 12 Tf 72 700 Td (survivor) Tj ET"),
        page_extra=(HOSTILE_KEY + b" 1 ") * 3,
    )


# A PDF whose page dictionary repeats /X<ESC>]0;PWNED<BEL><ESC>[31mRED<CSI> made pypdf
# warn, and `worker --log-format json 2>e.txt` printed that warning raw: the terminal
# retitled, no time, level or task, not JSON. Parser deaths printed the same way (only
# the `ingestdesk.worker` logger had the handler). And a failure was "event": "progress".
@pytest.mark.parametrize("fmt", ["json", "text"])
def test_parser_warnings_go_through_the_worker_log_escaped(tmp_path: Path, fmt: str) -> None:
    evil = write(tmp_path / "evil.pdf", hostile_key_pdf())
    broken = write(tmp_path / "broken.pdf", hostile.truncated_pdf())
    evil_task, broken_task = added(tmp_path, evil, broken)

    proc = start_core_cli(
        tmp_path, "worker", "--until-idle", "--log-format", fmt, "--json", "--worker-id", "w1"
    )
    out, err = proc.communicate(timeout=CLI_TIMEOUT_S)

    assert proc.returncode == EXIT_OK, err
    summary = json.loads(out)  # stdout is the one answer
    assert summary["outcomes"] == {
        evil_task["task_id"]: "succeeded",
        broken_task["task_id"]: "failed",
    }
    assert not TERMINAL_CONTROLS.search(err.replace(b"\n", b"")), err
    if fmt == "json":
        records = json_records(err)
        warnings = [r for r in records if r["message"].startswith("parser warning: ")]
        evil_warnings = [r for r in warnings if "PWNED" in r["message"]]
        assert evil_warnings, records
        for record in evil_warnings:
            assert (record["level"], record["task_id"], record["worker_id"]) == (
                "WARNING",
                evil_task["task_id"],
                "w1",
            )
            assert "/X\\x1b]0;PWNED\\x07\\x1b[31mRED\\x9b" in record["message"]
        (failure,) = [r for r in records if r["message"].startswith("failed task=")]
        assert (failure["event"], failure["level"]) == ("failed", "WARNING")
        assert failure["task_id"] == broken_task["task_id"]
    else:
        lines = err.decode().splitlines()
        for line in lines:
            assert LOG_LINE.match(line), line
        warned = [line for line in lines if "parser warning: " in line and "PWNED" in line]
        assert warned and all(f"task={evil_task['task_id'][:8]} " in w for w in warned)
        assert all("\\x1b]0;PWNED\\x07" in w for w in warned), warned


# pipeline.py logs an internal error with exc_info=True; Python's last-resort handler
# printed its traceback to the operator's terminal. The traceback is for a bug report:
# only with INGESTDESK_DEBUG set, and escaped.
def test_a_log_record_shows_its_traceback_only_under_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        raise RuntimeError("boom at /home/someone/secret\x1b[2J")
    except RuntimeError:
        record = logging.LogRecord(
            "core.ingest.pipeline",
            logging.ERROR,
            "",
            0,
            "internal error in task=%s",
            ("3f2a9c1e",),
            sys.exc_info(),
        )
    monkeypatch.delenv("INGESTDESK_DEBUG", raising=False)
    assert "\n" not in TextFormatter().format(record)
    assert "Traceback" not in TextFormatter().format(record)
    assert "traceback" not in json.loads(JsonFormatter().format(record))

    monkeypatch.setenv("INGESTDESK_DEBUG", "1")
    text = TextFormatter().format(record)
    assert "Traceback" in text and "RuntimeError" in text
    assert all(line.isprintable() for line in text.split("\n"))
    stack = json.loads(JsonFormatter().format(record))["traceback"]
    assert any("RuntimeError" in line for line in stack)


# ------------------------------------------------------------- writes, not lines

# Every line was its own write and flush: a write gives up the GIL, and the worker's
# event loop then waited for it while the ledger's thread ran (a sixth of a small
# document's time on the loop). Lines logged on the loop are now written together.


class CountingStream(io.StringIO):
    """A real text stream that counts the writes that reach it, and can fail."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.refused = 0  # writes that failed while broken
        self.broken = False

    def write(self, text: str) -> int:
        if self.broken:
            self.refused += 1
            raise BrokenPipeError("the reader went away")
        self.writes += 1
        return super().write(text)


def progress(i: int) -> WorkerEvent:
    return WorkerEvent("w1", f"{i:032x}", "progress", f"stage=parse {i}/50")


async def until(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + CLI_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def test_lines_logged_on_the_loop_are_written_together() -> None:
    stream = CountingStream()
    with worker_log(stream, "text") as log:
        for i in range(50):
            log(progress(i))
        assert stream.writes == 0  # kept until the loop runs the write
        await until(lambda: stream.writes, "the kept lines to be written")
        assert stream.writes == 1
        lines = stream.getvalue().splitlines()
        assert [line.rsplit(" ", 1)[1] for line in lines] == [f"{i}/50" for i in range(50)]
        assert all(LOG_LINE.match(line) for line in lines)
        log(progress(50))
    # Leaving the log writes what it kept, without waiting for the loop.
    assert stream.writes == 2
    assert stream.getvalue().splitlines()[-1].endswith("stage=parse 50/50")


async def test_a_line_from_another_thread_is_written_at_once_after_the_kept_ones() -> None:
    stream = CountingStream()
    with worker_log(stream, "json") as log:
        log(progress(1))
        await asyncio.to_thread(logging.getLogger("pypdf").warning, "odd page %d", 2)
        messages = [json.loads(line)["message"] for line in stream.getvalue().splitlines()]
        assert messages == ["stage=parse 1/50", "odd page 2"]


async def test_a_log_stream_that_breaks_ends_the_log_not_the_worker() -> None:
    stream = CountingStream()
    with worker_log(stream, "text") as log:
        log(progress(1))
        await until(lambda: stream.writes, "the first line")
        stream.broken = True
        log(progress(2))
        await until(lambda: stream.refused, "the due write to fail quietly")
        log(progress(3))
    assert stream.getvalue().splitlines()[-1].endswith("stage=parse 1/50")


def test_log_times_are_what_datetime_says() -> None:
    rng = random.Random(7)
    now = time.time()
    times = [now + rng.uniform(-1e8, 1e8) for _ in range(20_000)]
    times += [1_700_000_000 + f for f in (0.0, 0.0004999, 0.0005, 0.9994999, 0.9995, 0.9999996)]
    for created in times:
        expected = datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")
        assert _utc(created) == expected[:-6] + "Z", created


def test_a_worker_log_in_a_pipe_shows_each_line_while_the_worker_runs(tmp_path: Path) -> None:
    # Under PYTHONUNBUFFERED=1 (most container images) and into a pipe: the line that
    # says a task succeeded arrives while the worker waits for more work, not at exit.
    added(tmp_path, write(tmp_path / "a.md", b"# Runbook\n\nRestart the worker.\n"))
    command = [sys.executable, "-m", "core.cli", "--db", str(tmp_path / "ledger.db")]
    command += ["--store", str(tmp_path / "objects"), "worker", "--loop"]
    env = clean_env(PYTHONUNBUFFERED="1")
    lines: queue.Queue[bytes] = queue.Queue()
    with subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE) as worker:
        reader = threading.Thread(target=lambda: [lines.put(b) for b in worker.stdout or ()])
        reader.start()
        try:
            deadline = time.monotonic() + CLI_TIMEOUT_S
            seen: list[bytes] = []
            while not any(b"succeeded task=" in line for line in seen):
                assert worker.poll() is None, seen
                seen.append(lines.get(timeout=max(0.0, deadline - time.monotonic())))
        finally:
            worker.terminate()
            worker.wait(CLI_TIMEOUT_S)
            reader.join(CLI_TIMEOUT_S)
    assert worker.returncode == EXIT_OK
