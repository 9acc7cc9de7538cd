"""What an operator reads on a large ledger (a bulk-built one, as bench.million makes):
counts wider than their boxes, and failures spread over months."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from textual.widgets import DataTable, Digits

from bench.million import build
from core import Ledger, Settings, sqlite_url
from tests.tui.conftest import APP_SIZE, wait_for
from tests.tui.driving import dashboard, open_failures
from tui.app import IngestDeskApp
from tui.widgets.counts import StatusCount, count_in, digits_width

TASKS = 1_000  # "1000" in big digits is 12 cells: wider than the "all" box (8 inside)
POLL_S = 0.1  # seconds


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
