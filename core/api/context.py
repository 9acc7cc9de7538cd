"""What every route needs from the running app: the open ledger, and the turn a
filtered read waits for."""

from __future__ import annotations

import asyncio

from fastapi import Request

from core.ledger import Ledger


def ledger_of(request: Request) -> Ledger:
    """The ledger the app opened at start-up (one per process, shared by requests)."""
    ledger: Ledger = request.app.state.ledger
    return ledger


# Filtered reads run one at a time per server. A filter's substring terms cannot use
# an index, so each such read scans the tasks it pages through; one client sending the
# largest filter back to back must not hold every ledger connection. (Its statement
# costs ~0.5 ms to build and is compiled once: core.ledger.filter_sql. Built term by
# term and compiled afresh, it cost ~13 ms of GIL-held CPU a request, and the hostile-
# neighbour row of bench.api measured a quiet GET's p99 x7.2; now under x3.)
FILTERED_READS_AT_ONCE = 1


def filtered_reads() -> asyncio.Semaphore:
    """The turns for filtered reads (one set per app: a semaphore belongs to the event
    loop that first waits on it)."""
    return asyncio.Semaphore(FILTERED_READS_AT_ONCE)


def filtered_reads_of(request: Request) -> asyncio.Semaphore:
    turns: asyncio.Semaphore = request.app.state.filtered_reads
    return turns
