"""Bad input at the ledger's edge: one clear refusal, nothing lost, nothing half-written.

Each test here failed on the tree before its fix (the defect it names is in the
comment above it).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from core import (
    BadInput,
    Ledger,
    LedgerUnavailable,
    ObjectReadError,
    Settings,
    TaskStatus,
    parse_filter,
    sqlite_url,
)
from core.config import settings_from, upload_cap_bytes
from core.errors import StoreUnavailable
from core.filters import EVERY_TASK
from core.intake import display_name
from core.safe_text import check_identifier, neutralise, visible
from core.store import ObjectStore
from tests.core.test_cli import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_UNEXPECTED,
    MARKDOWN,
    SCREENS,
    added,
    clean_env,
    core_cli,
    run,
    write,
)

TEXT = b"A note about ingestion, long enough to index.\n"
REPO_ROOT = Path(__file__).resolve().parents[2]


# A stored original corrupted on disk (same size) was never repaired: a re-upload
# of the same content kept the bad object.
def test_a_reupload_repairs_a_corrupted_object(tmp_path: Path) -> None:
    store = ObjectStore(tmp_path / "objects")
    key, digest = store.put(TEXT)
    path = store.root / key
    path.write_bytes(b"X" * len(TEXT))  # bit rot, same size
    with pytest.raises(ObjectReadError, match="checksum"):
        store.get(key, digest)
    assert store.put(TEXT) == (key, digest)
    assert store.get(key, digest) == TEXT


async def test_the_readme_advice_for_object_read_error_works(ledger: Ledger) -> None:
    first = await ledger.operator.upload(TEXT, "note.txt")
    (ledger.operator.store.root / first.object_key).write_bytes(b"Y" * len(TEXT))
    await ledger.operator.upload(TEXT, "note-again.txt")
    assert ledger.operator.store.get(first.object_key, first.sha256) == TEXT


# A store root that is a file, or a full disk, gave a traceback.
async def test_a_store_that_cannot_be_written_is_one_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "objects"
    blocker.write_text("not a folder")
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=blocker)
    async with await Ledger.open(settings) as ledger:
        with pytest.raises(StoreUnavailable, match="cannot store the original"):
            await ledger.operator.upload(TEXT, "note.txt")
        assert await ledger.reads.list_documents() == []


def test_a_full_disk_leaves_no_partial_object(tmp_path: Path) -> None:
    """The write fails part-way (a file-size limit stands in for a full disk: the
    same OSError from the same write): one clear error, and no partial object."""
    code = textwrap.dedent(
        f"""
        import resource, signal, pathlib
        from core.store import ObjectStore
        from core.errors import StoreUnavailable
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            ObjectStore(pathlib.Path({str(tmp_path / "objects")!r})).put(b"x" * 100_000)
        except StoreUnavailable as exc:
            print(exc)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("cannot store the original in"), out
    assert "Traceback" not in out.stderr
    assert [p for p in (tmp_path / "objects").rglob("*") if p.is_file()] == []


# A filter of only whitespace matched every task and `cancel --filter ' '` cancelled
# them all: an empty filter never means "everything" for an action.
@pytest.mark.parametrize("text", ["", " ", "\t \n"])
async def test_an_empty_filter_is_refused_by_bulk_actions(ledger: Ledger, text: str) -> None:
    doc = await ledger.operator.upload(TEXT, "note.txt")
    task = await ledger.operator.submit(doc.document_id)
    for action in (ledger.operator.bulk_cancel, ledger.operator.bulk_retry):
        with pytest.raises(BadInput, match="empty filter"):
            await action(parse_filter(text))
        with pytest.raises(BadInput, match="empty filter"):
            await action(parse_filter(text), dry_run=True)
    assert (await ledger.reads.get_task(task.task_id)).status is TaskStatus.QUEUED
    everything = await ledger.operator.bulk_cancel(EVERY_TASK)
    assert (everything.matched, everything.done) == (1, 1)


# attempt:>99999999999999999999999 overflowed SQLite's integers (a traceback).
@pytest.mark.parametrize("term", ["attempt:>99999999999999999999999", "attempt:²", "attempt:>٣"])
def test_out_of_range_attempt_numbers_are_bad_input(term: str) -> None:
    with pytest.raises(BadInput, match="attempt"):
        parse_filter(term)


