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


# Filtered reads run one at a time per server. A filter's statement is compiled afresh
# (core.ledger.reads.UNCACHED): ~10 ms of CPU holding the GIL for a 32-term filter,
# against ~3 ms for a whole unfiltered page. Four clients sending the largest filter
# back to back kept four such compiles contending with every other request (bench.api:
# a quiet GET's p99 x18.8); one at a time, they queue behind each other, not in front
# of everyone (x7.2).
FILTERED_READS_AT_ONCE = 1


def filtered_reads() -> asyncio.Semaphore:
    """The turns for filtered reads (one set per app: a semaphore belongs to the event
    loop that first waits on it)."""
    return asyncio.Semaphore(FILTERED_READS_AT_ONCE)


def filtered_reads_of(request: Request) -> asyncio.Semaphore:
    turns: asyncio.Semaphore = request.app.state.filtered_reads
    return turns
