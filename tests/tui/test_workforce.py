"""The dashboard's in-process workers when something outside breaks: a worker that
stopped by itself is shown stopped with why (one clean line) and restarts from the
dashboard; a ledger outage is shown, ridden out or restarted from, and expired leases
are reaped at once afterwards; quitting never prints a traceback.

Every fault is real: parser processes that cannot start (the interpreter they run is
/bin/false), and a PostgreSQL server of the test's own stopped with ``pg_ctl -m
immediate`` and started again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import Ledger, Settings, TaskStatus
from tests.hostile import make_pdf
from tests.pg_server import PgServer, require_pg_binaries
from tests.tui.conftest import wait_for
from tests.tui.driving import POLL_S, dashboard, notes, screen_text
from tui.app import LEDGER_DOWN_MARK, IngestDeskApp
from tui.policy import refusal
from tui.widgets.workers import UNREACHABLE_LINE, WorkersPanel

SIZE = (160, 50)  # wide: the side panel and the whole footer are on screen
OUTAGE_WAIT_S = 60.0  # seconds a test waits for the app to notice the outage
RECOVERY_WAIT_S = 120.0  # seconds for the work to drain after the ledger is back
LEASE_S = 2.0  # seconds: the leases held at the outage have expired by the restart
# What the dashboard must never show of a database fault: SQLAlchemy's own text.
RAW_DATABASE_TEXT = ("sqlalche.me", "[SQL:", "[parameters:", "(Background on this error")


def workers_text(app: IngestDeskApp) -> str:
    """The in-process workers' lines of the panel, as drawn (one line each, unwrapped)."""
    panel = dashboard(app).query_one(WorkersPanel)
    return "\n".join(" ".join(str(line.content).split()) for line in panel.query(".worker-line"))


def footer(app: IngestDeskApp) -> str:
    return screen_text(app).splitlines()[-1]


def assert_clean(app: IngestDeskApp) -> None:
    shown = screen_text(app) + "\n".join(notes(app))
    for raw in RAW_DATABASE_TEXT:
        assert raw not in shown, shown


async def add_pdfs(ledger: Ledger, count: int) -> list[str]:
    ids = []
    for n in range(count):
        # 40 pages: a batch of two-page PDFs could be done between two looks on a
        # loaded machine, and the outage test never saw it under way.
        pdf = make_pdf([f"Quarterly figures {n}", f"Lighthouse keeper {n}"] * 20)
        document = await ledger.operator.upload(pdf, f"report-{n}.pdf")
        ids.append((await ledger.operator.submit(document.document_id, actor="t")).task_id)
    return ids


async def all_succeeded(ledger: Ledger, task_ids: list[str]) -> bool:
    tasks = [await ledger.reads.get_task(t) for t in task_ids]
    return all(t.status is TaskStatus.SUCCEEDED for t in tasks)


# ------------------------------------------------ a worker that stops by itself


