"""STAND-IN until the embedder registry (core.ingest.embedders, branch i21-embed) is
merged: wordllama behind the Embedder protocol, as a worker and the query side use
it. Its index is ``wordllama-256`` (kind ``wordllama``, as the registry names it)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from core.ledger import Ledger
from core.ledger.hybrid import Searcher


@cache
def _model() -> Any:
    import wordllama

    return wordllama.WordLlama.load(
        dim=256, cache_dir=Path(wordllama.__file__).parent, disable_download=True
    )


class WordLlamaEmbedder:
    name = "wordllama"
    kind = "wordllama"
    model = ""
    version = "0.4-l2_supercat-256"
    dimensions = 256

    async def embed(self, texts: Sequence[str]) -> list[bytes]:
        vectors = await asyncio.to_thread(_model().embed, list(texts), norm=True)
        return [v.astype("<f4").tobytes() for v in vectors]


def attach(ledger: Ledger, **searcher: Any) -> None:
    """The ledger's search with wordllama embedding the queries."""
    ledger.reads.searcher = Searcher(
        ledger.transactions,
        ledger.indexes,
        embedders=lambda index: WordLlamaEmbedder(),
        **searcher,
    )
