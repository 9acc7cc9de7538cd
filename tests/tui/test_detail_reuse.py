"""The task detail says what identifies a task's result and where a reused one came
from (the never-twice work is visible, not only recorded)."""

from __future__ import annotations

import json

from sqlalchemy import text

from tests.tui.conftest import APP_SIZE, Seeded, wait_for
from tests.tui.driving import make_app, ready, screen_text, select
from tui.screens.task_detail import TaskDetailScreen


async def test_detail_shows_the_processing_key_and_a_reused_result(seeded: Seeded) -> None:
    task_id = seeded.id("board-minutes.md")
    source = seeded.id("scanned-receipt.md")
    options = {"parser": "text", "processing_key": "ab" * 32, "reused_from": source}
    await seeded.ledger.transactions.write(
        lambda conn: conn.execute(
            text("UPDATE ingestion_tasks SET options = :o WHERE id = :i"),
            {"o": json.dumps(options), "i": task_id},
        )
    )
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot)
        await select(pilot, task_id)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, TaskDetailScreen))
        await wait_for(pilot, lambda: "processing key" in screen_text(app), what="the key")
        shown = screen_text(app)
        assert "ab" * 32 in shown
        assert f"reused from task {source}" in shown
        assert "parser=text" in shown
