"""Every bad input the dashboard meets gets one clear line, and nothing is lost:
a bulk action with no filter, files that are not files, names that are markup, a
folder full of hostile names, and a ledger URL that holds a password."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection
from textual.widgets import Button, DataTable, Input, Static

from core import Ledger, Settings, TaskStatus, visible
from tests.tui.conftest import APP_SIZE, Seeded, wait_for
from tests.tui.driving import make_app, notes, ready, screen_text, select, table
from tui.app import IngestDeskApp
from tui.format import ledger_label, without_password
from tui.screens.bulk import BulkScreen
from tui.screens.submit import SubmitScreen, complete_path
from tui.screens.task_detail import TaskDetailScreen

PG_PASSWORD = "hunter2-not-real"

# ------------------------------------------------------------------ bulk


async def test_bulk_with_no_filter_says_so_and_offers_every_task_explicitly(
    seeded: Seeded,
) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=len(seeded.tasks))
        await pilot.press("b")
        await wait_for(pilot, lambda: isinstance(app.screen, BulkScreen))
        screen = app.screen
        assert isinstance(screen, BulkScreen)
        await wait_for(
            pilot,
            lambda: str(screen.query_one("#bulk-scope", Static).content) != "",
            what="the bulk scope",
        )
        scope = str(screen.query_one("#bulk-scope", Static).content)
        assert "\n" not in scope and scope.startswith("No filter: a bulk action needs one.")
        # Nothing destructive on offer, and no dry run that can only fail.
        assert screen.query_one("#do-cancel", Button).disabled
        assert screen.query_one("#do-retry", Button).disabled
        assert not screen.query_one("#dry-cancel", Static).display
        assert "dry run failed" not in screen_text(app)
        assert screen.focused is screen.query_one("#back", Button)
        # Every task, said explicitly: dry run first, then the real run.
        screen.query_one("#every-task", Button).press()
        await wait_for(pilot, lambda: "cancel" in screen.results and "retry" in screen.results)
        assert "5 of 10 matching are eligible" in str(
            screen.query_one("#dry-cancel", Static).content
        )
        assert str(screen.query_one("#bulk-scope", Static).content) == "every task in the ledger"
        assert (await seeded.ledger.reads.counts())[TaskStatus.CANCELLED] == 1  # untouched
        screen.query_one("#do-cancel", Button).press()
        await wait_for(pilot, lambda: any(n.title == "bulk cancel" for n in app._notifications))
    assert any("cancelled 5 tasks" in m for m in notes(app))
    assert (await seeded.ledger.reads.counts())[TaskStatus.CANCELLED] == 6


async def test_bulk_can_be_left_without_changing_anything(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        await pilot.press("b")
        await wait_for(pilot, lambda: isinstance(app.screen, BulkScreen))
        await pilot.press("enter")  # the focused button: Back
        await wait_for(pilot, lambda: not isinstance(app.screen, BulkScreen))
    assert (await seeded.ledger.reads.counts())[TaskStatus.CANCELLED] == 1


# ---------------------------------------------------------------- submit


async def test_submit_refuses_what_is_not_a_file_in_one_line_each(
    empty: Seeded, tmp_path: Path, monkeypatch: Any
) -> None:
    folder = tmp_path / "incoming"
    folder.mkdir()
    os.mkfifo(folder / "pipe.md")  # opening it would block until a writer came
    (folder / "good.md").write_text("# Good\n\nThis one goes through.\n")
    monkeypatch.chdir(folder)
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE, notifications=True) as pilot:
        await wait_for(pilot, lambda: app.poller.baseline_taken)
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(app.screen, SubmitScreen))
        paths = app.screen.query_one("#paths", Input)
        paths.value = "pipe.md /dev/zero '[bold]gone[/].md' good.md"
        await pilot.press("enter")
        await wait_for(
            pilot,
            lambda: any("not submitted" in (n.title or "") for n in app._notifications),
            what="the refusal",
        )
        await wait_for(pilot, lambda: len(table(app).tasks) == 1, what="the good file's row")
        refusal = next(n for n in app._notifications if "not submitted" in (n.title or ""))
        assert n_lines(refusal.message) == 3
        lines = refusal.message.split("\n")
        assert lines[0].startswith("pipe.md") and "regular file" in lines[0]
        assert lines[1].startswith("/dev/zero") and "regular file" in lines[1]
        assert lines[2] == "[bold]gone[/].md: no such file"
        # The toast shows the name as written, not as markup.
        await wait_for(
            pilot,
            lambda: "[bold]gone[/].md: no such file" in screen_text(app),
            what=lambda: screen_text(app),
        )
        assert app.is_running


def n_lines(text: str) -> int:
    return len(text.split("\n"))


async def test_submit_screen_opens_on_a_folder_of_hostile_names(
    empty: Seeded, request: pytest.FixtureRequest, monkeypatch: Any
) -> None:
    # The folder's path holds "[/x]", which is not valid markup: the screen used to
    # raise MarkupError while opening, and take the dashboard down with it. Made under
    # a short temporary folder of fixed length, not tmp_path: the dialog wraps the
    # path, and a longer tmp_path (pytest-xdist adds a segment) moved the wrap into it.
    short = Path(tempfile.mkdtemp(prefix="h"))
    request.addfinalizer(lambda: shutil.rmtree(short, ignore_errors=True))
    folder = short / "[" / "x] incoming"
    folder.mkdir(parents=True)
    for name in ("[bold]x.md", "[@click=app.quit]quit.md", "ev\x1b[2J.md"):
        (folder / name).write_text("a file with a hostile name")
    monkeypatch.chdir(folder)
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        await wait_for(pilot, lambda: app.poller.baseline_taken)
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(app.screen, SubmitScreen))
        await wait_for(pilot, lambda: "[/x] incoming" in screen_text(app), what="the folder")
        shown = screen_text(app)
        assert "[/x] incoming" in shown
        # Names as they are, not markup (a click on the second used to quit).
        for name in ("[bold]x.md", "[@click=app.quit]quit.md", "ev\\x1b[2J.md"):
            assert name in shown
        assert "\x1b" not in shown
        # A name the box would draw raw is never offered as a completion.
        assert complete_path("e", folder) is None
        assert complete_path("[b", folder) == "[bold]x.md"
        assert app.is_running


# ------------------------------------------------------ rows it cannot read


async def unreadable(seeded: Seeded, sql: str, task_id: str) -> None:
    """Write a value the ledger's views refuse, as an older or newer version might."""

    def write(conn: Connection) -> None:
        conn.execute(text(sql), {"task": task_id})

    await seeded.ledger.transactions.write(write)


