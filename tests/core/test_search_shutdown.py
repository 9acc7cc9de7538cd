"""A search process that embedded queries with a remote (OpenAI-compatible) endpoint
closes that endpoint's HTTP client when its ledger closes."""

from __future__ import annotations

import socket

import pytest

from core import Ledger, Settings
from core.errors import ProviderUnreachable
from core.ingest.embedder import HashingEmbedder
from core.ledger import ChunkRecord, IndexKey


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_closing_the_ledger_closes_the_query_embedders_http_client(
    settings: Settings,
) -> None:
    ledger = await Ledger.open(settings)
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    key = IndexKey("openai", "text-embedding-3-small", "text-embedding-3-small", 256, {"url": url})
    doc = await ledger.operator.upload(b"the cafeteria opens at noon\n", "a.md")
    task = await ledger.operator.submit(doc.document_id)
    claim = await ledger.queue.claim(task.task_id, "w1")
    assert claim is not None
    (vector,) = await HashingEmbedder(256).embed(["the cafeteria opens at noon"])
    record = ChunkRecord(0, "the cafeteria opens at noon", None, 0, 27, vector)
    assert await ledger.queue.finish(claim, [record], index=key)
    await ledger.versions.publish(doc.document_id)
    # Nothing listens there: the client is made and used all the same.
    with pytest.raises(ProviderUnreachable):
        await ledger.reads.search("cafeteria", mode="vector")
    made = list(ledger.reads.searcher._embedders.values())
    assert [type(e).__name__ for e in made] == ["OpenAIEmbeddings"]
    assert not made[0]._client.is_closed
    await ledger.close()
    assert made[0]._client.is_closed
