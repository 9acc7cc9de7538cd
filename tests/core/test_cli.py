"""The ``ingestdesk`` command, driven as a real console program in subprocesses.

Every call goes through ``python -m core.cli`` (one test uses the installed
``ingestdesk`` script) against a SQLite file and an object store under ``tmp_path``,
so exit codes, stdout and stderr are exactly what a shell script would see.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from core import (
    BadInput,
    DocumentStatus,
    ErrorCode,
    Ledger,
    Settings,
    Stage,
    TaskStatus,
    sqlite_url,
)
from core.intake import check_upload

# Seconds one command may take before the test gives up: generous, since a loaded
# 2-core machine took over 60 s for a worker to drain an 8000-page PDF.
CLI_TIMEOUT_S = 300.0
EXIT_OK, EXIT_UNEXPECTED, EXIT_BAD_INPUT, EXIT_CONFLICT, EXIT_NOT_FOUND = 0, 1, 2, 3, 4
EXIT_INTERRUPTED = 130  # stopped by Ctrl-C (SIGINT)

TEXT = b"Ingestion throughput rose by a third after the parser pool landed.\n"
MARKDOWN = b"# Runbook\n\nRestart the worker, then check the dashboard.\n"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(64)
UNKNOWN_ID = "0123456789abcdef0123456789abcdef"
OBJECT_KEY = re.compile(r"^sha256/[0-9a-f]{2}/[0-9a-f]{64}$")


def zip_bytes() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("word/document.xml", "<w:document/>")
    return buf.getvalue()


def pdf_bytes() -> bytes:
    from reportlab.pdfgen import canvas

    buf = io.BytesIO()
    page = canvas.Canvas(buf)
    page.drawString(72, 720, "A small but real PDF.")
    page.save()
    return buf.getvalue()


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str

    @property
    def value(self) -> Any:
        """stdout as exactly one JSON value (json.loads refuses any extra output)."""
        return json.loads(self.stdout)

    @property
    def error(self) -> dict[str, str]:
        value = self.value
        assert set(value) == {"error"}, value
        assert set(value["error"]) == {"kind", "message"}, value
        return dict(value["error"])


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without any ledger settings leaking in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INGESTDESK_")}
    env.update(extra)
    return env


def run(
    args: list[str],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
    program: list[str] | None = None,
) -> Result:
    proc = subprocess.run(
        [*(program or [sys.executable, "-m", "core.cli"]), *args],
        cwd=cwd,
        env=env if env is not None else clean_env(),
        input=stdin if stdin is not None else b"",
        capture_output=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    return Result(proc.returncode, proc.stdout.decode(), proc.stderr.decode())


Cli = Callable[..., Result]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "objects"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def cli(tmp_path: Path, db_path: Path, store: Path) -> Cli:
    """``cli(*args, stdin=b"...")`` runs one command on this test's ledger."""

    def call(*args: str, stdin: bytes | None = None, cwd: Path | None = None) -> Result:
        return run(
            ["--db", str(db_path), "--store", str(store), *args],
            cwd=cwd or tmp_path,
            stdin=stdin,
        )

    return call


def ok(result: Result) -> Any:
    """The JSON answer of a command that must have succeeded."""
    assert result.code == EXIT_OK, result
    return result.value


def one_error_line(result: Result) -> str:
    """A human-mode failure: nothing on stdout, one ``ingestdesk: ...`` line on stderr."""
    assert result.stdout == "", result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ingestdesk: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def stored_objects(store: Path) -> list[Path]:
    return sorted(p for p in store.rglob("*") if p.is_file()) if store.exists() else []


def add(cli: Cli, tmp_path: Path, name: str = "notes.txt", data: bytes = TEXT) -> dict[str, Any]:
    answer = ok(cli("add", str(write(tmp_path / name, data)), "--json"))
    assert isinstance(answer, list)
    assert len(answer) == 1
    return dict(answer[0])


# Commands on the ledger and store under tmp_path itself (the worker, log and refusal
# tests share these).
SCREENS = [sys.executable, "-m", "tui.cli"]  # the installed `ingestdesk`: core + screens
JSON_KEYS = {"time", "level", "worker_id", "task_id", "event", "message"}  # of a log line


def core_cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    return run(
        ["--db", str(tmp_path / "ledger.db"), "--store", str(tmp_path / "objects"), *args],
        cwd=tmp_path,
        env=env,
    )


