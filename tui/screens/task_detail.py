"""Task detail: every field, the document's status, the requests its attempts sent
to a remote embedding provider, the attempt history from the ledger's event log (one
row per attempt), every event with its actor and reason, and a preview of the first
chunks.

Everything here that came from a user or a document (names, worker ids, actors,
reasons, error details, options, chunk text) is shown through :func:`core.visible`,
as :class:`~rich.text.Text` (never markup): a history row cannot forge another line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Static

from core import (
    ERRORS,
    PAIRED_DOCUMENT_STATUS,
    TASK_MEANING,
    ChunkView,
    DocumentView,
    NotFound,
    TaskEventView,
    TaskStatus,
    TaskView,
    visible,
)
from core.ledger import ProviderRequestView
from core.ledger.pages import PageSummary
from core.states import RequestState
from tui import policy
from tui.desk import Desk, desk_of
from tui.format import age, failure_line, plain, shorten, when
from tui.messages import LedgerChanged
from tui.widgets.counts import request_state_label
from tui.widgets.data_table import DataTable
from tui.widgets.footer import WholeKeysFooter

CHUNK_PREVIEW = 5  # chunks shown
CHUNK_PREVIEW_CHARS = 240  # characters of each chunk shown
REQUEST_KEY_SHOWN = 12  # hex characters of a request key: enough to find it in the CLI
# The order states are summed up in: the usual outcome first, then what needs watching.
REQUEST_SUMMARY_ORDER: tuple[RequestState, ...] = (
    RequestState.DONE,
    RequestState.RECOVERED,
    RequestState.UNKNOWN,
    RequestState.NEEDS_REVIEW,
    RequestState.FAILED,
    RequestState.NOT_SENT,
    RequestState.RESEND,
)
# States whose requests are listed one by one, with their key and last answer: the
# outcome is not known, or a person has to decide.
REQUEST_LISTED = frozenset({RequestState.UNKNOWN, RequestState.NEEDS_REVIEW})


@dataclass(frozen=True)
class Attempt:
    """One attempt of a task, reconstructed from its events."""

    number: int
    worker: str
    started_at: float
    ended_at: float | None = None
    stage: str = ""
    outcome: str = "running"
    error_code: str = ""


def attempts_from(history: Sequence[TaskEventView]) -> list[Attempt]:
    """Group events per attempt: a claim (→ running) opens one, the next event that
    leaves running for the same attempt closes it."""
    found: list[Attempt] = []
    for event in history:
        if event.to_status is TaskStatus.RUNNING:
            found.append(Attempt(event.attempt, event.actor, event.at, stage=event.stage.value))
        elif (
            event.from_status is TaskStatus.RUNNING
            and found
            and found[-1].number == event.attempt
            and found[-1].ended_at is None
        ):
            last = found[-1]
            found[-1] = Attempt(
                last.number,
                last.worker,
                last.started_at,
                event.at,
                event.stage.value,
                event.to_status.value,
                event.error_code.value if event.error_code else "",
            )
    return found


def requests_summary(requests: Sequence[ProviderRequestView]) -> str:
    """``3 done, 1 recovered, 1 unknown``: how many requests are in each state."""
    counts = dict.fromkeys(REQUEST_SUMMARY_ORDER, 0)
    for request in requests:
        counts[request.state] += 1
    return ", ".join(f"{n} {request_state_label(state)}" for state, n in counts.items() if n)


def request_rows(requests: Sequence[ProviderRequestView]) -> list[tuple[str, Text]]:
    """The detail's rows for a task's provider requests: none for a task that sent
    none (a local embedder), else the summary and one row per request whose outcome
    is unknown or waits for a person."""
    if not requests:
        return []
    rows = [("provider requests", Text(requests_summary(requests)))]
    for request in requests:
        if request.state not in REQUEST_LISTED:
            continue
        line = Text(request_state_label(request.state), style="bold")
        line.append(f"  try {request.attempt} · sends {request.sends}")
        if request.lookups:
            line.append(f" · look-ups {request.lookups}")
        if request.detail:
            line.append(f": {visible(request.detail)}")
        rows.append((f"  request {request.request_key[:REQUEST_KEY_SHOWN]}", line))
    return rows


def chunk_where(chunk: ChunkView) -> str:
    """Where a chunk is, in the document's own terms: a slide and its notes, a sheet's
    rows, a footnote under a heading; ``page 3`` for a page, ``text`` for a file
    without pages (slides and sheets once all read ``text`` here)."""
    if set(chunk.location) - {"page"}:
        return chunk.place
    return f"page {chunk.page}" if chunk.page is not None else "text"


class TaskDetailScreen(Screen[None]):
    """All there is to know about one task."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("c", "cancel", "Cancel"),
        Binding("r", "retry", "Retry"),
    ]

    def __init__(self, task_id: str) -> None:
        super().__init__()
        self.task_id = task_id
        self.task_view: TaskView | None = None
        self.requests: list[ProviderRequestView] = []
        # The document's page summary (None: it has no pages), with its review flag.
        self.pages: PageSummary | None = None

    @property
    def desk(self) -> Desk:
        return desk_of(self)

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="detail"):
            yield Static("loading…", id="detail-fields")
            yield DataTable(id="detail-attempts", cursor_type="row", zebra_stripes=True)
            yield DataTable(id="detail-events", cursor_type="row", zebra_stripes=True)
            yield Static("", id="detail-chunks")
        yield WholeKeysFooter()

    def on_mount(self) -> None:
        attempts = self.query_one("#detail-attempts", DataTable)
        attempts.border_title = "Attempts"
        for key, label in (
            ("n", "#"),
            ("worker", "Worker"),
            ("start", "Started"),
            ("end", "Ended"),
            ("took", "Took"),
            ("stage", "Stage reached"),
            ("outcome", "Outcome"),
            ("code", "Error code"),
        ):
            attempts.add_column(label, key=key)
        events = self.query_one("#detail-events", DataTable)
        events.border_title = "Events (audit log)"
        for key, label in (
            ("at", "When (UTC)"),
            ("actor", "Actor"),
            ("change", "Change"),
            ("stage", "Stage"),
            ("attempt", "Try"),
            ("code", "Error code"),
            ("reason", "Reason"),
        ):
            events.add_column(label, key=key)
        self.query_one("#detail-fields").border_title = plain(f"Task {self.task_id[:8]}")
        self.query_one("#detail-chunks").border_title = f"First {CHUNK_PREVIEW} chunks"
        self.load()

    def on_ledger_changed(self, message: LedgerChanged) -> None:
        if any(t.task_id == self.task_id for t in message.tasks):
            self.load()

    @work(exclusive=True, group="detail", exit_on_error=False, description="load task detail")
    async def load(self) -> None:
        reads = self.desk.reads
        try:
            task = await reads.get_task(self.task_id)
            history = await reads.task_history(task.task_id)
        except Exception as exc:  # not found, or a row the ledger cannot read
            self.query_one("#detail-fields", Static).update(Text(failure_line(exc)))
            return
        document: DocumentView | None = None
        chunks: list[ChunkView] = []
        missing = "no longer in the ledger"
        try:
            document = await reads.get_document(task.document_id)
            chunks = await reads.chunks(task.document_id, limit=CHUNK_PREVIEW)
            summaries = await reads.page_summaries([task.document_id])
            self.pages = summaries.get(task.document_id)
        except NotFound:
            pass
        except Exception as exc:  # the task is still worth showing without them
            missing = f"cannot be read: {failure_line(exc)}"
        try:
            self.requests = await self.desk.providers.for_task(task.task_id)
        except Exception as exc:  # the task is still worth showing without them
            self.notify(failure_line(exc), severity="error", title="cannot load its requests")
            self.requests = []
        self.task_view = task
        now = self.desk.clock()
        fields = self._fields(task, document, now, missing=missing)
        self.query_one("#detail-fields", Static).update(fields)
        self._fill_attempts(attempts_from(history))
        self._fill_events(history)
        self.query_one("#detail-chunks", Static).update(self._chunks(chunks, task))

    def _fields(
        self, task: TaskView, document: DocumentView | None, now: float, *, missing: str
    ) -> Table:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column()
        stalled = task.is_stalled(now, self.desk.stall_after_s)
        status = Text(task.status.value, style="bold")
        status.append(f" — {TASK_MEANING[task.status]}", style="")
        if stalled:
            status.append("  ⚠ stalled: no progress for a while", style="bold")
        rows: list[tuple[str, Text | str]] = [
            ("task", task.task_id),
            ("status", status),
            ("stage", f"{task.stage.value} {task.completed}/{task.total}"),
            ("attempt", f"{task.attempt}  (automatic attempts allowed: {task.max_attempts})"),
            ("worker", task.worker_id or "-"),
            ("lease expires", when(task.lease_expires_at)),
            ("next attempt", when(task.next_attempt_at)),
            ("last progress", when(task.progress_at)),
            ("created", f"{when(task.created_at)} ({age(now - task.created_at)} ago)"),
            ("updated", when(task.updated_at)),
            ("revision", str(task.revision)),
        ]
        if task.error_code is not None:
            info = ERRORS[task.error_code]
            error = Text(task.error_code.value, style="bold")
            if task.error_detail:
                error.append(f" ({visible(task.error_detail)})")
            rows += [
                ("error", error),
                ("meaning", info.meaning),
                ("what to do", info.advice),
            ]
        rows += request_rows(self.requests)
        options = dict(task.options)
        key = options.pop("processing_key", None)
        reused_from = options.pop("reused_from", None)
        options.pop("result_sha256", None)  # a checksum, not something to read
        if key is not None:
            rows.append(("processing key", str(key)))
        if reused_from is not None:
            rows.append(("result", f"reused from task {reused_from} (not parsed again)"))
        if options:
            rows.append(("options", " ".join(f"{k}={v}" for k, v in sorted(options.items()))))
        if document is None:
            rows.append(("document", f"{task.document_id} ({missing})"))
        else:
            paired = PAIRED_DOCUMENT_STATUS[task.status]
            doc_status = Text(document.status.value, style="bold")
            if document.status is not paired:
                # Another, newer task may own the document now; say so plainly.
                doc_status.append(f"  (this task alone would pair it with {paired.value})")
            rows += [
                ("document", f"{document.document_id}  {document.filename}"),
                ("document status", doc_status),
                ("kind / size", f"{document.kind.value}, {document.size:,} bytes"),
                ("row version", str(document.version)),
                ("sha256", document.sha256),
            ]
        pages = self.pages
        if pages is not None:
            rows.append(
                (
                    "pages",
                    f"{pages.pages}: {pages.text} text, {pages.ocr} ocr, "
                    f"{pages.ocr_empty} ocr_empty, {pages.skipped} skipped",
                )
            )
            if pages.reason is not None:
                rows.append(("review flag", Text(pages.reason, style="bold red")))
        for label, value in rows:
            # Plain values hold the ledger's text (ids, names, options): escaped here.
            grid.add_row(label, value if isinstance(value, Text) else Text(visible(value)))
        return grid

    def _fill_attempts(self, attempts: list[Attempt]) -> None:
        table = self.query_one("#detail-attempts", DataTable)
        table.clear()
        for attempt in attempts:
            took = (
                "-" if attempt.ended_at is None else f"{attempt.ended_at - attempt.started_at:.1f}s"
            )
            table.add_row(
                str(attempt.number),
                Text(visible(attempt.worker)),
                when(attempt.started_at),
                when(attempt.ended_at),
                took,
                attempt.stage,
                attempt.outcome,
                attempt.error_code or "-",
            )
        if not attempts:
            table.add_row("-", Text("no attempt yet"), "", "", "", "", "", "")

    def _fill_events(self, history: Sequence[TaskEventView]) -> None:
        table = self.query_one("#detail-events", DataTable)
        table.clear()
        for event in history:
            source = event.from_status.value if event.from_status else "new"
            change = f"{source} → {event.to_status.value}"
            table.add_row(
                when(event.at),
                Text(visible(event.actor)),
                change,
                event.stage.value,
                str(event.attempt),
                event.error_code.value if event.error_code else "-",
                Text(visible(event.reason or "")),
            )

    @staticmethod
    def _chunks(chunks: Sequence[ChunkView], task: TaskView) -> Text:
        if not chunks:
            why = (
                "the document has no chunks yet"
                if task.status is not TaskStatus.SUCCEEDED
                else "the document's chunks were replaced or removed"
            )
            return Text(why, style="dim")
        text = Text()
        for chunk in chunks:
            page = chunk_where(chunk)
            text.append(
                f"#{chunk.ordinal} {page} [{chunk.char_start}:{chunk.char_end}]\n", style="bold"
            )
            body = visible(" ".join(chunk.text.split()))  # a document's own bytes
            text.append(shorten(body, CHUNK_PREVIEW_CHARS) + "\n\n")
        return text

    # --------------------------------------------------------------- actions

    def action_back(self) -> None:
        self.dismiss(None)

    def action_cancel(self) -> None:
        operator = policy.operator_for(self.desk, "cancel")
        if operator is None or self.task_view is None:
            return
        from tui.screens.actions import request_cancel

        request_cancel(self, operator, self.task_view)

    def action_retry(self) -> None:
        operator = policy.operator_for(self.desk, "retry")
        if operator is None or self.task_view is None:
            return
        from tui.screens.actions import retry_task

        retry_task(self, operator, self.task_view)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return policy.allows(self.desk, action)
