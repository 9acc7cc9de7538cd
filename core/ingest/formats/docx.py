"""Word documents (DOCX, DOCM, templates) with python-docx: paragraphs under their
heading path, tables as rows and cells. Macros are never run: only the XML is read.

python-docx parses every part with libxml2 without resolving entities (so nothing
expands and nothing external is fetched) and without "huge tree" (so XML deeper than
256 levels is refused rather than walked).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.ingest.chunker import Location
from core.ingest.formats.base import Block, Extracted, Format, Prose, Table
from core.ingest.formats.package import parse_package
from core.ingest.limits import TableBudget
from core.states import DocumentKind

if TYPE_CHECKING:
    from core.ingest.formats.base import ParseOptions
    from core.ingest.parser_warnings import WarningCollector

WHAT = "DOCX"


def heading_level(style_name: str) -> int | None:
    """The outline level a paragraph style stands for: Title 0, "Heading N" N."""
    if style_name == "Title":
        return 0
    prefix, _, number = style_name.partition(" ")
    if prefix == "Heading" and number.isdigit():
        return int(number)
    return None


class Sections:
    """Collects prose under the current heading path, and tables beside it."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self._path: list[tuple[int, str]] = []
        self._lines: list[str] = []

    @property
    def location(self) -> Location:
        return Location(headings=tuple(title for _, title in self._path))

    def heading(self, level: int, title: str) -> None:
        self.flush()
        while self._path and self._path[-1][0] >= level:
            self._path.pop()
        self._path.append((level, title))
        self._lines.append(title)

    def line(self, text: str) -> None:
        if text.strip():
            self._lines.append(text)

    def table(self, rows: list[list[str]]) -> None:
        rows = [row for row in rows if any(cell.strip() for cell in row)]
        if not rows:
            return
        self.flush()
        numbered = [(number, row) for number, row in enumerate(rows[1:], start=1)]
        self.blocks.append(Table(rows[0], numbered, self.location))

    def flush(self) -> None:
        if self._lines:
            self.blocks.append(Prose("\n".join(self._lines), self.location))
            self._lines = []


def parse(data: bytes, request: ParseOptions, warnings: WarningCollector) -> Extracted:
    return parse_package(data, WHAT, _extract)


def _extract(data: bytes) -> Extracted:
    from io import BytesIO

    import docx
    from docx.table import Table as DocxTable
    from docx.table import _Cell

    document = docx.Document(BytesIO(data))
    # By style id, read once: python-docx's Paragraph.style looks the default style up
    # anew for every paragraph (measured: 20 of 28 s on an 872-page handbook), and
    # Row.cells resolves spans with XPath (6 s more).
    levels = {
        style.style_id: heading_level(style.name or "")
        for style in document.styles
        if style.style_id is not None
    }
    sections = Sections()
    budget = TableBudget(WHAT)
    for item in document.iter_inner_content():
        if isinstance(item, DocxTable):
            rows = []
            for tr in item._tbl.tr_lst:
                cells = [_Cell(tc, item).text for tc in tr.tc_lst]
                budget.take(len(cells))
                rows.append(cells)
            sections.table(rows)
            continue
        text = item.text
        level = levels.get(item._p.style)
        if level is not None and text.strip():
            sections.heading(level, " ".join(text.split()))
        else:
            sections.line(text)
    sections.flush()
    return Extracted(1, sections.blocks)


FORMAT = Format(
    kind=DocumentKind.DOCX,
    name="Word document (DOCX, DOCM)",
    recognised_by="zip whose [Content_Types].xml names a wordprocessingml main part",
    needs=("python-docx",),
    parse=parse,
)
