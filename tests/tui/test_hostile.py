"""Hostile text reaches the operator's terminal escaped, never raw, on every screen.

The ledger's own entry checks refuse or neutralise such text today, so the rows here
are written straight into the database, as an older ingestdesk (or anyone with the
database) could have left them: names with escape sequences, a bell, a bidi override
and markup; worker ids, actors, reasons, error details and chunk text likewise.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection
from textual.widgets import DataTable, Input, Log, RichLog, Static

from core import ErrorCode, Stage, TaskStatus, WorkerEvent, visible
from tests.tui.conftest import APP_SIZE, Seeded, submit, wait_for
from tests.tui.driving import (
    dashboard,
    make_app,
    notes,
    open_failures,
    ready,
    screen_text,
    select,
    table,
)
from tui.messages import LedgerChanged
from tui.screens.modals import ConfirmScreen
from tui.screens.task_detail import TaskDetailScreen
from tui.widgets.filter_bar import FilterBar

CLEAR = "\x1b[2J\x1b]0;pwned\x07"  # clear the screen, retitle the window, ring the bell
EVIL_NAME = f"ev{CLEAR}.md"
BIDI_NAME = "invoice\u202efdp.md"  # displays as invoicedm.pdf when drawn raw
MARKUP_NAME = "[bold red]x[/].md"
EVIL_WORKER = "w\x1b[2J"
EVIL_ACTOR = "mal\x1b]0;t\x07"
FORGED_REASON = "ok\n2030-01-01 00:00:00 root"  # a second, forged history line
EVIL_DETAIL = "bad\x1b[31mred"
EVIL_CHUNK = "chunk\x1b[2Jtext"


def assert_safe(shown: str) -> None:
    """Nothing on screen that a terminal would act on: only printable characters and
    the screen's own line breaks."""
    unsafe = sorted({ch for ch in shown if not ch.isprintable() and ch != "\n"})
    assert not unsafe, f"raw characters reached the screen: {unsafe!r}"


async def seed_hostile(seeded: Seeded) -> Seeded:
    """A running, a failed and a queued task, then hostile text written over them."""
    ledger = seeded.ledger
    running = await submit(seeded, "running.md")
    claim = await ledger.queue.claim(running.task_id, "w1", lease_s=3600)
    assert claim is not None
    await ledger.queue.report_progress(claim, Stage.PARSE, 1, 4, lease_s=3600)
    failed = await submit(seeded, "failed.md")
    claim = await ledger.queue.claim(failed.task_id, "w2")
    assert claim is not None
    await ledger.queue.fail(claim, ErrorCode.PARSE_ERROR, "not a valid PDF")
    await submit(seeded, "queued.md")
    now = seeded.clock()

    def write(conn: Connection) -> None:
        def run(sql: str, **params: Any) -> None:
            conn.execute(text(sql), params)

        names = {"running.md": EVIL_NAME, "failed.md": BIDI_NAME, "queued.md": MARKUP_NAME}
        for name, hostile in names.items():
            run(
                "UPDATE documents SET filename = :hostile WHERE id = "
                "(SELECT document_id FROM ingestion_tasks WHERE id = :task)",
                hostile=hostile,
                task=seeded.id(name),
            )
        run(
            "UPDATE ingestion_tasks SET worker_id = :w WHERE id = :t",
            w=EVIL_WORKER,
            t=seeded.id("running.md"),
        )
        run(
            "UPDATE ingestion_tasks SET error_detail = :d WHERE id = :t",
            d=EVIL_DETAIL,
            t=seeded.id("failed.md"),
        )
        run(
            "UPDATE task_events SET actor = :a, reason = :r WHERE task_id = :t",
            a=EVIL_ACTOR,
            r=FORGED_REASON,
            t=seeded.id("failed.md"),
        )
        run(
            "INSERT INTO workers (id, host, pid, started_at, heartbeat_at, stopped_at) "
            "VALUES (:w, 'elsewhere', 1, :now, :now, NULL)",
            w=EVIL_WORKER,
            now=now,
        )
        run(
            "INSERT INTO chunks (document_id, ordinal, text, page, char_start, char_end) "
            "SELECT document_id, 0, :c, NULL, 0, 10 FROM ingestion_tasks WHERE id = :t",
            c=EVIL_CHUNK,
            t=seeded.id("failed.md"),
        )
        # Indexed as the ledger indexes the chunks it writes (one statement after
        # the insert; core.ledger.statements.INDEX_CHUNKS).
        run(
            "INSERT INTO chunks_fts(rowid, text) SELECT id, text FROM chunks WHERE text = :c",
            c=EVIL_CHUNK,
        )

    await ledger.transactions.write(write)
    return seeded


