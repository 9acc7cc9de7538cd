"""Spreadsheets (XLSX, XLSM, templates) with openpyxl in read-only mode: each sheet a
table, its first non-empty row the header, rows numbered as the sheet numbers them.

Read-only mode streams a sheet's XML row by row, so a sheet of a million rows costs
rows up to the table limit (:data:`core.ingest.limits.MAX_TABLE_ROWS`), not memory for
the whole. Cached values are read (``data_only``): formulas are not evaluated, macros
in an XLSM never run, external links are not followed (``keep_links=False``), and
openpyxl parses through defusedxml when it is installed (it is a dependency here), so
entity declarations are refused.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from core.ingest.chunker import Location
from core.ingest.formats.base import Extracted, Format, Table
from core.ingest.formats.package import parse_package
from core.ingest.limits import TableBudget
from core.ingest.parse_progress import report_units
from core.states import DocumentKind

if TYPE_CHECKING:
    from core.ingest.formats.base import ParseOptions
    from core.ingest.parser_warnings import WarningCollector

WHAT = "XLSX"


def cell_text(value: object) -> str:
    """A cell's value as it reads: whole floats without ``.0``, dates in ISO form."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, datetime.datetime) and value.time() == datetime.time(0):
        return value.date().isoformat()
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return str(value)


def parse(data: bytes, request: ParseOptions, warnings: WarningCollector) -> Extracted:
    return parse_package(data, WHAT, _extract)


def _extract(data: bytes) -> Extracted:
    from io import BytesIO

    import openpyxl

    book = openpyxl.load_workbook(BytesIO(data), read_only=True, data_only=True, keep_links=False)
    out = Extracted()
    budget = TableBudget(WHAT)
    try:
        sheets = book.worksheets
        for sheet in sheets:
            out.units += 1
            # The declared dimension can claim 16384 columns for one cell: forget it,
            # so rows are not padded to it.
            sheet.reset_dimensions()
            header: list[str] | None = None
            rows: list[tuple[int, list[str]]] = []
            for number, values in enumerate(sheet.iter_rows(values_only=True), start=1):
                budget.take(len(values))
                cells = [cell_text(v) for v in values]
                while cells and not cells[-1].strip():
                    cells.pop()
                if not cells:
                    continue
                if header is None:
                    header = cells
                else:
                    rows.append((number, cells))
            if header is not None:
                if not rows:  # a sheet of one row: that row is data, not a header
                    out.blocks.append(Table(None, [(1, header)], Location(sheet=sheet.title)))
                else:
                    out.blocks.append(Table(header, rows, Location(sheet=sheet.title)))
            report_units(out.units, len(sheets))
    finally:
        book.close()
    return out


FORMAT = Format(
    kind=DocumentKind.XLSX,
    name="Excel workbook (XLSX, XLSM)",
    recognised_by="zip whose [Content_Types].xml names a spreadsheetml main part",
    needs=("openpyxl", "defusedxml"),
    parse=parse,
)
