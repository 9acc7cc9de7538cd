"""Workers claim tasks from the ledger and run them through the pipeline.

The same :class:`Worker` runs inside the dashboard (as coroutines on its event loop)
and as ``ingestdesk worker`` processes (:mod:`core.cli.worker`). CPU-bound parsing
happens in a process pool and database I/O is async, so a worker never blocks the
loop it shares.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

from core.errors import error_detail_of
from core.ingest.embedder import Embedder, HashingEmbedder
from core.ingest.parse_pool import ParserPool
from core.ingest.pipeline import PARSER_UNAVAILABLE, Outcome, Pipeline, PipelineOptions
from core.ingest.providers import RemoteProvider
from core.ingest.reconcile import reconcile_with
from core.ledger import Claim, Ledger
from core.safe_text import check_identifier
from core.store import ObjectStore

logger = logging.getLogger(__name__)

IDLE_POLL_MIN_S = 0.2  # seconds between claim attempts right after work ran out
IDLE_POLL_MAX_S = 2.0  # seconds; idle polling backs off up to this
REAP_EVERY_S = 5.0  # seconds between sweeps for expired leases
REGISTRY_HEARTBEAT_S = 10.0  # seconds between worker-registry heartbeats
# With a remote provider, unknown requests (replies lost, workers killed mid-call) are
# looked up this often, besides once at start; each request's own back-off decides
# whether it is asked again (see core.ingest.reconcile).
RECONCILE_EVERY_S = 15.0  # seconds
# Claims a worker takes ahead of its free slots, in one claim transaction, when tasks
# are quick: about this much work by the recent average task time. A claim costs a
# write transaction (~1 ms for one task, ~0.25 ms each in a batch of eight), as much
# as a whole small document's indexing. Slow tasks get no claims ahead, so several
# workers still share a queue of big documents evenly.
PREFETCH_WINDOW_S = 0.05  # seconds of work
PREFETCH_MAX = 16  # claims held ahead at most
TASK_TIME_SMOOTHING = 0.2  # weight of the newest task in the average task time
# Tasks quicker than this on average (small texts, one-page PDFs) run with twice the
# worker's concurrency. Two in flight keep the parser process busy with the next big
# document while the last one is indexed; with quick tasks, two often means none is a
# PDF waiting for the parser, which then idles (measured on 500 one-page PDFs + 500
# notes: 5% more documents/s with four). Slow tasks keep the set concurrency, so a
# worker holds no more big documents than it can start on.
QUICK_TASK_S = 0.02  # seconds

# The worker, and the task, that the code running now works for: set for the worker's
# loop and for each task's coroutine (contextvars follow asyncio tasks), so a record
# logged deep in the pipeline or the parser pool, by code that knows no task, still
# names its task in the worker's log (core.cli.logs reads them).
current_worker_id: ContextVar[str | None] = ContextVar("ingestdesk_worker_id", default=None)
current_task_id: ContextVar[str | None] = ContextVar("ingestdesk_task_id", default=None)


@dataclass(frozen=True)
class WorkerEvent:
    """One line of a worker's story, for logs and the dashboard."""

    worker_id: str
    task_id: str | None
    kind: str
    line: str


