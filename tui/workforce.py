"""The dashboard's in-process workers: add, remove, pause, and hand back on quit.

Each worker is a :class:`core.Worker` run as a Textual worker of the app (so it
outlives any screen), sharing one parser pool. Stopping a worker makes it hand its
running tasks back to the queue before it returns; quitting waits for that.

With a remote embedding provider every worker embeds through it (and reconciles its
unknown requests); the provider belongs to whoever made it, who closes it after the
workforce (see :mod:`tui.provider_process`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from core import ParserPool, Worker, WorkerEvent
from tui.widgets.workers import LocalWorker

if TYPE_CHECKING:
    from textual.dom import DOMNode
    from textual.worker import Worker as TextualWorker

    from core import Ledger
    from core.ingest.providers import RemoteProvider

ACTIVITY_LINES = 200  # worker log lines buffered between polls at most
POOL_PROCESSES = 2  # parser processes shared by the in-process workers
STOP_WORKERS_TIMEOUT_S = 15.0  # seconds stopping waits for a worker to hand back


class Workforce:
    """In-process workers and the parser pool they share.

    Args:
        ledger: The ledger the workers claim from.
        host: The node whose Textual workers run them (the app).
        prefix: Prefix of worker ids, distinct between dashboards.
        pool: Parser pool for the workers (default: one this workforce starts on
            first use and closes in :meth:`aclose`).
        provider: Remote embedding provider the workers embed with (default: the
            local embedder). Not closed here.
    """

    def __init__(
        self,
        ledger: Ledger,
        host: DOMNode,
        *,
        prefix: str,
        pool: ParserPool | None = None,
        provider: RemoteProvider | None = None,
    ) -> None:
        self.ledger = ledger
        self.provider = provider
        self.host = host
        self.prefix = prefix
        self.paused = False
        self._pool = pool
        self._own_pool = pool is None
        self._workers: dict[str, tuple[Worker, TextualWorker[Any]]] = {}
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
        return [
            LocalWorker(worker_id, worker.state, tuple(worker.current))
            for worker_id, (worker, _) in self._workers.items()
        ]

    def newest(self) -> str | None:
        """The id of the most recently added worker still running, if any."""
        return next(reversed(self._workers), None)

    def drain_activity(self) -> list[str]:
        """Worker log lines since the last call (the poller hands them on)."""
        lines = list(self._activity)
        self._activity.clear()
        return lines

    def _on_event(self, event: WorkerEvent) -> None:
        # Called on the app's loop by the workers.
        self._activity.append(event.line)

    def add(self) -> str:
        """Start one more worker; returns its id."""
        worker_id = f"{self.prefix}-w{self._next}"
        self._next += 1
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
            worker.run(),
            name=worker_id,
            group="ingest",
            description=f"in-process worker {worker_id}",
            exit_on_error=False,
        )
        self._workers[worker_id] = (worker, runner)
        return worker_id

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
        for worker, _ in self._workers.values():
            if paused:
                worker.pause()
            else:
                worker.resume()

    async def retire(self, worker_id: str) -> None:
        """Stop one worker; its running tasks are handed back."""
        entry = self._workers.pop(worker_id, None)
        if entry is None:
            return
        worker, runner = entry
        worker.stop()
        await _settle(runner)

    async def stop_all(self) -> None:
        """Stop every worker and wait until each has handed back its tasks."""
        entries = list(self._workers.values())
        self._workers.clear()
        for worker, _ in entries:
            worker.stop()
        await asyncio.gather(*(_settle(runner) for _, runner in entries))

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
