"""What a worker writes to its log: every line formatted (text or JSON), with the time,
level and task, parser warnings included, and nothing in it a terminal would obey."""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path

import pytest

from core.cli.logs import JsonFormatter, TextFormatter
from tests import hostile
from tests.core.test_cli import (
    CLI_TIMEOUT_S,
    EXIT_OK,
    added,
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
