"""The review desk: document versions waiting for a person, the longest-waiting
first, and for the selected one what changed against the version publishing it
retires (the one search finds now, or a withdrawn one) — chunk and page counts
before → after, the lines added (green) and removed (red), and its first chunks.
``p`` publishes it, ``r`` rejects it (with a reason); enter opens the document's
versions, pages and history.

A version flagged for review (pages read by OCR at low confidence, or skipped: see
:mod:`core.ledger.pages`) is marked ``!`` in the queue, its detail says why, and ``p``
asks the reviewer to accept those pages as read before publishing it.

Everything drawn here that came from a document or a user (names, chunk text, diff
lines) goes through :func:`core.visible` into :class:`~rich.text.Text`, never markup:
a line of a document reading ``[red]x[/]`` is shown as written.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container, VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Static

from core import ChunkView, DocumentStatus, DocumentView, TaskStatus, visible
from tui import policy
from tui.desk import Desk, desk_of
from tui.format import age, failure_line, shorten
from tui.messages import LedgerChanged
from tui.widgets.data_table import DataTable
from tui.widgets.footer import WholeKeysFooter

if TYPE_CHECKING:
    from core.ledger.pages import PageSummary
    from core.ledger.review_diff import VersionDiff

NAME_WIDTH = 28  # characters of a document name in the queue
CHUNK_PREVIEW = 3  # chunks of the candidate shown under the diff
CHUNK_PREVIEW_CHARS = 240  # characters of each
DIFF_SHOWN_MAX = 200  # diff lines drawn; the rest is counted
# Columns from which the queue sits beside the detail; below (80x24) it sits above.
SIDE_BY_SIDE_FROM = 110
RELOAD_AFTER_S = 1.0  # seconds between reloads while tasks keep finishing
# Seconds between reloads when no task changed: publishing, rejecting and replacing
# change documents only, and the poller's news is about tasks, so a decision taken
# in another process (the CLI, another dashboard) shows up within this long.
RESYNC_S = 5.0
PLUS_STYLE = "green"
MINUS_STYLE = "red"
HUNK_STYLE = "cyan dim"
CONTEXT_STYLE = "dim"
FLAG_STYLE = "bold red"
FLAG_MARK = "! "  # before a flagged version's name in the queue


def diff_text(lines: Sequence[str], *, shown_max: int = DIFF_SHOWN_MAX) -> Text:
    """Unified diff lines as Rich text: ``+`` green, ``-`` red, hunk marks and
    context dim. Each line is escaped (:func:`core.visible`) and styled as a whole."""
    out = Text()
    for line in lines[:shown_max]:
        if line.startswith("@@"):
            style = HUNK_STYLE
        elif line.startswith("+"):
            style = PLUS_STYLE
        elif line.startswith("-"):
            style = MINUS_STYLE
        else:
            style = CONTEXT_STYLE
        out.append(visible(line), style=style)
        out.append("\n")
    if len(lines) > shown_max:
        out.append(f"… {len(lines) - shown_max} more diff lines not shown\n", style="italic")
    out.rstrip()
    return out


def summary_text(diff: VersionDiff, now: float, pages: PageSummary | None = None) -> Text:
    """The selected version in four lines: which, as of which row version, against
    what, and the counts before → after; then, for a version with pages, how they
    were read and why it is flagged."""
    version = diff.candidate
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append(visible(version.filename), style="bold")
    out.append(f"  v{version.version_no}", style="bold")
    out.append(f"  row version {version.version}  ·  waiting {age(now - version.updated_at)}\n")
    out.append(f"document {version.family_id[:8]}  ·  this version {version.document_id[:8]}\n")
    replaced = diff.published
    if replaced is None:
        out.append("first to be published: nothing of this document is searchable yet\n")
    elif replaced.status is DocumentStatus.WITHDRAWN:
        # Out of search, but publishing this version retires it all the same.
        out.append(
            f"against withdrawn version {replaced.version_no} "
            f"({replaced.document_id[:8]}), not searchable now; publishing retires it\n"
        )
    else:
        out.append(
            f"against v{replaced.version_no} ({replaced.document_id[:8]}), which search finds now\n"
        )
    out.append(f"chunks {diff.chunks_before} → {diff.chunks_after}", style="bold")
    out.append(f"   pages {diff.pages_before} → {diff.pages_after}   lines ")
    out.append(f"+{len(diff.added)}", style=PLUS_STYLE)
    out.append(" ")
    out.append(f"-{len(diff.removed)}", style=MINUS_STYLE)
    if diff.truncated:
        out.append(" (cut)", style="italic")
    if pages is not None and pages.pages:
        out.append("\n")
        out.append(pages_line(pages))
    return out


def pages_line(pages: PageSummary) -> Text:
    """``read: 480 text, 3 ocr (lowest 42.0)`` and, if flagged, why."""
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append("read: " + pages.by_decision)
    if pages.ocr_min_confidence is not None:
        out.append(f" (lowest confidence {pages.ocr_min_confidence:.1f})")
    if pages.reason is not None:
        out.append("\nflagged: ", style=FLAG_STYLE)
        out.append(pages.reason, style=FLAG_STYLE)
    return out


def chunks_text(chunks: Sequence[ChunkView]) -> Text:
    """The first chunks, one paragraph each, whitespace folded, cut at the edge of
    CHUNK_PREVIEW_CHARS."""
    if not chunks:
        return Text("no chunks", style="dim")
    out = Text()
    for chunk in chunks:
        page = f" p.{chunk.page}" if chunk.page is not None else ""
        out.append(f"#{chunk.ordinal}{page} ", style="bold")
        out.append(shorten(visible(" ".join(chunk.text.split())), CHUNK_PREVIEW_CHARS))
        out.append("\n")
    out.rstrip()
    return out


class ReviewDeskScreen(Screen[None]):
    """Versions waiting for review: what changed, then publish or reject."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("enter", "open", "Document", tooltip="Versions and history of the document"),
        Binding("p", "publish", "Publish", tooltip="Make this version what search finds"),
        Binding("r", "reject", "Reject", tooltip="Back to draft, with a reason"),
    ]
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (SIDE_BY_SIDE_FROM, "-wide")]

    def __init__(self) -> None:
        super().__init__()
        self.queue: dict[str, DocumentView] = {}  # by version id, as listed
        self.diff: VersionDiff | None = None  # of the version whose detail is shown
        self.pages: PageSummary | None = None  # the same version's page summary
        self._flagged: set[str] = set()  # versions in the queue flagged for review
        self._detail_for: tuple[str, int] | None = None  # (version id, row version)
        # Chunk counts by (version id, row version): a version's chunks do not change
        # while it waits for review, so each is read once, not at every reload.
        self._chunk_counts: dict[tuple[str, int], int] = {}
        self._asked_at = float("-inf")  # monotonic: when the queue was last (re)loaded
        self._stale = False

    @property
    def desk(self) -> Desk:
        return desk_of(self)

    def compose(self) -> ComposeResult:
        yield Header()
        with Container(id="review-desk"):
            yield DataTable(id="review-queue", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="review-detail"):
                yield Static("", id="review-summary")
                yield Static("", id="review-diff")
                yield Static("", id="review-chunks")
        yield WholeKeysFooter()

    def on_mount(self) -> None:
        table = self.query_one("#review-queue", DataTable)
        table.border_title = "Waiting for review, oldest first"
        for key, label, width in (
            ("name", "Document", NAME_WIDTH),
            ("version", "Ver", 4),
            ("waiting", "Waiting", 7),
            ("chunks", "Chunks", 6),
        ):
            table.add_column(label, key=key, width=width)
        self.query_one("#review-summary").border_title = "Selected version"
        self.query_one("#review-diff").border_title = "What changed"
        self.query_one("#review-chunks").border_title = f"First {CHUNK_PREVIEW} chunks"
        table.focus()
        self.reload()

    # ------------------------------------------------------------------ data

    def reload(self) -> None:
        """Read the queue again (now)."""
        # Marked when asked, not when done: polls keep arriving while it loads, and
        # each would otherwise start it again (cancelling the load under way).
        self._asked_at = time.monotonic()
        self._stale = False
        self.load_queue()

    @work(exclusive=True, group="review-queue", exit_on_error=False, description="load reviews")
    async def load_queue(self) -> None:
        reads = self.desk.reads
        try:
            queue = await reads.review_queue()
            summaries = await reads.page_summaries([v.document_id for v in queue])
        except Exception as exc:  # the ledger's refusal, or a row it cannot read
            self.notify(failure_line(exc), severity="error", title="cannot load the review queue")
            return
        table = self.query_one("#review-queue", DataTable)
        selected, row = self._selected_key(), table.cursor_row
        self.queue = {v.document_id: v for v in queue}
        self._flagged = {d for d, p in summaries.items() if p.flagged}
        # Counts of versions decided since are dropped: the cache stays queue-sized.
        self._chunk_counts = {k: n for k, n in self._chunk_counts.items() if k[0] in self.queue}
        now = self.desk.clock()
        table.clear()
        for version in queue:
            table.add_row(
                self._name_cell(version),
                f"v{version.version_no}",
                age(now - version.updated_at),
                self._chunks_cell(version),
                key=version.document_id,
            )
        table.border_subtitle = f"{len(queue)} waiting"
        if selected in self.queue:
            table.move_cursor(row=table.get_row_index(selected), animate=False)
        elif self.queue:
            # The selected version left the queue (decided): the next one moves up.
            table.move_cursor(row=min(row, len(self.queue) - 1), animate=False)
        self._show_selected()
        self.count_chunks()

    def _name_cell(self, version: DocumentView) -> Text:
        if version.document_id not in self._flagged:
            return Text(shorten(visible(version.filename), NAME_WIDTH))
        name = Text(FLAG_MARK, style=FLAG_STYLE)
        name.append(shorten(visible(version.filename), NAME_WIDTH - len(FLAG_MARK)))
        return name

    def _chunks_cell(self, version: DocumentView) -> str:
        count = self._chunk_counts.get((version.document_id, version.version))
        return "…" if count is None else str(count)

    @work(exclusive=True, group="review-counts", exit_on_error=False, description="count chunks")
    async def count_chunks(self) -> None:
        reads = self.desk.reads
        for version in list(self.queue.values()):
            key = (version.document_id, version.version)
            if key in self._chunk_counts:
                continue
            try:
                count = len(await reads.chunks(version.document_id))
            except Exception:  # gone meanwhile: the next reload drops its row
                continue
            self._chunk_counts[key] = count
            self._update_chunks_cell(version)

    def _update_chunks_cell(self, version: DocumentView) -> None:
        # The queue may have been reloaded while this was read: only a row still
        # showing that version is updated.
        if self.queue.get(version.document_id) == version:
            table = self.query_one("#review-queue", DataTable)
            table.update_cell(version.document_id, "chunks", self._chunks_cell(version))

    def _selected_key(self) -> str | None:
        table = self.query_one("#review-queue", DataTable)
        if not table.row_count:
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return None if row_key.value is None else str(row_key.value)

    def selected_version(self) -> DocumentView | None:
        """The version under the cursor, as the queue last listed it."""
        return self.queue.get(self._selected_key() or "")

    def _show_selected(self) -> None:
        version = self.selected_version()
        if version is None:
            self._detail_for = None
            self.diff = None
            self.pages = None
            self.query_one("#review-summary", Static).update(
                Text("no version is waiting for review", style="dim")
            )
            self.query_one("#review-diff", Static).update("")
            self.query_one("#review-chunks", Static).update("")
            return
        key = (version.document_id, version.version)
        if key != self._detail_for:
            self._detail_for = key
            self.load_detail(version)

    @work(exclusive=True, group="review-detail", exit_on_error=False, description="load a review")
    async def load_detail(self, version: DocumentView) -> None:
        reads = self.desk.reads
        try:
            diff = await reads.review(version.document_id)
            chunks = await reads.chunks(version.document_id, limit=CHUNK_PREVIEW)
            pages, _ = await reads.pages(diff.candidate.document_id)
        except Exception as exc:  # rejected or replaced meanwhile, or unreadable
            self._detail_for = None
            self.query_one("#review-summary", Static).update(Text(failure_line(exc)))
            return
        if self._detail_for != (version.document_id, version.version):
            return  # the cursor moved on while this was read
        self.diff, self.pages = diff, pages
        self._chunk_counts[(version.document_id, version.version)] = diff.chunks_after
        self._update_chunks_cell(version)
        self._render_detail(diff, chunks)

    def _render_detail(self, diff: VersionDiff, chunks: Sequence[ChunkView]) -> None:
        summary = summary_text(diff, self.desk.clock(), self.pages)
        self.query_one("#review-summary", Static).update(summary)
        shown = self.query_one("#review-diff", Static)
        if diff.published is None:
            shown.border_title = "Its text (nothing published to compare with)"
        elif diff.published.status is DocumentStatus.WITHDRAWN:
            shown.border_title = f"What changed against withdrawn v{diff.published.version_no}"
        else:
            shown.border_title = f"What changed against v{diff.published.version_no}"
        shown.update(
            diff_text(diff.diff) if diff.diff else Text("no line of text changed", style="dim")
        )
        preview = self.query_one("#review-chunks", Static)
        preview.border_title = f"First {len(chunks)} of {diff.chunks_after} chunks"
        preview.update(chunks_text(chunks))
        self.query_one("#review-detail", VerticalScroll).scroll_home(animate=False)

    def on_ledger_changed(self, message: LedgerChanged) -> None:
        # A task that succeeded has put a version up for review. Polls arrive even
        # when nothing changed, so a reload held back by the throttle still happens,
        # and decisions taken elsewhere (no task changes) within RESYNC_S.
        if any(t.status is TaskStatus.SUCCEEDED for t in message.tasks):
            self._stale = True
        since = time.monotonic() - self._asked_at
        if (self._stale and since >= RELOAD_AFTER_S) or since >= RESYNC_S:
            self.reload()

    # ------------------------------------------------------------- navigation

    @on(DataTable.RowHighlighted, "#review-queue")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        # The cursor as it is now, not as the event says: a reload's clear and
        # re-add post highlights of rows the cursor has already left.
        self._show_selected()

    @on(DataTable.RowSelected, "#review-queue")
    def _selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open()

    def action_open(self) -> None:
        version = self.selected_version()
        if version is None:
            self.notify("no version selected", severity="warning")
            return
        from tui.screens.document import DocumentScreen

        self.app.push_screen(DocumentScreen(version.document_id))

    def action_back(self) -> None:
        self.dismiss(None)

    # ---------------------------------------------------------------- decisions

    def _decided(self) -> None:
        # Called from the decision's worker on the app: this screen may be gone.
        if self.is_attached:
            self.reload()

    def action_publish(self) -> None:
        versions = policy.versions_for(self.desk, "publish")
        if versions is None:
            return
        version = self.selected_version()
        if version is None:
            self.notify("no version selected", severity="warning")
            return
        diff, published, pages = self.diff, None, None
        if diff is not None and diff.candidate.document_id == version.document_id:
            # What the detail shows is what the reviewer looked at: its row version
            # is the one expected (a change since is refused, not published), and
            # its flag the one the dialog asks to accept.
            version, published, pages = diff.candidate, diff.published, self.pages
        from tui.screens.version_decisions import request_publish

        request_publish(
            self, versions, version, published=published, pages=pages, done=self._decided
        )

    def action_reject(self) -> None:
        versions = policy.versions_for(self.desk, "reject")
        if versions is None:
            return
        version = self.selected_version()
        if version is None:
            self.notify("no version selected", severity="warning")
            return
        from tui.screens.version_decisions import request_reject

        request_reject(self, versions, version, done=self._decided)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return policy.allows(self.desk, action)
