"""Every bad input gets one clear line and loses nothing: the command line's side.

Each test here failed on the tree before its fix (the defect is in the comment above
it), except the two marked "guards core's fix": core already refused those, and the
test keeps the command line's answer one line. Refusals that happen before any
process-wide effect run in this process through :func:`core.cli.main` (fast, same
code path); signals, closed descriptors, a missing login name, resource limits and
pipes run in real subprocesses, as a shell would.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import logging
import os
import re
import resource
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tests.hostile as hostile
from core import Ledger, Settings, sqlite_url
from core.cli import build_parser, main
from core.cli.logs import JsonFormatter, TextFormatter, level_of
from core.cli.options import default_actor
from core.errors import BadInput
from core.ingest.worker import WorkerEvent
from core.intake import read_stream, read_upload
from tests.core.test_cli import (
    CLI_TIMEOUT_S,
    EXIT_BAD_INPUT,
    EXIT_OK,
    MARKDOWN,
    TEXT,
    Result,
    clean_env,
    ok,
    one_error_line,
    run,
    write,
)

EXIT_UNEXPECTED, EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 1, 130, 141
REPO_ROOT = Path(__file__).resolve().parents[2]
CORE_CLI = (sys.executable, "-m", "core.cli")
HOSTILE = "evil\x1b[2J\x1b]0;owned\x07\nforged 2026-01-01 line\u202efdp.md"

Call = Callable[..., Result]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "objects"


@pytest.fixture
def call(
    db_path: Path, store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Call:
    """``call(*args)`` runs one command of ``python -m core.cli`` in this process on
    this test's ledger."""
    for name in [k for k in os.environ if k.startswith("INGESTDESK_")]:
        monkeypatch.delenv(name)

    def go(*args: str) -> Result:
        code = main(["--db", str(db_path), "--store", str(store), *args])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return go


@pytest.fixture
def sub(tmp_path: Path, db_path: Path, store: Path) -> Call:
    """``sub(*args, **popen)`` runs one command in a real subprocess on this ledger."""

    def go(*args: str, stdin: bytes | None = None) -> Result:
        return run(["--db", str(db_path), "--store", str(store), *args], cwd=tmp_path, stdin=stdin)

    return go


def added(call: Call, tmp_path: Path, *names: str) -> list[dict[str, Any]]:
    paths = [str(write(tmp_path / n, TEXT + n.encode())) for n in names]
    answer = ok(call("add", *paths, "--json"))
    assert isinstance(answer, list)
    return answer


def statuses(call: Call) -> dict[str, str]:
    return {t["task_id"]: t["status"] for t in ok(call("tasks", "--json"))}


def json_error(result: Result, code: int) -> str:
    """The one JSON error value of a refused ``--json`` command; its message."""
    assert result.code == code, result
    assert result.stderr == "", result
    value = json.loads(result.stdout)
    assert set(value) == {"error"} and set(value["error"]) == {"kind", "message"}, value
    return str(value["error"]["message"])


def count_rows(db_path: Path, table: str) -> int:
    with sqlite3.connect(db_path) as raw:
        (n,) = raw.execute(f"SELECT count(*) FROM {table}").fetchone()
    return int(n)


def fail_task(db_path: Path, store: Path, task_id: str) -> None:
    async def go() -> None:
        ledger = await Ledger.open(Settings(db_url=sqlite_url(db_path), store_root=store))
        try:
            claim = await ledger.queue.claim(task_id, "w1")
            assert claim is not None
            from core import ErrorCode

            await ledger.queue.fail(claim, ErrorCode.INTERNAL_ERROR)
        finally:
            await ledger.close()

    asyncio.run(go())


# ----------------------------------------------------------- 1. empty filters, --all


# `cancel --filter ' '` parsed to a filter with no terms and cancelled every task.
@pytest.mark.parametrize("command", ["cancel", "retry"])
def test_an_empty_filter_is_refused_and_touches_nothing(
    call: Call, tmp_path: Path, db_path: Path, store: Path, command: str
) -> None:
    tasks = added(call, tmp_path, "a.txt", "b.txt")
    fail_task(db_path, store, tasks[1]["task_id"])
    before = statuses(call)
    for text in (" ", "", "\t \n"):
        for dry in ((), ("--dry-run",)):
            result = call(command, "--filter", text, *dry)
            assert result.code == EXIT_BAD_INPUT, (text, dry, result)
            assert "--all" in one_error_line(result)
            message = json_error(call(command, "--filter", text, *dry, "--json"), EXIT_BAD_INPUT)
            assert "every task" in message
    assert statuses(call) == before


