"""What keeps the dashboard's first screen and its refreshes cheap: running-task slots
mounted only when needed, a footer that keeps its keys when they are the same, strips
reused across window reloads. Each drives the real widgets in a real Textual app."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from textual.app import App, ComposeResult
from textual.widgets._footer import FooterKey

from core import Stage, TaskStatus, TaskView
from tests.tui.conftest import Seeded, wait_for
from tests.tui.driving import dashboard, make_app, ready
from tui.widgets.running import RUNNING_SHOWN_MAX, RunningNow, RunningTask
from tui.widgets.task_table import TaskTable

T0 = 1_800_000_000.0


def running(n: int, *, completed: int = 0, name: str = "doc") -> TaskView:
    return TaskView(
        task_id=f"{n:08d}" + "a" * 24,
        document_id="d" * 32,
        status=TaskStatus.RUNNING,
        stage=Stage.PARSE,
        completed=completed,
        total=10,
        attempt=1,
        error_code=None,
        error_detail=None,
        created_at=T0 + n,
        updated_at=T0 + n,
        revision=n * 100 + completed,
        document_name=f"{name}-{n}.pdf",
    )


class Holder(App[None]):
    def __init__(self, widget: Any) -> None:
        super().__init__()
        self.widget = widget

    def compose(self) -> ComposeResult:
        yield self.widget


def shown_slots(panel: RunningNow) -> list[RunningTask]:
    return [s for s in panel.query(RunningTask) if not s.has_class("-free")]


def label(slot: RunningTask, name: str) -> str:
    return str(slot.query_one(f".{name}").render())


async def test_running_slots_are_mounted_when_tasks_run_and_reused() -> None:
    panel = RunningNow()
    async with Holder(panel).run_test(size=(60, 40)) as pilot:
        panel.update_tasks({}, set())
        await pilot.pause()
        assert len(panel.query(RunningTask)) == 0  # nothing runs: no slots at all
        tasks = {t.task_id: t for t in (running(n) for n in range(3))}
        panel.update_tasks(tasks, set())
        await wait_for(pilot, lambda: len(shown_slots(panel)) == 3, what="three slots")
        assert len(panel.query(RunningTask)) == 3
        first = next(iter(tasks))
        assert "doc-0.pdf" in label(shown_slots(panel)[0], "running-title")
        # Progress only: the count follows.
        tasks[first] = replace(tasks[first], completed=7, revision=tasks[first].revision + 1)
        panel.update_tasks(tasks, set())
        await wait_for(
            pilot,
            lambda: label(shown_slots(panel)[0], "running-count") == "7/10",
            what="the new progress",
        )
        # The first task ends and another takes its slot: its own name, not the old one.
        del tasks[first]
        newcomer = running(9, name="other")
        tasks[newcomer.task_id] = newcomer
        panel.update_tasks(tasks, set())
        await wait_for(
            pilot,
            lambda: "other-9.pdf" in label(panel.query(RunningTask).first(), "running-title"),
            what="the newcomer in the freed slot",
        )
        assert len(panel.query(RunningTask)) == 3  # reused, none added
        assert label(panel.query(RunningTask).first(), "running-count") == "0/10"
        # More than there are bars: the rest summed up.
        many = {t.task_id: t for t in (running(n) for n in range(RUNNING_SHOWN_MAX + 4))}
        panel.update_tasks(many, set())
        await wait_for(
            pilot, lambda: len(shown_slots(panel)) == RUNNING_SHOWN_MAX, what="all the bars"
        )
        more = str(panel.query_one("#running-more").render())
        assert "4 more running" in more
        panel.update_tasks({}, set())
        await wait_for(pilot, lambda: not shown_slots(panel), what="every slot freed")


async def test_footer_keeps_its_keys_when_the_bindings_shown_are_the_same(
    seeded: Seeded,
) -> None:
    app = make_app(seeded)
    async with app.run_test(size=(160, 50)) as pilot:
        await ready(pilot, rows=len(seeded.tasks))
        screen = dashboard(app)
        await wait_for(pilot, lambda: len(screen.query(FooterKey)) > 3, what="the footer")
        before = list(screen.query(FooterKey))
        screen.refresh_bindings()
        await pilot.pause()
        await pilot.pause()
        assert list(screen.query(FooterKey)) == before  # the same widgets, not new ones
        # A narrower terminal shows fewer keys: those are composed anew.
        await pilot.resize_terminal(80, 24)
        await wait_for(
            pilot,
            lambda: len(screen.query(FooterKey)) < len(before),
            what="the narrow footer",
        )


async def test_a_window_loaded_again_reuses_its_rows_strips() -> None:
    table = TaskTable(clock=lambda: T0 + 100, stall_after_s=1e9)
    async with Holder(table).run_test(size=(160, 30)) as pilot:
        await pilot.pause()
        old = [running(n) for n in range(5)]
        new = [running(n) for n in range(10, 15)]
        table.load(old, T0 + 100)
        strips = {t.task_id: table._rows[t.task_id][1] for t in old}
        table.load(new, T0 + 100)
        assert not set(strips) & set(table.tasks)
        table.load(old, T0 + 100)
        assert all(table._rows[t][1] is strip for t, strip in strips.items())
        # A row whose look changed gets a new strip.
        moved = replace(old[0], completed=5, revision=old[0].revision + 1)
        table.apply([moved], lambda _task: True, T0 + 100)
        assert table._rows[moved.task_id][1] is not strips[moved.task_id]
        assert "5/10" in str(table.cell(moved.task_id, "progress"))
