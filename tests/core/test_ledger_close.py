"""Closing a ledger while transactions are under way (a dashboard quitting: Textual
cancels its workers without waiting for them). ``close()`` returns only once each of
them has handed its connection back, so the pool closes every connection; a
transaction asked for afterwards is refused instead of opening a pool nobody closes.

On PostgreSQL a connection handed back after the pool was disposed of stayed open
until it was garbage-collected, where asyncpg warns of it (an "unclosed connection"
ResourceWarning, and its socket's): under ``filterwarnings = error`` that failed
whichever test the collector happened to run in.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection

from core import Ledger, Settings

SLOW_S = 0.5  # seconds the transaction under way takes, in the database


class Sleeper:
    """A transaction that takes SLOW_S; remembers its driver connection. Made on the
    event loop: ``started`` is set from whichever thread the transaction runs on."""

    def __init__(self) -> None:
        self.driver: Any = None
        self.finished = False
        self.started = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    def __call__(self, conn: Connection) -> None:
        self.driver = conn.connection.driver_connection
        self._loop.call_soon_threadsafe(self.started.set)
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_sleep(:s)"), {"s": SLOW_S})
        else:
            time.sleep(SLOW_S)  # SQLite: the transaction runs on a thread of its own
        self.finished = True


async def under_way(ledger: Ledger, sleeper: Sleeper) -> asyncio.Task[None]:
    task = asyncio.create_task(ledger.transactions.read(sleeper))
    await sleeper.started.wait()
    return task


def closed(driver: Any) -> bool:
    """Whether the driver connection is closed (asyncpg says; SQLite's is not asked:
    its connections are made on the ledger's threads)."""
    is_closed = getattr(driver, "is_closed", None)
    return True if is_closed is None else bool(is_closed())


async def test_close_waits_for_a_transaction_under_way(settings: Settings) -> None:
    ledger = await Ledger.open(settings)
    sleeper = Sleeper()
    task = await under_way(ledger, sleeper)
    await ledger.close()
    assert sleeper.finished, "close() returned with a transaction still under way"
    assert closed(sleeper.driver)
    await task


async def test_close_waits_for_a_cancelled_transaction_to_hand_its_connection_back(
    settings: Settings,
) -> None:
    """What a quitting dashboard does: its read is cancelled, and the ledger closed
    at once, while the read is still giving its connection back."""
    ledger = await Ledger.open(settings)
    sleeper = Sleeper()
    task = await under_way(ledger, sleeper)
    task.cancel()
    await ledger.close()
    assert closed(sleeper.driver)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert closed(sleeper.driver)


async def test_a_transaction_after_close_is_refused(settings: Settings) -> None:
    ledger = await Ledger.open(settings)
    await ledger.close()
    with pytest.raises(RuntimeError):
        await ledger.reads.revision()
