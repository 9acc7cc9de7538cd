"""Slide decks (PPTX, PPTM, PPSX) with python-pptx: each slide's text frames and
tables, then its speaker notes, marked as notes. Macros are never run.

Shapes grouped in groups are walked to ``MAX_GROUP_DEPTH`` levels; libxml2 under
python-pptx resolves no entities and refuses XML deeper than 256 levels.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from core.ingest.chunker import Location
from core.ingest.formats.base import Extracted, Format, Prose, Table
from core.ingest.formats.package import parse_package
from core.ingest.limits import MAX_GROUP_DEPTH, LimitExceeded, TableBudget
from core.ingest.parse_progress import report_units
from core.states import DocumentKind

if TYPE_CHECKING:
    from core.ingest.formats.base import ParseOptions
    from core.ingest.parser_warnings import WarningCollector

WHAT = "PPTX"


def parse(data: bytes, request: ParseOptions, warnings: WarningCollector) -> Extracted:
    return parse_package(data, WHAT, _extract)


def _extract(data: bytes) -> Extracted:
    from io import BytesIO

    import pptx

    deck = pptx.Presentation(BytesIO(data))
    out = Extracted()
    budget = TableBudget(WHAT)
    slides = deck.slides
    for number, slide in enumerate(slides, start=1):
        out.units = number
        where = Location(slide=number)
        lines: list[str] = []
        for shape in _shapes(slide.shapes, 0):
            if getattr(shape, "has_table", False):
                rows = []
                for row in shape.table.rows:
                    cells = [cell.text for cell in row.cells]
                    budget.take(len(cells))
                    rows.append(cells)
                if rows:
                    out.blocks.append(Table(rows[0], list(enumerate(rows[1:], start=1)), where))
            elif getattr(shape, "has_text_frame", False):
                # A frame's text is joined from its runs' XML on every access: once.
                text = shape.text_frame.text
                if text.strip():
                    lines.append(text)
        if lines:
            out.blocks.append(Prose("\n".join(lines), where))
        if slide.has_notes_slide:
            frame = slide.notes_slide.notes_text_frame
            notes = "" if frame is None else frame.text
            if notes.strip():
                out.blocks.append(Prose(notes, Location(slide=number, notes=True)))
        report_units(number, len(slides))
    return out


def _shapes(shapes: Iterable[Any], depth: int) -> Iterable[Any]:
    if depth > MAX_GROUP_DEPTH:
        raise LimitExceeded(f"{WHAT} groups shapes over {MAX_GROUP_DEPTH} levels deep")
    for shape in shapes:
        if hasattr(shape, "shapes"):  # a group shape
            yield from _shapes(shape.shapes, depth + 1)
        else:
            yield shape


FORMAT = Format(
    kind=DocumentKind.PPTX,
    name="PowerPoint deck (PPTX, PPTM, PPSX)",
    recognised_by="zip whose [Content_Types].xml names a presentationml main part",
    needs=("python-pptx",),
    parse=parse,
)
