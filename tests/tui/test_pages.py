"""The page record in the dashboard, through Pilot on a real SQLite ledger: the review
desk marks a flagged version and says why, publishing it asks to accept its pages
(and the ledger records that), the document screen lists the pages with runs
collapsed, and the filter bar's ``ocr:low`` keeps the task table to documents with
low-confidence OCR pages, live. Versions are finished through the ledger's own roles
with given readings (OCR readings come from the parser)."""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from core.ingest.formats.base import PageReading
from core.states import DocumentStatus, PageDecision, TaskStatus
from tests.tui.conftest import APP_SIZE, Seeded, line_chunks, wait_for
from tests.tui.driving import make_app, notes, ready, screen_text, table
from tui.screens.document import DocumentScreen
from tui.screens.modals import ConfirmScreen
from tui.screens.review_desk import FLAG_MARK, ReviewDeskScreen

TEXT, OCR, SKIPPED = PageDecision.TEXT, PageDecision.OCR, PageDecision.SKIPPED
LOW_SCAN = [PageReading(n, OCR, 700, 41.0 if n in (4, 7, 9) else 92.0, 2.0) for n in range(1, 11)]
LONG_TEXT = [PageReading(n, TEXT, 1500) for n in range(1, 481)] + [
    PageReading(481, SKIPPED, 0, None, 0.0, "over the OCR time budget")
]


async def finish_with(seeded: Seeded, name: str, readings: list[PageReading]) -> str:
    """A document uploaded, submitted and finished with ``readings``; its version id."""
    ledger = seeded.ledger
    doc = await ledger.operator.upload(f"%PDF-1.4 {name}\n".encode(), name)
    task = await ledger.operator.submit(doc.document_id, actor="alice")
    seeded.tasks[name] = task.task_id
    claim = await ledger.queue.claim(task.task_id, "w1")
    assert claim is not None
    assert await ledger.queue.finish(claim, line_chunks([f"{name} text"]), readings=readings)
    seeded.clock.advance(30)
    return doc.document_id


async def open_desk(pilot: Pilot[Any]) -> ReviewDeskScreen:
    app = pilot.app
    await ready(pilot, rows=0)
    await pilot.press("v")
    await wait_for(pilot, lambda: isinstance(app.screen, ReviewDeskScreen), what="the desk")
    desk = app.screen
    assert isinstance(desk, ReviewDeskScreen)
    await wait_for(pilot, lambda: desk.pages is not None, what="the first version's pages")
    return desk


async def test_the_desk_flags_a_low_confidence_version_and_publishing_accepts_it(
    empty: Seeded,
) -> None:
    scan = await finish_with(empty, "contract-scan.pdf", LOW_SCAN)
    clean = await finish_with(empty, "clean.pdf", [PageReading(1, TEXT, 900)])
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        desk = await open_desk(pilot)
        queue = desk.query_one("#review-queue", DataTable)
        await wait_for(pilot, lambda: scan in desk._flagged, what="the flag in the queue")
        assert str(queue.get_cell(scan, "name")).startswith(FLAG_MARK + "contract-scan.pdf")
        assert not str(queue.get_cell(clean, "name")).startswith(FLAG_MARK)
        summary = str(desk.query_one("#review-summary", Static).content)
        assert "read: 10 ocr (lowest confidence 41.0)" in summary
        assert "flagged: 3 pages read by OCR at confidence < 60: pages 4, 7, 9" in summary

        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the dialog")
        dialog = app.screen
        assert isinstance(dialog, ConfirmScreen)
        assert dialog.title_text == "Publish this flagged version?"
        assert dialog.confirm_label == "Publish, accepting"
        assert "Flagged for review: 3 pages read by OCR at confidence < 60: pages 4, 7, 9" in (
            dialog.body
        )
        await pilot.press("enter")
        await wait_for(
            pilot, lambda: any(m.startswith("published contract") for m in notes(app)), what="it"
        )
    reads = empty.ledger.reads
    assert (await reads.get_document(scan)).status is DocumentStatus.PUBLISHED
    last = (await reads.document_history(scan))[-1]
    assert (last.action, last.actor) == ("publish", "tester")
    assert last.reason == "accepted as read: 3 pages read by OCR at confidence < 60: pages 4, 7, 9"


async def test_a_version_flagged_after_the_reviewer_looked_is_refused_not_accepted(
    empty: Seeded,
) -> None:
    """The dialog accepts only what it named: a version whose flag the desk never
    showed (its detail not loaded) is refused by the ledger, and the notification says
    why."""
    scan = await finish_with(empty, "scan.pdf", LOW_SCAN)
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        desk = await open_desk(pilot)
        desk.pages = None  # as if the detail had not been read
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the dialog")
        assert app.screen.confirm_label == "Publish"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await wait_for(
            pilot, lambda: any(n.title == "cannot publish" for n in app._notifications), what="no"
        )
    line = next(n.message for n in app._notifications if n.title == "cannot publish")
    assert "flagged for review: 3 pages read by OCR" in line
    assert (await empty.ledger.reads.get_document(scan)).status is DocumentStatus.REVIEW_PENDING


async def test_the_document_screen_lists_pages_with_runs_collapsed(empty: Seeded) -> None:
    doc = await finish_with(empty, "manual.pdf", LONG_TEXT)
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        await open_desk(pilot)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, DocumentScreen), what="document")
        screen = app.screen
        pages = screen.query_one("#document-pages", DataTable)
        await wait_for(pilot, lambda: pages.row_count == 2, what="the pages")
        assert pages.display
        assert [str(c) for c in pages.get_row("1")] == ["1-480", "text", "720000", "", "", ""]
        assert [str(c) for c in pages.get_row("481")][:2] == ["481", "skipped"]
        assert str(pages.get_row("481")[5]) == "over the OCR time budget"
        shown = screen_text(app)
        assert "pages         481: 480 text, 0 ocr, 1 skipped" in shown
        assert "review flag   1 page skipped: page 481" in shown
        assert doc[:8] in shown


async def test_the_ocr_low_filter_keeps_only_flagged_documents_live(empty: Seeded) -> None:
    await finish_with(empty, "low.pdf", LOW_SCAN)
    await finish_with(empty, "clean.pdf", [PageReading(1, OCR, 900, 97.0, 2.0)])
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=2)
        await pilot.press("slash", *"ocr:low", "enter")
        tasks = table(app)
        await wait_for(
            pilot, lambda: set(tasks.tasks) == {empty.id("low.pdf")}, what="the filtered table"
        )
        # A document finished now with a low page joins the table; a clean one does not.
        await finish_with(empty, "later-clean.pdf", [PageReading(1, OCR, 900, 95.0, 2.0)])
        await finish_with(empty, "later-low.pdf", [PageReading(1, OCR, 900, 12.0, 2.0)])
        await wait_for(
            pilot,
            lambda: set(tasks.tasks) == {empty.id("low.pdf"), empty.id("later-low.pdf")},
            what="the new low-confidence task",
        )
        assert all(t.status is TaskStatus.SUCCEEDED for t in tasks.tasks.values())