async def test_a_worker_that_stops_by_itself_is_shown_with_why_and_restarts(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No parser process can start: the worker hands its task back and stops. The
    panel says it stopped and why, ^r Restart appears in the footer, and pressing it
    (the fault gone) starts the worker again under its id; the task then succeeds."""
    ledger = await Ledger.open(settings)
    try:
        (task_id,) = await add_pdfs(ledger, 1)
        app = IngestDeskApp(ledger, workers=1, poll_interval_s=POLL_S, worker_prefix="tui")
        with monkeypatch.context() as broken:
            broken.setattr(sys, "executable", "/bin/false")
            async with app.run_test(size=SIZE) as pilot:
                assert app.workforce is not None
                await wait_for(
                    pilot,
                    lambda: "stopped: parser process failed to start" in workers_text(app),
                    within=OUTAGE_WAIT_S,
                    what="the panel to say the worker stopped and why",
                )
                assert app.workforce.stopped() == ["tui-w1"]
                await wait_for(pilot, lambda: "^r Restart" in footer(app), what="^r in the footer")
                assert "1 stopped" in str(dashboard(app).query_one(WorkersPanel).border_title)
                broken.undo()  # the fault is gone: parsers start again
                await pilot.press("ctrl+r")
                await wait_for(
                    pilot,
                    lambda: app.workforce is not None and not app.workforce.stopped(),
                    what="the worker to restart",
                )
                assert "restarted tui-w1" in " ".join(notes(app))
                await wait_for(pilot, lambda: "^r Restart" not in footer(app))
                done = False
                deadline = time.monotonic() + RECOVERY_WAIT_S
                while not done and time.monotonic() < deadline:
                    done = await all_succeeded(ledger, [task_id])
                    await pilot.pause(0.2)
                assert done, await ledger.reads.get_task(task_id)
                assert [w.worker_id for w in app.workforce.local_workers()] == ["tui-w1"]
                assert_clean(app)
    finally:
        await ledger.close()


async def test_restart_is_refused_in_read_only_mode_in_the_one_wording(
    settings: Settings,
) -> None:
    ledger = await Ledger.open(settings)
    try:
        app = IngestDeskApp(ledger, read_only=True, poll_interval_s=POLL_S)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.poller.baseline_taken)
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: refusal("restart_workers") in notes(app))
            assert "Restart" not in footer(app)
    finally:
        await ledger.close()


# ------------------------------------------------ the ledger goes away and comes back


@pytest.fixture
def own_postgres() -> Iterator[PgServer]:
    server = PgServer(require_pg_binaries())
    server.start()
    try:
        yield server
    finally:
        server.destroy()


@pytest.mark.postgres
async def test_a_ledger_outage_is_shown_and_the_work_resumes_after_it(
    own_postgres: PgServer, tmp_path: Path
) -> None:
    """PostgreSQL stops under two working in-process workers. Each is shown riding
    out the outage or stopped, in one clean line; the header says the ledger is
    unreachable. Once the server is back the view is live again by itself; stopped
    workers restart with ^r; every task ends succeeded, none stays running: the
    leases held at the outage (expired by then) were reaped at once."""
    settings = Settings(db_url=own_postgres.url, store_root=tmp_path / "objects", lease_s=LEASE_S)
    ledger = await Ledger.open(settings)
    try:
        task_ids = await add_pdfs(ledger, 24)
        app = IngestDeskApp(ledger, workers=2, poll_interval_s=POLL_S, worker_prefix="tui")
        async with app.run_test(size=SIZE) as pilot:
            workforce = app.workforce
            assert workforce is not None
            await wait_for(
                pilot,
                lambda: (
                    app.mirror.counts[TaskStatus.SUCCEEDED] >= 1
                    and app.mirror.counts[TaskStatus.RUNNING] >= 1
                ),
                within=RECOVERY_WAIT_S,
                what="the workers to be mid-batch",
            )
            own_postgres.stop()
            # The toast comes with the mark and goes after its timeout (5 s): looked for
            # at every poll of both waits, as the mark may come before the workers
            # notice, and a loaded machine can take longer than that between the two.
            toasts: list[str] = []

            def look_for_the_toast() -> None:
                toasts.extend(n for n in notes(app) if "cannot read the ledger" in n)

            def troubled() -> bool:
                look_for_the_toast()
                states = {w.state for w in workforce.local_workers()}
                return states <= {"stopped", "unreachable"}

            def marked() -> bool:
                look_for_the_toast()
                return LEDGER_DOWN_MARK in app.sub_title and bool(toasts)

            await wait_for(
                pilot, troubled, within=OUTAGE_WAIT_S, what="both workers to notice the outage"
            )
            await wait_for(pilot, marked, within=OUTAGE_WAIT_S, what="the mark and its toast")
            assert any("cannot read the ledger" in n for n in toasts)
            # Each line says the outage in words: riding it out, or stopped and why
            # (the ledger unreachable, or the driver's own one line). The panel is
            # redrawn at its next refresh after the state changed: wait for that.

            def outage_lines() -> bool:
                lines = workers_text(app).splitlines()
                return len(lines) == 2 and all(
                    UNREACHABLE_LINE in line or "stopped: " in line for line in lines
                )

            await wait_for(
                pilot,
                outage_lines,
                within=OUTAGE_WAIT_S,
                what=lambda: f"the panel to show the outage: {workers_text(app)!r}",
            )
            assert_clean(app)
            # Leases of the tasks held at the outage run out while the server is down.
            await asyncio.sleep(LEASE_S * 2)
            own_postgres.start()
            await wait_for(
                pilot,
                lambda: LEDGER_DOWN_MARK not in app.sub_title,
                within=OUTAGE_WAIT_S,
                what="the live view to resume",
            )
            assert "the ledger can be read again" in notes(app)
            if workforce.stopped():
                await wait_for(pilot, lambda: "^r Restart" in footer(app))
                await pilot.press("ctrl+r")
            await wait_for(
                pilot,
                lambda: (
                    not workforce.stopped()
                    and all(w.state != "unreachable" for w in workforce.local_workers())
                ),
                within=OUTAGE_WAIT_S,
                what="both workers back at work",
            )
            deadline = time.monotonic() + RECOVERY_WAIT_S
            done = False
            while not done and time.monotonic() < deadline:
                done = await all_succeeded(ledger, task_ids)
                await pilot.pause(0.2)
            counts = await ledger.reads.counts()
            assert done, counts
            assert counts[TaskStatus.RUNNING] == 0
            await wait_for(
                pilot,
                lambda: app.mirror.counts[TaskStatus.SUCCEEDED] == len(task_ids),
                within=RECOVERY_WAIT_S,  # a count that drifted heals at the next re-read
                what="the dashboard to show every task succeeded",
            )
            assert_clean(app)
    finally:
        await ledger.close()


# ------------------------------------------------ quitting after an outage


def _read_until_exit(fd: int, pid: int, within: float) -> tuple[bytes, int | None]:
    """Everything the child writes until it exits; its exit code (None: still running
    after ``within`` seconds)."""
    out = b""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            with contextlib.suppress(OSError):  # the terminal closed: its processes are gone
                out += os.read(fd, 65536)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            while select.select([fd], [], [], 0)[0]:  # what is still buffered
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            return out, os.waitstatus_to_exitcode(status)
    return out, None


def _pump(fd: int, until: Any, within: float) -> bytes:
    out = b""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and not until(out):
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                out += os.read(fd, 65536)
            except OSError as exc:  # the terminal closed: the dashboard exited
                raise AssertionError(f"the dashboard exited: {out[-3000:]!r}") from exc
    return out


async def _mid_batch(env: dict[str, str]) -> bool:
    settings = Settings(db_url=env["INGESTDESK_DB"], store_root=Path(env["INGESTDESK_STORE"]))
    async with await Ledger.open(settings) as ledger:
        counts = await ledger.reads.counts()
    return counts[TaskStatus.RUNNING] >= 1 and counts[TaskStatus.SUCCEEDED] >= 1


@pytest.mark.postgres
def test_quitting_after_an_outage_prints_no_traceback(
    own_postgres: PgServer, tmp_path: Path
) -> None:
    """The real ``ingestdesk dashboard`` in a terminal, four workers mid-batch when
    PostgreSQL stops; q quits with exit code 0 and nothing after the screen is given
    back is a traceback."""
    env = dict(
        os.environ,
        INGESTDESK_DB=own_postgres.url,
        INGESTDESK_STORE=str(tmp_path / "objects"),
        TERM="xterm-256color",
    )
    docs = tmp_path / "docs"
    docs.mkdir()
    # Long enough that the batch is seen mid-way: 40 three-page PDFs were once all done
    # between two looks on a loaded machine, and the test never got to stop the server.
    for n in range(40):
        (docs / f"report-{n}.pdf").write_bytes(make_pdf([f"Quarterly figures {n}"] * 60))
    cli = [sys.executable, "-c", "from tui.cli import main; raise SystemExit(main())"]
    added = subprocess.run(
        [*cli, "add", *sorted(map(str, docs.iterdir()))], env=env, capture_output=True, timeout=120
    )
    assert added.returncode == 0, added.stderr
    pid, fd = pty.fork()
    if pid == 0:  # the child: the dashboard, in the pseudo-terminal
        os.execve(sys.executable, [*cli, "dashboard", "--workers", "4"], env)
    try:
        shown = b""
        deadline = time.monotonic() + RECOVERY_WAIT_S
        while not asyncio.run(_mid_batch(env)):  # the workers hold tasks, some are done
            assert time.monotonic() < deadline, "the workers never got going"
            shown += _pump(fd, lambda out: False, 0.5)
        own_postgres.stop()
        shown += _pump(fd, lambda out: b"cannot read the ledger" in out, OUTAGE_WAIT_S)
        os.write(fd, b"q")
        rest, code = _read_until_exit(fd, pid, RECOVERY_WAIT_S)
    finally:
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass  # exited already
        os.close(fd)
    shown += rest
    after = shown[shown.rfind(b"\x1b[?1049l") :].decode(errors="replace")
    assert code == 0, after
    assert "Traceback" not in after, after
    for raw in RAW_DATABASE_TEXT:
        assert raw not in after, after
