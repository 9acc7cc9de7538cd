"""Driving the dashboard in Pilot tests: building the app, finding its parts, waiting
for it, and reading what its terminal shows."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from textual.pilot import Pilot

from tests.tui.conftest import Seeded, wait_for
from tui.app import IngestDeskApp
from tui.screens.dashboard import DashboardScreen
from tui.screens.failures import FailuresScreen
from tui.widgets.task_table import TaskTable

POLL_S = 0.1  # seconds: tests poll the ledger fast


def make_app(seeded: Seeded, **options: Any) -> IngestDeskApp:
    options.setdefault("poll_interval_s", POLL_S)
    options.setdefault("workers", 0)
    app = IngestDeskApp(seeded.ledger, clock=seeded.clock, actor="tester", **options)
    return app


def dashboard(app: IngestDeskApp) -> DashboardScreen:
    screen = app.screen_stack[1]
    assert isinstance(screen, DashboardScreen)
    return screen


def table(app: IngestDeskApp) -> TaskTable:
    return dashboard(app).query_one(TaskTable)


def notes(app: IngestDeskApp) -> list[str]:
    return [n.message for n in app._notifications]


async def ready(pilot: Pilot[Any], rows: int = 1) -> None:
    app = pilot.app
    assert isinstance(app, IngestDeskApp)
    await wait_for(
        pilot,
        lambda: (
            app.poller.baseline_taken
            and len(app.screen_stack) > 1
            and len(table(app).tasks) >= rows
        ),
        what="the dashboard to load",
    )


async def select(pilot: Pilot[Any], task_id: str) -> None:
    app = pilot.app
    assert isinstance(app, IngestDeskApp)
    tasks = table(app)
    await wait_for(pilot, lambda: task_id in tasks.tasks, what=f"row {task_id[:8]}")
    tasks.focus()
    tasks.move_cursor(row=tasks.get_row_index(task_id))
    await pilot.pause()


async def open_failures(pilot: Pilot[Any]) -> FailuresScreen:
    """Press f and return the failures screen once it is shown."""
    await pilot.press("f")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, FailuresScreen))
    screen = pilot.app.screen
    assert isinstance(screen, FailuresScreen)
    return screen


def screen_text(app: IngestDeskApp) -> str:
    """What the app's terminal shows now, as plain text: the current screen with its
    notifications, composed the way ``App.export_screenshot`` composes it."""
    console = Console(
        width=app.size.width,
        height=app.size.height,
        file=io.StringIO(),
        force_terminal=True,
        color_system="truecolor",
        record=True,
        legacy_windows=False,
        safe_box=False,
    )
    console.print(
        app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    )
    return console.export_text(styles=False)
