"""A SQLite ledger's writers in one process queue for one writer thread, not on
SQLite's busy handler (which polls the write lock with sleeps of 1, 2, 5, 10... ms).

With ``busy_timeout`` 0 a writer that meets the lock held fails at once ("database
is locked"), so these tests see any in-process collision as an error, on a real
ledger file."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

from sqlalchemy.engine import Connection

from core import Ledger, Settings, sqlite_url

HOLD_S = 0.3  # seconds the first writer keeps the write lock: the others arrive meanwhile


def _settings(tmp_path: Path) -> Settings:
    return Settings(
        db_url=sqlite_url(tmp_path / "ledger.db"),
        store_root=tmp_path / "objects",
        sqlite_busy_timeout_ms=0,
    )


def _note(order: list[str], lock: threading.Lock, what: str) -> None:
    with lock:
        order.append(what)


async def test_writers_of_one_process_never_meet_the_lock(tmp_path: Path) -> None:
    order: list[str] = []
    guard = threading.Lock()

    def writer(name: str, hold_s: float) -> Callable[[Connection], None]:
        def tx(conn: Connection) -> None:
            _note(order, guard, f"{name} in")
            conn.exec_driver_sql("UPDATE ingestion_tasks SET revision = revision WHERE 0")
            threading.Event().wait(hold_s)  # holds the write lock (BEGIN IMMEDIATE)
            _note(order, guard, f"{name} out")

        return tx

    async with await Ledger.open(_settings(tmp_path)) as ledger:
        writes = [ledger.transactions.write(writer("first", HOLD_S))]
        writes += [ledger.transactions.write(writer(f"w{i}", 0.0)) for i in range(7)]
        await asyncio.gather(*writes)  # none failed with "database is locked"
        # One at a time: every writer was out before the next came in.
        assert order[0::2] == [w.replace("out", "in") for w in order[1::2]]
        assert order[0] == "first in" and len(order) == 16


async def test_a_cancelled_writer_keeps_its_turn_until_its_transaction_ends(
    tmp_path: Path,
) -> None:
    """Cancelling the caller cannot stop the thread running its transaction: the next
    writer waits for that thread, not for the caller."""
    order: list[str] = []
    guard = threading.Lock()
    entered, release = threading.Event(), threading.Event()

    def slow(conn: Connection) -> None:
        _note(order, guard, "slow in")
        conn.exec_driver_sql("UPDATE ingestion_tasks SET revision = revision WHERE 0")
        entered.set()
        release.wait(30)
        _note(order, guard, "slow out")

    def quick(conn: Connection) -> None:
        _note(order, guard, "quick in")
        conn.exec_driver_sql("UPDATE ingestion_tasks SET revision = revision WHERE 0")

    async with await Ledger.open(_settings(tmp_path)) as ledger:
        first = asyncio.create_task(ledger.transactions.write(slow))
        await asyncio.to_thread(entered.wait, 30)
        first.cancel()
        second = asyncio.create_task(ledger.transactions.write(quick))
        await asyncio.sleep(0)
        assert not second.done()
        release.set()
        await second  # would fail "database is locked" had it not waited
        assert first.cancelled()
        assert order == ["slow in", "slow out", "quick in"]
