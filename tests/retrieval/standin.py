"""STAND-IN until main has ``ledger.indexes`` and the embedder registry (issue 21's
"Ledger: indexes and chunk vectors"): an index over the chunks' own ``embedding``
column, and wordllama behind the Embedder protocol. Removed at that merge."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from core.ledger import Ledger
from core.ledger.hybrid import Searcher
from core.ledger.schema import CHUNKS


@cache
def _model() -> Any:
    import wordllama

    return wordllama.WordLlama.load(
        dim=256, cache_dir=Path(wordllama.__file__).parent, disable_download=True
    )


class WordLlamaEmbedder:
    name = "wordllama"
    version = "0.4-l2_supercat-256"
    dimensions = 256

    async def embed(self, texts: Sequence[str]) -> list[bytes]:
        vectors = await asyncio.to_thread(_model().embed, list(texts), norm=True)
        return [v.astype("<f4").tobytes() for v in vectors]


@dataclass(frozen=True)
class StandInIndex:
    id: int
    name: str
    embedder: str
    model: str
    version: str
    dimensions: int
    revision: int
    vectors: int
    state: str = "active"
    options: Mapping[str, str] = field(default_factory=dict)


class ChunkColumnIndexes:
    """``ledger.indexes`` as far as search reads it, over ``chunks.embedding``."""

    def __init__(self, ledger: Ledger, embedder: str = "wordllama") -> None:
        self._tx = ledger.transactions
        self._embedder = embedder

    async def active(self) -> StandInIndex:
        return await self.get(1)

    async def get(self, name_or_id: str | int) -> StandInIndex:
        def tx(conn: Connection) -> StandInIndex:
            count, last = conn.execute(
                select(func.count(), func.coalesce(func.max(CHUNKS.c.id), 0)).where(
                    CHUNKS.c.embedding.is_not(None)
                )
            ).one()
            return StandInIndex(1, "standin", self._embedder, "l2_supercat", "1", 256, last, count)

        return await self._tx.read(tx)

    async def revision(self, index_id: int) -> int:
        # The newest chunk's id: one seek (a count would read every chunk). Misses a
        # deletion below the newest chunk; the stand-in's tests delete the newest.
        def tx(conn: Connection) -> int:
            return int(
                conn.execute(
                    select(func.coalesce(func.max(CHUNKS.c.id), 0)).where(
                        CHUNKS.c.embedding.is_not(None)
                    )
                ).scalar_one()
            )

        return await self._tx.read(tx)

    async def vectors(
        self, index_id: int, after_id: int = 0, limit: int = 1000
    ) -> list[tuple[int, int, bytes]]:
        def tx(conn: Connection) -> list[tuple[int, int, bytes]]:
            rows = conn.execute(
                select(CHUNKS.c.id, CHUNKS.c.id, CHUNKS.c.embedding)
                .where(CHUNKS.c.embedding.is_not(None), CHUNKS.c.id > after_id)
                .order_by(CHUNKS.c.id)
                .limit(limit)
            )
            return [(a, b, bytes(v)) for a, b, v in rows]

        return await self._tx.read(tx)


def attach(ledger: Ledger, **searcher: Any) -> None:
    """Give the ledger's reads the stand-in index and the wordllama query embedder."""
    ledger.reads.searcher = Searcher(
        ledger.transactions,
        ChunkColumnIndexes(ledger),
        embedders=lambda index: WordLlamaEmbedder(),
        **searcher,
    )
