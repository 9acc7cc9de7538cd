"""Workers claim tasks from the ledger and run them through the pipeline.

The same :class:`Worker` runs inside the dashboard (as coroutines on its event loop)
and as ``ingestdesk worker`` processes (:mod:`core.cli.worker`). CPU-bound parsing
happens in a process pool and database I/O is async, so a worker never blocks the
loop it shares.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator

from core.errors import LedgerUnreachable, error_detail_of
from core.ingest.embedder import Embedder, HashingEmbedder
from core.ingest.outage import LedgerOutage, log_failure
from core.ingest.parse_pool import ParserPool, default_parsers
from core.ingest.pipeline import PARSER_UNAVAILABLE, Outcome, Pipeline, PipelineOptions
from core.ingest.providers import RemoteProvider
from core.ingest.reconcile import reconcile_with
from core.ingest.worker_story import WorkerEvent as WorkerEvent
from core.ingest.worker_story import WorkerStats as WorkerStats
from core.ingest.worker_story import current_task_id as current_task_id
from core.ingest.worker_story import current_worker_id as current_worker_id
from core.ingest.worker_story import default_worker_id as default_worker_id
from core.ledger import Claim, Ledger
from core.safe_text import check_identifier
from core.states import RequestState

# WorkerEvent, WorkerStats and the context variables live in worker_story and are
# re-exported here (``import X as X``), where callers have always found them.

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
# are quick: about this much work by the recent average (wall) task time. A claim's
# transaction costs ~1.5 ms of worker CPU for one task, ~0.15 ms each in a batch of
# eight; at 0.05 s a loaded machine's one-page PDF (25-45 ms) left one claim ahead, a
# transaction every other document. Tasks of 0.2 s or more get none, so workers share
# big documents evenly; a claim held too long goes back unstarted (Worker._step).
PREFETCH_WINDOW_S = 0.2  # seconds of work
PREFETCH_MAX = 16  # claims held ahead at most
TASK_TIME_SMOOTHING = 0.2  # weight of the newest task in the average task time
# Tasks quicker than this on average (small texts, one-page PDFs) run with twice the
# worker's concurrency. Two in flight keep the parser process busy with the next big
# document while the last one is indexed; with quick tasks, two often means none is a
# PDF waiting for the parser, which then idles (measured on 500 one-page PDFs + 500
# notes: 5% more documents/s with four). Slow tasks keep the set concurrency, so a
# worker holds no more big documents than it can start on.
QUICK_TASK_S = 0.02  # seconds

# The outcome of an attempt cut short because the ledger went away mid-task: the claim
# is handed back once the ledger answers again (or the reaper takes it back).
LEDGER_UNAVAILABLE = "ledger_unavailable"


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
        if pool is None:
            pool = ParserPool(workers=parsers or default_parsers(concurrency))
        self.pool = pool
        self.pipeline = Pipeline(
            ledger,
            ledger.operator.store,
            self.pool,
            embedder or HashingEmbedder(),
            options,
        )
        self.on_event = on_event
        self.register = register
        self.stats = WorkerStats()
        self._stop = asyncio.Event()
        # Set when a running task ends or stop is asked (see _wait_for_change).
        self._changed = False
        self._change_waiter: asyncio.Future[None] | None = None
        self._resume = asyncio.Event()
        self._resume.set()
        self._running: dict[str, asyncio.Task[Outcome]] = {}
        self._claims: dict[str, Claim] = {}
        self._queued: deque[Claim] = deque()  # claimed ahead, not started yet
        self._task_s: float | None = None  # moving average of a task's wall time
        self._state = "idle"
        # Why the worker stopped by itself (it cannot parse), or None.
        self.fault: str | None = None
        self._outage = LedgerOutage(lambda kind, line: self._say(kind, line))
        # Claims whose attempt the ledger's going away cut short, to hand back.
        self._stranded: dict[str, Claim] = {}
        self._stranded_fault: LedgerUnreachable | None = None

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
        self._wake()

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
        # A one-off run does not wait for the ledger: it gives the task back if it
        # can and ends with the outage (the command exits with its code).
        fault = self._stranded_fault
        await self._hand_back_stranded(suppress=True)
        if fault is not None:
            raise fault

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
        except LedgerUnreachable as exc:
            # Nothing more can be written for it now: keep the claim to give back
            # when the ledger answers (fenced: a reaped task is not given back).
            self._stranded[claim.task_id] = claim
            self._stranded_fault = exc
            self.stats.outcomes[claim.task_id] = LEDGER_UNAVAILABLE
            return Outcome(claim.task_id, LEDGER_UNAVAILABLE, detail=exc.message)
        except Exception as exc:
            # Not a document's fault (the pipeline records those): a fault of the
            # ledger that is not an outage, or a bug. One line; its lease runs out
            # and the reaper gives the task back.
            logger.error(
                "task=%s abandoned by %s; the reaper takes it back when its lease ends",
                claim.task_id[:8],
                error_detail_of(exc),
            )
            logger.debug("task=%s abandoned", claim.task_id[:8], exc_info=exc)
            self.stats.outcomes[claim.task_id] = "abandoned"
            return Outcome(claim.task_id, "abandoned", detail=error_detail_of(exc))
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
        side: list[asyncio.Task[None]] = []
        try:
            # Start-up (register, reap, reconcile) is done once the ledger answers.
            while not self._stop.is_set() and await self._ledger_step(self._start, until_idle):
                pass
            side = [
                asyncio.create_task(self._reaper(), name="reaper"),
                asyncio.create_task(self._registry_heartbeat(), name="registry-heartbeat"),
                asyncio.create_task(self._reconciler(), name="reconciler"),
            ]
            for t in side:
                t.add_done_callback(log_failure)
            idle_s: float | None = IDLE_POLL_MIN_S
            while not self._stop.is_set():
                step = functools.partial(self._step, until_idle, idle_s or IDLE_POLL_MIN_S)
                idle_s = await self._ledger_step(step, until_idle)
                if idle_s is None:  # drained (a draining worker only)
                    break
        finally:
            for t in side:
                t.cancel()
            await self._wind_down(stop_grace_s)
            await self._hand_back_queued("handed back on shutdown")
            await self._hand_back_stranded(suppress=True)
            for t in side:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            if self.register:
                with contextlib.suppress(Exception):
                    await self.ledger.registry.heartbeat(self.worker_id, stopped=True)
            await self.close()
        return self.stats

    async def _start(self) -> None:
        if self.register:
            await self.ledger.registry.register(self.worker_id)
        # Reap before the first claim so a burst run picks up orphaned tasks too;
        # settle unknown provider requests before any task meets one.
        await self.reap_once()
        await self.reconcile_once()

    async def _ledger_step(
        self, step: Callable[[], Awaitable[float | None]], until_idle: bool
    ) -> float | None:
        """One step of the loop, or IDLE_POLL_MIN_S after riding out a ledger away (a
        draining worker ends with the fault). A whole step ends an outage, not a read."""
        try:
            answer = await step()
        except LedgerUnreachable as exc:
            if until_idle:
                raise
            await self._ride_out(exc)
            return IDLE_POLL_MIN_S
        self._outage.back()
        return answer

    async def _ride_out(self, fault: LedgerUnreachable) -> None:
        """Wait for the ledger with capped exponential backoff and jitter, looking
        with one cheap read, until it answers or the worker is stopped. Running tasks
        carry on meanwhile (their writes fail and strand them, or succeed)."""
        self._state = LEDGER_UNAVAILABLE
        try:
            while not self._stop.is_set():
                await self._outage.wait(fault, self._stop)
                if self._stop.is_set():
                    return
                try:
                    await self.ledger.reads.revision()
                except LedgerUnreachable as again:
                    fault = again
                    continue
                return
        finally:
            self._state = "idle"

    async def _step(self, until_idle: bool, idle_s: float) -> float | None:
        """One round of the loop: hand back what an outage stranded, claim for the
        free slots, start what was claimed, or wait. The next idle poll interval, or
        None when nothing is claimable, running or held (a draining worker ends)."""
        if self._stranded:
            await self._hand_back_stranded(suppress=False)
        if not self._resume.is_set():
            await self._hand_back_queued("handed back on pause")
            await self._resume.wait()
        if self._stop.is_set():
            return idle_s
        # A task that ends from here on wakes the wait below at once.
        self._changed = False
        free = self._slots() - len(self._running)
        if free > 0 and not self._queued:
            self._state = "claiming"
            try:
                self._queued.extend(
                    await self.ledger.queue.claim_next(
                        self.worker_id,
                        limit=free + self._claims_ahead(),
                        lease_s=self.lease_s,
                        with_document=True,
                    )
                )
            finally:
                self._state = "idle"
        started = handed_back = 0
        while started < free and self._queued:
            claim = self._queued.popleft()
            if claim.lease_expires_at - self.ledger.clock() < claim.lease_s / 2:
                # Held ahead for too long (a slow document came first): give it back,
                # claimable at once, rather than start on half a lease.
                await self._hand_back(claim, "handed back unstarted")
                handed_back += 1
                continue
            task = asyncio.create_task(self._execute(claim), name=f"task-{claim.task_id[:8]}")
            self._running[claim.task_id] = task
            task.add_done_callback(self._forget)
            started += 1
        if started or handed_back:
            return IDLE_POLL_MIN_S
        if self._queued:
            idle_s = IDLE_POLL_MIN_S  # slots full, claims held: wait for a slot
        if until_idle and not self._running and not self._queued and not self._stranded:
            return None
        await self._wait_for_change(idle_s)
        return min(idle_s * 2, IDLE_POLL_MAX_S)

    async def _hand_back_stranded(self, *, suppress: bool) -> None:
        """Give back the claims an outage cut short (fenced: one the reaper took back
        meanwhile, or another worker now runs, is not touched)."""
        reason = "handed back after a ledger outage"
        for task_id, claim in list(self._stranded.items()):
            if suppress:
                given = await self._hand_back(claim, reason)
            else:
                given = await self.ledger.queue.hand_back(claim, reason=reason)
            del self._stranded[task_id]
            if given:
                self._say(
                    "handed_back",
                    f"handed back task={task_id[:8]} worker={self.worker_id} ({reason})",
                    task_id,
                )
        self._stranded_fault = None

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
        self._wake()

    def _wake(self) -> None:
        self._changed = True
        if self._change_waiter is not None:
            _settle(self._change_waiter)

    async def _wait_for_change(self, poll_s: float) -> None:
        """Sleep until a slot frees up, stop is requested, or the poll interval ends.

        One future and one timer, woken by a task's end (:meth:`_forget`) or
        :meth:`stop`: this runs after every document, and a task made for the stop
        event plus asyncio.wait's callbacks on every running task cost more loop
        turns than a small document's own coroutine steps."""
        if self._changed or self._stop.is_set():
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._change_waiter = waiter
        timer = loop.call_later(poll_s, _settle, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._change_waiter = None

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
            if claim is not None and await self._hand_back(claim, "handed back on shutdown"):
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
            # A look-up that settled nothing (no answer, a damaged result) is not a
            # reconciliation: the line says the request is still unknown.
            verb = "looked up" if d.state is RequestState.UNKNOWN else "reconciled"
            after = "still unknown; asked again later" if verb == "looked up" else d.state.value
            self._say(
                "reconciled",
                f"{verb} request={d.request_key[:12]} task={d.task_id[:8]} "
                f"answer={d.answer.value} -> {after}",
                d.task_id,
            )

    async def _reconciler(self) -> None:
        if not isinstance(self.pipeline.embedder, RemoteProvider):
            return
        await self._every(RECONCILE_EVERY_S, self.reconcile_once)

    async def _reaper(self) -> None:
        await self._every(REAP_EVERY_S, self.reap_once)

    async def _registry_heartbeat(self) -> None:
        if not self.register:
            return
        await self._every(
            REGISTRY_HEARTBEAT_S, lambda: self.ledger.registry.heartbeat(self.worker_id)
        )

    async def _every(self, interval_s: float, chore: Callable[[], Awaitable[object]]) -> None:
        """Run a side chore every ``interval_s`` for the worker's life. A round that
        fails is one log line and the next round tries again: an outage is the main
        loop's to report (once), and a side task that died would leave its chore
        undone for good (no more reaping after a restart)."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await chore()
            except LedgerUnreachable:
                continue
            except Exception as exc:
                current = asyncio.current_task()
                logger.warning(
                    "worker=%s %s round failed: %s",
                    self.worker_id,
                    current.get_name() if current is not None else "side chore",
                    error_detail_of(exc),
                )


def _settle(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
