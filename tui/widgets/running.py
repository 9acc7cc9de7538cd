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

    Slots are mounted the first time that many tasks run at once and reused from then
    on: tasks start and finish several times a second, and mounting a widget per task
    would churn the DOM and paint a frame late, while updating a slot is immediate.
    Each slot is six widgets; mounting all of them up front was half the dashboard's
    DOM, styled several times over before the first screen.
    """

    def __init__(self, slot: int) -> None:
        super().__init__(id=f"running-slot-{slot}", classes="running-task -free")
        self.task_view: TaskView | None = None
        self._shown: tuple[object, ...] | None = None
        # What show() was asked before the slot was mounted (None: free).
        self._pending: tuple[TaskView | None, bool] | None = None
        self._parts: tuple[object, ...] = (None, None, None, None)
        self._ready = False  # mounted: show() may touch the parts
        # Made here and kept: show() runs for every slot on every poll with a change,
        # and a slot mounted while the dashboard runs gets its Mount before its row's
        # children are mounted (a query for them then finds nothing).
        self._title = Label("", classes="running-title")
        self._stage = Label("", classes="running-stage")
        self._bar = ProgressBar(total=1, show_eta=False, show_percentage=False)
        self._count = Label("", classes="running-count")

    def compose(self) -> ComposeResult:
        yield self._title
        with Horizontal(classes="running-row"):
            yield self._stage
            yield self._bar
            yield self._count

    def on_mount(self) -> None:
        self._ready = True
        if self._pending is not None:
            task, stalled = self._pending
            self._pending = None
            self.show(task, stalled=stalled)

    def show(self, task: TaskView | None, *, stalled: bool = False) -> None:
        """Show ``task`` in this slot, or free the slot (None)."""
        signature = (None if task is None else (task.task_id, task.revision), stalled)
        if signature == self._shown:
            return  # unchanged: touching the widgets would only cost a repaint
        self.task_view = task
        if not self._ready:
            self._pending = (task, stalled)
            return
        self._shown = signature
        self.set_class(task is None, "-free")
        self.set_class(stalled, "-stalled")
        if task is None:
            return
        # Under a stream of changes most of them are progress: only the parts that
        # changed are touched, and after the slot's first task none of them changes
        # the slot's size (one line each, fixed widths: app.tcss).
        name, stage, done, total = self._parts
        layout = name is None
        if name != (task.task_id, task.document_name):
            title = Text(task.short_id, style="bold")
            title.append(" ")
            title.append(shorten(visible(task.document_name or task.document_id[:8]), NAME_WIDTH))
            self._title.update(title, layout=layout)
        if stage != task.stage:
            self._stage.update(task.stage.value, layout=layout)
        if (done, total) != (task.completed, task.total):
            self._bar.update(total=max(task.total, 1), progress=task.completed)
            self._count.update(f"{task.completed}/{task.total}", layout=layout)
        self._parts = ((task.task_id, task.document_name), task.stage, task.completed, task.total)


class RunningNow(VerticalScroll):
    """The running tasks, each keeping its slot while it runs."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._shown: tuple[object, ...] | None = None
        self._slot_of: dict[str, int] = {}

    def compose(self) -> ComposeResult:
        yield Label("nothing running", id="running-empty")
        yield Label("", id="running-more")

    def _slots(self, wanted: int) -> list[RunningTask]:
        """At least ``wanted`` slots (of RUNNING_SHOWN_MAX), mounting the missing ones."""
        slots = list(self.query(RunningTask))
        if len(slots) < wanted:
            added = [RunningTask(slot) for slot in range(len(slots), wanted)]
            self.mount(*added, before=self.query_one("#running-more"))
            slots += added
        return slots

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
        for slot, widget in enumerate(self._slots(max(by_slot, default=-1) + 1)):
            task = by_slot.get(slot)
            widget.show(task, stalled=task is not None and task.task_id in stalled)
        self.query_one("#running-empty").display = not running
        hidden = len(ordered) - len(shown)
        more = self.query_one("#running-more", Label)
        more.display = hidden > 0
        more.update(f"… and {hidden} more running")
        self.border_title = f"Running now ({len(running)})"
