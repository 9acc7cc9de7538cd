"""Every key of the dashboard, driven through Pilot on a real SQLite ledger,
refusals included."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from textual.widgets import Button, DataTable, Input, Static

from core import ERRORS, ErrorCode, Stage, TaskStatus
from tests.tui.conftest import APP_SIZE, Seeded, submit, wait_for
from tests.tui.driving import (
    dashboard,
    make_app,
    notes,
    open_failures,
    ready,
    select,
    table,
)
from tui.screens.bulk import BulkScreen
from tui.screens.dashboard import DashboardScreen
from tui.screens.help import HelpScreen
from tui.screens.modals import ConfirmScreen
from tui.screens.submit import SubmitScreen, complete_path
from tui.screens.task_detail import TaskDetailScreen
from tui.widgets.counts import StatusCount
from tui.widgets.filter_bar import FilterBar
from tui.widgets.task_table import TaskTable

# ------------------------------------------------------------------------ main


async def test_table_shows_every_task_with_counts(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=len(seeded.tasks))
        rows = table(app).tasks
        assert set(rows) == set(seeded.tasks.values())
        assert app.mirror.counts[TaskStatus.FAILED] == 3
        assert app.mirror.counts[TaskStatus.RUNNING] == 2
        # Newest first, and the stalled task is marked as such.
        first = table(app).task_id_at(0)
        assert first == seeded.id("queued-memo.md")
        stalled = seeded.id("huge-scan.md")
        assert "stalled" in str(table(app).cell(stalled, "status"))
        running = dashboard(app).query_one("#running")
        await wait_for(
            pilot, lambda: len(running.query(".running-task").exclude(".-free")) == 2, what="2 bars"
        )


async def test_status_keys_filter_the_table(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=len(seeded.tasks))
        await pilot.press("4")
        await wait_for(pilot, lambda: len(table(app).tasks) == 3, what="failed tasks only")
        assert {t.status for t in table(app).tasks.values()} == {TaskStatus.FAILED}
        active = [b for b in dashboard(app).query(StatusCount) if b.has_class("-active")]
        assert [b.status for b in active] == [TaskStatus.FAILED]
        await pilot.press("0")
        await wait_for(pilot, lambda: len(table(app).tasks) == len(seeded.tasks))


async def test_filter_bar_applies_terms_and_explains_bad_ones(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=len(seeded.tasks))
        await pilot.press("slash")
        bar = dashboard(app).query_one(FilterBar)
        assert bar.has_focus and bar.has_class("-open")
        bar.value = "code:parse_error !name:vendor"
        await pilot.press("enter")
        await wait_for(pilot, lambda: set(table(app).tasks) == {seeded.id("corrupt-export.md")})
        # The bar closes and hands the focus back once the filter's rows are painted.
        await wait_for(
            pilot,
            lambda: not bar.has_class("-open") and table(app).has_focus,
            what="the bar closed, the table focused",
        )
        await pilot.press("slash")
        bar.value = "status:nonsense"
        await pilot.press("enter")
        await wait_for(pilot, lambda: bar.has_class("-invalid"))
        assert any("status must be one of" in m for m in notes(app))
        await pilot.press("escape")
        assert bar.value == "code:parse_error !name:vendor"
        assert set(table(app).tasks) == {seeded.id("corrupt-export.md")}


async def test_live_changes_update_rows_by_key(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=len(seeded.tasks))
        await select(pilot, seeded.id("queued-handbook.md"))
        cursor_task = table(app).selected
        new = await submit(seeded, "fresh-upload.md")
        await wait_for(pilot, lambda: new.task_id in table(app).tasks, what="the new row")
        # The cursor stays on the same task although a row was added above it.
        assert table(app).selected is not None and cursor_task is not None
        assert table(app).selected.task_id == cursor_task.task_id
        claim = await seeded.ledger.queue.claim(new.task_id, "w9")
        assert claim is not None
        await seeded.ledger.queue.report_progress(claim, Stage.EMBEDDING, 5, 10)
        await wait_for(
            pilot,
            lambda: "5/10" in str(table(app).cell(new.task_id, "progress")),
            what="progress in the row",
        )
        assert app.mirror.counts[TaskStatus.RUNNING] == 3


async def test_window_holds_only_the_newest_rows(empty: Seeded) -> None:
    for n in range(12):
        await submit(empty, f"note-{n:02}.md")
    app = make_app(empty, window_rows=5)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=5)
        assert set(table(app).tasks) == {empty.id(f"note-{n:02}.md") for n in range(7, 12)}
        newest = await submit(empty, "note-12.md")
        await wait_for(pilot, lambda: newest.task_id in table(app).tasks)
        assert len(table(app).tasks) == 5
        assert empty.id("note-07.md") not in table(app).tasks
        assert app.mirror.counts[TaskStatus.QUEUED] == 13


# --------------------------------------------------------------------- actions


async def test_submit_uploads_each_path_and_reports_bad_ones(
    empty: Seeded, tmp_path: Path, monkeypatch: Any
) -> None:
    folder = tmp_path / "incoming"
    folder.mkdir()
    (folder / "minutes.md").write_text("# Minutes\n\nThe dashboard submitted this.\n")
    (folder / "call notes.txt").write_text("Notes from the call about ingestion.\n")
    (folder / "archive.zip").write_bytes(b"PK\x03\x04" + bytes(64))
    monkeypatch.chdir(folder)
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        await wait_for(pilot, lambda: app.poller.baseline_taken)
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(app.screen, SubmitScreen))
        paths = app.screen.query_one("#paths", Input)
        await pilot.press(*"min")
        await wait_for(pilot, lambda: paths._suggestion == "minutes.md", what="completion")
        await pilot.press("right")  # accept the suggestion
        assert paths.value == "minutes.md"
        paths.value += " 'call notes.txt' archive.zip missing.pdf"
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(table(app).tasks) == 2, what="two new rows")
        names = {t.document_name for t in table(app).tasks.values()}
        assert names == {"minutes.md", "call notes.txt"}
        await wait_for(
            pilot, lambda: any("not submitted" in (n.title or "") for n in app._notifications)
        )
        refusal = next(n for n in app._notifications if "not submitted" in (n.title or ""))
        assert "archive.zip: unsupported file type" in refusal.message
        assert "missing.pdf: no such file" in refusal.message


def test_path_completion(tmp_path: Path) -> None:
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "q3.pdf").write_bytes(b"%PDF-1.4")
    (tmp_path / "readme.md").write_text("x")
    assert complete_path("rea", tmp_path) == "readme.md"
    assert complete_path("rep", tmp_path) == "reports/"
    assert complete_path("readme.md reports/q", tmp_path) == "readme.md reports/q3.pdf"
    assert complete_path("nothing", tmp_path) is None


async def test_cancel_asks_then_cancels_with_reason(seeded: Seeded) -> None:
    app = make_app(seeded)
    task_id = seeded.id("queued-handbook.md")
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        await select(pilot, task_id)
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        app.screen.query_one("#reason", Input).value = "duplicate"
        await pilot.press("enter")
        await wait_for(
            pilot, lambda: table(app).tasks[task_id].status is TaskStatus.CANCELLED, what="cancel"
        )
    history = await seeded.ledger.reads.task_history(task_id)
    assert (history[-1].actor, history[-1].reason) == ("tester", "duplicate")


async def test_enter_confirms_a_dialog_before_its_focus_lands(seeded: Seeded) -> None:
    # The dialog focuses its reason box on the next turn of the app's loop; an enter
    # that came first (typed at once, or a loaded CI run's test) was lost.
    app = make_app(seeded)
    task_id = seeded.id("queued-memo.md")
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        await select(pilot, task_id)
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        dialog = app.screen
        await wait_for(pilot, lambda: dialog.focused is not None)
        dialog.set_focus(None)  # as it is before the dialog's own focus lands
        await pilot.press("enter")
        await wait_for(
            pilot, lambda: table(app).tasks[task_id].status is TaskStatus.CANCELLED, what="cancel"
        )


async def test_cancel_can_be_backed_out_of(seeded: Seeded) -> None:
    app = make_app(seeded)
    task_id = seeded.id("queued-memo.md")
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        await select(pilot, task_id)
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen))
    assert (await seeded.ledger.reads.get_task(task_id)).status is TaskStatus.QUEUED


async def test_cancel_of_a_succeeded_task_is_refused_in_words(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        await select(pilot, seeded.id("board-minutes.md"))
        await pilot.press("c")
        await wait_for(pilot, lambda: any(n.title == "cannot cancel" for n in app._notifications))
        assert isinstance(app.screen, DashboardScreen)  # no pointless confirmation
        refusal = next(n for n in app._notifications if n.title == "cannot cancel")
        assert refusal.severity == "error"
        assert "is succeeded; only queued, running or retry_wait tasks can be cancelled" in (
            refusal.message
        )


async def test_retry_requeues_a_failed_task(seeded: Seeded) -> None:
    app = make_app(seeded)
    task_id = seeded.id("corrupt-export.md")
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        await select(pilot, task_id)
        await pilot.press("r")
        await wait_for(pilot, lambda: table(app).tasks[task_id].status is TaskStatus.QUEUED)
        assert any(m.startswith("requeued") for m in notes(app))


async def test_retry_of_a_queued_task_is_explained(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        await select(pilot, seeded.id("queued-memo.md"))
        await pilot.press("r")
        await wait_for(pilot, lambda: any(n.title == "cannot retry" for n in app._notifications))
        refusal = next(n for n in app._notifications if n.title == "cannot retry")
        assert "is queued; only failed tasks can be retried" in refusal.message


async def test_bulk_cancel_dry_runs_then_acts_on_everything_matching(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        await pilot.press("slash")
        dashboard(app).query_one(FilterBar).value = "name:queued"
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(table(app).tasks) == 2)
        await pilot.press("b")
        await wait_for(pilot, lambda: isinstance(app.screen, BulkScreen))
        screen = app.screen
        await wait_for(pilot, lambda: "cancel" in screen.results and "retry" in screen.results)
        assert "2 of 2 matching are eligible" in str(
            screen.query_one("#dry-cancel", Static).content
        )
        retry_text = str(screen.query_one("#dry-retry", Static).content)
        assert "0 of 2 matching are eligible" in retry_text and "queued" in retry_text
        assert screen.query_one("#do-retry", Button).disabled
        screen.query_one("#reason", Input).value = "cleanup"
        screen.query_one("#do-cancel", Button).press()
        await wait_for(pilot, lambda: any(n.title == "bulk cancel" for n in app._notifications))
        await wait_for(
            pilot,
            lambda: all(t.status is TaskStatus.CANCELLED for t in table(app).tasks.values()),
        )
    assert "cancelled 2 tasks" in notes(app)[-1] or any(
        "cancelled 2 tasks" in m for m in notes(app)
    )
    history = await seeded.ledger.reads.task_history(seeded.id("queued-memo.md"))
    assert history[-1].reason == "cleanup"


# ------------------------------------------------------------------- screens


async def test_failures_screen_groups_and_drills_down(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        screen = await open_failures(pilot)
        await wait_for(pilot, lambda: len(screen.groups) == 2, what="two groups")
        groups = screen.query_one("#failure-groups", DataTable)
        first = groups.coordinate_to_cell_key((0, 0)).row_key.value
        assert first == "parse_error|parse"  # the largest group first
        assert str(groups.get_cell(first, "count")) == "2"
        advice = str(screen.query_one("#failure-advice", Static).content)
        assert ERRORS[next(iter(screen.groups.values())).error_code].advice in advice
        await pilot.press("enter")
        tasks = screen.query_one("#failure-tasks", DataTable)
        await wait_for(pilot, lambda: tasks.has_focus and tasks.row_count == 2)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, TaskDetailScreen))
        detail = app.screen
        assert isinstance(detail, TaskDetailScreen)
        assert detail.task_id in {seeded.id("corrupt-export.md"), seeded.id("vendor-contract.md")}
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen)
        # The other group's advice says retrying will not help.
        await pilot.press("escape")  # back to the groups table
        await pilot.press("down")
        await wait_for(pilot, lambda: screen.current_group == "empty_document|parse")
        assert "retrying will not help" in str(screen.query_one("#failure-advice", Static).content)


async def test_retry_from_the_failures_screen(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        screen = await open_failures(pilot)
        await wait_for(pilot, lambda: len(screen.tasks) == 2)
        await pilot.press("enter", "r")
        await wait_for(pilot, lambda: app.mirror.counts[TaskStatus.FAILED] == 2, what="a retry")


async def test_detail_shows_fields_attempts_events_and_chunks(seeded: Seeded) -> None:
    app = make_app(seeded)
    task_id = seeded.id("board-minutes.md")
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        await select(pilot, task_id)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, TaskDetailScreen))
        screen = app.screen
        attempts = screen.query_one("#detail-attempts", DataTable)
        await wait_for(pilot, lambda: attempts.row_count == 1, what="the attempt row")
        row = attempts.get_row_at(0)
        assert [str(c) for c in (row[0], row[1], row[6])] == ["1", "w1", "succeeded"]
        events = screen.query_one("#detail-events", DataTable)
        assert events.row_count == 3  # submitted, claimed, succeeded
        chunks = str(screen.query_one("#detail-chunks", Static).content)
        assert "The board approved the ingestion budget" in chunks
        fields = screen.query_one("#detail-fields", Static)
        assert fields.content is not None
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen))


async def test_help_lists_keys_states_and_error_codes(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        console = Console(width=200, record=True, file=io.StringIO())
        for static in app.screen.query(Static):
            console.print(static.content)
        text = console.export_text()
        for key in ("s", "c", "r", "f", "enter", "?", "q", "R", "/", "b", "w / W", "p"):
            assert f"\n {key} " in text or f"\n{key} " in text, key
        for code in ERRORS:
            assert code.value in text
        assert "review_pending" in text and "retry_wait" in text and "published" in text
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen))


async def test_command_palette_lists_the_actions(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {"Submit files", "Cancel selected task", "Failures", "Claim race"} <= titles
        footer_keys = set(app.screen.active_bindings)
        assert {"s", "c", "r", "f", "enter", "slash", "question_mark", "q"} <= footer_keys


# ---------------------------------------------------------------- read-only


async def test_read_only_hides_and_refuses_every_change(seeded: Seeded) -> None:
    app = make_app(seeded, read_only=True, workers=2)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        assert app.workforce is None  # read-only runs no workers
        shown = set(app.screen.active_bindings)
        assert not shown & {"s", "c", "r", "b", "w", "W", "p", "R"}
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert "Submit files" not in titles and "Failures" in titles
        await select(pilot, seeded.id("corrupt-export.md"))
        for key in ("s", "c", "r", "b", "w", "p", "R"):
            await pilot.press(key)
        await pilot.pause()
        refusals = [m for m in notes(app) if m.startswith("read-only")]
        assert len(refusals) == 7
        assert isinstance(app.screen, DashboardScreen)
    assert (await seeded.ledger.reads.get_task(seeded.id("corrupt-export.md"))).status is (
        TaskStatus.FAILED
    )


async def test_actions_never_crash_on_vanished_tasks(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        task = table(app).tasks[seeded.id("queued-memo.md")]
        from tui.screens.actions import retry_task

        assert app.operator is not None
        retry_task(app, app.operator, task.__class__(**{**task.__dict__, "task_id": "0" * 32}))
        await wait_for(pilot, lambda: any("no task" in m for m in notes(app)))
        assert app.is_running


async def test_workers_can_be_added_paused_and_removed(seeded: Seeded) -> None:
    app = make_app(seeded, workers=0)
    workforce = app.workforce
    assert workforce is not None
    workforce.set_paused(True)  # no parsing in this test: claims are not wanted
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        await pilot.press("w", "w")
        assert [w.state for w in workforce.local_workers()] == ["paused", "paused"]
        await pilot.press("p")
        assert not workforce.paused
        await pilot.press("p")
        assert workforce.paused
        await pilot.press("W")
        await wait_for(pilot, lambda: len(workforce.local_workers()) == 1)
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running)


async def test_poll_errors_are_reported_not_raised(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        original = seeded.ledger.reads.tasks_since

        async def broken(*args: Any, **kwargs: Any) -> Any:
            raise OSError("disk went away")

        seeded.ledger.reads.tasks_since = broken  # type: ignore[method-assign]
        await wait_for(pilot, lambda: any("disk went away" in m for m in notes(app)))
        seeded.ledger.reads.tasks_since = original  # type: ignore[method-assign]
        new = await submit(seeded, "after-recovery.md")
        await wait_for(pilot, lambda: new.task_id in table(app).tasks)
        assert app.is_running


async def test_failures_screen_follows_new_failures(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        screen = await open_failures(pilot)
        await wait_for(pilot, lambda: len(screen.groups) == 2)
        claim = await seeded.ledger.queue.claim(seeded.id("queued-memo.md"), "w4")
        assert claim is not None
        await seeded.ledger.queue.fail(claim, ErrorCode.INTERNAL_ERROR, "KeyError")
        await wait_for(pilot, lambda: "internal_error|download" in screen.groups)


async def test_a_short_window_is_refilled(seeded: Seeded) -> None:
    app = make_app(seeded, window_rows=2)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        await pilot.press("4")
        await wait_for(pilot, lambda: len(table(app).tasks) == 2, what="a full window")
        newest_failed = {seeded.id("vendor-contract.md"), seeded.id("corrupt-export.md")}
        assert set(table(app).tasks) == newest_failed
        await seeded.ledger.operator.retry(seeded.id("vendor-contract.md"), actor="tester")
        # The retried task leaves the window; the next newest failed task fills it.
        await wait_for(
            pilot,
            lambda: (
                set(table(app).tasks)
                == {seeded.id("corrupt-export.md"), seeded.id("scanned-receipt.md")}
            ),
            what="the window to refill",
        )


async def test_o_sorts_by_the_next_column_and_keeps_the_cursor(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=len(seeded.tasks))
        await select(pilot, seeded.id("annual-report.md"))
        await pilot.press("o")
        tasks = table(app)
        assert tasks.sort_column == "id"
        order = [tasks.task_id_at(n) for n in range(tasks.row_count)]
        assert order == sorted(order)
        assert tasks.selected is not None
        assert tasks.selected.task_id == seeded.id("annual-report.md")


async def test_mouse_sorts_by_a_header_and_opens_a_clicked_row(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=len(seeded.tasks))
        tasks = table(app)
        # Offsets are within the table's border: the header is its first line, and
        # the Status column starts after ID (8 + 2) and Document (19 + 2).
        await pilot.click(TaskTable, offset=(34, 1))
        assert tasks.sort_column == "status"
        statuses = [tasks.tasks[tasks.task_id_at(n)].status for n in range(tasks.row_count)]
        assert statuses == sorted(statuses, key=list(TaskStatus).index)
        third = tasks.task_id_at(2)
        await pilot.click(TaskTable, offset=(5, 4))
        assert tasks.selected is not None and tasks.selected.task_id == third
        assert not isinstance(app.screen, TaskDetailScreen)  # a first click only selects
        await pilot.click(TaskTable, offset=(5, 4))
        await wait_for(pilot, lambda: isinstance(app.screen, TaskDetailScreen))
        assert isinstance(app.screen, TaskDetailScreen) and app.screen.task_id == third


async def test_paging_keys_move_the_cursor_and_keep_it_in_view(empty: Seeded) -> None:
    for n in range(120):
        await submit(empty, f"note-{n:03}.md")
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=120)
        tasks = table(app)
        tasks.focus()
        page = tasks.scrollable_content_region.height - 1  # rows below the header

        def cursor_in_view() -> bool:
            top = round(tasks.scroll_y)
            return top <= tasks.cursor_row < top + page

        # The table scrolls to the cursor after its next refresh, which a loaded
        # machine may run after the key's press returns: wait for it.
        await pilot.press("pagedown")
        await wait_for(pilot, lambda: tasks.scroll_y > 0 and cursor_in_view())
        assert tasks.cursor_row == page
        await pilot.press("end")
        await wait_for(pilot, lambda: tasks.cursor_row == 119 and cursor_in_view())
        assert tasks.selected is not None
        assert tasks.selected.task_id == empty.id("note-000.md")  # the oldest, last
        await pilot.press("up", "pageup")
        await wait_for(pilot, lambda: tasks.cursor_row == 118 - page and cursor_in_view())
        await pilot.press("home")
        await wait_for(pilot, lambda: tasks.cursor_row == 0 and tasks.scroll_y == 0)
        await pilot.press("up")  # nothing above the top row
        assert tasks.cursor_row == 0


async def test_a_slow_filter_read_says_so_in_the_title_until_its_rows_come(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A filter matching little of a million tasks can read for a second: the old rows
    # stayed under the old title meanwhile, as if they were its answer.
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=len(seeded.tasks))
        reads = app.desk.reads
        gate = asyncio.Event()
        real = reads.list_tasks

        async def held(*args: Any, **kwargs: Any) -> Any:
            await gate.wait()  # the read, held until the test has seen the title
            return await real(*args, **kwargs)

        monkeypatch.setattr(reads, "list_tasks", held)
        await pilot.press("slash")
        bar = dashboard(app).query_one(FilterBar)
        bar.value = "code:parse_error !name:vendor"
        await pilot.press("enter")
        rows = table(app)
        await wait_for(
            pilot,
            lambda: (
                str(rows.border_title)
                == "Tasks — code:parse_error !name:vendor · reading the ledger…"
            ),
            what="the reading sign",
        )
        gate.set()
        await wait_for(pilot, lambda: set(rows.tasks) == {seeded.id("corrupt-export.md")})
        await wait_for(
            pilot, lambda: str(rows.border_title) == "Tasks — code:parse_error !name:vendor"
        )
