"""Workers: the dashboard's own (in-process) and the ones the ledger has seen.

Each in-process worker has a line of its own, so its state is a CSS class
(``-unreachable``, ``-stopped``) that app.tcss colours from the theme; the panel
gets ``-attention`` while any of them is in trouble.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from core import WorkerView, visible
from tui.format import age

# What a worker's line says in the states that are not the worker's own words.
UNREACHABLE_LINE = "ledger unreachable — retrying"
STOPPED_PREFIX = "stopped: "  # then why, on the next line
TROUBLE_STATES = frozenset({"unreachable", "stopped"})


@dataclass(frozen=True)
class LocalWorker:
    """What the panel shows of an in-process worker.

    ``state`` is the worker's own (idle, claiming, running, paused), or
    ``unreachable`` (riding out a ledger outage) or ``stopped`` (its loop ended by
    itself; ``why`` says why, in one line).
    """

    worker_id: str
    state: str
    current: tuple[str, ...]
    why: str = ""


def worker_line(worker: LocalWorker) -> Text:
    """One in-process worker's line: id, state (or why it stopped), tasks held."""
    text = Text()
    text.append(f"  {visible(worker.worker_id):<14} ", style="bold")
    if worker.state == "stopped":
        # The reason on a line of its own: it is often longer than the panel is wide.
        text.append(STOPPED_PREFIX.rstrip() + "\n    " + visible(worker.why))
        return text
    text.append(UNREACHABLE_LINE if worker.state == "unreachable" else f"{worker.state:<8}")
    if worker.current:
        text.append(" " + " ".join(t[:8] for t in worker.current), style="italic")
    return text


class WorkersPanel(Vertical):
    """In-process workers with their state and task, then ledger workers."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._shown: tuple[object, ...] | None = None
        self._lines: dict[str, Static] = {}

    def compose(self) -> ComposeResult:
        yield Static(classes="workers-heading")
        yield Static(classes="workers-seen")

    def show(
        self,
        local: Sequence[LocalWorker],
        seen: Sequence[WorkerView],
        now: float,
        *,
        paused: bool,
    ) -> None:
        local_ids = {w.worker_id for w in local}
        others = [w for w in seen if w.worker_id not in local_ids]
        seen_text = self._seen_text(others, now)
        # Called on every poll; only a change is worth a repaint.
        signature = (tuple(local), seen_text.plain, paused)
        if signature == self._shown:
            return
        self._shown = signature
        heading = Text("in this dashboard", style="bold")
        if paused:
            heading.append("  (paused)", style="italic")
        if not local:
            heading.append("\n  none (watch only)", style="dim")
        self.query_one(".workers-heading", Static).update(heading)
        for gone in set(self._lines) - local_ids:
            self._lines.pop(gone).remove()
        seen_block = self.query_one(".workers-seen", Static)
        for worker in local:
            line = self._lines.get(worker.worker_id)
            if line is None:
                line = self._lines[worker.worker_id] = Static(classes="worker-line")
                self.mount(line, before=seen_block)
            line.update(worker_line(worker))
            line.set_class(worker.state == "unreachable", "-unreachable")
            line.set_class(worker.state == "stopped", "-stopped")
        seen_block.update(seen_text)
        trouble = [w for w in local if w.state in TROUBLE_STATES]
        self.set_class(bool(trouble), "-attention")
        stopped = sum(w.state == "stopped" for w in local)
        # The title has room for two counts: the stopped ones matter more then.
        self.border_title = (
            f"Workers ({len(local)} here, {stopped} stopped)"
            if stopped
            else f"Workers ({len(local)} here, {sum(w.alive for w in others)} elsewhere)"
        )

    @staticmethod
    def _seen_text(others: Sequence[WorkerView], now: float) -> Text:
        text = Text()
        text.append("seen in the ledger", style="bold")
        if not others:
            text.append("\n  none", style="dim")
        for other in others:
            state = "alive" if other.alive else ("stopped" if other.stopped_at else "vanished")
            # Another process's id, as the ledger has it: escaped, then cut.
            text.append(f"\n  {visible(other.worker_id)[:14]:<14} ", style="bold")
            text.append(f"{state:<8}", style="" if other.alive else "dim")
            text.append(f" {age(now - other.heartbeat_at)} ago", style="dim")
        return text
