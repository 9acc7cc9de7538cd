"""IngestDeskApp: the dashboard's application object.

The app owns what lives as long as the dashboard: the ledger handle (opened and
closed by :func:`run_dashboard`, never here), the in-process workers and their parser
pool, and the polling loop that feeds every screen.

The polling loop (after Dolphie): read what changed since the last revision, apply it,
post one :class:`~tui.messages.LedgerChanged`, then re-arm a one-shot timer. Polls
never overlap, and a slow poll is never cancelled by the next tick.
"""

from __future__ import annotations

import asyncio
import gc
import getpass
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from textual import events, work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Input
from textual.worker import Worker as TextualWorker

from core import (
    IngestDeskError,
    Ledger,
    ParserPool,
    Settings,
    TaskStatus,
    TaskView,
    Worker,
    WorkerEvent,
    WorkerView,
)
from tui.messages import LedgerChanged
from tui.mirror import LedgerMirror, status_at
from tui.widgets.task_table import WINDOW_ROWS
from tui.widgets.workers import LocalWorker

if TYPE_CHECKING:
    from tui.screens.dashboard import DashboardScreen

POLL_INTERVAL_S = 0.5  # seconds between the end of one poll and the start of the next
POLL_SOON_S = 0.01  # seconds: the delay of a poll asked for "now"
BUSY_POLL_FACTOR = 2  # after a poll that brought changes, wait this many intervals
POLL_BATCH = 2000  # changed tasks read per poll; a full batch polls again at once
POLL_ERROR_BACKOFF_MAX_S = 5.0  # seconds between polls while the ledger cannot be read
BASELINE_TRIES = 5  # attempts at reading counts while no revision moves
RUNNING_LOAD_MAX = 500  # running tasks read at start
RESOLVE_PER_POLL = 25  # old tasks whose previous status is looked up per poll
RECONCILE_EVERY_S = 30.0  # seconds between count re-reads while the ledger is quiet
LEDGER_WORKERS_EVERY_S = 5.0  # seconds between reads of the worker registry
YOUNG_GC_ALLOCATIONS = 20_000  # net allocations per young collection (CPython: 700)
ACTIVITY_LINES = 200  # worker log lines buffered between polls at most
POOL_PROCESSES = 2  # parser processes shared by the in-process workers
STOP_WORKERS_TIMEOUT_S = 15.0  # seconds quitting waits for workers to hand back

# Actions that change the ledger: hidden and refused in read-only mode.
MUTATING_ACTIONS = frozenset(
    {
        "submit",
        "cancel",
        "retry",
        "bulk",
        "add_worker",
        "remove_worker",
        "toggle_pause",
        "race",
    }
)
# Keys of those actions, and what a refusal says when one is pressed in read-only mode.
READ_ONLY_REFUSALS: dict[str, str] = {
    "s": "submit files",
    "c": "cancel tasks",
    "r": "retry tasks",
    "b": "change tasks in bulk",
    "w": "add workers",
    "W": "stop workers",
    "p": "pause workers",
    "R": "run a claim race (it submits a task)",
}


