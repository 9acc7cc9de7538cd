"""Running now: one stage progress bar per running task."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Label, ProgressBar

from core import TaskView, visible
from tui.format import shorten

RUNNING_SHOWN_MAX = 16  # bars at most; the rest are summed up in one line
NAME_WIDTH = 26  # characters of a document name above its bar


class RunningTask(Vertical):
    """A slot for one running task: its id and name, then a bar for its stage.

    Slots are composed once and reused: tasks start and finish several times a
    second, and mounting a widget per task would churn the DOM and paint a frame
    late, while updating a slot is immediate.
    """

    def __init__(self, slot: int) -> None:
        super().__init__(id=f"running-slot-{slot}", classes="running-task -free")
        self.task_view: TaskView | None = None

    def compose(self) -> ComposeResult:
        yield Label("", classes="running-title")
        with Horizontal(classes="running-row"):
            yield Label("", classes="running-stage")
            yield ProgressBar(total=1, show_eta=False, show_percentage=False)
            yield Label("", classes="running-count")

    def on_mount(self) -> None:
        # Looked up once: show() runs for every slot on every poll with a change.
        self._title = self.query_one(".running-title", Label)
        self._stage = self.query_one(".running-stage", Label)
        self._bar = self.query_one(ProgressBar)
        self._count = self.query_one(".running-count", Label)
        self._shown: tuple[object, ...] | None = None

    def show(self, task: TaskView | None, *, stalled: bool = False) -> None:
        """Show ``task`` in this slot, or free the slot (None)."""
        signature = (None if task is None else (task.task_id, task.revision), stalled)
        if signature == self._shown:
            return  # unchanged: touching the widgets would only cost a repaint
        self._shown = signature
        self.task_view = task
        self.set_class(task is None, "-free")
        self.set_class(stalled, "-stalled")
        if task is None:
            return
        title = Text(task.short_id, style="bold")
        title.append(" ")
        title.append(shorten(visible(task.document_name or task.document_id[:8]), NAME_WIDTH))
        self._title.update(title)
        self._stage.update(task.stage.value)
        self._bar.update(total=max(task.total, 1), progress=task.completed)
        self._count.update(f"{task.completed}/{task.total}")


class RunningNow(VerticalScroll):
    """The running tasks, each keeping its slot while it runs."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._shown: tuple[object, ...] | None = None
        self._slot_of: dict[str, int] = {}

    def compose(self) -> ComposeResult:
        yield Label("nothing running", id="running-empty")
        for slot in range(RUNNING_SHOWN_MAX):
            yield RunningTask(slot)
        yield Label("", id="running-more")

    def update_tasks(self, running: Mapping[str, TaskView], stalled: set[str]) -> None:
        # Called on every poll; only a change is worth touching the widgets.
        signature = (tuple((t, v.revision) for t, v in running.items()), frozenset(stalled))
        if signature == self._shown:
            return
        self._shown = signature
        ordered = sorted(running.values(), key=lambda t: (t.created_at, t.task_id))
        shown = {t.task_id: t for t in ordered[:RUNNING_SHOWN_MAX]}
        # A task keeps its slot while it runs, so bars do not jump around.
        self._slot_of = {t: s for t, s in self._slot_of.items() if t in shown}
        free = sorted(set(range(RUNNING_SHOWN_MAX)) - set(self._slot_of.values()))
        for task_id in shown:
            if task_id not in self._slot_of:
                self._slot_of[task_id] = free.pop(0)
        by_slot = {slot: shown[task_id] for task_id, slot in self._slot_of.items()}
        for slot, widget in enumerate(self.query(RunningTask)):
            task = by_slot.get(slot)
            widget.show(task, stalled=task is not None and task.task_id in stalled)
        self.query_one("#running-empty").display = not running
        hidden = len(ordered) - len(shown)
        more = self.query_one("#running-more", Label)
        more.display = hidden > 0
        more.update(f"… and {hidden} more running")
        self.border_title = f"Running now ({len(running)})"
