"""The dashboard's tables keep their header in step with their columns.

Textual 8.2 re-measures a DataTable's columns when idle after rows arrive but kept a
header painted before that at its labels' width (the detail screen's snapshot caught
it on a loaded machine). Here the early paint is made to happen, not hoped for.
"""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import DataTable as TextualDataTable

from tui.widgets.data_table import DataTable

LONG = "2027-01-15 08:00:35"


class OneTable(App[None]):
    def __init__(self, table: TextualDataTable[object]) -> None:
        super().__init__()
        self.table = table

    def compose(self) -> ComposeResult:
        # A fixed size: no resize to start a new cache generation by luck.
        self.table.styles.height = 6
        self.table.styles.width = 60
        yield self.table


async def header_after_early_paint(table: TextualDataTable[object]) -> str:
    app = OneTable(table)
    async with app.run_test(size=(80, 10)) as pilot:
        table.add_column("Started", key="start")
        table.add_column("Took", key="took")
        await pilot.pause()
        table.add_row(LONG, "0.1s")
        # A paint between add_row and the idle pass that re-measures the columns.
        early = table.render_line(0).text
        await pilot.pause()
        assert table.get_row_at(0) == [LONG, "0.1s"]
        assert "Started  Took" in early  # painted at the labels' width, as a busy refresh does
        return table.render_lines(table.size.region)[0].text


async def test_header_follows_the_columns_measured_after_an_early_paint() -> None:
    header = await header_after_early_paint(DataTable())
    assert header.startswith(f" {'Started':<{len(LONG)}}  Took ")


async def test_textual_alone_keeps_the_stale_header() -> None:
    # When this fails, Textual fixed it upstream and tui/widgets/data_table.py can go.
    header = await header_after_early_paint(TextualDataTable())
    assert "Started  Took" in header
