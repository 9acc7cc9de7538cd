"""The ledger goes away and comes back: a database restarting, a SQLite file locked
past the busy timeout, a full disk. Every outside fault is classified once (one line,
an exit code of its own, 503 over HTTP), looping workers ride it out and carry on,
and nothing is lost or done twice.

Real parts throughout: a real PostgreSQL (the shared one for what does not stop the
server, a throwaway one, :mod:`tests.pg_server`, for what does), real SQLite files
locked by another process, a real full filesystem (a small tmpfs, as root).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from core import ErrorCode, Ledger, LedgerUnreachable, Settings, TaskStatus, sqlite_url
from core.errors import EXIT_TEMPFAIL, LedgerFull
from core.ingest.outage import LEDGER_BACK, LEDGER_UNAVAILABLE
from core.ingest.parse_pool import ParserPool
from core.ingest.worker import Worker, WorkerEvent
from tests.api.conftest import start_server, stop_server, stopped_gracefully
from tests.api.test_checklist import is_problem
from tests.core.test_worker import add
from tests.pg_server import PgServer, require_pg_binaries

REPO_ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 120.0  # seconds: a generous deadline for any condition on a loaded machine
BUSY_TIMEOUT_MS = 200  # a short busy timeout keeps the lock tests quick
# What an outage's one line must never carry.
PRIVATE = ("SELECT", "UPDATE", "INSERT", "sqlalche.me", "Traceback", "hunter2")
TEXT = b"# notes\n\n" + b"The ledger goes away and comes back. " * 40


def wait_for(condition: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


async def async_wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def assert_one_clean_line(message: str) -> None:
    assert "\n" not in message.strip(), message
    for private in PRIVATE:
        assert private not in message, message


# ------------------------------------------------- classified once, by cause (PG)


@pytest.mark.postgres
async def test_a_connection_the_server_ends_mid_transaction_is_unreachable_then_recovers(
    pg_url: str, tmp_path: Path
) -> None:
    """A session the server ends ("terminating connection due to administrator
    command", what every session gets on a restart) was a plain DBAPIError: a bug in
    the CLI's words, a 500 over HTTP. The pool discards the dead connection: the
    next transaction runs."""
    settings = Settings(db_url=pg_url, store_root=tmp_path / "objects")
    async with await Ledger.open(settings) as ledger:
        await ledger.reads.revision()

        def killed(conn: object) -> None:
            conn.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))  # type: ignore[attr-defined]

        with pytest.raises(LedgerUnreachable) as refused:
            await ledger.transactions.read(killed)
        # asyncpg says "connection was closed in the middle of operation" (08003).
        assert "SQLSTATE 08" in refused.value.message or "57P01" in refused.value.message
        assert_one_clean_line(refused.value.message)
        assert await ledger.reads.revision() >= 0  # a fresh connection, no restart


@pytest.mark.postgres
async def test_a_wrong_statement_stays_a_bug(pg_url: str, tmp_path: Path) -> None:
    settings = Settings(db_url=pg_url, store_root=tmp_path / "objects")
    async with await Ledger.open(settings) as ledger:
        with pytest.raises(DBAPIError) as raised:
            await ledger.transactions.read(
                lambda conn: conn.execute(text("SELECT * FROM no_such_table"))
            )
        assert not isinstance(raised.value, LedgerUnreachable)
        assert "ProgrammingError" in type(raised.value).__name__


# --------------------------------------- SQLite locked past the busy timeout


LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()  # hold the write lock until told (or killed)
conn.rollback()
"""


@pytest.fixture
def lock_holder() -> Iterator[Callable[[Path], subprocess.Popen[str]]]:
    """Start another process that holds a SQLite file's write lock (BEGIN IMMEDIATE)
    until its stdin is closed."""
    started: list[subprocess.Popen[str]] = []

    def hold(path: Path) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", LOCK_HOLDER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        return proc

    yield hold
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()


def release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=WAIT_S)


def sqlite_settings(tmp_path: Path) -> Settings:
    return Settings(
        db_url=sqlite_url(tmp_path / "ledger.db"),
        store_root=tmp_path / "objects",
        sqlite_busy_timeout_ms=BUSY_TIMEOUT_MS,
    )