async def test_main_screen_shows_hostile_names_and_ids_escaped(empty: Seeded) -> None:
    seeded = await seed_hostile(empty)
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=3)
        screen = dashboard(app)
        await wait_for(
            pilot,
            lambda: (
                len(screen.query(".running-task").exclude(".-free")) == 1
                and EVIL_WORKER in {w.worker_id for w in app.ledger_workers}
            ),
            what="the running panel and the ledger's workers",
        )
        await wait_for(pilot, lambda: "invoice\\u202efdp.md" in screen_text(app), what="the table")
        shown = screen_text(app)
        assert_safe(shown)
        # The table: every name escaped, markup shown as written.
        assert visible(BIDI_NAME) == "invoice\\u202efdp.md"
        assert "invoice\\u202efdp.md" in shown
        assert "[bold red]x[/].md" in shown
        assert "ev\\x1b[2J" in shown
        running = table(app).cell(seeded.id("running.md"), "worker")
        assert str(running) == "w\\x1b[2J"
        # The running-now panel and the workers panel.
        title = screen.query_one("#running-slot-0 .running-title")
        assert "ev\\x1b[2J\\x1b]0;pwned" in str(title.render())

        # The panel shows the ledger's workers once the poll that read them is heard
        # (the counts and running tasks may be shown a broadcast earlier).
        def workers() -> str:
            panel = screen.query("#workers Static").results(Static)
            return "\n".join(str(line.content) for line in panel)

        await wait_for(pilot, lambda: "w\\x1b[2J" in workers(), what=workers)
        # The worker log: a line quoting a parser's error about a document's bytes.
        screen.post_message(LedgerChanged([], seeded.clock(), [f"failed detail={EVIL_DETAIL}"]))
        log = screen.query_one("#activity", RichLog)
        await wait_for(pilot, lambda: len(log.lines) > 0, what="the worker log line")
        assert "bad\\x1b[31mred" in log.lines[-1].text
        assert_safe(screen_text(app))


async def test_failures_and_detail_show_history_escaped(empty: Seeded) -> None:
    seeded = await seed_hostile(empty)
    app = make_app(seeded)
    failed = seeded.id("failed.md")
    # Toasts drawn (run_test turns them off by default): they quote the name.
    async with app.run_test(size=APP_SIZE, notifications=True) as pilot:
        await ready(pilot, rows=3)
        failures = await open_failures(pilot)
        tasks = failures.query_one("#failure-tasks", DataTable)
        await wait_for(pilot, lambda: tasks.row_count == 1, what="the failed task")
        await wait_for(pilot, lambda: "bad\\x1b[31mred" in screen_text(app), what="the row")
        shown = screen_text(app)
        assert_safe(shown)
        assert "invoice\\u202efdp.md" in shown and "bad\\x1b[31mred" in shown
        await pilot.press("escape", "escape")
        await select(pilot, failed)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, TaskDetailScreen))
        detail = app.screen
        events = detail.query_one("#detail-events", DataTable)
        await wait_for(pilot, lambda: events.row_count == 3, what="the task's events")
        await wait_for(
            pilot,
            lambda: screen_text(app).count("2030-01-01 00:00:00 root") >= events.row_count,
            what=lambda: screen_text(app),
        )
        shown = screen_text(app)
        assert_safe(shown)
        # One row per event: the forged second line stays inside its reason cell.
        assert shown.count("2030-01-01 00:00:00 root") == events.row_count
        assert "ok\\n2030-01-01 00:00:00 root" in shown
        assert "mal\\x1b]0;t\\x07" in shown  # the actor, in attempts and events
        assert "bad\\x1b[31mred" in shown and "chunk\\x1b[2Jtext" in shown
        assert "invoice\\u202efdp.md" in shown
        # A notification that quotes the name: escaped too.
        await pilot.press("r")
        await wait_for(pilot, lambda: any(m.startswith("requeued") for m in notes(app)))
        assert f"({visible(BIDI_NAME)})" in next(m for m in notes(app) if "requeued" in m)
        await wait_for(pilot, lambda: "requeued" in screen_text(app), what="the toast")
        assert_safe(screen_text(app))


