"""One document: which version this is, how each of its pages was read (text layer,
OCR and its confidence, skipped and why; runs of alike pages on one row) and whether
that flags it for review, every version of the document, its history (uploads,
publishes, rejects, retirements, with actor and reason) and, opened from a search
hit, the chunk that matched.

Read-only by design: the decisions on versions are the review desk's. Names, actors,
reasons and chunk text are escaped (:func:`core.visible`) into
:class:`~rich.text.Text`, never markup.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Static

from core import DocumentStatus, DocumentView, NotFound, SearchHit, visible
from core.states import DOCUMENT_MEANING, PageDecision
from tui.desk import Desk, desk_of
from tui.format import HIT_STYLE, failure_line, plain, shorten, snippet_text, when
from tui.widgets.data_table import DataTable
from tui.widgets.footer import WholeKeysFooter

if TYPE_CHECKING:
    from core.ledger.pages import PageSummary, PageView
    from core.ledger.views import DocumentEventView

CHUNK_SHOWN_CHARS = 1200  # characters of the hit's chunk shown
FLAG_STYLE = "bold red"


class DocumentScreen(Screen[None]):
    """A document's versions and history; from a search hit, its chunk too.

    Args:
        document_id: Any of the document's versions' ids (this one is described).
        hit: The search hit this was opened from, if any.
    """

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "back", "Back")]

    def __init__(self, document_id: str, *, hit: SearchHit | None = None) -> None:
        super().__init__()
        self.document_id = document_id
        self.hit = hit

    @property
    def desk(self) -> Desk:
        return desk_of(self)

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="document"):
            yield Static("loading…", id="document-fields")
            if self.hit is not None:
                yield Static("", id="document-chunk")
            yield DataTable(id="document-pages", cursor_type="row", zebra_stripes=True)
            yield DataTable(id="document-versions", cursor_type="row", zebra_stripes=True)
            yield DataTable(id="document-history", cursor_type="row", zebra_stripes=True)
        yield WholeKeysFooter()

    def on_mount(self) -> None:
        pages = self.query_one("#document-pages", DataTable)
        pages.border_title = "Pages"
        pages.display = False  # until the version is known to have pages
        for key, label in (
            ("pages", "Pages"),
            ("decision", "Read by"),
            ("chars", "Chars"),
            ("confidence", "Confidence"),
            ("ocr", "OCR s"),
            ("reason", "Why"),
        ):
            pages.add_column(label, key=key)
        versions = self.query_one("#document-versions", DataTable)
        versions.border_title = "Versions"
        for key, label in (
            ("no", "Ver"),
            ("id", "ID"),
            ("status", "Status"),
            ("updated", "Updated (UTC)"),
            ("row", "Row ver"),
            ("name", "Name"),
        ):
            versions.add_column(label, key=key)
        history = self.query_one("#document-history", DataTable)
        history.border_title = "History"
        for key, label in (
            ("at", "When (UTC)"),
            ("actor", "Actor"),
            ("action", "Action"),
            ("no", "Ver"),
            ("change", "Change"),
            ("reason", "Reason"),
        ):
            history.add_column(label, key=key)
        self.query_one("#document-fields").border_title = plain(
            f"Document version {self.document_id[:8]}"
        )
        if self.hit is not None:
            chunk = self.query_one("#document-chunk", Static)
            page = f", page {self.hit.page}" if self.hit.page is not None else ""
            if set(self.hit.location) - {"page"}:  # a slide, a sheet's rows, headings
                page = f", {plain(self.hit.place)}"
            chunk.border_title = f"The hit: chunk #{self.hit.ordinal}{page}"
            chunk.update(hit_chunk_text(self.hit))
        versions.focus()
        self.load()

    @work(exclusive=True, group="document", exit_on_error=False, description="load a document")
    async def load(self) -> None:
        reads = self.desk.reads
        try:
            try:
                found = await reads.versions(self.document_id)
            except NotFound:
                found = []  # deleted: its history outlives it, and is shown
            history = await reads.document_history(self.document_id)
            this = next((v for v in found if v.document_id == self.document_id), None)
            summary, pages = (None, []) if this is None else await reads.pages(this.document_id)
        except Exception as exc:  # never in the ledger, or unreadable
            self.query_one("#document-fields", Static).update(Text(failure_line(exc)))
            return
        self.query_one("#document-fields", Static).update(fields_table(this, found, summary))
        self._fill_pages(summary, pages)
        self._fill_versions(found)
        self._fill_history(history)

    def _fill_versions(self, found: Sequence[DocumentView]) -> None:
        table = self.query_one("#document-versions", DataTable)
        table.clear()
        for version in found:
            table.add_row(
                f"v{version.version_no}",
                version.document_id[:8],
                Text(version.status.value, style="bold" if self._is_this(version) else ""),
                when(version.updated_at),
                str(version.version),
                Text(shorten(visible(version.filename), 40)),
                key=version.document_id,
            )
        if self.document_id in {v.document_id for v in found}:
            table.move_cursor(row=table.get_row_index(self.document_id), animate=False)

    def _fill_pages(self, summary: PageSummary | None, pages: Sequence[PageView]) -> None:
        from core.ledger.pages import page_runs

        table = self.query_one("#document-pages", DataTable)
        table.clear()
        table.display = bool(pages)
        if summary is None or not pages:
            return
        table.border_subtitle = f"{summary.pages} pages"
        for run in page_runs(pages):
            low = run.decision is PageDecision.OCR and (
                run.confidence is None or run.confidence < summary.review_below
            )
            flagged = low or run.decision is PageDecision.SKIPPED
            confidence = "" if run.confidence is None else f"{run.confidence:.1f}"
            table.add_row(
                Text(run.pages.removeprefix("pages ").removeprefix("page ")),
                Text(run.decision.value, style=FLAG_STYLE if flagged else ""),
                str(run.chars),
                Text(confidence or ("?" if low else ""), style=FLAG_STYLE if low else ""),
                f"{run.ocr_seconds:.1f}" if run.ocr_seconds else "",
                Text(visible(run.reason or "")),
                key=str(run.first),
            )

    def _is_this(self, version: DocumentView) -> bool:
        return version.document_id == self.document_id

    def _fill_history(self, history: Sequence[DocumentEventView]) -> None:
        table = self.query_one("#document-history", DataTable)
        table.clear()
        for event in history:
            table.add_row(
                when(event.at),
                Text(visible(event.actor)),
                event.action,
                f"v{event.version_no}",
                f"{event.from_status or 'new'} → {event.to_status or 'gone'}",
                Text(visible(event.reason or "")),
            )

    def action_back(self) -> None:
        self.dismiss(None)


def fields_table(
    this: DocumentView | None,
    versions: Sequence[DocumentView],
    pages: PageSummary | None = None,
) -> Table:
    """Which document and which version, its status and what that means, and (for a
    version with pages) how they were read and why it is flagged for review."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    if this is None:
        grid.add_row("version", Text("deleted: no longer in the ledger", style="dim"))
        grid.add_row("history", Text("kept, below", style="dim"))
        return grid
    status = Text(this.status.value, style="bold")
    status.append(f" — {DOCUMENT_MEANING[this.status]}", style="")
    published = next((v for v in versions if v.status is DocumentStatus.PUBLISHED), None)
    rows: list[tuple[str, Text]] = [
        ("name", Text(visible(this.filename))),
        ("document", Text(f"{this.family_id}  ({len(versions)} versions)")),
        ("this version", Text(f"v{this.version_no}  {this.document_id}")),
        ("status", status),
        ("row version", Text(str(this.version))),
        (
            "search finds",
            Text(f"v{published.version_no}" if published else "no version (none is published)"),
        ),
    ]
    if pages is not None and pages.pages:
        read = Text(f"{pages.pages}: {pages.text} text, {pages.ocr} ocr")
        if pages.ocr_empty:
            read.append(f", {pages.ocr_empty} ocr_empty")
        if pages.skipped:
            read.append(f", {pages.skipped} skipped")
        if pages.ocr_min_confidence is not None and pages.ocr_mean_confidence is not None:
            read.append(
                f"  (confidence lowest {pages.ocr_min_confidence:.1f}, "
                f"mean {pages.ocr_mean_confidence:.1f})"
            )
        rows.append(("pages", read))
        if pages.reason is not None:
            rows.append(("review flag", Text(pages.reason, style=FLAG_STYLE)))
    for label, value in rows:
        grid.add_row(label, value)
    return grid


def hit_chunk_text(hit: SearchHit) -> Text:
    """The chunk that matched, its matched words (those the snippet marks)
    highlighted, cut at CHUNK_SHOWN_CHARS."""
    words = {w.casefold() for w in re.findall(r"\w+", _marked_words(hit.snippet))}
    body = visible(" ".join(hit.text.split()))
    shown = shorten(body, CHUNK_SHOWN_CHARS)
    out = Text(shown)
    for found in re.finditer(r"\w+", shown):
        if found.group(0).casefold() in words:
            out.stylize(HIT_STYLE, found.start(), found.end())
    return out


def _marked_words(snippet: str) -> str:
    marked = snippet_text(snippet)
    return " ".join(
        marked.plain[span.start : span.end] for span in marked.spans if span.style == HIT_STYLE
    )
