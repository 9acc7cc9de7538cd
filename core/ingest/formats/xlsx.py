"""Spreadsheets (XLSX, XLSM, templates) with openpyxl in read-only mode: each sheet a
table, its first non-empty row the header, rows numbered as the sheet numbers them.

Read-only mode streams a sheet's XML row by row, so a sheet of a million rows costs
rows up to the table limit (:data:`core.ingest.limits.MAX_TABLE_ROWS`), not memory for
the whole. Cached values are read (``data_only``): formulas are not evaluated, macros
in an XLSM never run, external links are not followed (``keep_links=False``), and
openpyxl parses through defusedxml when it is installed (it is a dependency here), so
entity declarations are refused. A formula saved without a value (by a program that
does not calculate) reads empty, and the parse warns how many there are.

Rows are read with openpyxl's own sheet parser but not through ``iter_rows``: each
sheet's XML is parsed once (no dimension pre-scan, see :func:`_open_book`) and no
padded tuple of values is built per row only to be turned into strings again. This
leans on openpyxl 3.1's reader internals; tests/core/test_formats_chunks_unchanged.py
holds the rows to what ``iter_rows`` gives.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO

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
    return parse_package(data, WHAT, functools.partial(_extract, warnings=warnings))


class _Uncalculated:
    """Formula cells saved without a value: a workbook written by a program that
    does not calculate (openpyxl, many exporters) leaves them for Excel to compute.
    They read as empty, so the parse says how many and where the first one is."""

    def __init__(self) -> None:
        self.count = 0
        self.first = ""

    def warn(self, warnings: WarningCollector) -> None:
        if self.count:
            warnings.add(
                f"{WHAT} has {self.count} formula cell(s) saved without a value "
                f"(first: {self.first}), read as empty: open and save the workbook "
                "in Excel or LibreOffice to store their values"
            )


def _extract(data: bytes, *, warnings: WarningCollector) -> Extracted:
    from io import BytesIO

    book = _open_book(BytesIO(data))
    out = Extracted()
    budget = TableBudget(WHAT)
    uncalculated = _Uncalculated()
    try:
        sheets = book.worksheets
        for sheet in sheets:
            out.units += 1
            header: list[str] | None = None
            rows: list[tuple[int, list[str]]] = []
            for number, cells in _sheet_rows(book, sheet, budget, uncalculated):
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
    uncalculated.warn(warnings)
    return out


def _open_book(source: BinaryIO) -> Any:
    """The workbook as ``openpyxl.load_workbook(read_only=True, data_only=True,
    keep_links=False)`` opens it, without the pass over each sheet's XML that looks for
    its declared dimension: the dimension is not trusted (it can claim 16384 columns
    for one cell), and a sheet without one is read through to its end to find none."""
    reader = _reader_class()(source, read_only=True, data_only=True, keep_links=False)
    reader.read()
    return reader.wb


@functools.cache
def _reader_class() -> type:
    from openpyxl.reader.excel import ExcelReader
    from openpyxl.worksheet._read_only import ReadOnlyWorksheet

    class UnsizedSheet(ReadOnlyWorksheet):  # type: ignore[misc]  # openpyxl is untyped
        def _get_size(self) -> None:
            pass  # left unsized, as reset_dimensions() would leave it

    class Reader(ExcelReader):  # type: ignore[misc]
        def read_worksheets(self) -> None:
            # openpyxl 3.1's read-only branch of this method, with the unsized sheet.
            for sheet, rel in self.parser.find_sheets():
                if rel.target not in self.valid_files:
                    continue
                if "chartsheet" in rel.Type:
                    self.read_chartsheet(sheet, rel)
                    continue
                ws = UnsizedSheet(self.wb, sheet.name, rel.target, self.shared_strings)
                ws.sheet_state = sheet.state
                self.wb._sheets.append(ws)

    return Reader


@functools.cache
def _sheet_parser_class() -> type:
    from openpyxl.worksheet._reader import FORMULA_TAG, WorkSheetParser

    class SheetParser(WorkSheetParser):  # type: ignore[misc]  # openpyxl is untyped
        uncalculated: _Uncalculated
        sheet_title: str

        def parse_cell(self, element: Any) -> dict[str, Any]:
            cell: dict[str, Any] = super().parse_cell(element)
            # data_only hides the formula. A formula whose result is "" is typed
            # t="str" with an empty <v>; one never calculated has none or an empty
            # one (openpyxl writes <v></v>) under another type.
            if (
                cell["value"] is None
                and element.get("t") != "str"
                and element.find(FORMULA_TAG) is not None
            ):
                found = self.uncalculated
                found.count += 1
                if not found.first:
                    found.first = f"{self.sheet_title}!{element.get('r') or '?'}"
            return cell

    return SheetParser


def _sheet_rows(
    book: Any, sheet: Any, budget: TableBudget, uncalculated: _Uncalculated | None = None
) -> Iterator[tuple[int, list[str]]]:
    """A sheet's non-empty rows as ``(row number, cell texts)``, trailing blank cells
    dropped: the rows ``iter_rows(values_only=True)`` gives an unsized read-only sheet,
    every row it gives (gaps' empty rows too) counted against ``budget``.

    Read with openpyxl's own sheet parser (shared strings, dates, cached formula
    values, its warnings), without the padded tuple of values per row that
    ``iter_rows`` builds and this would turn into strings again."""
    with book._archive.open(sheet._worksheet_path) as source:
        parser = _sheet_parser_class()(
            source,
            sheet._shared_strings,
            data_only=book.data_only,
            epoch=book.epoch,
            date_formats=book._date_formats,
            timedelta_formats=book._timedelta_formats,
        )
        parser.uncalculated = uncalculated or _Uncalculated()
        parser.sheet_title = sheet.title
        expected = 1  # the row iter_rows would give next
        for number, parsed in parser.parse():
            while expected < number:  # rows missing from the XML read as empty
                budget.take(0)
                expected += 1
            if expected > number:
                continue  # out of order: iter_rows skips it
            expected += 1
            if not parsed:
                budget.take(0)
                continue
            width = parsed[-1]["column"]
            values: list[object] = [None] * width
            for cell in parsed:
                column = cell["column"]
                if 1 <= column <= width:
                    values[column - 1] = cell["value"]
            budget.take(width)
            # Most cells are text already: only the others go through cell_text.
            cells = [v if type(v) is str else cell_text(v) for v in values]
            while cells and not cells[-1].strip():
                cells.pop()
            if cells:
                yield number, cells


FORMAT = Format(
    kind=DocumentKind.XLSX,
    name="Excel workbook (XLSX, XLSM)",
    recognised_by="zip whose [Content_Types].xml names a spreadsheetml main part",
    needs=("openpyxl", "defusedxml"),
    parse=parse,
)
