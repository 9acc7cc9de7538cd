"""Workers seen in the ledger: who is working, on which host, alive or vanished."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection

from core.ledger.schema import WORKERS
from core.ledger.transactions import Transactions
from core.ledger.views import WorkerView

WORKER_GONE_AFTER_S = 90.0  # seconds without a heartbeat before a worker counts as vanished


class WorkerRegistry:
    """One row per worker id, renewed by the worker's heartbeat."""

    def __init__(self, transactions: Transactions, clock: Callable[[], float]) -> None:
        self._tx = transactions
        self.clock = clock

    async def register(self, worker_id: str) -> None:
        """Record a worker (id, host, pid) so others can see it alive or vanished."""
        now = self.clock()
        values = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": now,
            "heartbeat_at": now,
            "stopped_at": None,
        }

        def tx(conn: Connection) -> None:
            updated = conn.execute(
                update(WORKERS).where(WORKERS.c.id == worker_id).values(**values)
            )
            if not updated.rowcount:
                conn.execute(insert(WORKERS).values(id=worker_id, **values))

        await self._tx.write(tx)

    async def heartbeat(self, worker_id: str, *, stopped: bool = False) -> None:
        """The worker is still there (or, with ``stopped``, has stopped cleanly)."""
        now = self.clock()
        values: dict[str, Any] = {"heartbeat_at": now}
        if stopped:
            values["stopped_at"] = now

        def tx(conn: Connection) -> None:
            conn.execute(update(WORKERS).where(WORKERS.c.id == worker_id).values(**values))

        await self._tx.write(tx)

    async def workers(self) -> list[WorkerView]:
        """Every worker the ledger has seen, by id."""
        now = self.clock()

        def tx(conn: Connection) -> list[WorkerView]:
            return [
                WorkerView(
                    worker_id=r.id,
                    host=r.host,
                    pid=r.pid,
                    started_at=r.started_at,
                    heartbeat_at=r.heartbeat_at,
                    stopped_at=r.stopped_at,
                    alive=r.stopped_at is None and now - r.heartbeat_at < WORKER_GONE_AFTER_S,
                )
                for r in conn.execute(select(WORKERS).order_by(WORKERS.c.id))
            ]

        return await self._tx.read(tx)
