"""CSV and TSV with the standard library's csv module: the first row is the header,
rows are numbered from 2 as a spreadsheet would show them, the delimiter is sniffed.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from core.ingest.chunker import Location
from core.ingest.formats.base import Extracted, Format, Table
from core.ingest.formats.text import decoded
from core.ingest.limits import MAX_TABLE_COLUMNS, LimitExceeded, TableBudget
from core.states import DocumentKind, ErrorCode

if TYPE_CHECKING:
    from core.ingest.formats.base import ParseOptions
    from core.ingest.parser_warnings import WarningCollector

WHAT = "CSV"
DELIMITERS = ",;\t|"
SNIFF_CHARS = 16 * 1024  # characters csv.Sniffer reads to guess the dialect


def dialect_of(sample: str) -> type[csv.Dialect]:
    """The sample's dialect; the standard comma-separated one when nothing fits."""
    try:
        return csv.Sniffer().sniff(sample, delimiters=DELIMITERS)
    except csv.Error:
        return csv.excel


def parse(data: bytes, request: ParseOptions, warnings: WarningCollector) -> Extracted:
    from core.ingest.failures import ParseFailure

    text = decoded(data, warnings, WHAT).replace("\x00", "")
    # newline="": lines end at \n, \r\n or a lone \r alike (files pasted together
    # from Windows, Unix and old Mac), as the csv module asks its input to be opened.
    dialect = dialect_of(text[:SNIFF_CHARS])
    lines = _narrow_lines(io.StringIO(text, newline=""), dialect)
    reader = csv.reader(lines, dialect)
    budget = TableBudget(WHAT)
    header: list[str] | None = None
    rows: list[tuple[int, list[str]]] = []
    try:
        for number, cells in enumerate(reader, start=1):
            budget.take(len(cells))
            if header is None:
                header = cells
            else:
                rows.append((number, cells))
    except csv.Error as exc:  # a field over csv's size limit, a NUL in a field
        raise ParseFailure(
            ErrorCode.PARSE_ERROR, f"damaged CSV (line {reader.line_num}: {exc})"
        ) from None
    if header is None:
        return Extracted(1, [])
    if not rows:
        return Extracted(1, [Table(None, [(1, header)], Location())])
    return Extracted(1, [Table(header, rows, Location())])


def _narrow_lines(lines: Iterable[str], dialect: type[csv.Dialect]) -> Iterator[str]:
    """The lines, refusing one of more columns than a row may have before the csv
    module splits it: a 90 MB line of ``a,a,a,...`` is 45 million field strings,
    past the parser's memory cap before the table limit could count them. A line
    without quotes has exactly one more field than delimiters; a quoted one is left
    to the row limit (its quotes may hold delimiters)."""
    delimiter, quote = dialect.delimiter, dialect.quotechar or ""
    for line in lines:
        if len(line) > MAX_TABLE_COLUMNS and (not quote or quote not in line):
            fields = line.count(delimiter) + 1
            if fields > MAX_TABLE_COLUMNS:
                raise LimitExceeded(
                    f"{WHAT} has a row of {fields} columns (limit {MAX_TABLE_COLUMNS})"
                )
        yield line


FORMAT = Format(
    kind=DocumentKind.CSV,
    name="CSV / TSV",
    recognised_by=(
        "text named .csv/.tsv, or any text whose first 3+ lines have the same 2+ fields"
    ),
    needs=(),
    parse=parse,
    captures_warnings=False,
)
