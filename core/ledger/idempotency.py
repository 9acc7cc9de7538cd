"""Client idempotency keys: a request repeated with the same key gets the original
answer instead of doing the work again.

A key is recorded, with a fingerprint of what was asked (the action and its content:
the original's sha256, or the document submitted), in the same transaction as the
work it names. Writers are serialised, so a repeat arriving while the first request
is still in flight waits for it and then finds the key: there is no window in which
both run. The same key with a different fingerprint is a conflict. Keys are kept for
:data:`RETENTION_S` and removed by ``ingestdesk prune``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Connection

from core.errors import KeyReused
from core.ledger.schema import IDEMPOTENCY_KEYS
from core.ledger.transactions import Transactions
from core.safe_text import check_identifier

T = TypeVar("T")

RETENTION_S = 7 * 24 * 3600.0  # seconds a key is remembered (7 days)
KEY_MAX = 255  # characters of a key (the column's width): one limit, one message


@dataclass(frozen=True)
class Once(Generic[T]):
    """The answer to a request made under an idempotency key."""

    value: T
    replayed: bool  # True: the original answer; nothing was done this time


@dataclass(frozen=True)
class Earlier:
    document_id: str
    task_id: str | None


def check_key(key: str) -> str:
    """A key as clients send it: visible text, at most KEY_MAX characters (not the
    128 of worker ids and actors: a key often carries a client's own request id)."""
    return check_identifier(key, "idempotency key", limit=KEY_MAX)


def fingerprint(action: str, **fields: str) -> str:
    """What a request asked for, as sha256 of canonical JSON."""
    canonical = json.dumps({"action": action, **fields}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def find(conn: Connection, key: str, fingerprint: str) -> Earlier | None:
    """The earlier request's result under ``key``, or None for a new key; a key used
    for a different request is a conflict."""
    row = conn.execute(select(IDEMPOTENCY_KEYS).where(IDEMPOTENCY_KEYS.c.key == key)).first()
    if row is None:
        return None
    if row.fingerprint != fingerprint:
        raise KeyReused(
            f"idempotency key {key!r} was used for a different request "
            "(other content or another document); use a new key"
        )
    return Earlier(row.document_id, row.task_id)


def record(
    conn: Connection,
    key: str,
    fingerprint: str,
    document_id: str,
    task_id: str | None,
    now: float,
) -> None:
    conn.execute(
        insert(IDEMPOTENCY_KEYS),
        {
            "key": key,
            "fingerprint": fingerprint,
            "document_id": document_id,
            "task_id": task_id,
            "created_at": now,
        },
    )


class IdempotencyKeys:
    """The keys' upkeep."""

    def __init__(self, transactions: Transactions, clock: Callable[[], float]) -> None:
        self._tx = transactions
        self.clock = clock

    async def prune(self, older_than_s: float = RETENTION_S) -> int:
        """Forget keys older than ``older_than_s``; how many were removed."""
        cutoff = self.clock() - older_than_s

        def tx(conn: Connection) -> int:
            statement = delete(IDEMPOTENCY_KEYS).where(IDEMPOTENCY_KEYS.c.created_at < cutoff)
            return int(conn.execute(statement).rowcount)

        return await self._tx.write(tx)
