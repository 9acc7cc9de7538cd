"""The dashboard's DataTable: Textual's, with its header kept in step with its columns.

Textual 8.2's DataTable re-measures its columns when idle after rows are added, but
keeps the lines it rendered before that under the same cache generation. A header
painted between ``add_row`` and that idle pass (a refresh on a busy machine) kept its
columns at their labels' width above rows drawn at their real width, until the next
change to the table.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from textual.widgets import DataTable as TextualDataTable
from textual.widgets.data_table import RowKey


class DataTable(TextualDataTable[Any]):
    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        super()._update_dimensions(new_rows)
        # New widths make every line rendered before them wrong, not only the new rows.
        self._clear_caches()
        self.refresh()
