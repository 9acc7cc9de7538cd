"""The dashboard's search names where a hit is when the page does not say it: a
slide and its notes, a sheet's rows, a heading path."""

from __future__ import annotations

from core.ledger.views import SearchHit, chunk_place
from tui.screens.search import hit_text


def _hit(page: int | None, stored: str | None) -> SearchHit:
    location, place = chunk_place(page, stored)
    return SearchHit(
        "d" * 32, "deck.pptx", 3, page, "text", snippet="**text**", location=location, place=place
    )


def test_a_hit_names_its_slide_notes_or_sheet_rows() -> None:
    notes = hit_text(_hit(None, '{"slide":2,"notes":true}')).plain.splitlines()[0]
    assert notes.startswith("deck.pptx  v1 · slide 2 notes · chunk #3")
    rows = hit_text(_hit(None, '{"sheet":"Q1","rows":[2,41]}')).plain.splitlines()[0]
    assert " · sheet Q1 rows 2-41 · " in rows
    # A PDF page reads as before.
    assert " · page 4 · " in hit_text(_hit(4, None)).plain


def test_the_task_detail_names_a_chunks_slide_sheet_or_part() -> None:
    """The detail screen's chunk preview said "text" for every slide, sheet or header."""
    from core.ledger.views import ChunkView
    from tui.screens.task_detail import chunk_where

    def chunk(page: int | None, stored: str | None) -> ChunkView:
        location, place = chunk_place(page, stored)
        return ChunkView("d" * 32, 0, "text", page, 0, 4, location, place)

    assert chunk_where(chunk(None, '{"slide":2,"notes":true}')) == "slide 2 notes"
    assert chunk_where(chunk(None, '{"sheet":"Q1","rows":[2,41]}')) == "sheet Q1 rows 2-41"
    assert chunk_where(chunk(3, None)) == "page 3"
    assert chunk_where(chunk(None, None)) == "text"