async def test_a_document_row_it_cannot_read_is_one_line_in_the_detail(seeded: Seeded) -> None:
    task_id = seeded.id("board-minutes.md")
    await unreadable(
        seeded,
        "UPDATE documents SET kind = 'bogus' WHERE id = "
        "(SELECT document_id FROM ingestion_tasks WHERE id = :task)",
        task_id,
    )
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=len(seeded.tasks))
        await select(pilot, task_id)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, TaskDetailScreen))
        # It used to stay at "loading…": the loader died on the row, silently.
        await wait_for(
            pilot,
            lambda: "cannot be read: ValueError: 'bogus' is not a valid" in screen_text(app),
            what="the document's line",
        )
        events = app.screen.query_one("#detail-events", DataTable)
        assert events.row_count == 3  # the rest of the task is still shown


async def test_a_task_row_it_cannot_read_is_one_line_not_an_empty_table(seeded: Seeded) -> None:
    await unreadable(
        seeded,
        "UPDATE ingestion_tasks SET status = 'bogus' WHERE id = :task",
        seeded.id("queued-memo.md"),
    )
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await wait_for(
            pilot,
            lambda: any(n.title == "cannot load the tasks" for n in app._notifications),
            what="the window's failure",
        )
        note = next(n for n in app._notifications if n.title == "cannot load the tasks")
        assert note.message == "ValueError: 'bogus' is not a valid TaskStatus"
        assert app.is_running


# ------------------------------------------------------------ the ledger URL


def test_the_header_never_shows_a_password() -> None:
    url = f"postgresql+asyncpg://ingest:{PG_PASSWORD}@db.example:5432/ledger"
    assert (
        ledger_label(url, read_only=False)
        == "postgresql+asyncpg://ingest:***@db.example:5432/ledger"
    )
    assert ledger_label(url, read_only=True).endswith("  [read-only]")
    assert PG_PASSWORD not in ledger_label(url, read_only=True)
    assert (
        ledger_label("sqlite:////srv/ingest/ledger.db", read_only=False) == "/srv/ingest/ledger.db"
    )
    message = f"could not connect to postgresql://ingest:{PG_PASSWORD}@db.example/ledger"
    assert PG_PASSWORD not in without_password(message, url)
    assert "ingest:***@db.example" in without_password(message, url)


async def test_the_header_shows_a_sqlite_ledgers_path(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        path = str(seeded.ledger.settings.db_url).removeprefix("sqlite:///")
        assert app.sub_title == visible(path)
        assert f"ingestdesk — {path}" in screen_text(app)


@pytest.mark.postgres
async def test_a_postgres_password_stays_out_of_the_header_and_every_message(
    pg_url: str, tmp_path: Path
) -> None:
    # The test server trusts local connections, so the password is never checked:
    # what matters is that the dashboard never shows it.
    user, _, rest = pg_url.partition("@")
    url = f"{user}:{PG_PASSWORD}@{rest}"
    ledger = await Ledger.open(Settings(db_url=url, store_root=tmp_path / "objects"))
    try:
        app = IngestDeskApp(ledger, workers=0, poll_interval_s=0.1, actor="tester")
        async with app.run_test(size=APP_SIZE, notifications=True) as pilot:
            await wait_for(pilot, lambda: app.poller.baseline_taken)
            assert PG_PASSWORD not in app.sub_title and ":***@" in app.sub_title

            async def broken(*args: Any, **kwargs: Any) -> Any:
                raise OSError(f"connection to {url} was reset")

            ledger.reads.tasks_since = broken  # type: ignore[method-assign]
            await wait_for(pilot, lambda: any("was reset" in m for m in notes(app)))
            await wait_for(pilot, lambda: "was reset" in screen_text(app), what="the toast")
            assert not any(PG_PASSWORD in m for m in notes(app))
            shown = screen_text(app)
            assert ":***@" in shown and PG_PASSWORD not in shown
    finally:
        await ledger.close()
