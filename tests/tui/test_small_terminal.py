"""The dashboard in an 80x24 terminal: the task table keeps status, stage, progress
and error code on screen, the side panel folds away (``i`` swaps it in), and a
resize switches between the layouts both ways. At the common widths (80, 100, 120,
160) the footer shows each key whole or not at all, the counts' names are whole, and
from 120 columns the side panel sits beside the table."""

from __future__ import annotations

import pytest
from textual.binding import Binding

from tests.tui.conftest import APP_SIZE, Seeded, wait_for
from tests.tui.driving import dashboard, make_app, ready, screen_text, table
from tui.app import IngestDeskApp
from tui.screens.dashboard import SIDE_PANEL_FROM, DashboardScreen
from tui.screens.search import SearchScreen
from tui.widgets.task_columns import NARROW, WIDE

SMALL = (80, 24)  # columns, rows


def row_on_screen(shown: str, task_id: str) -> str:
    """The screen line showing the task's row (found by its short id)."""
    return next(line for line in shown.splitlines() if task_id[:8] in line)


async def test_an_80x24_terminal_shows_what_triage_needs(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=SMALL) as pilot:
        await ready(pilot, rows=len(seeded.tasks))
        names = ("annual-report.md", "corrupt-export.md", "provider-outage.md", "huge-scan.md")
        await wait_for(pilot, lambda: drawn(app, seeded, *names), what="the rows drawn")
        shown = screen_text(app)
        running = row_on_screen(shown, seeded.id("annual-report.md"))
        assert "running" in running and "embedding" in running and "40/120" in running
        failed = row_on_screen(shown, seeded.id("corrupt-export.md"))
        assert "failed" in failed and "parse" in failed and "0/4" in failed
        assert "parse_error" in failed
        waiting = row_on_screen(shown, seeded.id("provider-outage.md"))
        assert "retry_wait" in waiting and "3/12" in waiting
        assert "provider_unavailable" in waiting  # the longest code, whole
        stalled = row_on_screen(shown, seeded.id("huge-scan.md"))
        assert "stalled" in stalled and "2/60" in stalled
        # Every status count is on screen, name and number.
        for label in ("0 all", "3 retry_wait", "5 succeeded", "6 cancelled"):
            assert label in shown
        tasks = table(app)
        assert tasks.column_layout is NARROW
        # Every column fits: nothing is scrolled out of view to the right.
        assert tasks.virtual_size.width <= tasks.scrollable_content_region.width


async def test_the_side_panel_folds_away_and_i_swaps_it_in(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=SMALL) as pilot:
        await ready(pilot, rows=len(seeded.tasks))
        screen = dashboard(app)
        side, left = screen.query_one("#side"), screen.query_one("#left")
        assert screen.has_class("-narrow")
        assert not side.display and left.display
        assert "i" in screen.active_bindings
        await wait_for(pilot, lambda: "i Panel" in screen_text(app), what="the i key")
        await pilot.press("i")
        await wait_for(pilot, lambda: side.display and not left.display, what="the panel")
        # The running-now panel, once drawn.
        await wait_for(pilot, lambda: "annual-report.md" in screen_text(app), what="its rows")
        await pilot.press("i")
        await wait_for(pilot, lambda: not side.display and left.display, what="the table")
        assert table(app).has_focus


async def test_a_resize_switches_the_layout_both_ways(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=len(seeded.tasks))
        screen = dashboard(app)
        tasks = table(app)
        assert tasks.column_layout is WIDE and screen.query_one("#side").display
        assert "i" not in screen.active_bindings  # a wide screen shows both
        cursor_task = tasks.selected
        await pilot.resize_terminal(*SMALL)
        await wait_for(pilot, lambda: tasks.column_layout is NARROW, what="the narrow layout")
        assert not screen.query_one("#side").display
        assert "worker" not in tasks.column_layout.keys
        assert tasks.selected == cursor_task  # the cursor stays on its task
        # The footer follows the breakpoint (once it is drawn).
        await wait_for(pilot, lambda: "i Panel" in screen_text(app), what="the narrow footer")
        await pilot.resize_terminal(*APP_SIZE)
        await wait_for(pilot, lambda: tasks.column_layout is WIDE, what="the wide layout")
        assert screen.query_one("#side").display
        assert str(tasks.cell(seeded.id("annual-report.md"), "progress")).endswith("40/120")