async def test_a_looping_worker_rides_out_a_lock_held_past_the_busy_timeout(
    tmp_path: Path,
    lock_holder: Callable[[Path], subprocess.Popen[str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A BEGIN IMMEDIATE held past the busy timeout by another process killed the
    worker with "database is locked". It says so once, waits, says once it is back
    and runs the work queued meanwhile."""
    settings = sqlite_settings(tmp_path)
    events: list[WorkerEvent] = []
    async with await Ledger.open(settings) as ledger, ParserPool(workers=1) as pool:
        worker = Worker(ledger, "rider", pool=pool, on_event=events.append)
        run = asyncio.create_task(worker.run())
        await async_wait_for(
            lambda: any(e.kind == "idle" for e in events) or worker.state == "idle", "idle"
        )
        holder = lock_holder(tmp_path / "ledger.db")
        await async_wait_for(
            lambda: any(e.kind == LEDGER_UNAVAILABLE for e in events), "ledger_unavailable"
        )
        assert not run.done(), run
        [said] = [e for e in events if e.kind == LEDGER_UNAVAILABLE]
        assert "database is locked" in said.line and "unreachable" in said.line
        assert "retrying in" in said.line
        assert_one_clean_line(said.line)
        release(holder)
        await async_wait_for(lambda: any(e.kind == LEDGER_BACK for e in events), "ledger_back")
        task_id = await add(ledger, TEXT, "after.md")
        await async_wait_for(lambda: worker.stats.outcomes.get(task_id) == "succeeded", "work")
        assert [e.kind for e in events].count(LEDGER_UNAVAILABLE) == 1
        assert [e.kind for e in events].count(LEDGER_BACK) == 1
        worker.stop()
        await asyncio.wait_for(run, WAIT_S)
    gc.collect()  # an unretrieved task exception is reported when its task is freed
    await asyncio.sleep(0)
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


def test_a_draining_worker_ends_with_one_line_and_the_tempfail_code(
    tmp_path: Path, lock_holder: Callable[[Path], subprocess.Popen[str]]
) -> None:
    settings = sqlite_settings(tmp_path)

    async def seed() -> None:
        async with await Ledger.open(settings) as ledger:
            await add(ledger, TEXT, "queued.md")

    asyncio.run(seed())
    holder = lock_holder(tmp_path / "ledger.db")
    env = dict(os.environ, INGESTDESK_BUSY_TIMEOUT_MS=str(BUSY_TIMEOUT_MS))
    for mode in ("--until-idle", None):
        done = subprocess.run(
            [sys.executable, "-m", "core.cli", "--db", settings.db_url, "--store",
             str(settings.store_root), "worker", *([mode] if mode else [])],
            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=WAIT_S,
        )  # fmt: skip
        assert done.returncode == EXIT_TEMPFAIL, done
        assert "database is locked" in done.stderr, done
        assert "a bug in ingestdesk" not in done.stderr + done.stdout
        assert_one_clean_line(done.stderr)
    release(holder)


# ----------------------------------------------------------- a full disk


FILL_CHUNK = 1 << 20  # bytes written at a time while filling the disk
# bytes left free: room for a claim and for recording its failure (which writes the
# task counters of migration 0016 and their indexes too), not for a document's chunks
HEADROOM = 160 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 8 MB filesystem (tmpfs) at tmp_path/disk; unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` until the OS says it is full, then free ``leave`` bytes."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for block in (FILL_CHUNK, 4096, 1):
            try:
                while os.write(fd, b"\0" * block):
                    pass
            except OSError:
                pass  # full at this block size: go on with a smaller one
    finally:
        os.close(fd)
    size = filler.stat().st_size
    os.truncate(filler, max(0, size - leave))
    return filler


def on_disk(disk: Path) -> Settings:
    """A SQLite ledger on ``disk``; its originals elsewhere (the disk's room is the
    ledger's alone)."""
    return Settings(db_url=sqlite_url(disk / "ledger.db"), store_root=disk.parent / "objects")


def fill_at(disk: Path, leave: int, line: str) -> Callable[[WorkerEvent], None]:
    """A worker's event hook that fills ``disk`` once (leaving ``leave`` bytes), when
    the worker first says ``line``: the disk is full from that stage on whatever the
    machine's speed. (Filled before the claim, the progress commits in between ate
    the room left, more of them the slower the machine, and the test was flaky.)"""
    filled = False

    def hear(event: WorkerEvent) -> None:
        nonlocal filled
        if event.line.startswith(line) and not filled:
            filled = True
            fill(disk, leave)

    return hear


async def test_a_full_disk_while_indexing_is_disk_full_and_retried(small_disk: Path) -> None:
    """A full disk during indexing was a permanent internal_error ("report a bug").
    It is the machine's fault: disk_full, retried with backoff, and the same task
    succeeds once there is room."""
    settings = on_disk(small_disk)
    big = b"# big\n\n" + b"".join(b"word%d " % i for i in range(60_000))
    async with await Ledger.open(settings) as ledger, ParserPool(workers=1) as pool:
        task_id = await add(ledger, big, "big.md")
        hook = fill_at(small_disk, HEADROOM, "stage=indexing")
        worker = Worker(ledger, "filler", pool=pool, register=False, on_event=hook)
        assert await worker.run_one()
        view = await ledger.reads.get_task(task_id)
        assert (view.status, view.error_code) == (TaskStatus.RETRY_WAIT, ErrorCode.DISK_FULL)
        assert view.next_attempt_at is not None and view.next_attempt_at > ledger.clock()
        (small_disk / "filler").unlink()
        # Due now (the backoff is the queue's business, tested with it).
        await ledger.transactions.write(
            lambda conn: conn.execute(
                text("UPDATE ingestion_tasks SET next_attempt_at = 0 WHERE id = :t"),
                {"t": task_id},
            )
        )
        assert await Worker(ledger, "roomy", pool=pool, register=False).run_one()
        assert (await ledger.reads.get_task(task_id)).status is TaskStatus.SUCCEEDED


async def test_a_disk_too_full_to_record_the_failure_is_ridden_out(small_disk: Path) -> None:
    """When the disk fills so far that not even the failure can be written, the task
    cannot say disk_full: the looping worker keeps the claim and says once that the
    ledger is full. A full disk still answers reads, and a read that answered ended
    the outage: "back" and "unavailable" again every half second, the backoff never
    growing. It is back once a write goes through: the claim is given back, its
    attempt not counted, and the task runs."""
    settings = on_disk(small_disk)
    events: list[WorkerEvent] = []
    hook = fill_at(small_disk, 0, "stage=indexing")

    def hear(event: WorkerEvent) -> None:
        events.append(event)
        hook(event)

    def kinds() -> list[str]:
        return [e.kind for e in events]

    async with await Ledger.open(settings) as ledger, ParserPool(workers=1) as pool:
        task_id = await add(ledger, TEXT, "full.md")
        first = await ledger.reads.get_task(task_id)
        worker = Worker(ledger, "rider", pool=pool, register=False, on_event=hear)
        run = asyncio.create_task(worker.run())
        await async_wait_for(lambda: LEDGER_UNAVAILABLE in kinds(), "ledger_unavailable")
        [said] = [e for e in events if e.kind == LEDGER_UNAVAILABLE]
        assert "full" in said.line, said
        assert_one_clean_line(said.line)
        # Several looks at the ledger (the backoff's first waits are 0.25-1 s), and
        # still one line, no "back": the disk is still full.
        await async_wait_for(lambda: worker._outage.failures >= 3, "three looks")
        assert kinds().count(LEDGER_UNAVAILABLE) == 1 and LEDGER_BACK not in kinds()
        assert (await ledger.reads.get_task(task_id)).status is TaskStatus.RUNNING
        assert not run.done(), run
        (small_disk / "filler").unlink()
        await async_wait_for(lambda: worker.stats.outcomes.get(task_id) == "succeeded", "work")
        assert kinds().count(LEDGER_UNAVAILABLE) == 1 and kinds().count(LEDGER_BACK) == 1
        assert "handed_back" in kinds()
        worker.stop()
        await asyncio.wait_for(run, WAIT_S)
        view = await ledger.reads.get_task(task_id)
        assert (view.status, view.error_code) == (TaskStatus.SUCCEEDED, None)
        assert view.max_attempts == first.max_attempts + 1  # the cut attempt not counted


async def test_a_full_ledger_disk_is_said_as_such(small_disk: Path) -> None:
    settings = on_disk(small_disk)
    async with await Ledger.open(settings) as ledger:
        fill(small_disk, 0)
        with pytest.raises(LedgerFull) as refused:
            await ledger.operator.add_many([(TEXT * 200, "big.md")], submit=True)
        assert "full" in refused.value.message
        assert_one_clean_line(refused.value.message)


def test_a_ledger_on_a_full_disk_is_full_even_to_read(small_disk: Path) -> None:
    """Opening a closed WAL ledger must create and size its -shm file: on a full disk
    SQLite says only "disk I/O error" (SQLITE_IOERR_SHMSIZE), and every command, reads
    too, ended "cannot open ledger: OperationalError: disk I/O error", exit 1, as if
    the file were damaged. It is a full disk: said so, exit 75 (try again)."""
    settings = on_disk(small_disk)

    async def seed() -> None:
        async with await Ledger.open(settings) as ledger:
            await add(ledger, TEXT, "queued.md")

    asyncio.run(seed())
    assert not (small_disk / "ledger.db-shm").exists()  # the last close removed it
    fill(small_disk, 0)
    for command in (["tasks"], ["worker", "--until-idle"], ["worker"]):
        done = subprocess.run(
            [sys.executable, "-m", "core.cli", "--db", settings.db_url, *command],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=WAIT_S,
        )  # fmt: skip
        assert done.returncode == EXIT_TEMPFAIL, (command, done)
        assert "disk is full" in done.stderr, (command, done.stderr)
        assert_one_clean_line(done.stderr)
    (small_disk / "filler").unlink()
    done = subprocess.run(
        [sys.executable, "-m", "core.cli", "--db", settings.db_url, "tasks"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=WAIT_S,
    )  # fmt: skip
    assert done.returncode == 0 and "queued.md" in done.stdout, done


def test_an_original_on_a_full_disk_is_try_again_and_nothing_is_recorded(
    small_disk: Path, tmp_path: Path
) -> None:
    """The store's disk full: `add` said "cannot store the original ...: No space left
    on device" with exit 1, as for a store that is not a folder, and the API answered
    503 without Retry-After. A full disk is for now, as the ledger's is: exit 75, and
    Retry-After; nothing is recorded, and once there is room the same add works."""
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=small_disk)
    cli = [sys.executable, "-m", "core.cli", "--db", settings.db_url, "--store", str(small_disk)]
    first, second = tmp_path / "first.md", tmp_path / "second.md"
    first.write_text("# First\n\nThe store is written.\n")
    second.write_text("# Second\n\nRestart the worker, then check the dashboard.\n" * 500)

    def add_file(path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*cli, "add", str(path)], cwd=REPO_ROOT, capture_output=True, text=True,
            timeout=WAIT_S,
        )  # fmt: skip

    assert add_file(first).returncode == 0
    fill(small_disk, 0)
    done = add_file(second)
    assert done.returncode == EXIT_TEMPFAIL, done
    assert "cannot store the original" in done.stderr and "No space left" in done.stderr, done
    assert_one_clean_line(done.stderr)
    api = start_server(settings)
    try:
        with httpx.Client(base_url=api.base, timeout=WAIT_S) as client:
            answer = client.post(
                "/api/documents", files={"file": ("second.md", second.read_bytes())}
            )
        is_problem(answer, 503, "StoreFull")
        assert answer.headers["retry-after"].isdigit()
    finally:
        code, out = stop_server(api)
        assert stopped_gracefully(code, out), out
    listed = subprocess.run(
        [*cli, "documents", "--json"], cwd=REPO_ROOT, capture_output=True, text=True,
        timeout=WAIT_S,
    )  # fmt: skip
    assert [d["filename"] for d in json.loads(listed.stdout)] == ["first.md"], listed
    (small_disk / "filler").unlink()
    assert add_file(second).returncode == 0


@pytest.fixture
def postgres_small_disk() -> Iterator[Path]:
    """An 8 MB tmpfs the ``postgres`` user owns and can reach (pytest's own folders
    are root's alone), for a tablespace; unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    import pwd

    disk = Path(tempfile.mkdtemp(prefix="ingestdesk-pg-full."))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", str(disk)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        disk.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        entry = pwd.getpwnam("postgres")
        os.chown(disk, entry.pw_uid, entry.pw_gid)
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
        disk.rmdir()


@pytest.mark.postgres
async def test_a_full_disk_on_postgres_is_disk_full_and_retried(
    postgres_small_disk: Path, tmp_path: Path
) -> None:
    """PostgreSQL's "could not extend file" (SQLSTATE 53100) arrived as a plain
    DBAPIError: internal_error. The chunks table lives on a full tablespace (a small
    tmpfs) of a throwaway server; the task's own row does not."""
    server = PgServer(require_pg_binaries())
    try:
        server.start()
        settings = Settings(db_url=server.url, store_root=tmp_path / "objects")
        async with await Ledger.open(settings) as ledger, ParserPool(workers=1) as pool:
            big = b"# big\n\n" + b"".join(b"word%d " % i for i in range(60_000))
            task_id = await add(ledger, big, "big.md")
            await _chunks_on_tablespace(server, postgres_small_disk)
            fill(postgres_small_disk, 0)
            assert await Worker(ledger, "full", pool=pool, register=False).run_one()
            view = await ledger.reads.get_task(task_id)
            assert (view.status, view.error_code) == (TaskStatus.RETRY_WAIT, ErrorCode.DISK_FULL)
    finally:
        server.destroy()


async def _chunks_on_tablespace(server: PgServer, disk: Path) -> None:
    import asyncpg

    conn = await asyncpg.connect(server.dsn)
    try:
        await conn.execute(f"CREATE TABLESPACE small LOCATION '{disk}'")
        await conn.execute("ALTER TABLE chunks SET TABLESPACE small")
    finally:
        await conn.close()
