"""The dashboard with real workers, real processes and real ledgers: quitting hands
tasks back, the claim race has exactly one winner, another process's writes show up,
and an unopenable ledger is refused before the app starts."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Log

from bench.million import build
from core import Ledger, Settings, TaskStatus, sqlite_url
from tests.hostile import make_pdf
from tests.tui.conftest import APP_SIZE, Notices, Seeded, submit, wait_for
from tui.app import LEDGER_DOWN_MARK, IngestDeskApp, run_dashboard
from tui.poller import RESOLVE_PER_POLL
from tui.screens.race import RACERS, RaceScreen
from tui.widgets.task_table import TaskTable

POLL_S = 0.1  # seconds
SUBPROCESS_TIMEOUT_S = 60.0


class StuckPool:
    """A parser pool whose parses never finish: tasks stay running at the parse stage."""

    def __init__(self) -> None:
        self.parsing = 0

    async def parse(self, *args: Any, **kwargs: Any) -> Any:
        self.parsing += 1
        await asyncio.Event().wait()

    async def aclose(self) -> None:
        return None


async def test_quit_hands_running_tasks_back(empty: Seeded) -> None:
    # A PDF: small Markdown and text are parsed in the worker's process, not the pool.
    task = await submit(empty, "long-report.pdf", make_pdf(["Quarterly figures"]))
    pool = StuckPool()
    app = IngestDeskApp(
        empty.ledger,
        workers=1,
        pool=pool,  # type: ignore[arg-type]
        clock=empty.clock,
        poll_interval_s=POLL_S,
        worker_prefix="t",
    )
    async with app.run_test(size=APP_SIZE) as pilot:
        await wait_for(pilot, lambda: pool.parsing == 1, what="the worker to start parsing")
        await wait_for(pilot, lambda: app.mirror.counts[TaskStatus.RUNNING] == 1)
        assert app.workforce is not None
        assert [w.current for w in app.workforce.local_workers()] == [(task.task_id,)]
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, what="the app to exit")
    after = await empty.ledger.reads.get_task(task.task_id)
    assert after.status is TaskStatus.RETRY_WAIT  # claimable again at once
    assert after.worker_id is None or after.lease_expires_at is None
    history = await empty.ledger.reads.task_history(task.task_id)
    assert history[-1].reason == "handed back on shutdown"
    assert history[-1].actor == "t-w1"
    assert (await empty.ledger.reads.counts())[TaskStatus.RUNNING] == 0


async def test_claim_race_has_exactly_one_winner(empty: Seeded) -> None:
    app = IngestDeskApp(empty.ledger, workers=0, clock=empty.clock, poll_interval_s=POLL_S)
    async with app.run_test(size=APP_SIZE) as pilot:
        await wait_for(pilot, lambda: app.poller.baseline_taken)
        await pilot.press("R")
        await wait_for(pilot, lambda: isinstance(app.screen, RaceScreen))
        screen = app.screen
        assert isinstance(screen, RaceScreen)
        await wait_for(pilot, lambda: screen.outcome is not None, what="the race")
        assert screen.outcome is not None and sorted(screen.outcome) == [False, True]
        logs = {r: "\n".join(screen.query_one(f"#log-{r}", Log).lines) for r in RACERS}
        winner, loser = RACERS if screen.outcome[0] else RACERS[::-1]
        assert "claimed task=" in logs[winner] and "claim missed" not in logs[winner]
        assert "claim missed task=" in logs[loser] and "claimed task=" not in logs[loser]
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running)
    tasks = await empty.ledger.reads.list_tasks()
    assert len(tasks) == 1 and tasks[0].worker_id == winner


async def test_writes_from_another_process_appear(tmp_path: Path) -> None:
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "objects")
    ledger = await Ledger.open(settings)  # real clock: the other process uses one too
    note = tmp_path / "from-another-terminal.md"
    note.write_text("# Added by the CLI\n\nWhile the dashboard was watching.\n")
    try:
        app = IngestDeskApp(ledger, workers=0, poll_interval_s=POLL_S)
        async with app.run_test(size=APP_SIZE) as pilot:
            await wait_for(pilot, lambda: app.poller.baseline_taken)
            command = [
                sys.executable,
                "-m",
                "core.cli",
                "--db",
                settings.db_url,
                "--store",
                str(settings.store_root),
                "add",
                str(note),
            ]
            done = await asyncio.to_thread(
                subprocess.run,
                command,
                capture_output=True,
                text=True,
                timeout=SUBPROCESS_TIMEOUT_S,
            )
            assert done.returncode == 0, done.stderr
            table = app.screen.query_one(TaskTable)
            await wait_for(
                pilot,
                lambda: any(t.document_name == note.name for t in table.tasks.values()),
                what="the other process's task",
            )
            assert app.mirror.counts[TaskStatus.QUEUED] == 1
    finally:
        await ledger.close()


async def test_old_tasks_changing_after_the_baseline_keep_the_counts_exact(
    tmp_path: Path,
) -> None:
    # More old tasks change at once than one poll looks up (RESOLVE_PER_POLL): each
    # one's status at the baseline comes from its history, read in batches.
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "objects")
    await build(settings, 1_000)
    ledger = await Ledger.open(settings)
    try:
        failed = await ledger.reads.list_tasks(status=TaskStatus.FAILED, limit=None)
        assert len(failed) > RESOLVE_PER_POLL
        app = IngestDeskApp(ledger, workers=0, poll_interval_s=POLL_S)
        async with app.run_test(size=APP_SIZE) as pilot:
            await wait_for(pilot, lambda: app.poller.baseline_taken)
            for task in failed:
                await ledger.operator.retry(task.task_id, actor="alice", reason="again")
            head = await ledger.reads.revision()
            expected = await ledger.reads.counts()
            await wait_for(
                pilot,
                lambda: app.mirror.revision >= head and not app.mirror.unresolved,
                what="every retried task to be resolved",
            )
            assert app.mirror.counts == expected
            assert expected[TaskStatus.FAILED] == 0
    finally:
        await ledger.close()


def test_unopenable_ledger_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the ledger's folder should be")
    settings = Settings(db_url=sqlite_url(blocker / "ledger.db"), store_root=tmp_path / "objects")
    assert run_dashboard(settings, workers=0, read_only=False) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ingestdesk: ")
    assert "ledger" in err


async def test_a_ledger_that_cannot_be_read_is_one_clean_line_until_it_can(
    tmp_path: Path,
) -> None:
    """The ledger's file is overwritten under the dashboard (a real fault: SQLite
    answers "file is not a database", which SQLAlchemy wraps in its statement, its
    parameters and a sqlalche.me link). The dashboard says it once, in one line of
    the driver's words, and keeps it in the header; when the file is whole again the
    header clears, it says so, and the live view picks up what changed meanwhile."""
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "obj")
    async with await Ledger.open(settings) as ledger:
        app = IngestDeskApp(ledger, workers=0, poll_interval_s=POLL_S)
        notices = Notices()
        async with app.run_test(size=APP_SIZE, message_hook=notices) as pilot:
            await wait_for(pilot, lambda: app.poller.baseline_taken, what="the baseline")
            # The database and its WAL index, overwritten in place (the connections
            # hold them open); the index too, or a connection trusts its page cache.
            files = [tmp_path / f"ledger.db{end}" for end in ("", "-wal", "-shm")]
            whole = {path: path.read_bytes() for path in files if path.exists()}
            for path in whole:
                with path.open("r+b") as file:
                    file.write(b"not a database" * 512)
            await wait_for(pilot, lambda: LEDGER_DOWN_MARK in app.sub_title, what="the outage")
            # The notice is a message, handled after the header changed beside it.
            await wait_for(pilot, lambda: bool(notices.seen), what="the outage's notice")
            said = [line for line in notices.seen if "cannot read" in line]
            assert said == [
                "cannot read the ledger: DatabaseError: file is not a database; retrying"
            ]
            for path, data in whole.items():
                with path.open("r+b") as file:
                    file.write(data)
                    file.truncate()
            await wait_for(pilot, lambda: LEDGER_DOWN_MARK not in app.sub_title, what="recovery")
            await wait_for(
                pilot,
                lambda: "the ledger can be read again" in notices.seen,
                what=lambda: f"the recovery's notice, not only {notices.seen}",
            )
            # Each said once, though the outage lasted several failed polls.
            assert notices.seen == [*said, "the ledger can be read again"]
            task = await submit_note(ledger, "after-the-outage.md")
            table = app.screen_stack[1].query_one(TaskTable)
            await wait_for(pilot, lambda: task in table.tasks, what="the live view")


async def submit_note(ledger: Ledger, name: str) -> str:
    document = await ledger.operator.upload(b"# back\n\nThe ledger is back.\n", name)
    return (await ledger.operator.submit(document.document_id, actor="t")).task_id