def start_core_cli(tmp_path: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "core.cli",
            "--db",
            str(tmp_path / "ledger.db"),
            "--store",
            str(tmp_path / "objects"),
            *args,
        ],
        cwd=tmp_path,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def added(tmp_path: Path, *paths: Path) -> list[dict[str, Any]]:
    result = core_cli(tmp_path, "add", *map(str, paths), "--json")
    assert result.code == EXIT_OK, result
    value = result.value
    assert isinstance(value, list)
    return value


def task_row(tmp_path: Path, task_id: str) -> dict[str, Any]:
    result = core_cli(tmp_path, "task", task_id, "--json")
    assert result.code == EXIT_OK, result
    value = result.value
    assert isinstance(value, dict)
    return value


def json_records(stderr: bytes) -> list[dict[str, Any]]:
    records = []
    for line in stderr.decode().splitlines():
        record = json.loads(line)  # every line is one JSON object, nothing else
        assert isinstance(record, dict) and set(record) >= JSON_KEYS, line
        records.append(record)
    return records


def with_ledger(db_path: Path, store: Path, action: Callable[[Ledger], Any]) -> Any:
    """Run ``await action(ledger)`` on the CLI's ledger from the test process."""

    async def go() -> Any:
        ledger = await Ledger.open(Settings(db_url=sqlite_url(db_path), store_root=store))
        try:
            return await action(ledger)
        finally:
            await ledger.close()

    return asyncio.run(go())


# ------------------------------------------------------------------ happy paths


def test_upload_records_a_draft_document(cli: Cli, tmp_path: Path, store: Path) -> None:
    path = write(tmp_path / "runbook.md", MARKDOWN)
    (doc,) = ok(cli("upload", str(path), "--json"))
    assert doc["status"] == DocumentStatus.DRAFT
    assert doc["kind"] == "markdown"
    assert doc["filename"] == "runbook.md"
    assert doc["size"] == len(MARKDOWN)
    assert doc["version"] == 1
    listed = ok(cli("documents", "--json"))
    assert [d["document_id"] for d in listed] == [doc["document_id"]]
    assert ok(cli("tasks", "--json")) == []
    # The original is stored under its content hash, not its name.
    (obj,) = stored_objects(store)
    assert obj.read_bytes() == MARKDOWN
    assert obj.relative_to(store).as_posix() == doc["object_key"]


def test_upload_human_output_names_the_document(cli: Cli, tmp_path: Path) -> None:
    result = cli("upload", str(write(tmp_path / "a.txt", TEXT)))
    assert result.code == EXIT_OK
    assert result.stderr == ""
    assert re.fullmatch(r"uploaded document=[0-9a-f]{32} kind=text name=a\.txt\n", result.stdout)


def test_submit_queues_a_task_and_moves_the_document_to_processing(
    cli: Cli, tmp_path: Path
) -> None:
    (doc,) = ok(cli("upload", str(write(tmp_path / "a.txt", TEXT)), "--json"))
    task = ok(cli("submit", doc["document_id"], "--json"))
    assert task["document_id"] == doc["document_id"]
    assert task["status"] == TaskStatus.QUEUED
    assert task["attempt"] == 0
    shown = ok(cli("document", doc["document_id"], "--json"))
    assert shown["status"] == DocumentStatus.PROCESSING
    assert shown["version"] == 2
    assert [t["task_id"] for t in shown["tasks"]] == [task["task_id"]]


def test_add_uploads_and_submits_and_answers_the_task(cli: Cli, tmp_path: Path) -> None:
    a, b = write(tmp_path / "a.txt", TEXT), write(tmp_path / "b.md", MARKDOWN)
    answer = ok(cli("add", str(a), str(b), "--json", "--actor", "alice"))
    assert len(answer) == 2
    for task in answer:
        assert {
            "task_id",
            "document_id",
            "status",
            "stage",
            "completed",
            "total",
            "attempt",
            "error_code",
            "error_detail",
        } <= set(task)
        assert re.fullmatch(r"[0-9a-f]{32}", task["task_id"])
        assert (task["status"], task["stage"]) == (TaskStatus.QUEUED, Stage.DOWNLOAD)
        assert (task["completed"], task["total"], task["attempt"]) == (0, 1, 0)
        assert (task["error_code"], task["error_detail"]) == (None, None)
    docs = ok(cli("documents", "--json"))
    assert {d["document_id"] for d in docs} == {t["document_id"] for t in answer}
    assert {d["status"] for d in docs} == {DocumentStatus.PROCESSING}
    assert {d["filename"] for d in docs} == {"a.txt", "b.md"}


