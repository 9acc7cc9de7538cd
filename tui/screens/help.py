"""Help: every key, the two state machines and the error codes, from the same
tables core uses (nothing here is a second copy that could drift)."""

from __future__ import annotations

from typing import ClassVar

from rich import box
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Static

from core import ERRORS, PAIRED_DOCUMENT_STATUS, TASK_MEANING, DocumentStatus
from core.states import DOCUMENT_MEANING
from tui.widgets.footer import WholeKeysFooter

KEYS: tuple[tuple[str, str], ...] = (
    ("s", "submit files: type paths (→ completes), several at once; upload + submit"),
    ("c", "cancel the selected task (asks to confirm, takes a reason)"),
    ("r", "retry the selected failed task"),
    ("f", "failures grouped by error code and stage; enter drills down"),
    ("s / x", "failures, needs_review task: resend / mark failed its requests"),
    ("v", "review desk: versions waiting for review, what changed"),
    ("p / r", "review desk: publish / reject (with a reason); enter: history"),
    ("ctrl+f", "search published documents; enter opens a hit's document"),
    ("enter", "detail of the selected task: fields, attempts, events, chunks"),
    ("/", "filter bar: words and field:value terms, ! negates; esc closes"),
    ("0 … 6", "show all, queued, running, retry_wait, failed, succeeded, cancelled"),
    ("b", "bulk cancel / retry of every task matching the filter (dry run first)"),
    ("o", "sort the table by the next column (or click a header)"),
    ("i", "below 120 columns: swap the task table and the side panel"),
    ("arrows", "↑ ↓ pgup pgdn home end move in the table; a click selects"),
    ("w / W", "start one more / stop the newest in-process worker"),
    ("p", "pause / resume the in-process workers (running tasks finish)"),
    ("ctrl+r", "restart the in-process workers that stopped (shown with why)"),
    ("R", "claim race: two workers try to claim one new task at once"),
    ("I", "vector indexes and their re-embedding campaigns (bars)"),
    ("n / a", "indexes: a new index / activate one (asks first)"),
    ("r c d", "indexes: resume / cancel campaign (asks) / drop (asks)"),
    ("ctrl+p", "command palette: every action by name"),
    ("?", "this help"),
    ("esc", "back / close"),
    ("q", "quit: workers stop and hand their running tasks back to the queue"),
)

TRANSITIONS = (
    "queued → running → succeeded | failed | retry_wait | cancelled;  "
    "retry_wait → running when due;  failed → queued by an operator's retry;  "
    "queued, running, retry_wait → cancelled by an operator."
)
FILTER_HELP = (
    "Filter terms: status:failed code:parse_error stage:embedding attempt:>1 worker:w1 "
    "name:report id:ab12 document:cd34; bare words match the name, id or error code; "
    "! negates a term. Same syntax as ingestdesk tasks --filter."
)


def _table(title: str, *columns: str) -> Table:
    table = Table(
        title=title,
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        expand=True,
        pad_edge=False,
    )
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def keys_table() -> Table:
    table = _table("Keys", "key", "action")
    for key, action in KEYS:
        table.add_row(Text(key, style="bold"), Text(action))
    return table


def task_states_table() -> Table:
    table = _table("Task states: how far one execution got", "task", "meaning", "document")
    for status, meaning in TASK_MEANING.items():
        table.add_row(
            Text(status.value, style="bold"),
            Text(meaning),
            Text(PAIRED_DOCUMENT_STATUS[status].value),
        )
    return table


def document_states_table() -> Table:
    table = _table("Document states: may this version be searched", "document", "meaning")
    for status in DocumentStatus:
        table.add_row(Text(status.value, style="bold"), Text(DOCUMENT_MEANING[status]))
    return table


def errors_table() -> Table:
    table = _table("Error codes", "code", "what it means", "what to do", "auto retry")
    for info in ERRORS.values():
        table.add_row(
            Text(info.code.value, style="bold"),
            Text(info.meaning),
            Text(info.advice),
            Text("yes" if info.transient else "no"),
        )
    return table


class HelpScreen(Screen[None]):
    """Keys, state machines and error codes."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("question_mark", "back", "Back", show=False),
    ]

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="help"):
            with Horizontal(id="help-top"):
                yield Static(keys_table(), id="help-keys")
                with Vertical(id="help-states"):
                    yield Static(task_states_table(), id="help-task-states")
                    yield Static(Text(TRANSITIONS), id="help-transitions")
                    yield Static(document_states_table(), id="help-document-states")
            yield Static(errors_table(), id="help-errors")
            yield Static(Text(FILTER_HELP), id="help-filter")
        yield WholeKeysFooter()

    def on_mount(self) -> None:
        self.query_one("#help").focus()

    def action_back(self) -> None:
        self.dismiss(None)
