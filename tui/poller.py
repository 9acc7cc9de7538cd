"""The live loop (after Dolphie): fetch → diff → broadcast → re-arm.

Each poll reads what changed since the mirror's revision, applies it to the
:class:`~tui.mirror.LedgerMirror`, posts one :class:`~tui.messages.LedgerChanged`
to every listening screen, then re-arms a one-shot timer. Polls never overlap, and
a slow poll is never cancelled by the next tick (no ``set_interval``).

The first poll takes the baseline: counts and running tasks, read while no revision
moves. While the ledger is quiet the counts are re-read now and then and replace the
mirror's, which heals any drift.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from core import TaskStatus, TaskView, WorkerView
from core.states import RequestState
from tui.format import failure_line
from tui.messages import LedgerChanged
from tui.mirror import status_at

if TYPE_CHECKING:
    from textual.app import App
    from textual.timer import Timer
    from textual.worker import Worker as TextualWorker

    from core import Reads, WorkerRegistry
    from core.ledger import ProviderLedger
    from tui.mirror import LedgerMirror

POLL_INTERVAL_S = 0.5  # seconds between the end of one poll and the start of the next
POLL_SOON_S = 0.01  # seconds: the delay of a poll asked for "now"
BUSY_POLL_FACTOR = 2  # after a poll that brought changes, wait this many intervals
POLL_BATCH = 2000  # changed tasks read per poll; a full batch polls again at once
POLL_ERROR_BACKOFF_MAX_S = 5.0  # seconds between polls while the ledger cannot be read
BASELINE_TRIES = 5  # attempts at reading counts while no revision moves
RUNNING_LOAD_MAX = 500  # running tasks read at start
RESOLVE_PER_POLL = 25  # old tasks whose previous status is looked up per poll
RECONCILE_EVERY_S = 30.0  # seconds between count re-reads while the ledger is quiet
# Seconds between reads of the worker registry and of the provider requests' counts.
LEDGER_WORKERS_EVERY_S = 5.0


def _no_activity() -> list[str]:
    return []


def _nothing() -> None:
    return None


def _no_outage(_why: str | None) -> None:
    return None


class Poller:
    """Keeps a mirror of the ledger current and tells the screens.

    Args:
        host: The app: its timers and Textual workers run the loop, its screen stack
            hears the news, its notifications report a ledger that cannot be read.
        reads: The ledger's read role.
        registry: The ledger's worker registry.
        mirror: The mirror to keep current.
        providers: The provider ledger, whose counts per request state are read as
            often as the worker registry (None: not read).
        clock: Clock for what is shown (tests freeze it).
        interval_s: Seconds between polls.
        activity: Worker log lines since the last poll, handed on with each poll.
        on_baseline: Called once, when the baseline has been read.
        on_outage: Called with one line when polls start failing (the ledger cannot
            be read), and with None when a poll succeeds again.
    """

    def __init__(
        self,
        host: App[Any],
        reads: Reads,
        registry: WorkerRegistry,
        mirror: LedgerMirror,
        *,
        providers: ProviderLedger | None = None,
        clock: Callable[[], float],
        interval_s: float = POLL_INTERVAL_S,
        activity: Callable[[], list[str]] = _no_activity,
        on_baseline: Callable[[], None] = _nothing,
        on_outage: Callable[[str | None], None] = _no_outage,
    ) -> None:
        self.host = host
        self.reads = reads
        self.registry = registry
        self.mirror = mirror
        self.providers = providers
        self.clock = clock
        self.interval_s = interval_s
        self.activity = activity
        self.on_baseline = on_baseline
        self.on_outage = on_outage
        self.ledger_workers: list[WorkerView] = []
        self.provider_counts: dict[RequestState, int] = dict.fromkeys(RequestState, 0)
        self.baseline_taken = False
        self.polls = 0  # polls run, for bench.dashboard
        self._timer: Timer | None = None
        self._polling = False
        self._last_changed = False
        self._again = False
        self._stopped = False
        self._failures = 0
        self._last_error = ""
        # Throttles run on the monotonic clock; self.clock is for what is shown.
        self._workers_read_at = float("-inf")
        self._reconciled_at = time.monotonic()

    # ----------------------------------------------------------------- control

    def start(self) -> None:
        """Poll now, and keep polling."""
        # Not through a timer: at start-up its first tick comes only once the first
        # frame is drawn, and the baseline's reads can run while it is.
        if not self._stopped:
            self._run()

    def stop(self) -> None:
        """No more polls (quitting). A poll under way finishes without re-arming."""
        self._stopped = True
        if self._timer is not None:
            self._timer.stop()

    def poll_soon(self) -> None:
        """Poll now instead of at the next tick (after an action), never twice at once.

        The slow reads (workers, provider counts) are due at once too: an action is
        a person's, rare, and may have changed them (a review decision does).
        """
        self._workers_read_at = float("-inf")
        if self._polling:
            self._again = True
            return
        if self._timer is not None:
            self._timer.stop()
        self._arm(0)

    def _arm(self, delay: float) -> None:
        if not self._stopped:
            # Textual timers cannot take a zero interval; "now" is the next tick.
            delay = max(delay, POLL_SOON_S)
            self._timer = self.host.set_timer(delay, self._run, name="ledger-poll")

    def _run(self) -> TextualWorker[None]:
        # The method, not a coroutine made now: a poll cancelled before it starts
        # (the app quitting) must leave no coroutine behind that was never awaited.
        return self.host.run_worker(
            self._poll,
            name="ledger-poll",
            group="poll",
            description="read ledger changes",
            exclusive=True,
            exit_on_error=False,
        )

    # ----------------------------------------------------------------- polling

    async def _poll(self) -> None:
        self._polling = True
        delay = self.interval_s
        try:
            if not self.baseline_taken:
                await self._take_baseline()
                # The counts on screen now, before the first poll's reads (changes,
                # workers, provider requests): at start-up every read waits its turn
                # on a loop busy drawing the first frames.
                self._broadcast([], self.clock(), [])
            if await self._poll_once():
                delay = 0
            elif self._last_changed:
                # Under a stream of changes every poll repaints the table; polling at
                # half the rate halves that cost, while a quiet ledger is still
                # noticed within one normal interval.
                delay = self.interval_s * BUSY_POLL_FACTOR
            if self._failures:
                # Said once, like the failure: the view is live again by itself.
                self._failures, self._last_error = 0, ""
                self.on_outage(None)
                self.host.notify("the ledger can be read again", title="ledger", timeout=4)
        except Exception as exc:  # the dashboard must outlive a flaky ledger
            self._failures += 1
            delay = min(self.interval_s * 2**self._failures, POLL_ERROR_BACKOFF_MAX_S)
            message = failure_line(exc)
            if message != self._last_error:
                self._last_error = message
                self.on_outage(message)
                self.host.notify(
                    f"cannot read the ledger: {message}; retrying",
                    severity="error",
                    title="ledger",
                )
        finally:
            self._polling = False
            if self._again:
                self._again, delay = False, 0
            self._arm(delay)

    async def _take_baseline(self) -> None:
        reads = self.reads
        for _ in range(BASELINE_TRIES):
            before = await reads.revision()
            at = self.clock()
            # Side by side, on two of the ledger's threads: one wait, not two.
            counts, running = await asyncio.gather(
                reads.counts(),
                reads.list_tasks(status=TaskStatus.RUNNING, limit=RUNNING_LOAD_MAX),
            )
            after = await reads.revision()
            if before == after:
                break
        self.mirror.start(counts=counts, revision=before, at=at, running=running)
        self._reconciled_at = time.monotonic()
        self.baseline_taken = True
        self.on_baseline()

    async def _poll_once(self) -> bool:
        """One poll. True when more changes are waiting (the batch was full)."""
        self.polls += 1
        reads, mirror = self.reads, self.mirror
        changes = await reads.tasks_since(mirror.revision, limit=POLL_BATCH)
        self._last_changed = bool(changes)
        fresh = mirror.apply(changes)
        unresolved = list(mirror.unresolved)[:RESOLVE_PER_POLL]
        if unresolved:
            # One read for all of them: under changes spread over many old tasks a
            # read per task was what grew the poll's cost (bench.dashboard --million).
            histories = await reads.task_histories(unresolved)
            for task_id, history in histories.items():
                mirror.resolve(task_id, status_at(history, mirror.baseline_at))
        tick = time.monotonic()
        if tick - self._workers_read_at >= LEDGER_WORKERS_EVERY_S:
            self.ledger_workers = await self.registry.workers()
            # Provider requests change without any task changing (reconcile settles
            # them), so the revision feed cannot tell; one GROUP BY now and then can.
            if self.providers is not None:
                self.provider_counts = await self.providers.counts()
            self._workers_read_at = tick
        if not changes and tick - self._reconciled_at >= RECONCILE_EVERY_S:
            counts = await reads.counts()
            # Exact only if nothing committed since the last read of changes.
            if await reads.revision() == mirror.revision:
                mirror.reconcile(counts)
            self._reconciled_at = tick
        self._broadcast(fresh, self.clock(), self.activity())
        return len(changes) >= POLL_BATCH

    def _broadcast(self, tasks: list[TaskView], now: float, activity: list[str]) -> None:
        # Every screen on the stack hears about changes, so one brought back to the
        # top is already current.
        for screen in self.host.screen_stack:
            # Only screens that listen: a message to any screen can schedule a repaint.
            if hasattr(screen, "on_ledger_changed"):
                screen.post_message(LedgerChanged(tasks, now, activity))
