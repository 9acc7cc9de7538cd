"""PostgreSQL stopped and started under a running system, as every managed database
is for a failover, a restart or a minor upgrade: the API answers 503 (never a 500,
``/healthz`` included) while it is away and 200 once it is back, without a restart of
its own; the command line says "try again" (exit 75), never "a bug"; and three
``worker --loop`` processes and the dashboard with its in-process workers ride the
outage out and finish the batch, every document once, with nobody touching them.

Each test starts its own server (:mod:`tests.pg_server`): the shared one is never
stopped. Skipped with the reason where PostgreSQL is not installed; under CI=true it
must run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pty
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from core import Ledger, Settings
from core.errors import EXIT_TEMPFAIL
from tests.api.conftest import start_server, stop_server
from tests.core.test_ledger_outage import WAIT_S, assert_one_clean_line, wait_for
from tests.pg_server import PgServer, require_pg_binaries

pytestmark = pytest.mark.postgres

REPO_ROOT = Path(__file__).resolve().parents[2]
DRILL_DOCUMENTS = 36
DRILL_OUTAGE_S = 10.0  # seconds the server stays down: the fault itself, not a wait
DRILL_LEASE_S = 5.0  # seconds: claims lost with the server come back within this
DRILL_WORKERS = 3
# Big enough to go to the parser process (over 256 KiB), so the batch takes a while.
DOCUMENT_WORDS = 60_000


@pytest.fixture
def pg_server() -> Iterator[PgServer]:
    server = PgServer(require_pg_binaries())
    server.start()
    try:
        yield server
    finally:
        server.destroy()


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "core.cli", "--db", settings.db_url, "--store",
         str(settings.store_root), *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=WAIT_S,
    )  # fmt: skip


async def _tokens(settings: Settings) -> dict[str, str]:
    async with await Ledger.open(settings) as ledger:
        return {"viewer": (await ledger.tokens.create("drill-viewer", "viewer")).token}


async def _shutting_down(server: PgServer, check: Callable[[], None]) -> None:
    """Run ``check`` with the server in a smart shutdown held open by one session,
    every other session ended: a new connection then gets asyncpg's
    CannotConnectNowError, "the database system is shutting down" (SQLSTATE 57P03), as
    during a restart. The server stops when ``check`` returns."""
    held = await asyncpg.connect(server.dsn)
    server.stop("smart", wait=False)
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            probe = await asyncpg.connect(server.dsn)
        except asyncpg.CannotConnectNowError:
            break
        await probe.close()
        if time.monotonic() > deadline:
            raise AssertionError("the server did not start shutting down")
        await asyncio.sleep(0.05)
    await held.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
    )
    try:
        check()  # blocking calls: the held session needs nothing from this loop
    finally:
        await held.close()


def test_serve_answers_503_while_the_ledger_is_away_and_200_once_it_is_back(
    pg_server: PgServer, tmp_path: Path
) -> None:
    settings = Settings(db_url=pg_server.url, store_root=tmp_path / "objects")
    tokens = asyncio.run(_tokens(settings))
    api = start_server(settings)
    try:
        viewer = {"Authorization": f"Bearer {tokens['viewer']}"}
        with httpx.Client(base_url=api.base, timeout=30.0) as client:
            assert client.get("/api/ingestion-tasks", headers=viewer).status_code == 200

            def while_shutting_down() -> None:
                for path in ("/healthz", "/api/ingestion-tasks", "/metrics"):
                    answer = client.get(path, headers=viewer)
                    assert answer.status_code == 503, (path, answer.text)
                    assert answer.headers["content-type"].startswith("application/problem+json")
                    assert answer.json()["detail"] == "the ledger is unavailable; try again later"
                    assert "Retry-After" in answer.headers
                # The command line, meanwhile: try again later, never a bug.
                refused = cli(settings, "tasks")
                assert refused.returncode == EXIT_TEMPFAIL, refused
                assert "shutting down" in refused.stderr and "bug" not in refused.stderr
                assert_one_clean_line(refused.stderr)

            asyncio.run(_shutting_down(pg_server, while_shutting_down))
            wait_for(lambda: client.get("/healthz").status_code == 503, "server stopped")
            pg_server.start()
            wait_for(lambda: client.get("/healthz").status_code == 200, "/healthz back")
            assert client.get("/api/ingestion-tasks", headers=viewer).status_code == 200
    finally:
        _code, out = stop_server(api)
    assert "Traceback" not in out, out


# ------------------------------------------------------------------ the drill


def _document(n: int) -> bytes:
    words = " ".join(f"drill{n}word{i}" for i in range(DOCUMENT_WORDS))
    return f"# drill document {n}\n\n{words}\n".encode()


async def _seed(settings: Settings) -> None:
    async with await Ledger.open(settings) as ledger:
        files = [(_document(n), f"drill-{n}.md") for n in range(DRILL_DOCUMENTS)]
        await ledger.operator.add_many(files, submit=True)


async def _counts(settings: Settings) -> dict[str, int]:
    conn = await asyncpg.connect(settings.db_url.replace("postgresql+asyncpg", "postgresql"))
    try:
        rows = await conn.fetch("SELECT status, count(*) AS n FROM ingestion_tasks GROUP BY 1")
        return {r["status"]: r["n"] for r in rows}
    finally:
        await conn.close()


def counts(settings: Settings) -> dict[str, int]:
    try:
        return asyncio.run(_counts(settings))
    except (OSError, asyncpg.PostgresError):
        return {}


async def _chunk_check(settings: Settings) -> tuple[int, int, int]:
    """(documents with chunks, duplicated (document, ordinal) pairs, documents whose
    ordinals are not exactly 0..n-1)."""
    conn = await asyncpg.connect(settings.db_url.replace("postgresql+asyncpg", "postgresql"))
    try:
        with_chunks = await conn.fetchval("SELECT count(DISTINCT document_id) FROM chunks")
        twice = await conn.fetchval(
            "SELECT count(*) FROM (SELECT 1 FROM chunks GROUP BY document_id, ordinal "
            "HAVING count(*) > 1) AS d"
        )
        gaps = await conn.fetchval(
            "SELECT count(*) FROM (SELECT document_id FROM chunks GROUP BY document_id "
            "HAVING count(*) <> max(ordinal) + 1 OR min(ordinal) <> 0) AS g"
        )
        return int(with_chunks), int(twice), int(gaps)
    finally:
        await conn.close()


DASHBOARD_WORKERS = 2


class Dashboard:
    """The real ``ingestdesk dashboard`` in a pseudo-terminal, with in-process workers.
    A thread reads everything it draws (a terminal nobody reads would block it)."""

    def __init__(self, settings: Settings) -> None:
        env = dict(
            os.environ,
            INGESTDESK_DB=settings.db_url,
            INGESTDESK_STORE=str(settings.store_root),
            TERM="xterm-256color",
        )
        cli = [sys.executable, "-c", "from tui.cli import main; raise SystemExit(main())"]
        pid, fd = pty.fork()
        if pid == 0:  # the child: the dashboard, in the pseudo-terminal
            os.chdir(REPO_ROOT)
            os.execve(sys.executable, [*cli, "dashboard", "--workers", str(DASHBOARD_WORKERS)], env)
        self.pid, self.fd = pid, fd
        # The dashboard names its in-process workers after its pid (tui.app).
        self.worker_prefix = f"tui{pid % 1000:03d}-"
        self.shown = bytearray()
        self.exit_code: int | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:  # the terminal closed: the dashboard exited
                return
            if not chunk:
                return
            self.shown += chunk

    def alive(self) -> bool:
        if self.exit_code is not None:
            return False
        done, status = os.waitpid(self.pid, os.WNOHANG)
        if done:
            self.exit_code = os.waitstatus_to_exitcode(status)
            return False
        return True

    def quit(self) -> int | None:
        """Press q; the exit code (None: still running after WAIT_S, then killed)."""
        if self.alive():
            os.write(self.fd, b"q")
            with contextlib.suppress(AssertionError):  # still running: killed below
                wait_for(lambda: not self.alive(), "the dashboard to quit")
        if self.alive():
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
            return None
        self._reader.join(timeout=WAIT_S)
        os.close(self.fd)
        return self.exit_code

    def after_screen(self) -> str:
        """What it printed after giving the terminal's screen back."""
        shown = bytes(self.shown)
        return shown[shown.rfind(b"\x1b[?1049l") :].decode(errors="replace")


