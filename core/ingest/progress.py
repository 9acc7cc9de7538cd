"""A task's progress as a worker reports it: coalesced into few writes, each renewing
the lease, and the way a worker learns that its task was taken away."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Coroutine, Mapping
from typing import Any, TypeVar

from core.errors import LedgerUnreachable, error_detail_of
from core.ingest.embedding import TaskLost
from core.ledger import Claim, Ledger
from core.states import Stage

PROGRESS_EVERY_S = 0.5  # seconds between coalesced progress writes
# While nothing new is to be written (a long parse), a running task's row is still
# written this often: the heartbeat that renews the lease is also how a worker learns
# that its task was cancelled or reaped, so this is how long a cancelled task may keep
# a parser busy. One single-row UPDATE a second per long task; tasks shorter than
# PROGRESS_EVERY_S write nothing at all.
HEARTBEAT_EVERY_S = 1.0  # seconds (never more than a third of the lease)

T = TypeVar("T")

logger = logging.getLogger(__name__)


class Progress:
    """A task's progress, coalesced.

    The pipeline reports every step in memory; :meth:`report` writes the latest
    one at most every PROGRESS_EVERY_S (renewing the lease in the same statement)
    and heartbeats in between, at least every HEARTBEAT_EVERY_S, so a document that
    takes milliseconds costs no progress writes at all, a long one shows movement
    within half a second, and a cancel reaches it within about a second.

    What an attempt reached is never lost at its end: a failure or a hand-back
    writes the latest stage and progress with it (see WorkQueue.fail). A worker that
    vanishes leaves what was last written, which the reaper records; so a stage
    whose work leaves this process for something that can take long and outlive
    the worker — a remote provider's call — is written as it starts
    (:meth:`write_now`), not held back by the coalescing. In-process stages take
    milliseconds: a write each (~0.4 ms of worker CPU, 13% of a small document's
    time per write) would buy a right stage only for a worker killed inside those
    milliseconds. A parse in a parser process is not written early either: for
    light PDFs the worker's CPU sets the pace (see the README), and a parse that
    takes long is on the row within PROGRESS_EVERY_S.
    """

    def __init__(self, ledger: Ledger, claim: Claim) -> None:
        self.ledger = ledger
        self.claim = claim
        self.latest: tuple[Stage, int, int] | None = None
        self.options: Mapping[str, str] | None = None
        self.lost = False
        self._written: tuple[Stage, int, int] | None = None
        self._abandon: asyncio.Future[Any] | None = None  # cancelled when the task is lost
        # One write at a time, so a write of an older step never lands after a newer.
        self._writing = asyncio.Lock()

    def set(
        self, stage: Stage, completed: int, total: int, *, options: Mapping[str, str] | None = None
    ) -> None:
        self.latest = (stage, completed, total)
        if options is not None:
            self.options = options

    def check(self) -> None:
        """Raise TaskLost if a write found the task taken away (cancelled, reaped)."""
        if self.lost:
            raise TaskLost

    async def unless_lost(self, work: Coroutine[Any, Any, T]) -> T:
        """Await ``work``, cancelling it as soon as a write finds the task taken away.

        Raises:
            TaskLost: The task was lost before or while ``work`` ran; ``work`` has been
                cancelled (for a parse: its parser process killed).
        """
        if self.lost:
            work.close()
            raise TaskLost
        running = asyncio.ensure_future(work)
        self._abandon = running
        try:
            return await running
        except asyncio.CancelledError:
            current = asyncio.current_task()
            # Ours only if nobody is cancelling this task as well (a worker shutting
            # down must still see its CancelledError).
            if self.lost and running.cancelled() and not (current and current.cancelling()):
                raise TaskLost from None
            raise
        finally:
            self._abandon = None

    def _lose(self) -> None:
        self.lost = True
        if self._abandon is not None:
            self._abandon.cancel()

    async def write_now(self) -> None:
        """Write the latest step at once (with the options not written yet); a write
        finding the task taken away marks it lost (see :meth:`check`)."""
        if not await self._write():
            self._lose()

    async def _write(self) -> bool:
        """Write the latest step if it is not on the row yet; whether the task is
        still held (True when there was nothing to write)."""
        async with self._writing:
            latest = self.latest
            if latest is None or latest == self._written:
                return True
            # The options are dropped only once written: a write the ledger never
            # received (an outage) must send them again.
            held = await self.ledger.queue.report_progress(
                self.claim, *latest, options=self.options
            )
            self._written, self.options = latest, None
            return held

    def _interval_s(self) -> float:
        return min(PROGRESS_EVERY_S, self.claim.lease_s / 3)

    @contextlib.asynccontextmanager
    async def reporting(self, name: str) -> AsyncIterator[None]:
        """Run :meth:`report` beside the body, as the side task ``name``.

        The reporter's first look is one interval in, and most small documents are
        done by then: the side task is only made if the attempt is still running at
        that first tick (a timer until then), so a document of milliseconds costs no
        task, no cancellation and no extra turns of the event loop. Its writes and
        heartbeats are the same either way. A reporter that fails is one log line,
        never the attempt's end."""
        started = time.monotonic()
        reporter: asyncio.Task[None] | None = None

        def begin() -> None:
            nonlocal reporter
            reporter = asyncio.create_task(self.report(since=started), name=name)

        timer = asyncio.get_running_loop().call_later(self._interval_s(), begin)
        try:
            yield
        finally:
            timer.cancel()
            if reporter is not None:
                reporter.cancel()
                try:
                    await reporter
                except asyncio.CancelledError:
                    pass
                except Exception as exc:
                    logger.warning("%s stopped: %s", name, error_detail_of(exc))

    async def report(self, *, since: float | None = None) -> None:
        """Write progress and heartbeats until the task is lost (run as a side task,
        cancelled when the attempt ends); on a write answering False, mark the task
        lost and cancel the work handed to :meth:`unless_lost`.

        ``since``: the monotonic time the attempt started, when the reporter is
        started one interval after it (see :meth:`reporting`): its first look is then
        at once, and a heartbeat counts from ``since``."""
        lease_part = self.claim.lease_s / 3
        interval = self._interval_s()
        # Half an interval early still counts: sleeps end a little off, and a heartbeat
        # due just after a tick would otherwise wait a whole interval more.
        heartbeat_after = min(HEARTBEAT_EVERY_S, lease_part) - interval / 2
        last_write = time.monotonic() if since is None else since
        first = since is None
        while not self.lost:
            if first:
                await asyncio.sleep(interval)
            first = True
            try:
                if self.latest is not None and self.latest != self._written:
                    held = await self._write()
                elif time.monotonic() - last_write >= heartbeat_after:
                    held = await self.ledger.queue.heartbeat(self.claim)
                else:
                    continue
            except LedgerUnreachable:
                # The ledger is away (the worker says so, once): try again next tick,
                # so the lease is renewed as soon as it is back. If it stays away past
                # the lease, the reaper takes the task and the fence stops this attempt.
                continue
            last_write = time.monotonic()
            if not held:
                self._lose()