def test_task_shows_its_history_with_the_submit_event(cli: Cli, tmp_path: Path) -> None:
    task = add(cli, tmp_path)
    shown = ok(cli("task", task["task_id"], "--json"))
    assert shown["task_id"] == task["task_id"]
    assert shown["document_name"] == "notes.txt"
    history = shown["history"]
    assert isinstance(history, list)
    assert len(history) == 1
    (event,) = history
    assert event["task_id"] == task["task_id"]
    assert event["from_status"] is None
    assert event["to_status"] == TaskStatus.QUEUED
    assert event["attempt"] == 0
    # Human mode prints the same history.
    human = cli("task", task["task_id"])
    assert human.code == EXIT_OK
    assert "history:" in human.stdout
    assert "-> queued" in human.stdout


def test_short_id_prefixes_are_accepted(cli: Cli, tmp_path: Path) -> None:
    (doc,) = ok(cli("upload", str(write(tmp_path / "a.txt", TEXT)), "--json"))
    task = ok(cli("submit", doc["document_id"][:8], "--json"))
    assert task["document_id"] == doc["document_id"]
    assert ok(cli("task", task["task_id"][:8], "--json"))["task_id"] == task["task_id"]
    assert (
        ok(cli("document", doc["document_id"][:8], "--json"))["document_id"] == doc["document_id"]
    )
    cancelled = ok(cli("cancel", task["task_id"][:8].upper(), "--json"))
    assert cancelled["task_id"] == task["task_id"]
    assert cancelled["status"] == TaskStatus.CANCELLED


def test_tasks_filters_by_status_and_error_code(
    cli: Cli, tmp_path: Path, db_path: Path, store: Path
) -> None:
    queued = [add(cli, tmp_path, f"q{i}.txt", TEXT + bytes([65 + i])) for i in range(2)]
    cancelled = add(cli, tmp_path, "c.txt", TEXT + b"c")
    ok(cli("cancel", cancelled["task_id"], "--json"))
    failed = add(cli, tmp_path, "f.txt", TEXT + b"f")

    async def fail_it(ledger: Ledger) -> None:
        claim = await ledger.queue.claim(failed["task_id"], "worker-1")
        assert claim is not None
        assert await ledger.queue.fail(claim, ErrorCode.PARSE_ERROR, "bad xref") is not None

    with_ledger(db_path, store, fail_it)

    def ids(*args: str) -> set[str]:
        return {t["task_id"] for t in ok(cli("tasks", *args, "--json"))}

    assert ids() == {t["task_id"] for t in [*queued, cancelled, failed]}
    assert ids("--status", "queued") == {t["task_id"] for t in queued}
    assert ids("--status", "cancelled") == {cancelled["task_id"]}
    assert ids("--status", "failed") == {failed["task_id"]}
    assert ids("--status", "running") == set()
    assert ids("--error-code", "parse_error") == {failed["task_id"]}
    assert ids("--error-code", "parse_error", "--status", "failed") == {failed["task_id"]}
    assert ids("--error-code", "provider_unavailable") == set()
    (row,) = ok(cli("tasks", "--error-code", "parse_error", "--json"))
    assert (row["status"], row["error_code"], row["error_detail"]) == (
        "failed",
        "parse_error",
        "bad xref",
    )
    human = cli("tasks", "--status", "queued")
    assert human.code == EXIT_OK
    assert len(human.stdout.splitlines()) == 2
    # --filter, as the README shows it, narrows the list too (it was once ignored).
    assert ids("--filter", "status:failed") == {failed["task_id"]}
    assert ids("--filter", "code:parse_error status:failed") == {failed["task_id"]}
    assert ids("--filter", "!status:queued") == {cancelled["task_id"], failed["task_id"]}
    assert ids("--filter", "name:q0", "--status", "queued") == {queued[0]["task_id"]}
    assert ids("--filter", "status:failed", "--status", "queued") == set()
    bad = cli("tasks", "--filter", "colour:red", "--json")
    assert bad.code == EXIT_BAD_INPUT
    assert bad.error["kind"] == "BadInput"