def test_all_says_every_task_out_loud(
    call: Call, tmp_path: Path, db_path: Path, store: Path
) -> None:
    tasks = added(call, tmp_path, "a.txt", "b.txt", "c.txt")
    fail_task(db_path, store, tasks[2]["task_id"])
    dry = ok(call("cancel", "--all", "--dry-run", "--json"))
    assert (dry["matched"], dry["eligible"], dry["done"], dry["dry_run"]) == (3, 2, 0, True)
    requeued = ok(call("retry", "--all", "--json"))
    assert (requeued["matched"], requeued["done"]) == (3, 1)
    cancelled = ok(call("cancel", "--all", "--reason", "wrong batch", "--json"))
    assert (cancelled["matched"], cancelled["done"]) == (3, 3)
    assert set(statuses(call).values()) == {"cancelled"}
    # --all is one of the three ways to name tasks, never combined with another.
    for args in (
        ("cancel", "--all", tasks[0]["task_id"]),
        ("retry", "--all", "--filter", "status:failed"),
        ("cancel",),
        ("retry", tasks[0]["task_id"], "--dry-run"),
    ):
        assert call(*args).code == EXIT_BAD_INPUT, args


# ------------------------------------------------- 2. worker options, before claiming


# `worker --chunk-size 0` claimed every queued task and failed each with internal_error.
BAD_WORKER_OPTIONS = [
    ("--chunk-size", "0"),
    ("--chunk-size", "-5"),
    ("--chunk-size", "99999999999999999999"),
    ("--chunk-overlap", "-1"),
    ("--chunk-size", "100", "--chunk-overlap", "100"),
    ("--chunk-overlap", "1000"),  # the default chunk size is 1000
    ("--concurrency", "0"),
    ("--concurrency", "99999999999"),
    ("--parsers", "0"),
    ("--parsers", "-1"),
    ("--lease", "0"),
    ("--lease", "-3"),
    ("--lease", "nan"),
    ("--lease", "inf"),
    ("--lease", "1e400"),
    ("--lease", "soon"),
    ("--worker-id", "w\x1b[2J"),
    ("--worker-id", "w\nforged"),
    ("--worker-id", "w\u202e1"),
    ("--worker-id", ""),
]


def test_out_of_range_worker_options_claim_nothing(call: Call, tmp_path: Path) -> None:
    tasks = added(call, tmp_path, "a.txt", "b.txt")
    for options in BAD_WORKER_OPTIONS:
        for mode in ((), ("--until-idle",), (tasks[0]["task_id"],)):
            result = call("worker", *mode, *options)
            assert result.code == EXIT_BAD_INPUT, (options, result)
            line = one_error_line(result)
            assert "\x1b" not in line and "\u202e" not in line
            json_error(call("worker", *mode, *options, "--json"), EXIT_BAD_INPUT)
    after = ok(call("tasks", "--json"))
    assert {(t["status"], t["attempt"]) for t in after} == {("queued", 0)}


