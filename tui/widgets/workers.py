"""Workers: the dashboard's own (in-process) and the ones the ledger has seen."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.widgets import Static

from core import WorkerView, visible
from tui.format import age


@dataclass(frozen=True)
class LocalWorker:
    """What the panel shows of an in-process worker."""

    worker_id: str
    state: str
    current: tuple[str, ...]


class WorkersPanel(Static):
    """In-process workers with their state and task, then ledger workers."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._shown: str | None = None

    def show(
        self,
        local: Sequence[LocalWorker],
        seen: Sequence[WorkerView],
        now: float,
        *,
        paused: bool,
    ) -> None:
        text = Text()
        text.append("in this dashboard", style="bold")
        if paused:
            text.append("  (paused)", style="italic")
        text.append("\n")
        if not local:
            text.append("  none (watch only)\n", style="dim")
        for worker in local:
            text.append(f"  {visible(worker.worker_id):<14} ", style="bold")
            text.append(f"{worker.state:<8}")
            if worker.current:
                text.append(" " + " ".join(t[:8] for t in worker.current), style="italic")
            text.append("\n")
        local_ids = {w.worker_id for w in local}
        others = [w for w in seen if w.worker_id not in local_ids]
        text.append("seen in the ledger", style="bold")
        text.append("\n")
        if not others:
            text.append("  none\n", style="dim")
        for other in others:
            state = "alive" if other.alive else ("stopped" if other.stopped_at else "vanished")
            # Another process's id, as the ledger has it: escaped, then cut.
            text.append(f"  {visible(other.worker_id)[:14]:<14} ", style="bold")
            text.append(f"{state:<8}", style="" if other.alive else "dim")
            text.append(f" {age(now - other.heartbeat_at)} ago\n", style="dim")
        # Called on every poll; only a change is worth a repaint.
        if text.plain == self._shown:
            return
        self._shown = text.plain
        self.update(text)
        self.border_title = f"Workers ({len(local)} here, {sum(w.alive for w in others)} elsewhere)"