def test_retry_of_a_failed_task_requeues_it(
    cli: Cli, tmp_path: Path, db_path: Path, store: Path
) -> None:
    task = add(cli, tmp_path)

    async def fail_it(ledger: Ledger) -> None:
        claim = await ledger.queue.claim(task["task_id"], "worker-1")
        assert claim is not None
        await ledger.queue.fail(claim, ErrorCode.INTERNAL_ERROR)

    with_ledger(db_path, store, fail_it)
    again = ok(cli("retry", task["task_id"], "--reason", "fixed the bug", "--json"))
    assert again["status"] == TaskStatus.QUEUED
    assert again["error_code"] is None
    assert ok(cli("document", task["document_id"], "--json"))["status"] == "processing"
    history = ok(cli("task", task["task_id"], "--json"))["history"]
    assert [e["to_status"] for e in history] == ["queued", "running", "failed", "queued"]
    assert history[-1]["reason"] == "fixed the bug"


def test_every_command_prints_exactly_one_json_value(cli: Cli, tmp_path: Path) -> None:
    """Success and failure alike: stdout is one JSON value, whatever the command."""
    task = add(cli, tmp_path)
    tid, did = task["task_id"], task["document_id"]
    path = str(write(tmp_path / "more.txt", TEXT + b"more"))
    successes = [
        ("upload", path),
        ("tasks",),
        ("task", tid),
        ("documents",),
        ("document", did),
        ("chunks", did),
        ("errors",),
        ("cancel", tid),
        ("submit", did),
    ]
    for args in successes:
        result = cli(*args, "--json")
        assert result.code == EXIT_OK, (args, result)
        assert isinstance(result.value, list | dict), args
    errors = ok(cli("errors", "--json"))
    assert {e["error_code"] for e in errors} == {c.value for c in ErrorCode}
    failures = [
        (("upload", str(tmp_path / "nope.txt")), EXIT_BAD_INPUT, "BadInput"),
        (("add", str(tmp_path / "nope.txt")), EXIT_BAD_INPUT, "BadInput"),
        (("submit", did), EXIT_CONFLICT, "Conflict"),
        (("publish", did), EXIT_CONFLICT, "Conflict"),
        (("retry", tid), EXIT_CONFLICT, "Conflict"),
        (("cancel", tid), EXIT_CONFLICT, "Conflict"),
        (("task", UNKNOWN_ID), EXIT_NOT_FOUND, "NotFound"),
        (("document", UNKNOWN_ID), EXIT_NOT_FOUND, "NotFound"),
        (("chunks", UNKNOWN_ID), EXIT_NOT_FOUND, "NotFound"),
    ]
    for args, code, kind in failures:
        result = cli(*args, "--json")
        assert result.code == code, (args, result)
        assert result.error["kind"] == kind, (args, result)
        assert result.error["message"], args
        assert result.stderr == "", (args, result)


def test_global_options_work_before_and_after_the_command(
    tmp_path: Path, db_path: Path, store: Path
) -> None:
    path = write(tmp_path / "a.txt", TEXT)
    before = run(
        ["--json", "--db", str(db_path), "--store", str(store), "upload", str(path)],
        cwd=tmp_path,
    )
    (doc,) = ok(before)
    after = run(["documents", "--db", str(db_path), "--store", str(store), "--json"], cwd=tmp_path)
    assert [d["document_id"] for d in ok(after)] == [doc["document_id"]]


# ------------------------------------------------------------ conflicts (exit 3)


def test_submitting_a_document_that_is_not_a_draft_is_a_conflict(cli: Cli, tmp_path: Path) -> None:
    task = add(cli, tmp_path)
    result = cli("submit", task["document_id"], "--json")
    assert result.code == EXIT_CONFLICT
    assert result.error["kind"] == "Conflict"
    assert "processing" in result.error["message"]
    assert "draft" in result.error["message"]
    # Nothing changed: still one task, still processing.
    assert len(ok(cli("tasks", "--json"))) == 1
    line = one_error_line(cli("submit", task["document_id"]))
    assert "only draft documents can be submitted" in line


def test_cancel_then_cancel_again_is_a_conflict_that_says_why(cli: Cli, tmp_path: Path) -> None:
    task = add(cli, tmp_path)
    cancelled = ok(cli("cancel", task["task_id"], "--reason", "wrong file", "--json"))
    assert cancelled["status"] == TaskStatus.CANCELLED
    assert ok(cli("document", task["document_id"], "--json"))["status"] == DocumentStatus.DRAFT
    again = cli("cancel", task["task_id"], "--json")
    assert again.code == EXIT_CONFLICT
    message = again.error["message"]
    assert "cancelled" in message
    assert "only" in message
    assert "queued" in message
    line = one_error_line(cli("cancel", task["task_id"]))
    assert f"task {task['task_id'][:8]} is cancelled" in line
    # The refused cancel wrote no event.
    history = ok(cli("task", task["task_id"], "--json"))["history"]
    assert [e["to_status"] for e in history] == ["queued", "cancelled"]
    assert history[-1]["reason"] == "wrong file"