async def test_markup_in_names_is_shown_as_written(empty: Seeded) -> None:
    seeded = await seed_hostile(empty)
    app = make_app(seeded)
    queued = seeded.id("queued.md")
    # Toasts drawn (run_test turns them off by default): they quote the name.
    async with app.run_test(size=APP_SIZE, notifications=True) as pilot:
        await ready(pilot, rows=3)
        # The cancel dialog and the notification after it quote the name literally.
        await select(pilot, queued)
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert f"({MARKUP_NAME})" in screen_text(app)
        await pilot.press("enter")
        await wait_for(pilot, lambda: any(m.startswith("cancelled") for m in notes(app)))
        await wait_for(
            pilot,
            lambda: f"({MARKUP_NAME}); its document is a" in screen_text(app),  # the toast wraps
            what=lambda: screen_text(app),
        )


async def test_a_filter_that_is_not_valid_markup_is_shown_as_typed(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        # The table's title quotes the filter: it used to be parsed as markup, and
        # "[/x]" raised MarkupError and took the dashboard down.
        await pilot.press("slash")
        bar = dashboard(app).query_one(FilterBar)
        bar.value = "name:[/x]"
        await pilot.press("enter")
        await wait_for(pilot, lambda: not table(app).tasks, what="no task matches")
        await wait_for(pilot, lambda: "Tasks — name:[/x]" in screen_text(app), what="the title")
        assert app.is_running


async def test_pasted_control_characters_are_kept_as_escapes(seeded: Seeded) -> None:
    from textual import events

    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        await pilot.press("slash")
        bar = dashboard(app).query_one(FilterBar)
        bar.post_message(events.Paste(f"name:{CLEAR}"))
        await wait_for(pilot, lambda: bar.value != "", what="the paste")
        assert bar.value == f"name:{visible(CLEAR)}"
        assert_safe(screen_text(app))


async def test_race_log_lines_are_escaped(empty: Seeded) -> None:
    from tui.screens.race import RACERS, RaceScreen

    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        await wait_for(pilot, lambda: app.poller.baseline_taken)
        await pilot.press("R")
        await wait_for(pilot, lambda: isinstance(app.screen, RaceScreen))
        race = app.screen
        assert isinstance(race, RaceScreen)
        await wait_for(pilot, lambda: race.outcome is not None, what="the race")
        race._writer(RACERS[0])(WorkerEvent(RACERS[0], None, "failed", f"detail={EVIL_DETAIL}"))
        log = race.query_one(f"#log-{RACERS[0]}", Log)
        await wait_for(pilot, lambda: "bad\\x1b[31mred" in log.lines[-1], what="the line")
        await wait_for(pilot, lambda: "bad\\x1b[31mred" in screen_text(app), what="it drawn")
        assert_safe(screen_text(app))


async def test_input_boxes_escape_what_is_typed_into_them(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        await select(pilot, seeded.id("queued-memo.md"))
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        reason = app.screen.query_one("#reason", Input)
        reason.insert_text_at_cursor(FORGED_REASON)
        assert reason.value == visible(FORGED_REASON)
        assert_safe(screen_text(app))
        await pilot.press("enter")
        await wait_for(
            pilot,
            lambda: table(app).tasks[seeded.id("queued-memo.md")].status is TaskStatus.CANCELLED,
        )


async def test_ctrl_c_says_how_to_quit_in_plain_words(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: any("to quit" in m for m in notes(app)))
        assert not any("[b]" in m for m in notes(app))  # no markup shown as text
