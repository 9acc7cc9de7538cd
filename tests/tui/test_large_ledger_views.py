"""What an operator reads on a large ledger (a bulk-built one, as bench.million makes):
counts wider than their boxes, and failures spread over months."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from textual.widgets import DataTable, Digits

from bench.million import build
from core import ErrorCode, Ledger, Settings, Stage, sqlite_url
from tests.tui.conftest import APP_SIZE, wait_for
from tests.tui.driving import dashboard, notes, open_failures, table
from tui.app import IngestDeskApp
from tui.screens import dashboard as dashboard_module
from tui.screens import failures as failures_module
from tui.widgets.counts import StatusCount, count_in, digits_width

TASKS = 1_000  # "1000" in big digits is 12 cells: wider than the "all" box (8 inside)
POLL_S = 0.1  # seconds
WINDOW = 50  # rows of the first window in the paging test


def test_a_count_too_wide_for_its_box_is_shortened_down_never_up() -> None:
    assert count_in(1_000_000, 8) == "1.0M"
    assert count_in(29_997, 11) == "29.9k"  # not 30.0k: fewer failures than it says
    assert count_in(999_999, 8) == "999k"
    assert count_in(950_000, 8) == "950k"
    assert count_in(1_234, 12) == "1234"  # fits whole
    assert count_in(12, 0) == "12"  # before the first layout: whole
    # The narrowest box (the "all" box) has 8 cells inside: every count fits it.
    for count in (7, 1_000, 29_997, 1_000_000, 12_345_678_901):
        for cells in (8, 10, 11, 13):
            assert digits_width(count_in(count, cells)) <= cells


def _boxes(app: IngestDeskApp) -> list[StatusCount]:
    return list(dashboard(app).query(StatusCount))


def _all_fit(app: IngestDeskApp, total: int) -> bool:
    boxes = _boxes(app)
    return any(b.status is None and b.count == total for b in boxes) and all(
        digits_width(b.query_one(Digits).value) <= b.content_size.width for b in boxes
    )


async def test_counts_wider_than_their_boxes_show_shortened_whole(tmp_path: Path) -> None:
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "objects")
    await build(settings, TASKS)
    ledger = await Ledger.open(settings)
    try:
        app = IngestDeskApp(ledger, workers=0, poll_interval_s=POLL_S)
        async with app.run_test(size=APP_SIZE) as pilot:
            await wait_for(pilot, lambda: _all_fit(app, TASKS), what="every count to fit")
            every = next(b for b in _boxes(app) if b.status is None)
            # Before, the box showed "100" and a third of the last 0.
            assert every.query_one(Digits).value == "1.0k"
            await pilot.resize_terminal(400, 60)
            await wait_for(pilot, lambda: _all_fit(app, TASKS), what="the counts, wide")
            # The counts' boxes get plain lines below COUNT_BOXES_FROM columns.
            await pilot.resize_terminal(150, 40)
            await wait_for(pilot, lambda: _all_fit(app, TASKS), what="the counts, narrower")
    finally:
        await ledger.close()


async def test_failures_from_another_day_show_their_date(tmp_path: Path) -> None:
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "objects")
    await build(settings, TASKS)  # failures spread over the last 180 days
    ledger = await Ledger.open(settings)
    try:
        app = IngestDeskApp(ledger, workers=0, poll_interval_s=POLL_S)
        async with app.run_test(size=APP_SIZE) as pilot:
            await wait_for(pilot, lambda: app.poller.baseline_taken)
            screen = await open_failures(pilot)
            tasks = screen.query_one("#failure-tasks", DataTable)
            await wait_for(pilot, lambda: tasks.row_count > 1, what="a group's tasks")
            today = datetime.fromtimestamp(app.clock(), UTC).date()
            seen_older = False
            for task_id, task in list(screen.tasks.items()):
                moment = datetime.fromtimestamp(task.updated_at, UTC)
                shown = str(tasks.get_cell(task_id, "updated"))
                if moment.date() == today:
                    assert shown == moment.strftime("%H:%M:%S")
                else:
                    # Before, "09:26:07" for a failure months ago.
                    assert shown == moment.strftime("%d %b %y")
                    seen_older = True
            assert seen_older
    finally:
        await ledger.close()


async def _built(tmp_path: Path) -> Ledger:
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "objects")
    await build(settings, TASKS)
    return await Ledger.open(settings)


async def test_paging_past_the_window_reads_the_next_older_tasks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = await _built(tmp_path)
    try:
        app = IngestDeskApp(ledger, workers=0, poll_interval_s=POLL_S, window_rows=WINDOW)
        async with app.run_test(size=APP_SIZE) as pilot:
            rows = table(app)
            await wait_for(pilot, lambda: rows.row_count == WINDOW, what="the first window")
            newest = [t.task_id for t in await ledger.reads.list_tasks(limit=3 * WINDOW)]
            await pilot.press("end")  # to the window's last row
            await wait_for(pilot, lambda: rows.cursor_row == WINDOW - 1)
            # Before, the table ended here: "newest 50 of 1000", and End did nothing.
            await pilot.press("end")
            await wait_for(pilot, lambda: rows.row_count == 2 * WINDOW, what="a page more")
            assert [rows.task_id_at(n) for n in range(2 * WINDOW)] == newest[: 2 * WINDOW]
            assert rows.cursor_row == WINDOW - 1  # still on the task it was on
            await pilot.press("pagedown", "pagedown", "pagedown", "end")
            await wait_for(pilot, lambda: rows.row_count == 3 * WINDOW, what="a third page")
            assert [rows.task_id_at(n) for n in range(3 * WINDOW)] == newest
            assert "newest 150 of 1000" in str(rows.border_subtitle)
            # At the cap, a notice instead of more rows.
            monkeypatch.setattr(dashboard_module, "WINDOW_MAX_ROWS", 3 * WINDOW)
            await pilot.press("end", "end")
            await wait_for(pilot, lambda: any("at most" in n for n in notes(app)))
            assert rows.row_count == 3 * WINDOW
            # A filter starts again from its newest window.
            await pilot.press("4")
            await wait_for(
                pilot,
                lambda: rows.row_count == 30 and str(rows.border_title).endswith("failed"),
                what="the failed tasks",
            )
            await pilot.press("0")
            await wait_for(pilot, lambda: rows.row_count == WINDOW, what="a fresh window")
    finally:
        await ledger.close()


async def test_a_backfilled_window_keeps_the_cursor_below_the_first_screenful(
    tmp_path: Path,
) -> None:
    ledger = await _built(tmp_path)
    try:
        # 25 rows held, fewer visible: the window reloads in two steps.
        app = IngestDeskApp(ledger, workers=0, poll_interval_s=POLL_S, window_rows=25)
        async with app.run_test(size=(160, 24)) as pilot:
            rows = table(app)
            await pilot.press("4")  # 30 failed tasks: a full window of 25
            await wait_for(
                pilot,
                lambda: str(rows.border_title).endswith("failed") and rows.row_count == 25,
                what="the failed tasks",
            )
            await pilot.press("end")
            await wait_for(pilot, lambda: rows.cursor_row == 24)
            on = rows.task_id_at(24)
            # Below the first screenful even once a row above it has left.
            assert rows.visible_rows + 1 < 23
            # Another operator retries the top task: it leaves, the window is refilled.
            await ledger.operator.retry(rows.task_id_at(0), actor="bob", reason="elsewhere")
            await wait_for(
                pilot,
                lambda: rows.row_count == 25 and rows.task_id_at(23) == on,
                what="the window to be refilled",
            )
            # Before, the first screenful (without the selected task) moved the cursor
            # to its last row, and the rest of the window kept it there.
            assert rows.selected is not None and rows.selected.task_id == on
    finally:
        await ledger.close()


# A group's tasks were read by error code alone (the newest GROUP_TASKS_MAX) and then
# narrowed to the group's stage: a code failing at two stages had the other stage's
# newer tasks fill the page, and its group listed "0 of 3".
async def test_a_group_lists_its_own_stage_when_its_code_fails_at_another_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(failures_module, "GROUP_TASKS_MAX", 5)
    ledger = await _built(tmp_path)
    await ledger.close()
    with sqlite3.connect(tmp_path / "ledger.db") as db:  # the oldest 3 failed later on
        code, stage = db.execute(
            "SELECT error_code, stage FROM ingestion_tasks WHERE status = 'failed' "
            "GROUP BY 1, 2 ORDER BY count(*) DESC LIMIT 1"
        ).fetchone()
        other = next(s.value for s in Stage if s.value not in (stage, "queued"))
        db.execute(
            "UPDATE ingestion_tasks SET stage = ? WHERE id IN (SELECT id FROM ingestion_tasks"
            " WHERE status = 'failed' AND error_code = ? ORDER BY created_at, id LIMIT 3)",
            (other, code),
        )
    ledger = await Ledger.open(
        Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "objects")
    )
    try:
        app = IngestDeskApp(ledger, workers=0, poll_interval_s=POLL_S)
        async with app.run_test(size=APP_SIZE) as pilot:
            await wait_for(pilot, lambda: app.poller.baseline_taken)
            screen = await open_failures(pilot)
            key = failures_module.group_key(ErrorCode(code), Stage(other))
            await wait_for(pilot, lambda: key in screen.groups, what="the group")
            groups = screen.query_one("#failure-groups", DataTable)
            groups.move_cursor(row=groups.get_row_index(key), animate=False)
            await wait_for(
                pilot,
                lambda: screen.current_group == key and len(screen.tasks) == 3,
                what="the group's three tasks",
            )
            assert {t.stage for t in screen.tasks.values()} == {Stage(other)}
    finally:
        await ledger.close()