def test_retry_of_a_cancelled_task_says_to_submit_again(cli: Cli, tmp_path: Path) -> None:
    task = add(cli, tmp_path)
    ok(cli("cancel", task["task_id"], "--json"))
    result = cli("retry", task["task_id"], "--json")
    assert result.code == EXIT_CONFLICT
    assert result.error["kind"] == "Conflict"
    assert "submit the document again" in result.error["message"]
    line = one_error_line(cli("retry", task["task_id"]))
    assert "submit the document again" in line
    # And submitting again is what works.
    resubmitted = ok(cli("submit", task["document_id"], "--json"))
    assert resubmitted["task_id"] != task["task_id"]
    assert resubmitted["status"] == TaskStatus.QUEUED


def test_retry_of_a_queued_task_and_publish_of_a_processing_document_conflict(
    cli: Cli, tmp_path: Path
) -> None:
    task = add(cli, tmp_path)
    retry = cli("retry", task["task_id"], "--json")
    assert retry.code == EXIT_CONFLICT
    assert "only failed tasks can be retried" in retry.error["message"]
    publish = cli("publish", task["document_id"], "--json")
    assert publish.code == EXIT_CONFLICT
    assert "review" in publish.error["message"]


# ------------------------------------------------------------ not found (exit 4)


UNKNOWN = [
    ("task", UNKNOWN_ID),
    ("task", UNKNOWN_ID[:8]),
    ("task", "not-hex!"),
    ("cancel", UNKNOWN_ID),
    ("retry", UNKNOWN_ID[:8]),
    ("submit", UNKNOWN_ID),
    ("document", UNKNOWN_ID[:8]),
    ("publish", UNKNOWN_ID),
    ("chunks", UNKNOWN_ID),
]


def test_unknown_ids_are_not_found(cli: Cli, tmp_path: Path) -> None:
    add(cli, tmp_path)  # a ledger with something in it, so the miss is a real miss
    for args in UNKNOWN:
        result = cli(*args, "--json")
        assert result.code == EXIT_NOT_FOUND, (args, result)
        assert result.error["kind"] == "NotFound", args
        assert "no " in result.error["message"], args
    for args in UNKNOWN[:2]:
        human = cli(*args)
        assert human.code == EXIT_NOT_FOUND
        assert "no task" in one_error_line(human)


# ---------------------------------------------------------- bad input (exit 2)


def test_stdin_upload_needs_a_name(cli: Cli, db_path: Path, store: Path) -> None:
    result = cli("upload", "-", "--json", stdin=TEXT)
    assert result.code == EXIT_BAD_INPUT
    assert "--name" in result.error["message"]
    assert "--name" in one_error_line(cli("add", "-", stdin=TEXT))
    assert_nothing_written(db_path, store)


def test_stdin_upload_with_a_name(cli: Cli, store: Path) -> None:
    (doc,) = ok(cli("upload", "-", "--name", "from-pipe.md", "--json", stdin=MARKDOWN))
    assert doc["filename"] == "from-pipe.md"
    assert doc["kind"] == "markdown"
    assert doc["size"] == len(MARKDOWN)
    (obj,) = stored_objects(store)
    assert obj.read_bytes() == MARKDOWN
    (task,) = ok(cli("add", "-", "--name", "second.txt", "--json", stdin=TEXT))
    assert task["status"] == TaskStatus.QUEUED


def test_a_path_traversal_name_is_neutralised(tmp_path: Path) -> None:
    # Run from deep inside tmp_path so that '../..' would still land inside it.
    cwd = tmp_path / "a" / "b"
    store = cwd / "objects"
    cwd.mkdir(parents=True)
    db = cwd / "ledger.db"
    before = {p for p in tmp_path.rglob("*")}
    pdf = pdf_bytes()
    result = run(
        [
            "--db",
            str(db),
            "--store",
            str(store),
            "upload",
            "-",
            "--name",
            "../../etc/passwd.pdf",
            "--json",
        ],
        cwd=cwd,
        stdin=pdf,
    )
    (doc,) = ok(result)
    name = doc["filename"]
    assert "/" not in name
    assert "\\" not in name
    assert ".." not in name
    assert name.endswith("passwd.pdf")
    assert doc["kind"] == "pdf"
    # Only the ledger and content-addressed objects were written.
    created = {p for p in tmp_path.rglob("*")} - before
    for path in created:
        is_ledger = path.parent == cwd and path.name.startswith(db.name)
        assert is_ledger or path == store or store in path.parents, path
    assert not any("passwd" in p.name or p.name == "etc" for p in tmp_path.rglob("*"))
    (obj,) = stored_objects(store)
    assert OBJECT_KEY.match(obj.relative_to(store).as_posix())
    assert obj.read_bytes() == pdf


