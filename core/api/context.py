"""What every route needs from the running app: the open ledger, and the turn a
filtered read waits for."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from fastapi import Request

from core.ledger import Ledger


def ledger_of(request: Request) -> Ledger:
    """The ledger the app opened at start-up (one per process, shared by requests)."""
    ledger: Ledger = request.app.state.ledger
    return ledger


# Filtered reads take turns, one at a time per server. A filter's substring terms
# cannot use an index, so each such read scans the tasks it pages through; one client
# sending the largest filter back to back must not hold every ledger connection.
# (Its statement costs ~0.5 ms to build and is compiled once: core.ledger.filter_sql.
# Built term by term and compiled afresh, it cost ~13 ms of GIL-held CPU a request,
# and the hostile-neighbour row of bench.api measured a quiet GET's p99 x7.2.)
FILTERED_READS_AT_ONCE = 1
# After a filtered read, the next one waits this share of the time the read took: back
# to back, expensive reads then use at most 1 / (1 + REST) of the server's time, and a
# cheap read always finds it idle that often. The read's own answer is not delayed (its
# turn is given back later, not its reply). With turns alone a GET's p99 under four
# largest-filter clients was 2.8-3.2x the quiet one, by run.
FILTERED_READ_REST = 1.0  # times the read's own duration


class FilteredTurns:
    """The turns for filtered reads (one set per app: a semaphore belongs to the event
    loop that first waits on it)."""

    def __init__(self, at_once: int = FILTERED_READS_AT_ONCE, rest: float = FILTERED_READ_REST):
        self._turns = asyncio.Semaphore(at_once)
        self.rest = rest

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        await self._turns.acquire()
        started = time.monotonic()
        try:
            yield
        finally:
            took = time.monotonic() - started
            asyncio.get_running_loop().call_later(took * self.rest, self._turns.release)


def filtered_reads() -> FilteredTurns:
    return FilteredTurns()


def filtered_reads_of(request: Request) -> FilteredTurns:
    turns: FilteredTurns = request.app.state.filtered_reads
    return turns
