"""The dashboard's in-process workers: add, remove, pause, restart, and hand back on quit.

Each worker is a :class:`core.Worker` run as a Textual worker of the app (so it
outlives any screen), sharing one parser pool. Stopping a worker makes it hand its
running tasks back to the queue before it returns; quitting waits for that.

A worker can also stop by itself: its loop ends with an error, or returns because it
cannot do the work (no parser process starts). It stays listed, as stopped and why,
until :meth:`Workforce.restart_stopped` starts it again under the same id; a new
worker reaps expired leases before its first claim, so the tasks the stopped one held
go back to the queue at once. A worker that rides out a ledger outage by itself says
so (``ledger_unavailable`` … ``ledger_back``) and is shown as retrying meanwhile.

With a remote embedding provider every worker embeds through it (and reconciles its
unknown requests); the provider belongs to whoever made it, who closes it after the
workforce (see :mod:`tui.provider_process`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core import LedgerUnavailable, ParserPool, Worker, WorkerEvent
from tui.format import failure_line
from tui.widgets.workers import LocalWorker

if TYPE_CHECKING:
    from textual.dom import DOMNode
    from textual.worker import Worker as TextualWorker

    from core import Ledger
    from core.ingest.embedder import Embedder
    from core.ingest.providers import RemoteProvider

ACTIVITY_LINES = 200  # worker log lines buffered between polls at most
POOL_PROCESSES = 2  # parser processes shared by the in-process workers
STOP_WORKERS_TIMEOUT_S = 15.0  # seconds stopping waits for a worker to hand back
# The kinds of WorkerEvent with which a looping worker says it lost the ledger and
# found it again (it keeps running in between, retrying).
LEDGER_UNAVAILABLE = "ledger_unavailable"
LEDGER_BACK = "ledger_back"
# Why a worker's loop returned when nobody asked it to and it gave no reason.
ENDED_UNASKED = "its loop ended"
STOPPED_UNREACHABLE = "the ledger was unreachable"


def _nothing() -> None:
    return None


@dataclass
class _Member:
    """One in-process worker and what the panel needs to know of its fate."""

    worker: Worker
    runner: TextualWorker[None]
    stopped: str | None = None  # why it stopped by itself, once it has
    unreachable: bool = False  # between ledger_unavailable and ledger_back


class Workforce:
    """In-process workers and the parser pool they share.

    Args:
        ledger: The ledger the workers claim from.
        host: The node whose Textual workers run them (the app).
        prefix: Prefix of worker ids, distinct between dashboards.
        pool: Parser pool for the workers (default: one this workforce starts on
            first use and closes in :meth:`aclose`).
        provider: The embedder or remote provider the workers embed with (default:
            the hashed bag of words). Not closed here.
        on_change: Called when a worker stops by itself, loses or finds the ledger
            (the panel shows it at once, not at the next poll, which may be failing).
    """

    def __init__(
        self,
        ledger: Ledger,
        host: DOMNode,
        *,
        prefix: str,
        pool: ParserPool | None = None,
        provider: Embedder | RemoteProvider | None = None,
        on_change: Callable[[], None] = _nothing,
    ) -> None:
        self.ledger = ledger
        self.provider = provider
        self.host = host
        self.prefix = prefix
        self.paused = False
        self._pool = pool
        self._own_pool = pool is None
        self.on_change = on_change
        self._workers: dict[str, _Member] = {}
        self._next = 1
        self._activity: deque[str] = deque(maxlen=ACTIVITY_LINES)

    def __len__(self) -> int:
        return len(self._workers)

    @property
    def pool(self) -> ParserPool:
        """The parser pool shared by the workers (started on first use)."""
        if self._pool is None:
            self._pool = ParserPool(workers=POOL_PROCESSES)
        return self._pool

    def local_workers(self) -> list[LocalWorker]:
        """What the workers panel shows of each worker, oldest first."""
        shown = []
        for worker_id, member in self._workers.items():
            worker = member.worker
            if member.stopped is not None:
                shown.append(LocalWorker(worker_id, "stopped", (), member.stopped))
            elif member.unreachable:
                shown.append(LocalWorker(worker_id, "unreachable", tuple(worker.current)))
            else:
                shown.append(LocalWorker(worker_id, worker.state, tuple(worker.current)))
        return shown

    def stopped(self) -> list[str]:
        """Ids of the workers that stopped by themselves, oldest first."""
        return [w for w, member in self._workers.items() if member.stopped is not None]

    def newest(self) -> str | None:
        """The id of the most recently added worker, if any."""
        return next(reversed(self._workers), None)

    def drain_activity(self) -> list[str]:
        """Worker log lines since the last call (the poller hands them on)."""
        lines = list(self._activity)
        self._activity.clear()
        return lines

    def _on_event(self, event: WorkerEvent) -> None:
        # Called on the app's loop by the workers.
        self._activity.append(event.line)
        if event.kind not in (LEDGER_UNAVAILABLE, LEDGER_BACK):
            return
        member = self._workers.get(event.worker_id)
        if member is None:
            return
        member.unreachable = event.kind == LEDGER_UNAVAILABLE
        if not member.unreachable:
            # Leases that ran out during the outage (this worker's heartbeats could
            # not be written, nor could another's) are due now, not at the next
            # sweep: the tasks they hold go back to the queue at once.
            self._reap_soon(member.worker)
        self.on_change()

    def _reap_soon(self, worker: Worker) -> TextualWorker[None]:
        # A function, not a coroutine made now: one cancelled before it starts
        # (quitting) leaves nothing behind that was never awaited.
        async def reap() -> None:
            await worker.reap_once()  # says what it reaped in the worker's log

        return self.host.run_worker(
            reap,
            name=f"reap-{worker.worker_id}",
            group="reap",
            description="reap leases that expired during the outage",
            exclusive=True,
            exit_on_error=False,
        )

    def add(self) -> str:
        """Start one more worker; returns its id."""
        worker_id = f"{self.prefix}-w{self._next}"
        self._next += 1
        self._start(worker_id)
        return worker_id

    def restart_stopped(self) -> list[str]:
        """Start again, each under its own id, the workers that stopped by themselves;
        returns their ids. Each reaps expired leases before its first claim."""
        restarted = self.stopped()
        for worker_id in restarted:
            self._start(worker_id)
        if restarted:
            self.on_change()
        return restarted

    def _start(self, worker_id: str) -> None:
        worker = Worker(
            self.ledger,
            worker_id,
            pool=self.pool,
            embedder=self.provider,
            on_event=self._on_event,
        )
        if self.paused:
            worker.pause()
        runner = self.host.run_worker(
            self._keep(worker_id, worker),
            name=worker_id,
            group="ingest",
            description=f"in-process worker {worker_id}",
            exit_on_error=False,
        )
        self._workers[worker_id] = _Member(worker, runner)

    async def _keep(self, worker_id: str, worker: Worker) -> None:
        """Run ``worker`` until it returns; if nobody asked it to stop, remember why
        it did (its error, in one line, or its own reason) for the panel."""
        try:
            await worker.run()
        except LedgerUnavailable as exc:
            # The panel is narrow: the cause there, the whole line in the worker log.
            why, detail = STOPPED_UNREACHABLE, failure_line(exc)
        except Exception as exc:  # the loop's end, whatever broke it: shown, not raised
            why = detail = failure_line(exc)
        else:
            why = detail = worker.fault or ENDED_UNASKED
        member = self._workers.get(worker_id)
        if member is None or member.worker is not worker:
            return  # stopped on request (retired, quitting): nothing to show
        member.stopped = why
        member.unreachable = False
        self._activity.append(f"worker={worker_id} stopped: {detail}")
        self.on_change()

    def racer(self, worker_id: str, on_event: Callable[[WorkerEvent], None]) -> Worker:
        """A worker outside this workforce (not registered in the ledger, not listed
        here) that shares its parser pool: for the claim race."""
        return Worker(
            self.ledger,
            worker_id,
            pool=self.pool,
            embedder=self.provider,
            on_event=on_event,
            register=False,
        )

    def set_paused(self, paused: bool) -> None:
        """Pause (no new claims; running tasks finish) or resume every worker."""
        self.paused = paused
        for member in self._workers.values():
            if paused:
                member.worker.pause()
            else:
                member.worker.resume()

    async def retire(self, worker_id: str) -> None:
        """Stop one worker; its running tasks are handed back."""
        member = self._workers.pop(worker_id, None)
        if member is None:
            return
        member.worker.stop()
        await _settle(member.runner)

    async def stop_all(self) -> None:
        """Stop every worker and wait until each has handed back its tasks."""
        members = list(self._workers.values())
        self._workers.clear()
        for member in members:
            member.worker.stop()
        await asyncio.gather(*(_settle(member.runner) for member in members))

    async def aclose(self) -> None:
        """Stop every worker, then the parser pool if this workforce started it.
        Safe to call twice."""
        await self.stop_all()
        if self._own_pool and self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.aclose()


async def _settle(runner: TextualWorker[Any]) -> None:
    try:
        await asyncio.wait_for(runner.wait(), STOP_WORKERS_TIMEOUT_S)
    except Exception:  # a worker that failed or hung must not block quitting
        runner.cancel()