async def test_at_the_breakpoint_every_column_of_the_narrow_layout_fits(seeded: Seeded) -> None:
    for width in (SIDE_PANEL_FROM - 1, SIDE_PANEL_FROM):
        app = make_app(seeded)
        async with app.run_test(size=(width, 30)) as pilot:
            await ready(pilot, rows=len(seeded.tasks))
            await wait_for(
                pilot,
                lambda app=app: drawn(app, seeded, "annual-report.md"),
                what="the table drawn",
            )
            tasks = table(app)
            side = dashboard(app).query_one("#side").display
            assert side is (width >= SIDE_PANEL_FROM)
            # Whichever layout is drawn fits without scrolling to the error column.
            assert tasks.column_layout.end_of("error") <= tasks.scrollable_content_region.width


async def test_an_80_column_dashboard_footer_shows_search(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=SMALL) as pilot:
        await ready(pilot, rows=len(seeded.tasks))
        await wait_for(pilot, lambda: "^f Search" in footer_line(app), what="the footer")
        footer = footer_line(app)
        assert "^f Search" in footer and "v Review" in footer and "i Panel" in footer
        await pilot.press("ctrl+f")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen), what="search")


async def test_a_wide_dashboard_shows_search_indexes_and_the_palette_hint(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=(160, 50)) as pilot:
        await ready(pilot, rows=len(seeded.tasks))
        await wait_for(pilot, lambda: "palette" in footer_line(app), what="the footer")
        footer = footer_line(app)
        assert footer.rstrip().endswith("^p palette")
        assert "^f Search" in footer and "I Indexes" in footer
        # The race comes last among the app's keys: the first a full footer leaves out.
        assert "R Race" not in footer
        # Narrow and back: the footer follows the width.
        await pilot.resize_terminal(*SMALL)
        # Waits for the narrow footer itself: a line without "palette" may be one not
        # drawn yet (blank, on a loaded machine).
        await wait_for(
            pilot,
            lambda: "^f Search" in footer_line(app) and "palette" not in footer_line(app),
            what=lambda: f"the narrow footer, not {footer_line(app)!r}",
        )
        assert isinstance(app.screen, DashboardScreen) and app.screen.has_class("-narrow")
        await pilot.resize_terminal(160, 50)
        await wait_for(pilot, lambda: "palette" in footer_line(app), what="the wide footer")
        assert screen_text(app).splitlines()[-1].rstrip().endswith("^p palette")
        await pilot.press("ctrl+f")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen), what="search")


COMMON_WIDTHS = (80, 100, 120, 160)  # columns


def drawn(app: IngestDeskApp, seeded: Seeded, *names: str) -> bool:
    """Whether the screen shows the named tasks' rows and the status counts: what a
    test reads from the screen is there, not a frame still being drawn."""
    shown = screen_text(app)
    return "5 succeeded" in shown and all(seeded.id(name)[:8] in shown for name in names)


def footer_line(app: IngestDeskApp) -> str:
    return screen_text(app).splitlines()[-1]


def footer_labels(app: IngestDeskApp) -> set[str]:
    """Every "key description" the dashboard's footer could show."""
    bindings = Binding.make_bindings([*IngestDeskApp.BINDINGS, *DashboardScreen.BINDINGS])
    labels = {f"{app.get_key_display(b)} {b.description}" for b in bindings}
    return labels | {"⏎ Open", "▏^p palette", "^p palette", "o Sort"}


@pytest.mark.parametrize("read_only", [False, True])
async def test_at_common_widths_the_footer_shows_keys_whole(
    seeded: Seeded, read_only: bool
) -> None:
    for width in COMMON_WIDTHS:
        app = make_app(seeded, read_only=read_only)
        async with app.run_test(size=(width, 30)) as pilot:
            await ready(pilot, rows=len(seeded.tasks))
            labels = footer_labels(app)

            def footer(app: IngestDeskApp = app) -> str:
                return screen_text(app).splitlines()[-1]

            await wait_for(pilot, lambda: "Open" in footer(), what="the footer")
            shown = [item.strip() for item in footer().split("  ") if item.strip()]
            cut = [item for item in shown if item not in labels]
            assert not cut, (width, footer())
            assert "? Help" in shown or width < 120, (width, footer())


async def test_from_120_columns_the_side_panel_is_beside_the_table(seeded: Seeded) -> None:
    assert SIDE_PANEL_FROM == 120  # what the README says
    for width in COMMON_WIDTHS:
        app = make_app(seeded)
        async with app.run_test(size=(width, 30)) as pilot:
            await ready(pilot, rows=len(seeded.tasks))
            screen = dashboard(app)
            await wait_for(
                pilot, lambda app=app: "5 succeeded" in screen_text(app), what="the counts' names"
            )
            assert screen.query_one("#side").display is (width >= 120), width
            shown = screen_text(app)
            # The counts' names whole, as boxes' titles or as plain lines.
            for label in ("0 all", "1 queued", "2 running", "3 retry_wait", "5 succeeded"):
                assert label in shown, (width, label)