def bad_input_cases(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name → (path to upload, a phrase the one error line must contain)."""
    (tmp_path / "folder").mkdir()
    return {
        "missing": (tmp_path / "missing.txt", "no such file"),
        "directory": (tmp_path / "folder", "is a directory"),
        "zero bytes": (write(tmp_path / "empty.txt", b""), "empty"),
        "zip named pdf": (write(tmp_path / "x.pdf", zip_bytes()), "unsupported"),
        "zip named txt": (write(tmp_path / "x.txt", zip_bytes()), "unsupported"),
        "png": (write(tmp_path / "photo.png", PNG), "unsupported"),
        "text named pdf": (
            write(tmp_path / "fake.pdf", TEXT),
            "not a PDF: the content is plain text",
        ),
    }


def assert_nothing_written(db_path: Path, store: Path) -> None:
    """No document, no task and no stored object: a refused upload leaves no trace."""

    async def contents(ledger: Ledger) -> tuple[list[Any], list[Any]]:
        return await ledger.reads.list_documents(), await ledger.reads.list_tasks()

    assert with_ledger(db_path, store, contents) == ([], [])
    assert stored_objects(store) == []


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "directory",
        "zero bytes",
        "zip named pdf",
        "zip named txt",
        "png",
        "text named pdf",
    ],
)
def test_bad_files_are_refused_and_nothing_is_written(
    cli: Cli, tmp_path: Path, db_path: Path, store: Path, case: str
) -> None:
    path, phrase = bad_input_cases(tmp_path)[case]
    result = cli("upload", str(path))
    assert result.code == EXIT_BAD_INPUT
    assert phrase in one_error_line(result)
    for command in ("upload", "add"):
        result = cli(command, str(path), "--json")
        assert result.code == EXIT_BAD_INPUT, (command, result)
        assert result.error["kind"] == "BadInput"
        assert phrase in result.error["message"]
        assert result.stderr == ""
    assert_nothing_written(db_path, store)


@pytest.mark.parametrize("bad", ["missing.txt", "x.pdf"])
def test_a_batch_with_one_bad_file_uploads_nothing(
    cli: Cli, tmp_path: Path, db_path: Path, store: Path, bad: str
) -> None:
    good = write(tmp_path / "good.txt", TEXT)
    if bad == "x.pdf":
        write(tmp_path / bad, zip_bytes())
    for command in ("upload", "add"):
        result = cli(command, str(good), str(tmp_path / bad))
        line = one_error_line(result)
        assert result.code == EXIT_BAD_INPUT
        assert bad in line
        assert "good.txt" not in line
    assert not db_path.exists()  # input is judged before the ledger is opened
    assert_nothing_written(db_path, store)


def test_a_batch_reports_every_bad_file_on_one_line(cli: Cli, tmp_path: Path) -> None:
    result = cli("upload", str(tmp_path / "one.txt"), str(tmp_path / "two.txt"))
    line = one_error_line(result)
    assert "one.txt" in line
    assert "two.txt" in line


def test_name_with_several_files_is_bad_input(cli: Cli, tmp_path: Path, db_path: Path) -> None:
    a, b = write(tmp_path / "a.txt", TEXT), write(tmp_path / "b.txt", TEXT + b"b")
    result = cli("upload", str(a), str(b), "--name", "x.txt", "--json")
    assert result.code == EXIT_BAD_INPUT
    assert not db_path.exists()


@pytest.mark.parametrize(
    "url",
    [
        "mysql://x",
        "sqlite+aiosqlite://",
        "sqlite:///",
        "sqlite+aiosqlite:///:memory:",
        "http://example.com/ledger",
        "://",
    ],
)
def test_a_malformed_ledger_url_is_bad_input(tmp_path: Path, url: str) -> None:
    result = run(["--db", url, "--store", str(tmp_path / "o"), "tasks", "--json"], cwd=tmp_path)
    assert result.code == EXIT_BAD_INPUT, result
    assert result.error["kind"] == "BadInput"
    assert "Traceback" not in result.stderr
    human = run(["--db", url, "tasks"], cwd=tmp_path)
    assert human.code == EXIT_BAD_INPUT
    one_error_line(human)
    assert list(tmp_path.iterdir()) == []


def test_a_sync_postgres_driver_url_is_bad_input(tmp_path: Path) -> None:
    url = "postgresql+psycopg2://user:secret@127.0.0.1:1/ledger"
    result = run(["--db", url, "tasks", "--json"], cwd=tmp_path)
    assert result.code == EXIT_BAD_INPUT, result
    assert result.error["kind"] == "BadInput"
    assert "secret" not in result.stdout + result.stderr


@pytest.mark.parametrize("driver", ["sqlite", "sqlite+pysqlite", "sqlite+aiosqlite"])
def test_every_sqlite_spelling_opens_the_same_ledger(tmp_path: Path, driver: str) -> None:
    url = f"{driver}:///{tmp_path / 'ledger.db'}"
    store = ["--store", str(tmp_path / "objects")]
    # A writer creates the ledger (a reader refuses a missing one) ...
    path = write(tmp_path / "a.txt", TEXT)
    (doc,) = ok(run(["--db", url, *store, "upload", str(path), "--json"], cwd=tmp_path))
    assert (tmp_path / "ledger.db").is_file()
    result = run(["--db", url, *store, "tasks", "--json"], cwd=tmp_path)
    assert result.code == 0, result
    # ... and the plain path opens the same ledger.
    plain = ["--db", str(tmp_path / "ledger.db"), *store, "documents", "--json"]
    assert [d["document_id"] for d in ok(run(plain, cwd=tmp_path))] == [doc["document_id"]]


def test_a_usage_error_under_json_still_prints_one_json_value(cli: Cli) -> None:
    result = cli("tasks", "--status", "bogus", "--json")
    assert result.code == EXIT_BAD_INPUT
    assert result.error["kind"] == "BadInput"


def test_the_cli_size_limit_refuses_big_files_and_writes_nothing(
    cli: Cli, tmp_path: Path, db_path: Path, store: Path
) -> None:
    big = write(tmp_path / "big.txt", b"x" * (2 * 1024 * 1024))
    small = write(tmp_path / "small.txt", TEXT)
    result = cli("--max-upload-mb", "1", "add", str(small), str(big), "--json")
    assert result.code == EXIT_BAD_INPUT
    assert result.error["kind"] == "BadInput"
    assert "over the upload limit" in result.error["message"]
    assert "big.txt" in result.error["message"]
    assert_nothing_written(db_path, store)
    # The same limit from the environment; a flag still wins over it.
    env = clean_env(INGESTDESK_MAX_UPLOAD_MB="1")
    base = ["--db", str(db_path), "--store", str(store)]
    refused = run([*base, "upload", str(big)], cwd=tmp_path, env=env)
    assert "over the upload limit" in one_error_line(refused)
    assert refused.code == EXIT_BAD_INPUT
    assert_nothing_written(db_path, store)
    (doc,) = ok(
        run([*base, "--max-upload-mb", "3", "upload", str(big), "--json"], cwd=tmp_path, env=env)
    )
    assert doc["size"] == 2 * 1024 * 1024
    bad = cli("--max-upload-mb", "0", "upload", str(small), "--json")
    assert bad.code == EXIT_BAD_INPUT
    assert "--max-upload-mb" in bad.error["message"]


async def test_the_upload_size_limit_refuses_big_files(settings: Settings, tmp_path: Path) -> None:
    small = settings.with_(max_upload_bytes=len(TEXT))
    big = TEXT + b"one byte too many"
    path = write(tmp_path / "big.txt", big)
    async with await Ledger.open(small) as ledger:
        with pytest.raises(BadInput, match=rf"{len(big)} bytes is over the upload limit"):
            await ledger.operator.upload(big, "big.txt")
        with pytest.raises(BadInput, match="over the upload limit"):
            await ledger.operator.upload_path(path)
        with pytest.raises(BadInput, match="over the upload limit"):
            check_upload(big, "big.txt", small.max_upload_bytes)
        assert await ledger.reads.list_documents() == []
        assert stored_objects(small.store_root) == []
        # Exactly at the limit is fine.
        doc = await ledger.operator.upload(TEXT, "fits.txt")
        assert doc.size == small.max_upload_bytes


# ------------------------------------------------ configuration and backends


def test_the_environment_chooses_ledger_and_store(tmp_path: Path) -> None:
    db, store = tmp_path / "env" / "ledger.db", tmp_path / "env-objects"
    env = clean_env(INGESTDESK_DB=str(db), INGESTDESK_STORE=str(store))
    script = Path(sys.executable).with_name("ingestdesk")
    program = [str(script)] if script.exists() else None
    path = write(tmp_path / "a.txt", TEXT)
    (task,) = ok(run(["add", str(path), "--json"], cwd=tmp_path, env=env, program=program))
    assert db.is_file()
    (obj,) = stored_objects(store)
    assert obj.read_bytes() == TEXT
    assert not (tmp_path / ".ingestdesk").exists()
    listed = ok(run(["tasks", "--json"], cwd=tmp_path, env=env, program=program))
    assert [t["task_id"] for t in listed] == [task["task_id"]]
    # A flag beats the environment: a command that only reads names the flag's
    # ledger and, since it does not exist yet, refuses without creating it ...
    other = tmp_path / "other.db"
    refused = run(["--db", str(other), "tasks", "--json"], cwd=tmp_path, env=env)
    assert refused.code == 1, refused
    assert str(other) in refused.error["message"]
    assert not other.exists()
    # ... and a writer creates it there, where readers then find it.
    ok(run(["--db", str(other), "upload", str(path), "--json"], cwd=tmp_path, env=env))
    assert other.is_file()
    empty = ok(run(["--db", str(other), "tasks", "--json"], cwd=tmp_path, env=env))
    assert empty == []


def test_without_settings_the_ledger_lives_in_the_working_directory(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", TEXT)
    ok(run(["upload", str(path), "--json"], cwd=tmp_path))
    assert (tmp_path / ".ingestdesk" / "ledger.db").is_file()
    assert stored_objects(tmp_path / ".ingestdesk" / "objects") != []


@pytest.mark.postgres
def test_the_cli_works_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    store = tmp_path / "objects"

    def pg(*args: str, stdin: bytes | None = None) -> Result:
        return run(["--db", pg_url, "--store", str(store), *args], cwd=tmp_path, stdin=stdin)

    path = write(tmp_path / "a.txt", TEXT)
    (task,) = ok(pg("add", str(path), "--json"))
    assert task["status"] == TaskStatus.QUEUED
    assert ok(pg("task", task["task_id"][:8], "--json"))["history"][0]["to_status"] == "queued"
    assert [t["task_id"] for t in ok(pg("tasks", "--status", "queued", "--json"))] == [
        task["task_id"]
    ]
    conflict = pg("submit", task["document_id"], "--json")
    assert conflict.code == EXIT_CONFLICT
    ok(pg("cancel", task["task_id"], "--json"))
    assert pg("cancel", task["task_id"], "--json").code == EXIT_CONFLICT
    assert pg("task", UNKNOWN_ID, "--json").code == EXIT_NOT_FOUND
    bad = pg("upload", str(tmp_path / "missing.txt"), "--json")
    assert bad.code == EXIT_BAD_INPUT
    assert [d["status"] for d in ok(pg("documents", "--json"))] == [DocumentStatus.DRAFT]
    assert not (tmp_path / ".ingestdesk").exists()


def test_bulk_cancel_by_filter_dry_runs_then_acts(cli: Cli, tmp_path: Path) -> None:
    for name in ("report-a.txt", "report-b.txt", "notes.txt"):
        ok(cli("add", str(write(tmp_path / name, TEXT)), "--json"))
    dry = ok(cli("cancel", "--filter", "name:report", "--dry-run", "--json"))
    assert (dry["matched"], dry["eligible"], dry["done"], dry["dry_run"]) == (2, 2, 0, True)
    assert {t["status"] for t in ok(cli("tasks", "--json"))} == {"queued"}
    human = cli("cancel", "--filter", "name:report", "--dry-run")
    assert human.stdout.startswith("would cancel 2 of 2 matching tasks")
    done = ok(cli("cancel", "--filter", "name:report", "--reason", "wrong batch", "--json"))
    assert (done["done"], done["refused"]) == (2, 0)
    statuses = {t["document_name"]: t["status"] for t in ok(cli("tasks", "--json"))}
    assert statuses == {
        "report-a.txt": "cancelled",
        "report-b.txt": "cancelled",
        "notes.txt": "queued",
    }
    again = ok(cli("cancel", "--filter", "name:report", "--json"))
    assert again["done"] == 0
    assert again["ineligible"] == {
        "cancelled: only queued, running or retry_wait tasks can be cancelled": 2
    }
    both = cli("cancel", "abcd1234", "--filter", "name:report", "--json")
    assert both.code == EXIT_BAD_INPUT