class IngestDeskApp(App[int]):
    """The ingestdesk dashboard.

    Args:
        ledger: An open ledger; the caller closes it after the app exits.
        workers: In-process workers started with the app (0: watch only).
        read_only: Hide and refuse every action that changes the ledger.
        pool: Parser pool for the in-process workers (default: one the app owns).
        clock: Clock for ages, stalls and throughput (tests freeze it).
        poll_interval_s: Seconds between polls of the ledger.
        actor: Name recorded in the audit log for operator actions.
        worker_prefix: Prefix of in-process worker ids.
        open_race: Open the claim race screen at start (``ingestdesk race``).
        window_rows: Most rows the task table holds (the newest that match).
    """

    CSS_PATH = "app.tcss"
    TITLE = "ingestdesk"
    ENABLE_COMMAND_PALETTE = True

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit", tooltip="Stop workers (handing back their tasks) and quit"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("w", "add_worker", "+Worker", tooltip="Start one more in-process worker"),
        Binding("W", "remove_worker", "-Worker", tooltip="Stop the newest in-process worker"),
        Binding("p", "toggle_pause", "Pause", tooltip="Pause or resume the in-process workers"),
        Binding("R", "race", "Race", tooltip="Two workers race to claim one task"),
    ]

    def __init__(
        self,
        ledger: Ledger,
        *,
        workers: int = 2,
        read_only: bool = False,
        pool: ParserPool | None = None,
        clock: Callable[[], float] | None = None,
        poll_interval_s: float = POLL_INTERVAL_S,
        actor: str | None = None,
        worker_prefix: str | None = None,
        open_race: bool = False,
        window_rows: int = WINDOW_ROWS,
    ) -> None:
        super().__init__()
        self.ledger = ledger
        self.read_only = read_only
        self.initial_workers = 0 if read_only else max(0, workers)
        self.clock: Callable[[], float] = clock or time.time
        self.poll_interval_s = poll_interval_s
        self.actor = actor or _default_actor()
        # Short enough for the table's worker column, distinct between dashboards.
        self.worker_prefix = worker_prefix or f"tui{os.getpid() % 1000:03d}"
        self.open_race = open_race
        self.window_rows = window_rows
        self.mirror = LedgerMirror(stall_after_s=ledger.settings.stall_after_s)
        self.ledger_workers: list[WorkerView] = []
        self.workers_paused = False
        self._pool = pool
        self._own_pool = pool is None
        self._ingest: dict[str, tuple[Worker, TextualWorker[Any]]] = {}
        self._next_worker = 1
        self._activity: deque[str] = deque(maxlen=ACTIVITY_LINES)
        self._poll_timer: Timer | None = None
        self._polling = False
        self._last_poll_changed = False
        self._poll_again = False
        self._baseline_taken = False
        self._quitting = False
        self._poll_failures = 0
        self._last_poll_error = ""
        # Throttles run on the monotonic clock; self.clock is for what is shown.
        self._workers_read_at = float("-inf")
        self._gc_threshold = gc.get_threshold()
        self._reconciled_at = time.monotonic()
        self.sub_title = ledger.settings.db_url.split("///")[-1] + (
            "  [read-only]" if read_only else ""
        )

    # ----------------------------------------------------------------- startup

    def on_mount(self) -> None:
        from tui.screens.dashboard import DashboardScreen

        self.push_screen(DashboardScreen())
        for _ in range(self.initial_workers):
            self.add_worker()
        if self.open_race:
            self.action_race()
        self._arm_poll(0)

    # ----------------------------------------------------------------- polling

    def _arm_poll(self, delay: float) -> None:
        if not self._quitting:
            # Textual timers cannot take a zero interval; "now" is the next tick.
            delay = max(delay, POLL_SOON_S)
            self._poll_timer = self.set_timer(delay, self._poll, name="ledger-poll")

    def poll_soon(self) -> None:
        """Poll now instead of at the next tick (after an action), never twice at once."""
        if self._polling:
            self._poll_again = True
            return
        if self._poll_timer is not None:
            self._poll_timer.stop()
        self._arm_poll(0)

    @work(exclusive=True, group="poll", exit_on_error=False, description="read ledger changes")
    async def _poll(self) -> None:
        self._polling = True
        delay = self.poll_interval_s
        try:
            if not self._baseline_taken:
                await self._take_baseline()
            if await self._poll_once():
                delay = 0
            elif self._last_poll_changed:
                # Under a stream of changes every poll repaints the table; polling at
                # half the rate halves that cost, while a quiet ledger is still
                # noticed within one normal interval.
                delay = self.poll_interval_s * BUSY_POLL_FACTOR
            self._poll_failures = 0
        except Exception as exc:  # the dashboard must outlive a flaky ledger
            self._poll_failures += 1
            delay = min(self.poll_interval_s * 2**self._poll_failures, POLL_ERROR_BACKOFF_MAX_S)
            message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            if message != self._last_poll_error:
                self._last_poll_error = message
                self.notify(
                    f"cannot read the ledger: {message}; retrying",
                    severity="error",
                    title="ledger",
                )
        finally:
            self._polling = False
            if self._poll_again:
                self._poll_again, delay = False, 0
            self._arm_poll(delay)

    async def _take_baseline(self) -> None:
        ledger = self.ledger
        for _ in range(BASELINE_TRIES):
            before = await ledger.reads.revision()
            at = self.clock()
            counts = await ledger.reads.counts()
            after = await ledger.reads.revision()
            if before == after:
                break
        running = await ledger.reads.list_tasks(status=TaskStatus.RUNNING, limit=RUNNING_LOAD_MAX)
        self.mirror.start(counts=counts, revision=before, at=at, running=running)
        self._reconciled_at = time.monotonic()
        self._baseline_taken = True
        # Start-up is done: move everything alive now (imports, Textual's DOM and
        # styles, SQLAlchemy's metadata) out of the cyclic collector's reach. Each
        # full collection walked all of it and froze the loop for 70-170 ms, the
        # slowest key presses measured by bench.dashboard. Then collect the young
        # generation after 20 000 allocations instead of 700: a frame's and a parsed
        # document's short-lived objects are freed by reference counting before a
        # collection sees them, instead of being promoted. Promotions are what set
        # off full collections (~40 a minute with two in-process workers, 40-60 ms
        # each); now none in bench.dashboard's key presses. Both undone at exit.
        gc.freeze()
        _, middle, oldest = gc.get_threshold()
        gc.set_threshold(YOUNG_GC_ALLOCATIONS, middle, oldest)

    async def _poll_once(self) -> bool:
        """One poll. True when more changes are waiting (the batch was full)."""
        ledger, mirror = self.ledger, self.mirror
        changes = await ledger.reads.tasks_since(mirror.revision, limit=POLL_BATCH)
        self._last_poll_changed = bool(changes)
        fresh = mirror.apply(changes)
        for task_id in list(mirror.unresolved)[:RESOLVE_PER_POLL]:
            history = await ledger.reads.task_history(task_id)
            mirror.resolve(task_id, status_at(history, mirror.baseline_at))
        tick = time.monotonic()
        if tick - self._workers_read_at >= LEDGER_WORKERS_EVERY_S:
            self.ledger_workers = await ledger.registry.workers()
            self._workers_read_at = tick
        if not changes and tick - self._reconciled_at >= RECONCILE_EVERY_S:
            counts = await ledger.reads.counts()
            # Exact only if nothing committed since the last read of changes.
            if await ledger.reads.revision() == mirror.revision:
                mirror.reconcile(counts)
            self._reconciled_at = tick
        now = self.clock()
        activity = list(self._activity)
        self._activity.clear()
        self._broadcast(fresh, now, activity)
        return len(changes) >= POLL_BATCH

    def _broadcast(self, tasks: list[TaskView], now: float, activity: list[str]) -> None:
        # Every screen on the stack hears about changes, so one brought back to the
        # top is already current.
        for screen in self.screen_stack:
            # Only screens that listen: a message to any screen can schedule a repaint.
            if hasattr(screen, "on_ledger_changed"):
                screen.post_message(LedgerChanged(tasks, now, activity))

    # ----------------------------------------------------------------- workers

    @property
    def pool(self) -> ParserPool:
        """The parser pool shared by in-process workers (started on first use)."""
        if self._pool is None:
            self._pool = ParserPool(workers=POOL_PROCESSES)
        return self._pool

    def local_workers(self) -> list[LocalWorker]:
        return [
            LocalWorker(worker_id, worker.state, tuple(worker.current))
            for worker_id, (worker, _) in self._ingest.items()
        ]

    def _on_worker_event(self, event: WorkerEvent) -> None:
        # Called on this loop by the workers; the next poll hands the lines on.
        self._activity.append(event.line)

    def add_worker(self) -> str:
        """Start one more in-process worker; returns its id."""
        worker_id = f"{self.worker_prefix}-w{self._next_worker}"
        self._next_worker += 1
        worker = Worker(self.ledger, worker_id, pool=self.pool, on_event=self._on_worker_event)
        if self.workers_paused:
            worker.pause()
        runner = self.run_worker(
            worker.run(),
            name=worker_id,
            group="ingest",
            description=f"in-process worker {worker_id}",
            exit_on_error=False,
        )
        self._ingest[worker_id] = (worker, runner)
        return worker_id

    async def retire_worker(self, worker_id: str) -> None:
        """Stop one in-process worker; its running tasks are handed back."""
        entry = self._ingest.pop(worker_id, None)
        if entry is None:
            return
        worker, runner = entry
        worker.stop()
        await self._settle(runner)

    @staticmethod
    async def _settle(runner: TextualWorker[object]) -> None:
        try:
            await asyncio.wait_for(runner.wait(), STOP_WORKERS_TIMEOUT_S)
        except Exception:  # a worker that failed or hung must not block quitting
            runner.cancel()

    async def stop_workers(self) -> None:
        """Stop every in-process worker and wait until each has handed back its tasks."""
        entries = list(self._ingest.values())
        self._ingest.clear()
        for worker, _ in entries:
            worker.stop()
        await asyncio.gather(*(self._settle(runner) for _, runner in entries))

    def action_add_worker(self) -> None:
        if self.refuse_if_read_only("add a worker"):
            return
        worker_id = self.add_worker()
        self.notify(f"started worker {worker_id}", timeout=2)

    def action_remove_worker(self) -> None:
        if self.refuse_if_read_only("stop a worker"):
            return
        if not self._ingest:
            self.notify("no in-process workers to stop", severity="warning")
            return
        worker_id = list(self._ingest)[-1]
        self._retire_in_background(worker_id)

    @work(group="retire", exit_on_error=False, description="stop an in-process worker")
    async def _retire_in_background(self, worker_id: str) -> None:
        await self.retire_worker(worker_id)
        self.notify(f"stopped worker {worker_id}; its running tasks were handed back", timeout=3)

    def action_toggle_pause(self) -> None:
        if self.refuse_if_read_only("pause workers"):
            return
        self.set_workers_paused(not self.workers_paused)
        self.notify(
            "workers paused: running tasks finish, no new claims"
            if self.workers_paused
            else "workers resumed",
            timeout=2,
        )

    def set_workers_paused(self, paused: bool) -> None:
        self.workers_paused = paused
        for worker, _ in self._ingest.values():
            if paused:
                worker.pause()
            else:
                worker.resume()

    # ----------------------------------------------------------------- actions

    def refuse_if_read_only(self, what: str) -> bool:
        """In read-only mode, say that ``what`` cannot be done and return True."""
        if self.read_only:
            self.notify(f"read-only: cannot {what}", severity="warning", title="read-only")
        return self.read_only

    def on_key(self, event: events.Key) -> None:
        # In read-only mode the bindings of changing actions are hidden, so their
        # keys reach here unhandled: say why nothing happened.
        if (
            self.read_only
            and event.key in READ_ONLY_REFUSALS
            and not isinstance(self.focused, Input)
        ):
            event.stop()
            self.refuse_if_read_only(READ_ONLY_REFUSALS[event.key])

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide ledger-changing actions from the footer and palette in read-only mode."""
        return not (self.read_only and action in MUTATING_ACTIONS)

    def action_help(self) -> None:
        from tui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_race(self) -> None:
        if self.refuse_if_read_only("run a claim race (it submits a task)"):
            return
        from tui.screens.race import RaceScreen

        if not isinstance(self.screen, RaceScreen):
            self.push_screen(RaceScreen())

    async def action_quit(self) -> None:
        """Stop the workers cleanly (their running tasks go back to the queue), then exit."""
        if self._quitting:
            return
        self._quitting = True
        if self._poll_timer is not None:
            self._poll_timer.stop()
        if self._ingest:
            self.notify("stopping workers; running tasks are handed back…", timeout=5)
        await self.shutdown()
        self.exit(0)

    async def shutdown(self) -> None:
        """Stop workers and the parser pool this app owns. Safe to call twice."""
        self._quitting = True
        await self.stop_workers()
        if self._own_pool and self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.aclose()

    async def on_unmount(self) -> None:
        # Covers exits that did not go through action_quit (tests, ctrl+q, errors).
        await self.shutdown()
        gc.unfreeze()
        gc.set_threshold(*self._gc_threshold)

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        commands: list[tuple[str, str, str, Callable[[], object]]] = []
        dashboard = self._dashboard()
        if dashboard is not None:
            commands += dashboard.palette_commands()
        commands += [
            (
                "Help",
                "Every key, the two state machines and the error codes",
                "help",
                self.action_help,
            ),
            (
                "Add worker",
                "Start one more in-process worker",
                "add_worker",
                self.action_add_worker,
            ),
            (
                "Remove worker",
                "Stop the newest in-process worker",
                "remove_worker",
                self.action_remove_worker,
            ),
            (
                "Pause / resume workers",
                "Stop or restart claiming",
                "toggle_pause",
                self.action_toggle_pause,
            ),
            ("Claim race", "Two workers race to claim one new task", "race", self.action_race),
        ]
        for title, help_text, action, callback in commands:
            if self.read_only and action in MUTATING_ACTIONS:
                continue
            yield SystemCommand(title, help_text, callback)

    def _dashboard(self) -> DashboardScreen | None:
        from tui.screens.dashboard import DashboardScreen

        for screen in self.screen_stack:
            if isinstance(screen, DashboardScreen):
                return screen
        return None


def _default_actor() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in some containers
        return "operator"


async def _run(settings: Settings, **options: object) -> int:
    try:
        ledger = await Ledger.open(settings)
    except IngestDeskError as exc:
        print(f"ingestdesk: {exc.message}", file=sys.stderr)
        return exc.exit_code or 1
    except Exception as exc:  # e.g. a driver error before the ledger's own checks
        print(f"ingestdesk: cannot open the ledger: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    try:
        app = IngestDeskApp(ledger, **options)  # type: ignore[arg-type]
        result = await app.run_async()
        return int(result or 0) if app.return_code in (None, 0) else int(app.return_code or 1)
    finally:
        await ledger.close()


def run_dashboard(settings: Settings, *, workers: int = 2, read_only: bool = False) -> int:
    """Open the ledger, run the dashboard until the operator quits, close the ledger.

    A ledger that cannot be opened gets one line on stderr and exit code 1, before
    any screen is drawn.

    Returns:
        The process exit code.
    """
    return asyncio.run(_run(settings, workers=workers, read_only=read_only))


def run_race(settings: Settings) -> int:
    """``ingestdesk race``: the dashboard opened on the claim race screen, no workers."""
    return asyncio.run(_run(settings, workers=0, open_race=True))