# SIGINT during `add` of many files left hundreds of drafts and no tasks.
async def test_a_batch_is_all_or_nothing(ledger: Ledger) -> None:
    with pytest.raises(BadInput, match="empty"):
        await ledger.operator.add_many([(TEXT, "a.txt"), (b"", "b.txt")], submit=True)
    assert await ledger.reads.list_documents() == []
    added = await ledger.operator.add_many([(TEXT, "a.txt"), (TEXT + b"!", "b.md")], submit=True)
    assert [t.status for _, t in added if t] == [TaskStatus.QUEUED] * 2


def test_an_interrupted_batch_leaves_no_document(tmp_path: Path) -> None:
    """A real SIGINT in the middle of a large batch, in a real process."""
    files = tmp_path / "files"
    files.mkdir()
    for i in range(400):
        (files / f"note-{i}.txt").write_bytes(TEXT + str(i).encode())
    db = tmp_path / "ledger.db"
    script = textwrap.dedent(
        f"""
        import asyncio, pathlib, sys
        from core import Ledger, Settings, sqlite_url
        async def main():
            settings = Settings(db_url=sqlite_url(pathlib.Path({str(db)!r})),
                                store_root=pathlib.Path({str(tmp_path / "objects")!r}))
            async with await Ledger.open(settings) as ledger:
                paths = sorted(pathlib.Path({str(files)!r}).iterdir())
                items = [(p.read_bytes(), p.name) for p in paths]
                print("ready", flush=True)
                await ledger.operator.add_many(items, submit=True)
                print("finished", flush=True)
        asyncio.run(main())
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    # Objects are being stored (400 fsyncs): interrupt in the middle of it.
    while not list((tmp_path / "objects").rglob("*")):
        pass
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert "finished" not in out

    with sqlite3.connect(db) as raw:
        assert raw.execute("SELECT count(*) FROM documents").fetchone() == (0,)
        assert raw.execute("SELECT count(*) FROM ingestion_tasks").fetchone() == (0,)


# Worker ids, actors, reasons and names reached the terminal raw.
@pytest.mark.parametrize(
    "hostile",
    ["\x1b[2J\x1b]0;owned\x07", "two\nlines", "invoice\u202efdp.md", "zero\u200bwidth", "\x9b31m"],
)
def test_control_and_invisible_characters_never_survive(hostile: str) -> None:
    assert neutralise(hostile).isprintable()
    assert visible(hostile).isprintable()
    assert display_name(hostile).isprintable()
    with pytest.raises(BadInput, match="control or invisible"):
        check_identifier(hostile, "worker id")


# Letters and marks drawn as nothing that str.isprintable passes: `--actor a\u3164`
# and `--worker-id w\u3164` were accepted, and names kept them, shown as a blank.
@pytest.mark.parametrize("invisible", ["\u3164", "\ufe0f", "\u115f", "\u034f", "\U000e0100"])
def test_invisible_letters_are_refused_in_ids_and_dropped_from_names(
    tmp_path: Path, invisible: str
) -> None:
    name = f"re{invisible}port.txt"
    (task,) = added(tmp_path, write(tmp_path / name, TEXT))
    assert task["document_name"] == "report.txt"
    refused = core_cli(tmp_path, "--actor", f"a{invisible}", "cancel", task["task_id"])
    assert refused.code == EXIT_BAD_INPUT
    assert "invisible characters" in refused.stderr
    assert invisible not in refused.stderr  # shown as its escape
    worker = core_cli(tmp_path, "worker", "--worker-id", f"w{invisible}")
    assert worker.code == EXIT_BAD_INPUT


def test_visible_shows_what_was_hidden() -> None:
    assert visible("invoice\u202efdp.md") == "invoice\\u202efdp.md"
    assert visible("\x1b[2J") == "\\x1b[2J"
    assert visible("plain text, ünïcödé") == "plain text, ünïcödé"


async def test_actors_are_refused_and_reasons_neutralised(ledger: Ledger) -> None:
    doc = await ledger.operator.upload(TEXT, "note.txt")
    with pytest.raises(BadInput, match="actor"):
        await ledger.operator.submit(doc.document_id, actor="mallory\x1b[2J")
    task = await ledger.operator.submit(doc.document_id, actor="alice")
    with pytest.raises(BadInput, match="actor"):
        await ledger.operator.cancel(task.task_id, actor="\u202eecila")
    await ledger.operator.cancel(task.task_id, actor="alice", reason="fake\nline\x1b]0;t\x07")
    history = await ledger.reads.task_history(task.task_id)
    assert history[-1].reason is not None and history[-1].reason.isprintable()
    assert "\n" not in history[-1].reason


async def test_worker_ids_with_control_characters_cannot_claim(ledger: Ledger) -> None:
    doc = await ledger.operator.upload(TEXT, "note.txt")
    task = await ledger.operator.submit(doc.document_id)
    with pytest.raises(BadInput, match="worker id"):
        await ledger.queue.claim(task.task_id, "w\x1b[2J")
    with pytest.raises(BadInput, match="worker id"):
        await ledger.queue.claim_next("w\nforged")
    assert (await ledger.reads.get_task(task.task_id)).status is TaskStatus.QUEUED


# Commands that only read created an empty ledger (and folders) at a mistyped --db.
async def test_opening_for_reading_never_creates_a_ledger(tmp_path: Path) -> None:
    where = tmp_path / "typo" / "ledger.db"
    settings = Settings(db_url=sqlite_url(where), store_root=tmp_path / "o")
    with pytest.raises(LedgerUnavailable, match=r"no ledger at .* run `ingestdesk add`"):
        await Ledger.open(settings, create=False)
    assert not (tmp_path / "typo").exists()


# `ingestdesk worker`, `dashboard --read-only`, `--db typo/ledger.db dashboard`, and
# `add missing.txt` / `upload /dev/zero` (refused, exit 2) each left a new ledger (and
# folders) behind in an empty directory.
@pytest.mark.parametrize(
    ("program", "args", "code", "says"),
    [
        ("core", ["worker"], EXIT_UNEXPECTED, "no ledger at"),
        ("core", ["worker", "--until-idle"], EXIT_UNEXPECTED, "no ledger at"),
        ("screens", ["dashboard", "--read-only"], EXIT_UNEXPECTED, "no ledger at"),
        ("screens", ["--read-only"], EXIT_UNEXPECTED, "no ledger at"),
        ("screens", ["--db", "typo/ledger.db", "dashboard"], EXIT_UNEXPECTED, "no folder"),
        ("core", ["add", "missing.txt"], EXIT_BAD_INPUT, "missing.txt: no such file"),
        ("core", ["upload", "/dev/zero"], EXIT_BAD_INPUT, "character device"),
        ("core", ["add", "empty.txt"], EXIT_BAD_INPUT, "empty.txt: the file is empty"),
        ("core", ["add", "picture.bin"], EXIT_BAD_INPUT, "unsupported file type"),
        ("core", ["add", "a.md", "b.md", "--idempotency-key", "k1"], EXIT_BAD_INPUT, "one file"),
        ("core", ["tokens", "list"], EXIT_UNEXPECTED, "no ledger at"),
        ("core", ["tokens", "revoke", "someone"], EXIT_UNEXPECTED, "no ledger at"),
    ],
)
def test_a_command_that_is_refused_leaves_no_ledger(
    tmp_path: Path, program: str, args: list[str], code: int, says: str
) -> None:
    write(tmp_path / "empty.txt", b"")
    write(tmp_path / "picture.bin", b"\x89PNG\r\n\x1a\n" + bytes(64))
    write(tmp_path / "a.md", MARKDOWN)
    write(tmp_path / "b.md", MARKDOWN + b"b")
    before = set(tmp_path.iterdir())

    result = run(args, cwd=tmp_path, program=SCREENS if program == "screens" else None)

    assert result.code == code, result
    assert says in result.stderr and result.stderr.count("\n") == 1, result
    if "no ledger at" in says:
        assert "run `ingestdesk add` or `ingestdesk demo` to create one" in result.stderr
    assert set(tmp_path.iterdir()) == before  # no .ingestdesk/, no typo/


# --db under a regular file gave a traceback.
async def test_a_ledger_path_under_a_file_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("a file, not a folder")
    settings = Settings(db_url=sqlite_url(tmp_path / "plain" / "ledger.db"), store_root=tmp_path)
    with pytest.raises(LedgerUnavailable, match="cannot create its folder"):
        await Ledger.open(settings)


# A read-only ledger's traceback even showed SQL and its parameters.
@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files")
async def test_a_read_only_ledger_refuses_writes_without_sql(tmp_path: Path) -> None:
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "o")
    async with await Ledger.open(settings):
        pass
    (tmp_path / "ledger.db").chmod(0o444)
    async with await Ledger.open(settings) as ledger:
        with pytest.raises(LedgerUnavailable) as refused:
            await ledger.operator.upload(TEXT, "note.txt")
    assert "INSERT" not in str(refused.value)


async def test_a_read_only_database_connection_refuses_writes_without_sql(
    tmp_path: Path,
) -> None:
    """Root ignores file modes, so make SQLite itself read-only (query_only)."""
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "o")
    async with await Ledger.open(settings) as ledger:
        await ledger.transactions.write(lambda conn: conn.exec_driver_sql("PRAGMA query_only = 1"))
        try:
            with pytest.raises(LedgerUnavailable) as refused:
                await ledger.operator.upload(TEXT, "note.txt")
        finally:
            await ledger.transactions.close()
    message = str(refused.value)
    assert "readonly" in message or "read-only" in message
    assert "INSERT" not in message and "note.txt" not in message


# A missing driver gave a traceback; the URL's password appeared in messages.
def test_a_missing_postgres_driver_says_how_to_install_it(tmp_path: Path) -> None:
    code = (
        "import sys, asyncio; sys.modules['asyncpg'] = None\n"
        "from core import Ledger, Settings, IngestDeskError\n"
        "s = Settings(db_url='postgresql://u:hunter2@127.0.0.1:1/db', store_root='o')\n"
        "try:\n"
        "    asyncio.run(Ledger.open(s))\n"
        "except IngestDeskError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert "pip install 'ingestdesk[postgres]'" in out.stdout
    assert "hunter2" not in out.stdout + out.stderr


async def test_an_unreachable_postgres_hides_the_password(tmp_path: Path) -> None:
    settings = Settings(
        db_url="postgresql+asyncpg://u:hunter2@127.0.0.1:1/db", store_root=tmp_path / "o"
    )
    with pytest.raises(LedgerUnavailable) as refused:
        await Ledger.open(settings)
    assert "hunter2" not in str(refused.value)
    assert "***" in str(refused.value)


# --max-upload-mb nan / inf gave a traceback (int(inf)) or a cap that is no cap (nan).
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-5", "1e300", "many"])
def test_an_unusable_upload_cap_is_bad_input(value: str) -> None:
    with pytest.raises(BadInput, match="INGESTDESK_MAX_UPLOAD_MB"):
        upload_cap_bytes(value, "INGESTDESK_MAX_UPLOAD_MB")
    with pytest.raises(BadInput, match="INGESTDESK_MAX_UPLOAD_MB"):
        settings_from(environ={"INGESTDESK_MAX_UPLOAD_MB": value}, home=Path("/nonexistent"))


# A bad INGESTDESK_MAX_UPLOAD_MB refused even `tasks`, which uploads nothing.
def test_a_bad_upload_cap_in_the_environment_refuses_only_uploads(tmp_path: Path) -> None:
    added(tmp_path, write(tmp_path / "a.md", MARKDOWN))
    env = clean_env(INGESTDESK_MAX_UPLOAD_MB="lots")
    listed = core_cli(tmp_path, "tasks", "--json", env=env)
    assert listed.code == EXIT_OK and len(listed.value) == 1, listed
    refused = core_cli(tmp_path, "add", str(tmp_path / "a.md"), env=env)
    assert refused.code == EXIT_BAD_INPUT and "INGESTDESK_MAX_UPLOAD_MB" in refused.stderr


def test_a_usable_upload_cap_is_taken() -> None:
    assert upload_cap_bytes("0.5", "x") == 512 * 1024
    assert upload_cap_bytes(100, "x") == 100 * 1024 * 1024


# A URI-form SQLite URL created stray "file:" folders in the current directory.
@pytest.mark.parametrize(
    "url", ["sqlite:///file:/tmp/x/l.db?mode=ro&uri=true", "sqlite:///l.db?timeout=1"]
)
def test_a_uri_form_sqlite_url_is_refused_and_creates_nothing(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInput, match="plain file path"):
        asyncio.run(Ledger.open(Settings(db_url=url, store_root=tmp_path / "o")))
    assert list(tmp_path.iterdir()) == []