async def _workers_seen_since(settings: Settings, prefix: str, since: float) -> dict[str, bool]:
    """The ledger's registered workers named ``prefix*``: whether each is running (not
    stopped) with a heartbeat written after ``since``."""
    conn = await asyncpg.connect(settings.db_url.replace("postgresql+asyncpg", "postgresql"))
    try:
        rows = await conn.fetch(
            "SELECT id, heartbeat_at, stopped_at FROM workers WHERE id LIKE $1", prefix + "%"
        )
        return {r["id"]: r["stopped_at"] is None and r["heartbeat_at"] > since for r in rows}
    finally:
        await conn.close()


def workers_seen_since(settings: Settings, prefix: str, since: float) -> dict[str, bool]:
    try:
        return asyncio.run(_workers_seen_since(settings, prefix, since))
    except (OSError, asyncpg.PostgresError):
        return {}


def test_three_looping_workers_ride_out_a_postgres_restart_mid_batch(
    pg_server: PgServer, tmp_path: Path
) -> None:
    """The README's drill: `pg_ctl stop -m immediate` mid-batch for 10 s, then start,
    under three ``worker --loop`` processes and the dashboard with two in-process
    workers. All three workers exited 1 within 0.2 s of the stop, and nothing drained
    until a person started new ones; the dashboard's workers died with it. Now every
    worker is still running afterwards, the dashboard's included (their heartbeats
    written after the restart), and the dashboard quits cleanly."""
    settings = Settings(db_url=pg_server.url, store_root=tmp_path / "objects")
    asyncio.run(_seed(settings))
    logs = [tmp_path / f"worker-{i}.log" for i in range(DRILL_WORKERS)]
    workers = []
    for i, log in enumerate(logs):
        with open(log, "w") as out:
            workers.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "core.cli",
                        "--db",
                        settings.db_url,
                        "--store",
                        str(settings.store_root),
                        "worker",
                        "--loop",
                        "--worker-id",
                        f"drill-{i}",
                        "--lease",
                        str(DRILL_LEASE_S),
                        "--log-format",
                        "json",
                    ],
                    cwd=REPO_ROOT,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
    dashboard = Dashboard(settings)
    quit_code: int | None = -1
    try:
        wait_for(lambda: counts(settings).get("succeeded", 0) >= 2, "the batch under way")
        # Every worker has opened the ledger before it goes away: the dashboard's can
        # make the batch move while the processes are still starting, and a worker
        # started during an outage exits 75 by design (for its service manager).
        wait_for(
            lambda: (
                len(workers_seen_since(settings, dashboard.worker_prefix, 0.0)) == DASHBOARD_WORKERS
            ),
            "the dashboard's workers registered",
        )
        wait_for(
            lambda: len(workers_seen_since(settings, "drill-", 0.0)) == DRILL_WORKERS,
            "the worker processes registered",
        )
        before = counts(settings)
        pg_server.stop("immediate")
        time.sleep(DRILL_OUTAGE_S)
        pg_server.start()
        restarted_at = time.time()
        wait_for(
            lambda: counts(settings).get("succeeded", 0) == DRILL_DOCUMENTS,
            "every document succeeded after the restart",
        )
        # The dashboard's workers too are at work again, nobody having pressed ^r.
        wait_for(
            lambda: (
                len(seen := workers_seen_since(settings, dashboard.worker_prefix, restarted_at))
                == DASHBOARD_WORKERS
                and all(seen.values())
            ),
            "the dashboard's workers heartbeating after the restart",
        )
        assert dashboard.alive(), dashboard.after_screen()
        quit_code = dashboard.quit()
        final = counts(settings)
        assert final == {"succeeded": DRILL_DOCUMENTS}, final  # none running, none failed
        with_chunks, twice, gaps = asyncio.run(_chunk_check(settings))
        assert (with_chunks, twice, gaps) == (DRILL_DOCUMENTS, 0, 0)
        alive = [w.poll() is None for w in workers]
        assert all(alive), [
            (w.returncode, log.read_text()[-2000:]) for w, log in zip(workers, logs, strict=True)
        ]
    finally:
        if quit_code == -1:  # failed before quitting: do not leave it running
            dashboard.quit()
        for w in workers:
            if w.poll() is None:
                w.terminate()
        for w in workers:
            w.wait(timeout=WAIT_S)
    after = dashboard.after_screen()
    assert quit_code == 0, after
    assert "Traceback" not in after, after
    # Mid-batch: work was left when the server went away.
    assert before.get("succeeded", 0) < DRILL_DOCUMENTS, before
    # The JSON log lines (the summary at the end is text).
    told = [
        [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        for log in logs
    ]
    for lines in told:
        events = [line.get("event") for line in lines]
        assert "Traceback" not in json.dumps(lines)
        assert "never retrieved" not in json.dumps(lines)
        # Each worker that met the outage said so once and said once it was back.
        if "ledger_unavailable" in events:
            assert events.count("ledger_unavailable") == events.count("ledger_back") == 1, events
    assert any("ledger_unavailable" in [line.get("event") for line in lines] for lines in told)
