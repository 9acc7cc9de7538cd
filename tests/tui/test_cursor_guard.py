"""A key meant for a task that just left the list does not act on its neighbour.

A live table drops a row when its task leaves (retried or cancelled elsewhere); the
cursor then stands on the next task. ``r`` pressed in that moment retried the next
failed task, one the operator never looked at (seen in tmux on a 1M ledger). Now the
key is asked again; pressed again, it acts on the task the cursor shows."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import DataTable

from bench.million import build
from core import Ledger, Settings, TaskStatus, sqlite_url
from tests.tui.conftest import APP_SIZE, wait_for
from tests.tui.driving import notes, open_failures, table
from tui.app import IngestDeskApp
from tui.widgets import cursor_guard

TASKS = 1_000  # 30 of them failed (bench.million's mix)
POLL_S = 0.1  # seconds


@pytest.fixture
async def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    # However slow the machine, the key below comes within the settle time.
    monkeypatch.setattr(cursor_guard, "SETTLE_S", 3_600.0)
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "objects")
    await build(settings, TASKS)
    opened = await Ledger.open(settings)
    yield opened
    await opened.close()


async def _status(ledger: Ledger, task_id: str) -> TaskStatus:
    return (await ledger.reads.get_task(task_id)).status


def _moved_notice(app: IngestDeskApp) -> bool:
    return any("left the list just now" in n for n in notes(app))


async def test_r_after_the_selected_task_left_the_table_asks_again(ledger: Ledger) -> None:
    app = IngestDeskApp(ledger, workers=0, poll_interval_s=POLL_S)
    async with app.run_test(size=APP_SIZE) as pilot:
        rows = table(app)
        await pilot.press("4")  # the failed tasks
        await wait_for(
            pilot,
            lambda: str(rows.border_title).endswith("failed") and rows.row_count == 30,
            what="the failed tasks",
        )
        gone, neighbour = rows.task_id_at(0), rows.task_id_at(1)
        assert rows.selected is not None and rows.selected.task_id == gone
        # Another operator retries the selected task: its row leaves.
        await ledger.operator.retry(gone, actor="bob", reason="elsewhere")
        await wait_for(
            pilot,
            lambda: rows.selected is not None and rows.selected.task_id == neighbour,
            what="the cursor on the neighbour",
        )
        await pilot.press("r")
        await wait_for(pilot, lambda: _moved_notice(app), what="the notice")
        assert await _status(ledger, neighbour) is TaskStatus.FAILED  # before: queued
        await pilot.press("r")  # pressed again: meant for the task it shows
        await wait_for(pilot, lambda: any("requeued" in n for n in notes(app)))
        assert await _status(ledger, neighbour) is TaskStatus.QUEUED
        # The operator's own retry taking a row away asks nothing: "r r" goes down
        # the column.
        await wait_for(
            pilot,
            lambda: rows.selected is not None and rows.selected.task_id != neighbour,
            what="the requeued task to leave",
        )
        following = rows.selected.task_id
        await pilot.press("r")
        await wait_for(pilot, lambda: sum("requeued" in n for n in notes(app)) == 2)
        assert await _status(ledger, following) is TaskStatus.QUEUED
        assert sum("left the list just now" in n for n in notes(app)) == 1


async def test_r_in_a_failures_group_keeps_to_its_task_and_asks_after_one_left(
    ledger: Ledger,
) -> None:
    app = IngestDeskApp(ledger, workers=0, poll_interval_s=POLL_S)
    async with app.run_test(size=APP_SIZE) as pilot:
        await wait_for(pilot, lambda: app.poller.baseline_taken)
        screen = await open_failures(pilot)
        tasks = screen.query_one("#failure-tasks", DataTable)
        await wait_for(pilot, lambda: tasks.row_count >= 4, what="a group's tasks")
        tasks.focus()
        tasks.move_cursor(row=2, animate=False)
        ids = [str(tasks.coordinate_to_cell_key((n, 0))[0].value) for n in range(4)]
        # A task above the cursor leaves: the cursor stays on its own task. Before, a
        # reload put it on the top row (or, by row number, on the next task).
        await ledger.operator.retry(ids[0], actor="bob", reason="elsewhere")
        await wait_for(pilot, lambda: ids[0] not in screen.tasks, what="the reload")
        await wait_for(pilot, lambda: tasks.cursor_row == 1)
        selected = screen._selected_task()
        assert selected is not None and selected.task_id == ids[2]
        # The cursor's own task leaves: the cursor stands on the next, and r asks again.
        await ledger.operator.retry(ids[2], actor="bob", reason="elsewhere")
        await wait_for(pilot, lambda: ids[2] not in screen.tasks, what="the second reload")
        await pilot.press("r")
        await wait_for(pilot, lambda: _moved_notice(app), what="the notice")
        assert await _status(ledger, ids[3]) is TaskStatus.FAILED
        await pilot.press("r")
        await wait_for(pilot, lambda: any("requeued" in n for n in notes(app)))
        assert await _status(ledger, ids[3]) is TaskStatus.QUEUED
