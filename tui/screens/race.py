"""The claim race: two workers, side by side, each with its own log, both trying to
claim the same freshly submitted task at the same moment. The ledger's conditional
UPDATE lets exactly one through: one pane says ``claimed``, the other ``claim missed``.
It is the two-terminal demonstration from the spec, in one screen."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Header, Label, Log, Static

from core import Operator, WorkerEvent, visible
from tui.desk import Desk, desk_of
from tui.format import failure_line
from tui.widgets.footer import WholeKeysFooter

if TYPE_CHECKING:
    from tui.workforce import Workforce

RACERS = ("race-a", "race-b")
SETTLE_S = 0.2  # seconds for paused workers to finish a claim already under way


class RaceScreen(Screen[None]):
    """Run the race on open; space runs it again with a new task.

    Args:
        operator: The ledger's operator role, which submits each race's task.
        workforce: The dashboard's workers: paused while the race runs, and the
            parser pool the racers share.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("space", "again", "Race again"),
    ]

    def __init__(self, operator: Operator, workforce: Workforce) -> None:
        super().__init__()
        self.operator = operator
        self.workforce = workforce
        self.round = 0
        self.outcome: tuple[bool, bool] | None = None
        self._resume_workers = False

    @property
    def desk(self) -> Desk:
        return desk_of(self)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(
            "A new task is submitted, then two workers call run_task(task) on it at the "
            "same moment. The claim is one conditional UPDATE (status must still be "
            "claimable), so exactly one of them gets it.",
            id="race-explain",
        )
        with Horizontal(id="race-panes"):
            for racer in RACERS:
                with Vertical(classes="race-pane", id=f"pane-{racer}"):
                    yield Label(racer, classes="race-title")
                    yield Log(id=f"log-{racer}", max_lines=500)
        yield Static("", id="race-result", markup=False)
        yield WholeKeysFooter()

    def on_mount(self) -> None:
        # The dashboard's own workers would otherwise join in and spoil the race.
        workforce = self.workforce
        self._resume_workers = not workforce.paused
        workforce.set_paused(True)
        for racer in RACERS:
            self.query_one(f"#pane-{racer}").border_title = racer
        self.race()

    def on_unmount(self) -> None:
        if self._resume_workers:
            self.workforce.set_paused(False)

    def _log(self, racer: str) -> Log:
        return self.query_one(f"#log-{racer}", Log)

    def _writer(self, racer: str) -> Callable[[WorkerEvent], None]:
        log = self._log(racer)

        def write(event: WorkerEvent) -> None:
            # A worker's line can quote a parser's error about the document's bytes.
            log.write_line(visible(event.line))

        return write

    @work(exclusive=True, group="race", exit_on_error=False, description="claim race")
    async def race(self) -> None:
        desk, operator = self.desk, self.operator
        self.round += 1
        self.outcome = None
        result = self.query_one("#race-result", Static)
        result.remove_class("-done")
        for racer in RACERS:
            self.query_one(f"#pane-{racer}").remove_class("-won", "-missed")
        result.update(f"round {self.round}: submitting a task…")
        await asyncio.sleep(SETTLE_S)
        body = (
            f"# Claim race, round {self.round}\n\n"
            "Two workers reach for this note at the same moment; one of them gets it.\n"
        )
        try:
            document = await operator.upload(
                body.encode(), f"claim-race-{self.round}.md", actor=desk.actor
            )
            task = await operator.submit(document.document_id, actor=desk.actor)
        except Exception as exc:  # the ledger's refusal, or the store or database failing
            result.update(f"could not submit the race task: {failure_line(exc)}")
            return
        workers = [self.workforce.racer(racer, self._writer(racer)) for racer in RACERS]
        for racer in RACERS:
            log = self._log(racer)
            log.write_line(f"--- round {self.round}")
            log.write_line(f"run_task task={task.short_id} worker={racer}")
        try:
            won = await asyncio.gather(*(w.run_task(task.task_id) for w in workers))
        except Exception as exc:  # the ledger failed under the racers
            result.update(f"round {self.round}: the race failed: {failure_line(exc)}")
            return
        self.outcome = (bool(won[0]), bool(won[1]))
        for racer, ok in zip(RACERS, won, strict=True):
            pane = self.query_one(f"#pane-{racer}")
            pane.set_class(ok, "-won")
            pane.set_class(not ok, "-missed")
            pane.border_subtitle = "claimed" if ok else "claim missed"
        winners = [racer for racer, ok in zip(RACERS, won, strict=True) if ok]
        if len(winners) == 1:
            loser = next(r for r in RACERS if r not in winners)
            text = (
                f"round {self.round}: {winners[0]} claimed task {task.short_id}; "
                f"{loser}'s claim missed — exactly one claim went through."
            )
        elif not winners:
            text = (
                f"round {self.round}: neither claimed task {task.short_id}: another worker "
                "outside this screen took it first. Press space to race again."
            )
        else:  # pragma: no cover - would mean the claim is broken
            text = f"round {self.round}: BOTH claimed task {task.short_id} — this is a bug"
        result.update(text)
        result.add_class("-done")
        desk.poll_soon()

    def action_again(self) -> None:
        self.race()

    def action_back(self) -> None:
        self.dismiss(None)