@dataclass
class WorkerStats:
    claimed: list[str] = field(default_factory=list)
    outcomes: dict[str, str] = field(default_factory=dict)
    missed: list[str] = field(default_factory=list)
    # Tasks given back to the queue unfinished on stop or pause (running, or claimed
    # ahead), each once, in the order they went back.
    handed_back: list[str] = field(default_factory=list)


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Worker:
    """Claims tasks (up to ``concurrency`` at once, twice that while tasks are quick)
    and runs them to the end."""

    def __init__(
        self,
        ledger: Ledger,
        worker_id: str | None = None,
        *,
        pool: ParserPool | None = None,
        embedder: Embedder | RemoteProvider | None = None,
        options: PipelineOptions | None = None,
        concurrency: int = 1,
        parsers: int | None = None,
        lease_s: float | None = None,
        on_event: Callable[[WorkerEvent], None] | None = None,
        register: bool = True,
    ) -> None:
        """Set the worker up; nothing is claimed until :meth:`run` (or a ``run_*``).

        Raises:
            BadInput: ``worker_id`` is empty, too long or holds control characters
                (refused here, not at the first claim).
            ValueError: ``concurrency`` is below 1.
        """
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.ledger = ledger
        self.worker_id = check_identifier(worker_id or default_worker_id(), "worker id")
        self.concurrency = concurrency
        self.lease_s = ledger.settings.lease_s if lease_s is None else lease_s
        self._own_pool = pool is None
        # With more tasks in flight than parser processes, the next document is
        # parsed while the last one is embedded and indexed.
        self.pool = pool if pool is not None else ParserPool(workers=parsers or concurrency)
        self.pipeline = Pipeline(
            ledger,
            ObjectStore(ledger.settings.store_root),
            self.pool,
            embedder or HashingEmbedder(),
            options,
        )
        self.on_event = on_event
        self.register = register
        self.stats = WorkerStats()
        self._stop = asyncio.Event()
        self._resume = asyncio.Event()
        self._resume.set()
        self._running: dict[str, asyncio.Task[Outcome]] = {}
        self._claims: dict[str, Claim] = {}
        self._queued: deque[Claim] = deque()  # claimed ahead, not started yet
        self._task_s: float | None = None  # moving average of a task's wall time
        self._state = "idle"
        # Why the worker stopped by itself (it cannot parse), or None.
        self.fault: str | None = None

    # --------------------------------------------------------------- state

    @property
    def state(self) -> str:
        if self._stop.is_set():
            return "stopped"
        if not self._resume.is_set():
            return "paused"
        return "running" if self._running else self._state

    @property
    def current(self) -> list[str]:
        return list(self._running)

    @property
    def paused(self) -> bool:
        return not self._resume.is_set()

    def pause(self) -> None:
        """Stop claiming new tasks; running ones carry on."""
        self._resume.clear()

    def resume(self) -> None:
        self._resume.set()

    def stop(self) -> None:
        """Stop claiming; :meth:`run` then finishes or hands back what it holds."""
        self._stop.set()
        self._resume.set()

    def _say(self, kind: str, line: str, task_id: str | None = None) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(WorkerEvent(self.worker_id, task_id, kind, line))
        except Exception as exc:
            # A log sink that breaks (the CLI's stdout piped into a reader that died)
            # must not fail tasks, nor leave a claim held with nothing running it: the
            # work goes on, without its story.
            self.on_event = None
            logger.warning(
                "worker=%s stops reporting events: %s", self.worker_id, error_detail_of(exc)
            )

    # ----------------------------------------------------------- one task

    @contextlib.contextmanager
    def _as_this_worker(self) -> Iterator[None]:
        """Log records made in here name this worker (see :data:`current_worker_id`)."""
        token = current_worker_id.set(self.worker_id)
        try:
            yield
        finally:
            current_worker_id.reset(token)

    async def run_task(self, task_id: str, *, stop_grace_s: float = 0.0) -> bool:
        """Claim this one task and run it. False if the claim was missed (another
        worker got it first, or it is not claimable): that is not an error."""
        with self._as_this_worker():
            return await self._run_task(task_id, stop_grace_s)

    async def _run_task(self, task_id: str, stop_grace_s: float) -> bool:
        claim = await self.ledger.queue.claim(
            task_id, self.worker_id, lease_s=self.lease_s, with_document=True
        )
        if claim is None:
            self.stats.missed.append(task_id)
            self._say("missed", f"claim missed task={task_id[:8]} worker={self.worker_id}", task_id)
            return False
        await self._run_claimed(claim, stop_grace_s)
        return True

    async def run_one(self, *, stop_grace_s: float = 0.0) -> bool:
        """Claim the oldest claimable task and run it; False if there was none."""
        with self._as_this_worker():
            return await self._run_one(stop_grace_s)

    async def _run_one(self, stop_grace_s: float) -> bool:
        claims = await self.ledger.queue.claim_next(
            self.worker_id, limit=1, lease_s=self.lease_s, with_document=True
        )
        if not claims:
            self._say("idle", f"nothing to claim worker={self.worker_id}")
            return False
        await self._run_claimed(claims[0], stop_grace_s)
        return True

    async def _run_claimed(self, claim: Claim, stop_grace_s: float) -> None:
        task = asyncio.create_task(self._execute(claim), name=f"task-{claim.task_id[:8]}")
        self._running[claim.task_id] = task
        stop = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait([task, stop], return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                await self._wind_down(stop_grace_s)
        finally:
            stop.cancel()
            self._running.pop(claim.task_id, None)

    async def _execute(self, claim: Claim) -> Outcome:
        # This coroutine is its own asyncio task, with its own copy of the context:
        # what is set here is seen by everything this task runs, and by no other task.
        current_worker_id.set(self.worker_id)
        current_task_id.set(claim.task_id)
        self.stats.claimed.append(claim.task_id)
        self._claims[claim.task_id] = claim
        self._say(
            "claimed",
            f"claimed task={claim.task_id[:8]} worker={self.worker_id} status=running "
            f"attempt={claim.attempt}",
            claim.task_id,
        )
        started = time.perf_counter()
        try:
            # The pipeline renews the lease itself, folded into its progress writes.
            outcome = await self.pipeline.run(
                claim, lambda line: self._say("progress", line, claim.task_id)
            )
        finally:
            self._claims.pop(claim.task_id, None)
        took = time.perf_counter() - started
        average = self._task_s
        self._task_s = took if average is None else average + TASK_TIME_SMOOTHING * (took - average)
        self.stats.outcomes[claim.task_id] = outcome.result
        if outcome.result == PARSER_UNAVAILABLE and self.fault is None:
            # Every further claim would be handed back the same way: stop, and say why.
            self.fault = outcome.detail or "no parser process could start"
            self._say(
                "stopped",
                f"worker={self.worker_id} stops: {self.fault}; its tasks go back to the queue",
                claim.task_id,
            )
            self.stop()
        return outcome

    async def close(self) -> None:
        """Release the parser pool if this worker created it."""
        if self._own_pool:
            await self.pool.aclose()

    # --------------------------------------------------------------- loop

    async def run(self, *, until_idle: bool = False, stop_grace_s: float = 0.0) -> WorkerStats:
        """Claim and run tasks until :meth:`stop` (or, with ``until_idle``, until
        nothing is claimable and nothing is running)."""
        with self._as_this_worker():
            return await self._run(until_idle, stop_grace_s)

    async def _run(self, until_idle: bool, stop_grace_s: float) -> WorkerStats:
        if self.register:
            await self.ledger.registry.register(self.worker_id)
        # Reap before the first claim so a burst run picks up orphaned tasks too;
        # settle unknown provider requests before any task meets one.
        await self.reap_once()
        await self.reconcile_once()
        side = [
            asyncio.create_task(self._reaper(), name="reaper"),
            asyncio.create_task(self._registry_heartbeat(), name="registry-heartbeat"),
            asyncio.create_task(self._reconciler(), name="reconciler"),
        ]
        idle_s = IDLE_POLL_MIN_S
        try:
            while not self._stop.is_set():
                if not self._resume.is_set():
                    await self._hand_back_queued("handed back on pause")
                    await self._resume.wait()
                if self._stop.is_set():
                    break
                free = self._slots() - len(self._running)
                if free > 0 and not self._queued:
                    self._state = "claiming"
                    self._queued.extend(
                        await self.ledger.queue.claim_next(
                            self.worker_id,
                            limit=free + self._claims_ahead(),
                            lease_s=self.lease_s,
                            with_document=True,
                        )
                    )
                    self._state = "idle"
                started = handed_back = 0
                while started < free and self._queued:
                    claim = self._queued.popleft()
                    if claim.lease_expires_at - self.ledger.clock() < claim.lease_s / 2:
                        # Held ahead for too long (a slow document came first): give
                        # it back, claimable at once, rather than start on half a lease.
                        await self._hand_back(claim, "handed back unstarted")
                        handed_back += 1
                        continue
                    task = asyncio.create_task(
                        self._execute(claim), name=f"task-{claim.task_id[:8]}"
                    )
                    self._running[claim.task_id] = task
                    task.add_done_callback(self._forget)
                    started += 1
                if started or handed_back or self._queued:
                    idle_s = IDLE_POLL_MIN_S
                    if started or handed_back:
                        continue
                if until_idle and not self._running and not self._queued:
                    break
                await self._wait_for_change(idle_s)
                idle_s = min(idle_s * 2, IDLE_POLL_MAX_S)
        finally:
            for t in side:
                t.cancel()
            await self._wind_down(stop_grace_s)
            await self._hand_back_queued("handed back on shutdown")
            for t in side:
                with contextlib.suppress(asyncio.CancelledError):
                    await t
            if self.register:
                with contextlib.suppress(Exception):
                    await self.ledger.registry.heartbeat(self.worker_id, stopped=True)
            await self.close()
        return self.stats

    def _slots(self) -> int:
        """Tasks to run at once: the concurrency, doubled for quick tasks."""
        if self._task_s is not None and self._task_s < QUICK_TASK_S:
            return 2 * self.concurrency
        return self.concurrency

    def _claims_ahead(self) -> int:
        """How many claims to take beyond the free slots (see PREFETCH_WINDOW_S)."""
        if self._task_s is None:
            return 0
        return min(PREFETCH_MAX, int(PREFETCH_WINDOW_S / max(self._task_s, 1e-6)))

    async def _hand_back_queued(self, reason: str) -> None:
        while self._queued:
            claim = self._queued.popleft()
            if await self._hand_back(claim, reason):
                self._handed_back(claim.task_id)

    async def _hand_back(self, claim: Claim, reason: str) -> bool:
        with contextlib.suppress(Exception):
            return await self.ledger.queue.hand_back(claim, reason=reason)
        return False

    def _handed_back(self, task_id: str) -> None:
        """Remember a task given back unfinished on stop or pause (a claim held ahead
        and given back unstarted is this worker's own scheduling, not counted)."""
        if task_id not in self.stats.handed_back:
            self.stats.handed_back.append(task_id)

    def _forget(self, task: asyncio.Task[Outcome]) -> None:
        for task_id, running in list(self._running.items()):
            if running is task:
                del self._running[task_id]

    async def _wait_for_change(self, poll_s: float) -> None:
        """Sleep until a slot frees up, stop is requested, or the poll interval ends."""
        waiters = [asyncio.create_task(self._stop.wait())]
        waiters.extend(self._running.values())  # type: ignore[arg-type]
        await asyncio.wait(waiters, timeout=poll_s, return_when=asyncio.FIRST_COMPLETED)
        waiters[0].cancel()

    async def _wind_down(self, grace_s: float) -> None:
        """Finish running tasks within the grace period, then hand the rest back so
        another worker can take them at once instead of waiting out the lease."""
        if not self._running:
            return
        if grace_s > 0:
            await asyncio.wait(list(self._running.values()), timeout=grace_s)
        for task_id, task in list(self._running.items()):
            claim = self._claims.get(task_id)  # read first: the task drops it on exit
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            if claim is not None and await self.ledger.queue.hand_back(claim):
                self._handed_back(task_id)
                self._say(
                    "handed_back",
                    f"handed back task={task_id[:8]} worker={self.worker_id}",
                    task_id,
                )
        self._running.clear()

    async def reap_once(self) -> None:
        """Take back tasks whose worker vanished (lease expired)."""
        for reaped in await self.ledger.queue.reap():
            self._say(
                "reaped",
                f"reaped task={reaped.task_id[:8]} (lease expired) -> {reaped.status.value}",
                reaped.task_id,
            )

    async def reconcile_once(self) -> None:
        """Look up this worker's provider's unknown requests (a remote provider only);
        a failing look-up is a decision like any other, never the worker's end."""
        provider = self.pipeline.embedder
        if not isinstance(provider, RemoteProvider):
            return
        try:
            decisions = await reconcile_with(self.ledger, self.pipeline.store, provider)
        except Exception as exc:  # the ledger briefly unreachable: try next round
            logger.warning("reconcile pass failed: %s", error_detail_of(exc))
            return
        for d in decisions:
            self._say(
                "reconciled",
                f"reconciled request={d.request_key[:12]} task={d.task_id[:8]} "
                f"answer={d.answer.value} -> {d.state.value}",
                d.task_id,
            )

    async def _reconciler(self) -> None:
        if not isinstance(self.pipeline.embedder, RemoteProvider):
            return
        while True:
            await asyncio.sleep(RECONCILE_EVERY_S)
            await self.reconcile_once()

    async def _reaper(self) -> None:
        while True:
            await asyncio.sleep(REAP_EVERY_S)
            await self.reap_once()

    async def _registry_heartbeat(self) -> None:
        if not self.register:
            return
        while True:
            await asyncio.sleep(REGISTRY_HEARTBEAT_S)
            await self.ledger.registry.heartbeat(self.worker_id)
