"""How a worker rides out a ledger that is away for a while (a restart, a failover, a
lock held past the busy timeout): it says so once, waits with capped exponential
backoff and jitter, and says once when the ledger answers again.

A small helper rather than a retry library (tenacity, backoff): the delay is two
lines (the same "equal jitter" the task retries use, see
``WorkQueue.backoff_s``), and what such a library would not give is the rest: the
wait must end at once when the worker is asked to stop, and the story is two events
the dashboard shows (``ledger_unavailable``, ``ledger_back``), not a log line per try.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable

from core.errors import LedgerUnavailable, error_detail_of

logger = logging.getLogger(__name__)

RETRY_FIRST_S = 0.5  # seconds before the first look after the ledger went away
RETRY_MAX_S = 30.0  # seconds: the longest wait between two looks

# The kinds of WorkerEvent the worker says them with (the dashboard keys on these).
LEDGER_UNAVAILABLE = "ledger_unavailable"
LEDGER_BACK = "ledger_back"

Say = Callable[[str, str], None]  # (event kind, line)


class LedgerOutage:
    """One worker's outage: when it began, how many looks failed, what was said."""

    def __init__(
        self,
        say: Say,
        *,
        first_s: float = RETRY_FIRST_S,
        max_s: float = RETRY_MAX_S,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self._say = say
        self.first_s = first_s
        self.max_s = max_s
        self._jitter = jitter
        self.since: float | None = None  # monotonic time the outage was first seen
        self.failures = 0

    @property
    def active(self) -> bool:
        return self.since is not None

    def next_delay_s(self) -> float:
        """The wait before the next look: doubled per failed look up to the cap, the
        upper half of it at random so a fleet does not knock in lockstep."""
        ceiling = min(self.max_s, self.first_s * 2.0 ** min(self.failures, 32))
        return ceiling / 2 + self._jitter() * ceiling / 2

    async def wait(self, fault: LedgerUnavailable, stop: asyncio.Event) -> None:
        """Wait before the next look at the ledger (at once when ``stop`` is set);
        the first wait of an outage says why, the later ones only log."""
        delay = self.next_delay_s()
        if self.since is None:
            self.since = time.monotonic()
            said = fault.message
            if "unreachable" not in said:  # a lock held past busy_timeout, a full disk
                said = f"{said}: ledger unreachable for now"
            self._say(LEDGER_UNAVAILABLE, f"{said}; retrying in {delay:.1f}s")
        else:
            logger.debug("ledger still unreachable; next look in %.1fs", delay)
        self.failures += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)

    def back(self) -> None:
        """The ledger answered: say so once, and start the next outage afresh."""
        if self.since is None:
            return
        away = time.monotonic() - self.since
        self._say(
            LEDGER_BACK,
            f"ledger reachable again after {away:.1f}s ({self.failures} looks); carrying on",
        )
        self.since = None
        self.failures = 0


def log_failure(task: asyncio.Task[object]) -> None:
    """A done-callback for a background task: its failure, if any, as one log line
    (never "Task exception was never retrieved" at garbage collection)."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is None:
        return
    if isinstance(exc, LedgerUnavailable):
        logger.warning("%s stopped: %s", task.get_name(), exc.message)
    else:
        # One line in the log; the traceback only for whoever debugs.
        logger.error("%s stopped by %s", task.get_name(), error_detail_of(exc))
        logger.debug("%s stopped", task.get_name(), exc_info=exc)
