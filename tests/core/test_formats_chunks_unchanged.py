"""XLSX, PPTX and CSV read to the very same chunks as before their readers were made
cheaper (issue 20): every chunk's text, offsets and location (sheet and rows, slide,
notes), the page count, the warning count and the progress reports, against digests
the previous readers produced (``chunks-before.json`` beside the test files), for the
real files here and those of the shared corpus when it is present.

And the sheet reader against openpyxl's own ``iter_rows`` (what the previous reader
used) on workbooks that stress it: rows missing, out of order, a declared dimension
far wider than the cells, cells out of order in a row.

Regenerate the digests only from a reader known to be right:
``python -m tests.core.test_formats_chunks_unchanged > tests/core/data/formats/chunks-before.json``.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import warnings
import zipfile
from pathlib import Path

import pytest

from core.ingest.parse_progress import reporting
from core.ingest.parsing import ParsedDocument, ParseRequest, run_parse
from core.ingest.sniffing import sniff_kind
from core.states import DocumentKind

DATA = Path(__file__).parent / "data" / "formats"
SHARED_CORPUS = Path("/work/shared/corpora/formats")
BEFORE = DATA / "chunks-before.json"
SUFFIXES = (".xlsx", ".xlsm", ".pptx", ".csv")


def sources() -> list[Path]:
    paths = [p for p in sorted(DATA.iterdir()) if p.suffix.lower() in SUFFIXES]
    if SHARED_CORPUS.is_dir():
        paths += [p for p in sorted(SHARED_CORPUS.iterdir()) if p.suffix.lower() in SUFFIXES]
    return paths


def key(path: Path) -> str:
    return f"{'corpus' if path.parent == SHARED_CORPUS else 'data'}/{path.name}"


def digest(path: Path) -> dict[str, object]:
    """What a parse of ``path`` gave: chunk digests, pages, warnings, progress, or
    the failure."""
    data = path.read_bytes()
    kind = sniff_kind(data, path.name) or DocumentKind.XLSX  # an encrypted workbook: OLE2
    progress: list[list[int]] = []
    with reporting(lambda done, total: progress.append([done, total])):
        outcome, _, count = run_parse(data, ParseRequest(kind))
    if not isinstance(outcome, ParsedDocument):
        return {"failure": [str(outcome.code), outcome.reason], "progress": progress}
    chunks = [
        hashlib.sha256(
            json.dumps(
                [c.ordinal, c.text, c.page, c.char_start, c.char_end, c.stored_location],
                ensure_ascii=False,
            ).encode()
        ).hexdigest()[:16]
        for c in outcome.chunks
    ]
    return {"pages": outcome.pages, "warnings": count, "progress": progress, "chunks": chunks}


@pytest.mark.parametrize("path", sources(), ids=key)
def test_a_file_reads_to_the_same_chunks_as_before(path: Path) -> None:
    before = json.loads(BEFORE.read_text(encoding="utf-8"))
    assert key(path) in before, f"no digest of {key(path)}: regenerate (see the docstring)"
    assert digest(path) == before[key(path)]


# --- the sheet reader against openpyxl's iter_rows --------------------------------------


def reference_rows(data: bytes) -> list[tuple[str, list[tuple[int, tuple[object, ...]]]]]:
    """What the previous reader read: each sheet's ``iter_rows(values_only=True)``
    after ``reset_dimensions()``, every row numbered."""
    import openpyxl

    book = openpyxl.load_workbook(
        io.BytesIO(data), read_only=True, data_only=True, keep_links=False
    )
    try:
        out = []
        for sheet in book.worksheets:
            sheet.reset_dimensions()
            rows = list(enumerate(sheet.iter_rows(values_only=True), start=1))
            out.append((sheet.title, rows))
        return out
    finally:
        book.close()


def expected_tables(data: bytes) -> tuple[list[tuple[str, list[tuple[int, list[str]]]]], int]:
    """The non-empty rows as the previous reader rendered them, and the rows it counted."""
    from core.ingest.formats.xlsx import cell_text

    tables, counted = [], 0
    for title, rows in reference_rows(data):
        kept = []
        for number, values in rows:
            counted += 1
            cells = [cell_text(v) for v in values]
            while cells and not cells[-1].strip():
                cells.pop()
            if cells:
                kept.append((number, cells))
        tables.append((title, kept))
    return tables, counted


def read_tables(data: bytes) -> tuple[list[tuple[str, list[tuple[int, list[str]]]]], int]:
    from core.ingest.formats.xlsx import _open_book, _sheet_rows
    from core.ingest.limits import TableBudget

    budget = TableBudget("XLSX")
    book = _open_book(io.BytesIO(data))
    try:
        tables = [(s.title, list(_sheet_rows(book, s, budget))) for s in book.worksheets]
    finally:
        book.close()
    return tables, budget.rows


def workbook_with_sheet_xml(sheet_data: str, dimension: str | None) -> bytes:
    """A real openpyxl workbook whose first sheet's XML is replaced by ``sheet_data``
    rows (inline strings and numbers), with ``dimension`` declared if given."""
    import openpyxl

    book = openpyxl.Workbook()
    book.active.title = "Crafted"
    book.create_sheet("Second")["B3"] = 2.0
    buffer = io.BytesIO()
    book.save(buffer)
    ns = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    dim = f'<dimension ref="{dimension}"/>' if dimension else ""
    xml = f'<worksheet xmlns="{ns}">{dim}<sheetData>{sheet_data}</sheetData></worksheet>'
    out = io.BytesIO()
    with zipfile.ZipFile(buffer) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            part = src.read(item.filename)
            if item.filename == "xl/worksheets/sheet1.xml":
                part = xml.encode()
            dst.writestr(item, part)
    return out.getvalue()


def text(ref: str, value: str) -> str:
    return f'<c r="{ref}" t="inlineStr"><is><t>{value}</t></is></c>'


def number(ref: str, value: str) -> str:
    return f'<c r="{ref}"><v>{value}</v></c>'


CRAFTED = {
    "rows missing": (
        f'<row r="2">{text("A2", "name")}{text("B2", "size")}</row>'
        f'<row r="5">{text("A5", "ant")}{number("B5", "3.0")}</row>'
        f'<row r="9">{number("C9", "1.5")}</row>',
        None,
    ),
    "rows out of order": (
        f'<row r="3">{text("A3", "third")}</row><row r="1">{text("A1", "first")}</row>'
        f'<row r="4">{text("A4", "fourth")}</row><row r="4">{text("A4", "again")}</row>',
        "A1:A4",
    ),
    "declared far wider": (
        f'<row r="1">{text("A1", "h")}</row><row r="2">{number("A2", "7")}</row>',
        "A1:XFD1048576",
    ),
    "cells out of order": (
        f'<row r="1">{text("C1", "c")}{text("A1", "a")}</row>'
        f'<row r="2">{text("B2", "b")}{number("E2", "5")}{text("D2", "d")}</row>',
        None,
    ),
    "rows without numbers": (
        f"<row>{text('A1', 'x')}</row><row></row><row>{text('B3', ' ')}{text('A3', 'y')}</row>",
        None,
    ),
}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_the_sheet_reader_reads_what_iter_rows_gives(name: str) -> None:
    data = workbook_with_sheet_xml(*CRAFTED[name])
    expected, counted = expected_tables(data)
    assert any(rows for _, rows in expected)  # the test reads something
    assert read_tables(data) == (expected, counted)


@pytest.mark.parametrize(
    "path", [p for p in sources() if p.suffix.lower() in (".xlsx", ".xlsm")], ids=key
)
def test_the_sheet_reader_reads_a_real_workbook_as_iter_rows(path: Path) -> None:
    from core.ingest.formats.package import is_encrypted_office, is_strict

    data = path.read_bytes()
    if is_encrypted_office(data):
        pytest.skip("encrypted: openpyxl cannot open it")
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        if is_strict(archive, "XLSX"):
            pytest.skip("Strict Open XML: refused before openpyxl opens it")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # openpyxl's "unknown extension": counted elsewhere
        assert read_tables(data) == expected_tables(data)


if __name__ == "__main__":
    json.dump(
        {key(p): digest(p) for p in sources()}, sys.stdout, ensure_ascii=False, indent=1,
        sort_keys=True,
    )  # fmt: skip
    sys.stdout.write("\n")