def test_worker_options_are_checked_before_the_ledger_is_opened(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = tmp_path / "nowhere" / "ledger.db"
    for options in BAD_WORKER_OPTIONS[:8]:
        code = main(["--db", str(where), "worker", "--until-idle", *options])
        assert code == EXIT_BAD_INPUT, options
    capsys.readouterr()
    assert not (tmp_path / "nowhere").exists()


def test_a_real_worker_with_chunk_size_zero_leaves_the_queue_alone(
    sub: Call, tmp_path: Path
) -> None:
    (task,) = ok(sub("add", str(write(tmp_path / "a.md", MARKDOWN)), "--json"))
    result = sub("worker", "--until-idle", "--chunk-size", "0")
    assert result.code == EXIT_BAD_INPUT
    assert "--chunk-size" in one_error_line(result)
    shown = ok(sub("task", task["task_id"], "--json"))
    assert (shown["status"], shown["attempt"], shown["error_code"]) == ("queued", 0, None)
    assert [e["to_status"] for e in shown["history"]] == ["queued"]


# --------------------------------------------------- 3. Ctrl-C in the middle of a batch


# SIGINT during `add` of 2 000 files left 689 drafts, no tasks, and said nothing.
@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_in_the_middle_of_a_batch_adds_nothing_and_says_so(
    tmp_path: Path, db_path: Path, store: Path, as_json: bool
) -> None:
    files = tmp_path / "files"
    files.mkdir()
    paths = []
    for i in range(2000):
        path = files / f"note-{i:04}.txt"
        path.write_bytes(TEXT + str(i).encode())
        paths.append(str(path))
    proc = subprocess.Popen(
        [sys.executable, "-m", "core.cli", "--db", str(db_path), "--store", str(store)]
        + ["add", *paths]
        + (["--json"] if as_json else []),
        cwd=tmp_path,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Interrupt while the originals are being stored (one fsync each), the phase
    # that once left drafts behind.
    deadline = time.monotonic() + CLI_TIMEOUT_S
    while not (store / "sha256").exists() and proc.poll() is None:
        assert time.monotonic() < deadline, "the batch never started storing"
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=CLI_TIMEOUT_S)
    assert proc.returncode == EXIT_INTERRUPTED, (out, err)
    if as_json:
        assert err == ""
        assert json.loads(out) == {
            "error": {"kind": "Interrupted", "message": "interrupted: no document was added"}
        }
    else:
        assert out == ""
        assert err == "ingestdesk: interrupted: no document was added\n"
    assert count_rows(db_path, "documents") == 0
    assert count_rows(db_path, "ingestion_tasks") == 0
    assert not [p for p in store.rglob(".incoming-*")]


def test_ctrl_c_while_stdin_is_silent_ends_at_once(
    tmp_path: Path, db_path: Path, store: Path
) -> None:
    """`upload - --name x` reading a terminal (or a silent pipe): Ctrl-C must end it,
    not leave the process waiting for a read no one can interrupt."""
    if not Path("/proc/self/wchan").exists():
        pytest.skip("needs Linux's /proc/PID/wchan to see the process wait on stdin")
    proc = subprocess.Popen(
        [*CORE_CLI, "--db", str(db_path), "--store", str(store), "upload", "-", "--name", "x.txt"],
        cwd=tmp_path,
        env=clean_env(),
        stdin=subprocess.PIPE,  # held open, never written: a silent writer
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wchan = Path(f"/proc/{proc.pid}/wchan")  # what the process waits on
    deadline = time.monotonic() + CLI_TIMEOUT_S
    while "pipe_read" not in wchan.read_text():
        assert time.monotonic() < deadline, "the upload never waited on stdin"
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert (proc.returncode, out) == (EXIT_INTERRUPTED, "")
    assert err == "ingestdesk: interrupted: no document was added\n"


@pytest.mark.parametrize(
    ("when", "message"),
    [
        ("before the batch was recorded", "interrupted: no document was added"),
        ("while its transaction was starting", "interrupted: no document was added"),
        ("after it committed", "interrupted too late: the whole batch was already recorded"),
    ],
)
def test_the_interrupt_line_says_what_the_batch_left(
    call: Call,
    tmp_path: Path,
    db_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    when: str,
    message: str,
) -> None:
    """A Ctrl-C can land at any await; the line must be true wherever it lands."""
    from core.ledger import Operator

    real = Operator.add_many

    async def interrupted(self: Operator, *args: Any, **kwargs: Any) -> Any:
        if when == "while its transaction was starting":
            self._ids()
        elif when == "after it committed":
            await real(self, *args, **kwargs)
        raise asyncio.CancelledError  # what asyncio.run makes of the first SIGINT

    monkeypatch.setattr(Operator, "add_many", interrupted)
    a, b = write(tmp_path / "a.txt", TEXT), write(tmp_path / "b.txt", TEXT + b"b")
    result = call("add", str(a), str(b), "--json")
    assert json_error(result, EXIT_INTERRUPTED).startswith(message)
    assert count_rows(db_path, "documents") == (2 if when == "after it committed" else 0)


# ------------------------------------------- 4. one line, never a traceback (in-process)


# --limit 99999999999999999999 was an OverflowError traceback; negative meant "no limit".
@pytest.mark.parametrize("limit", ["99999999999999999999", "1000001", "0", "-1", "ten", "1.5"])
def test_out_of_range_limits_are_bad_input(call: Call, tmp_path: Path, limit: str) -> None:
    added(call, tmp_path, "a.txt")
    for command in (("tasks",), ("documents",), ("search", "note")):
        result = call(*command, "--limit", limit)
        assert result.code == EXIT_BAD_INPUT, (command, result)
        assert "--limit" in one_error_line(result)
        assert "--limit" in json_error(call(*command, "--limit", limit, "--json"), EXIT_BAD_INPUT)


# --max-upload-mb nan was a ValueError traceback; inf was no cap at all.
@pytest.mark.parametrize("cap", ["nan", "inf", "-inf", "0", "-1", "1e300", "many"])
def test_an_unusable_upload_cap_flag_is_bad_input(
    call: Call, tmp_path: Path, db_path: Path, cap: str
) -> None:
    path = str(write(tmp_path / "a.txt", TEXT))
    result = call("--max-upload-mb", cap, "upload", path)
    assert result.code == EXIT_BAD_INPUT
    assert "--max-upload-mb" in one_error_line(result)
    json_error(call("upload", path, "--max-upload-mb", cap, "--json"), EXIT_BAD_INPUT)
    assert not db_path.exists() or count_rows(db_path, "documents") == 0


def test_a_flag_cap_wins_over_a_bad_environment_cap(
    call: Call, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INGESTDESK_MAX_UPLOAD_MB", "nan")
    path = str(write(tmp_path / "a.txt", TEXT))
    assert "INGESTDESK_MAX_UPLOAD_MB" in one_error_line(call("upload", path))
    (doc,) = ok(call("--max-upload-mb", "1", "upload", path, "--json"))
    assert doc["size"] == len(TEXT)


# --db under a regular file, or a --store that is a file, were tracebacks.
def test_a_ledger_or_store_under_a_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = write(tmp_path / "plain", b"a file, not a folder")
    path = str(write(tmp_path / "a.txt", TEXT))

    def go(*args: str) -> Result:
        code = main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    under = ["--db", str(blocker / "ledger.db"), "--store", str(tmp_path / "o")]
    assert "cannot create its folder" in one_error_line(go(*under, "add", path))
    assert "no ledger at" in one_error_line(go(*under, "tasks"))
    json_error(go(*under, "add", path, "--json"), EXIT_UNEXPECTED)
    store_is_file = ["--db", str(tmp_path / "ledger.db"), "--store", str(blocker)]
    result = go(*store_is_file, "add", path)
    assert result.code == EXIT_UNEXPECTED
    assert "cannot store the original" in one_error_line(result)
    assert "cannot store" in json_error(go(*store_is_file, "upload", path, "--json"), 1)
    assert count_rows(tmp_path / "ledger.db", "documents") == 0


# An unexpected fault must still be one line (one JSON value), not a traceback.
def test_an_unexpected_fault_is_one_line_naming_only_its_type(
    call: Call, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    added(call, tmp_path, "a.txt")
    from core.ledger import Reads

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("SELECT secret FROM somewhere")

    monkeypatch.setattr(Reads, "list_tasks", broken)
    line = one_error_line(call("tasks"))
    assert "RuntimeError" in line and "INGESTDESK_DEBUG" in line
    assert "secret" not in line
    assert "RuntimeError" in json_error(call("tasks", "--json"), EXIT_UNEXPECTED)


# getpass.getuser() ran while the parser was built: with no passwd entry for the uid
# and no LOGNAME/USER, even --help died.
@pytest.mark.parametrize("failure", [KeyError, OSError])
def test_no_login_name_falls_back_to_the_uid(
    monkeypatch: pytest.MonkeyPatch, failure: type[Exception]
) -> None:
    def no_login() -> str:
        raise failure("getpwuid(): uid not found")

    monkeypatch.setattr(getpass, "getuser", no_login)
    assert default_actor() == f"uid-{os.getuid()}"
    args = build_parser().parse_args(["tasks"])  # building and parsing ask no one
    assert args.actor is None
    monkeypatch.setattr(getpass, "getuser", lambda: "mallory\x1b[2J")
    assert default_actor() == f"uid-{os.getuid()}"


# Python as a user with no passwd entry: pwd.getpwuid raises KeyError (the
# interpreter lives under /root here, so the test cannot really switch uid).
NO_PASSWD_ENTRY = """
import pwd, sys
def missing(uid):
    raise KeyError(f"getpwuid(): uid not found: {uid}")
pwd.getpwuid = missing
from tui.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_process_without_a_login_name_runs_and_records_its_uid(tmp_path: Path) -> None:
    env = clean_env()
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        env[name] = ""
    note = write(tmp_path / "a.txt", TEXT)

    def go(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", NO_PASSWD_ENTRY, *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            check=False,
        )

    # The simulation is faithful: getpass itself fails in that process.
    faithful = NO_PASSWD_ENTRY.replace("from tui.cli", "import getpass; getpass.getuser()\n#")
    failed = subprocess.run(
        [sys.executable, "-c", faithful], env=env, capture_output=True, text=True, check=False
    )
    assert failed.returncode != 0 and "KeyError" in failed.stderr
    helped = go("--help")
    assert (helped.returncode, helped.stderr) == (0, "")
    assert "usage:" in helped.stdout
    answer = go("add", str(note), "--json")
    assert answer.returncode == 0, answer.stderr
    (task,) = json.loads(answer.stdout)
    shown = go("task", task["task_id"], "--json")
    assert json.loads(shown.stdout)["history"][0]["actor"] == f"uid-{os.getuid()}"


def without_file_override() -> None:
    """Drop root's power to ignore file modes (CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH) for the process about to run, so a 0444 file is read-only
    to it as to anyone else."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop, cap_dac_override, cap_dac_read_search = 24, 1, 2
    for cap in (cap_dac_override, cap_dac_read_search):
        if libc.prctl(pr_capbset_drop, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


# ---------------------------------------------- 4. one line, never a traceback (processes)


# A read-only ledger gave a traceback with SQL in it (guards core's fix).
def test_a_read_only_ledger_is_one_line(sub: Call, tmp_path: Path, db_path: Path) -> None:
    note = write(tmp_path / "a.txt", TEXT)
    ok(sub("upload", str(note), "--json"))
    db_path.chmod(0o444)
    tmp_path.chmod(0o555)  # and no journal files beside it either
    try:
        for extra in ((), ("--json",)):
            proc = subprocess.run(
                [
                    *CORE_CLI,
                    "--db",
                    str(db_path),
                    "--store",
                    str(tmp_path / "objects"),
                    "add",
                    str(note),
                    *extra,
                ],
                cwd="/",
                env=clean_env(),
                preexec_fn=without_file_override if os.geteuid() == 0 else None,
                capture_output=True,
                text=True,
                timeout=CLI_TIMEOUT_S,
                check=False,
            )
            result = Result(proc.returncode, proc.stdout, proc.stderr)
            if extra:
                message = json_error(result, EXIT_UNEXPECTED)
            else:
                assert result.code == EXIT_UNEXPECTED, result
                message = one_error_line(result)
            assert "INSERT" not in message and "cannot open ledger" in message
    finally:
        tmp_path.chmod(0o755)
        db_path.chmod(0o644)
    assert count_rows(db_path, "documents") == 1


# A full disk while storing an upload was a traceback (guards core's fix).
def test_a_full_disk_while_storing_is_one_line_and_adds_nothing(
    sub: Call, tmp_path: Path, db_path: Path, store: Path
) -> None:
    ok(sub("upload", str(write(tmp_path / "small.txt", TEXT)), "--json"))  # the ledger exists
    big = write(tmp_path / "big.txt", b"ingestion ledger lease\n" * 100_000)  # 2.3 MB
    limit = 1024 * 1024  # bytes any file may grow to: the ledger fits, the object does not

    def full_disk() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    base = [sys.executable, "-m", "core.cli", "--db", str(db_path), "--store", str(store)]
    for extra in ((), ("--json",)):
        proc = subprocess.run(
            [*base, "add", str(big), *extra],
            cwd=tmp_path,
            env=clean_env(),
            preexec_fn=full_disk,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            check=False,
        )
        result = Result(proc.returncode, proc.stdout, proc.stderr)
        if extra:
            assert "cannot store the original" in json_error(result, EXIT_UNEXPECTED)
        else:
            assert result.code == EXIT_UNEXPECTED
            assert "cannot store the original" in one_error_line(result)
    assert count_rows(db_path, "documents") == 1
    assert not [p for p in store.rglob("*") if p.is_file() and p.stat().st_size > limit]
    assert not [p for p in store.rglob(".incoming-*")]


# Output to a full disk was "Exception ignored ... OSError" and exit 0.
def test_output_to_a_full_device_is_one_line(tmp_path: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    for extra in ((), ("--json",)):
        with open("/dev/full", "w") as full:
            proc = subprocess.run(
                [sys.executable, "-m", "core.cli", "errors", *extra],
                cwd=tmp_path,
                env=clean_env(),
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                timeout=CLI_TIMEOUT_S,
                check=False,
            )
        assert proc.returncode == EXIT_UNEXPECTED
        assert proc.stderr == "ingestdesk: cannot write the output: No space left on device\n"


# `ingestdesk … | head` ended in a BrokenPipeError traceback.
def test_a_reader_that_goes_away_ends_the_command_quietly(sub: Call, tmp_path: Path) -> None:
    ok(sub("add", str(write(tmp_path / "a.txt", TEXT)), "--json"))
    for args in (("errors",), ("tasks", "--json"), ("--version",)):
        read_end, write_end = os.pipe()
        os.close(read_end)  # the reader is gone before the first line is written
        try:
            proc = subprocess.run(
                [
                    *CORE_CLI,
                    *args,
                    "--db",
                    str(tmp_path / "ledger.db"),
                    "--store",
                    str(tmp_path / "objects"),
                ],
                cwd=tmp_path,
                env=clean_env(),
                stdout=write_end,
                stderr=subprocess.PIPE,
                text=True,
                timeout=CLI_TIMEOUT_S,
                check=False,
            )
        finally:
            os.close(write_end)
        assert (proc.returncode, proc.stderr) == (EXIT_BROKEN_PIPE, ""), args


# `upload -` with stdin closed (`<&-`) was an AttributeError traceback.
def test_upload_from_a_closed_stdin_is_one_line(tmp_path: Path, db_path: Path, store: Path) -> None:
    base = [sys.executable, "-m", "core.cli", "--db", str(db_path), "--store", str(store)]
    for extra in ((), ("--json",)):
        proc = subprocess.run(
            [*base, "upload", "-", "--name", "x.txt", *extra],
            cwd=tmp_path,
            env=clean_env(),
            preexec_fn=lambda: os.close(0),
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            check=False,
        )
        result = Result(proc.returncode, proc.stdout, proc.stderr)
        if extra:
            assert "stdin is closed" in json_error(result, EXIT_BAD_INPUT)
        else:
            assert result.code == EXIT_BAD_INPUT
            assert "stdin is closed" in one_error_line(result)


# ----------------------------------------------------- 5. unbounded reads and hangs


# `upload /dev/zero` read until memory ran out; a FIFO blocked the open forever.
def test_devices_and_fifos_are_refused_without_reading(sub: Call, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path, phrase in ((fifo, "pipe (FIFO)"), (Path("/dev/zero"), "character device")):
        started = time.monotonic()
        result = sub("upload", str(path))  # a hang here is CLI_TIMEOUT_S, then a failure
        assert result.code == EXIT_BAD_INPUT
        assert phrase in one_error_line(result)
        assert time.monotonic() - started < 10
        with pytest.raises(BadInput, match="not a regular file"):
            read_upload(path, 1024)


# `cat /dev/urandom | ingestdesk upload - --name x.txt` read until memory ran out.
def test_stdin_is_read_with_the_cap(tmp_path: Path, db_path: Path, store: Path) -> None:
    with open("/dev/urandom", "rb") as endless:
        proc = subprocess.run(
            [
                *CORE_CLI,
                "--db",
                str(db_path),
                "--store",
                str(store),
                "--max-upload-mb",
                "1",
                "upload",
                "-",
                "--name",
                "x.txt",
            ],
            cwd=tmp_path,
            env=clean_env(),
            stdin=endless,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            check=False,
        )
    result = Result(proc.returncode, proc.stdout, proc.stderr)
    assert result.code == EXIT_BAD_INPUT
    assert "over the upload limit" in one_error_line(result)


class EndlessStream:
    """A stream that never ends, counting what is read from it."""

    def __init__(self) -> None:
        self.read_bytes = 0

    def read(self, n: int = -1) -> bytes:
        assert n >= 0, "an unbounded read of an endless stream"
        self.read_bytes += n
        return b"x" * n


def test_reads_stop_one_byte_past_the_cap(tmp_path: Path) -> None:
    endless = EndlessStream()
    with pytest.raises(BadInput, match="over the upload limit"):
        read_stream(endless, 1000, "x.txt")  # type: ignore[arg-type]
    assert endless.read_bytes == 1001
    assert read_stream(_Bytes(TEXT), 1000, "x.txt") == TEXT  # type: ignore[arg-type]
    with pytest.raises(BadInput, match="stdin is closed"):
        read_stream(None, 1000, "x.txt")
    exact = write(tmp_path / "exact.txt", b"y" * 1000)
    assert read_upload(exact, 1000) == b"y" * 1000
    with pytest.raises(BadInput, match="1001 bytes is over the upload limit"):
        read_upload(write(tmp_path / "over.txt", b"y" * 1001), 1000)


class _Bytes:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, n: int = -1) -> bytes:
        out, self.data = self.data[:n], self.data[n:]
        return out


# ----------------------------------------------------------------- 6. terminal safety


def tamper(db_path: Path, task_id: str, document_id: str) -> None:
    """Write hostile text straight into the ledger, as an older ingestdesk (or a
    person with sqlite3) could have: the CLI must still show it harmlessly."""
    with sqlite3.connect(db_path) as raw:
        raw.execute("UPDATE documents SET filename = ? WHERE id = ?", (HOSTILE, document_id))
        raw.execute(
            "UPDATE ingestion_tasks SET worker_id = ?, error_detail = ? WHERE id = ?",
            (HOSTILE, HOSTILE, task_id),
        )
        raw.execute(
            "UPDATE task_events SET actor = ?, reason = ? WHERE task_id = ?",
            (HOSTILE, HOSTILE, task_id),
        )


# Worker ids, actors, reasons and names were printed raw: ESC[2J cleared the screen,
# a newline forged a history line, a bidi override displayed reversed.
def test_text_output_escapes_what_users_supplied(call: Call, tmp_path: Path, db_path: Path) -> None:
    (task,) = added(call, tmp_path, "a.txt")
    tid, did = task["task_id"], task["document_id"]
    lines_before = {
        args: len(call(*args).stdout.splitlines())
        for args in (("tasks",), ("task", tid), ("documents",), ("document", did))
    }
    tamper(db_path, tid, did)
    for args, count in lines_before.items():
        result = call(*args)
        assert result.code == EXIT_OK
        out = result.stdout
        assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out, args
        assert len(out.splitlines()) == count, (args, out)  # no forged lines
        assert "\\x1b[2J" in out and "\\u202e" in out, args  # shown, not obeyed
        # --json keeps the exact text, escaped by json.dumps (ASCII only on the wire).
        answer = call(*args, "--json")
        assert answer.stdout.isascii()
        assert HOSTILE in set(strings(json.loads(answer.stdout))), args


def strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def test_errors_that_quote_input_are_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile_dir = tmp_path / "x\x1b[2J\u202e\nforged"
    commands = [
        ["--db", str(hostile_dir / "ledger.db"), "tasks"],  # "no ledger at <path>"
        ["--db", str(tmp_path / "l.db"), "upload", str(hostile_dir / "nope.txt")],
        ["--db", str(tmp_path / "l.db"), "task", "\x1b[2J\x1b]0;x\x07"],
        ["--db", str(tmp_path / "l.db"), "tasks", "--filter", "attempt:>\u202e1\x1b[2J"],
        ["--db", str(tmp_path / "l.db"), "tasks", "--bogus\x1b[2J"],  # a usage error
    ]
    # The ledger the hostile task id is looked up in (a refused upload creates none).
    good = str(write(tmp_path / "ok.txt", TEXT))
    assert main(["--db", str(tmp_path / "l.db"), "--store", str(tmp_path / "o"), "add", good]) == 0
    capsys.readouterr()
    for args in commands:
        for extra in ([], ["--json"]):
            code = main([*args, *extra, "--store", str(tmp_path / "o")])
            captured = capsys.readouterr()
            result = Result(code, captured.out, captured.err)
            assert code in (EXIT_BAD_INPUT, EXIT_UNEXPECTED, 4), (args, result)
            if extra:
                assert result.stdout.isascii() and result.stderr == "", args
                json.loads(result.stdout)
            else:
                line = one_error_line(result)
                assert line.isprintable(), (args, line)
                assert "\\x1b" in line or "\\u202e" in line, (args, line)


def test_unsafe_actors_are_refused_at_the_command_line(
    call: Call, tmp_path: Path, db_path: Path
) -> None:
    path = str(write(tmp_path / "a.txt", TEXT))
    for actor in ("mallory\x1b[2J", "two\nlines", "\u202eecila", "", "x" * 129):
        result = call("--actor", actor, "add", path)
        assert result.code == EXIT_BAD_INPUT, actor
        assert "actor" in one_error_line(result)
        json_error(call("add", path, "--actor", actor, "--json"), EXIT_BAD_INPUT)
    assert not db_path.exists()  # refused while parsing: nothing was opened
    (task,) = ok(call("--actor", "alice ops", "add", path, "--json"))
    assert ok(call("task", task["task_id"], "--json"))["history"][0]["actor"] == "alice ops"


# ------------------------------------------------------------------------ 7. --version


def test_version_comes_from_the_package_metadata(tmp_path: Path) -> None:
    from importlib.metadata import version

    script = Path(sys.executable).with_name("ingestdesk")
    program = [str(script)] if script.exists() else [sys.executable, "-m", "tui.cli"]
    shown = run(["--version"], cwd=tmp_path, program=program)
    assert (shown.code, shown.stdout, shown.stderr) == (
        0,
        f"ingestdesk {version('ingestdesk')}\n",
        "",
    )
    assert ok(run(["--version", "--json"], cwd=tmp_path)) == {"version": version("ingestdesk")}
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------- 8. readers never create a ledger


# `ingestdesk tasks` (or a mistyped --db) created an empty ledger and its folders.
def test_commands_that_need_a_ledger_never_create_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "typo" / "ledgr.db"
    some_id = "0123456789abcdef0123456789abcdef"
    commands = [
        ("tasks",),
        ("tasks", "--filter", "status:failed"),
        ("task", some_id),
        ("documents",),
        ("document", some_id),
        ("chunks", some_id),
        ("search", "leases"),
        ("submit", some_id),
        ("publish", some_id),
        ("cancel", some_id),
        ("retry", "--all"),
    ]
    for args in commands:
        code = main(["--db", str(typo), "--store", str(tmp_path / "typo" / "o"), *args])
        captured = capsys.readouterr()
        assert code == EXIT_UNEXPECTED, args
        line = one_error_line(Result(code, captured.out, captured.err))
        assert f"no ledger at {typo}" in line and "ingestdesk add" in line, args
    assert list(tmp_path.iterdir()) == []


def test_a_reader_in_a_fresh_folder_leaves_it_empty(tmp_path: Path) -> None:
    result = run(["tasks", "--json"], cwd=tmp_path)
    message = json_error(result, EXIT_UNEXPECTED)
    assert message.startswith(f"no ledger at {tmp_path / '.ingestdesk' / 'ledger.db'}")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------ 9. worker logs

LOG_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (INFO|WARNING) +task=([0-9a-f]{8}|-) +(.+)$"
)


# At concurrency 2 the stage lines of two tasks interleaved with no task id on them.
def test_every_worker_log_line_has_its_time_level_and_task(sub: Call, tmp_path: Path) -> None:
    good = [str(write(tmp_path / f"n{i}.md", MARKDOWN + bytes([65 + i]))) for i in range(3)]
    bad = str(write(tmp_path / "broken.pdf", hostile.truncated_pdf()))
    tasks = ok(sub("add", *good, bad, "--json"))
    ids = {t["task_id"][:8] for t in tasks}
    broken = tasks[-1]["task_id"][:8]
    result = sub("worker", "--until-idle", "--concurrency", "2", "--worker-id", "w1")
    assert result.code == EXIT_OK, result
    *log, summary = result.stdout.splitlines()
    assert summary.startswith("worker=w1 stopped: claimed=4")
    seen: dict[str, list[str]] = {}
    for line in log:
        match = LOG_LINE.match(line)
        assert match, line
        _, level, task, message = match.groups()
        if task != "-":
            assert task in ids, line
            seen.setdefault(task, []).append(message)
        if message.startswith("failed "):
            assert level == "WARNING", line
    for task in ids:
        assert f"claimed task={task} worker=w1" in seen[task][0]
        assert all(task in m for m in seen[task] if "task=" in m)
    assert any(m.startswith("stage=") for m in seen[next(iter(ids - {broken}))])
    assert any(m.startswith("failed ") for m in seen[broken])


def test_json_logs_are_one_object_per_line_on_stderr(sub: Call, tmp_path: Path) -> None:
    (task,) = ok(sub("add", str(write(tmp_path / "a.md", MARKDOWN)), "--json"))
    result = sub("worker", "--until-idle", "--log-format", "json", "--json", "--worker-id", "w2")
    assert result.code == EXIT_OK, result
    summary = json.loads(result.stdout)  # stdout is the one answer
    assert summary["claimed"] == [task["task_id"]]
    records = [json.loads(line) for line in result.stderr.splitlines()]
    assert records
    for record in records:
        assert set(record) == {"time", "level", "worker_id", "task_id", "event", "message"}
        assert record["worker_id"] == "w2"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["time"])
    claimed = [r for r in records if r["event"] == "claimed"]
    assert [r["task_id"] for r in claimed] == [task["task_id"]]
    assert "claimed task=" in claimed[0]["message"]
    bad = sub("worker", "--log-format", "xml")
    assert bad.code == EXIT_BAD_INPUT


def test_log_levels_and_escaping() -> None:
    def event(kind: str, line: str) -> WorkerEvent:
        return WorkerEvent("w1", "3f2a9c1e" * 4, kind, line)

    assert level_of(event("claimed", "claimed task=3f2a9c1e worker=w1")) == logging.INFO
    assert level_of(event("progress", "stage=parse 0/3")) == logging.INFO
    for kind, line in [
        ("progress", "failed task=3f2a9c1e error_code=parse_error attempt=1"),
        ("progress", "retry_wait task=3f2a9c1e error_code=provider_unavailable attempt=1"),
        ("progress", "lost task=3f2a9c1e (cancelled or reaped); stopped without writing"),
        ("reaped", "reaped task=3f2a9c1e (lease expired) -> retry_wait"),
    ]:
        assert level_of(event(kind, line)) == logging.WARNING, line
    record = logging.LogRecord("x", logging.INFO, "", 0, "name \x1b[2J\nforged", None, None)
    record.task_id = None
    text = TextFormatter().format(record)
    assert text.isprintable() and "task=-" in text
    assert JsonFormatter().format(record).isascii()
