"""Vector and hybrid search in the ledger, on both backends: the matrix follows the
ledger (new vectors, deleted ones) without a restart, publication is decided at
query time, each hit says how it was found, and the modes refuse what they cannot
do in one line."""

from __future__ import annotations

import socket

import pytest

from core import BadInput, Ledger
from core.errors import ProviderUnreachable
from core.ingest.embedder import HashingEmbedder
from core.ingest.http_provider import HttpProvider
from core.ledger import ChunkRecord, DocumentView, IndexKey, IndexView
from core.ledger.fusion import reciprocal_rank_fusion
from core.ledger.hybrid import MODES, Searcher, default_mode
from core.ledger.vector_search import default_path
from core.states import IndexState

EMBEDDER = HashingEmbedder(256)
# The index the tests' vectors go into: hashed vectors, but an index whose embedder is
# not "hashed", so that hybrid is the default as it is for a real model.
KEY = IndexKey("test-model", "", "1", 256)
INDEX = "test-model-256"


async def published(ledger: Ledger, name: str, *texts: str) -> DocumentView:
    doc = await ledger.operator.upload("\n".join(texts).encode(), name)
    task = await ledger.operator.submit(doc.document_id)
    claim = await ledger.queue.claim(task.task_id, "w1")
    assert claim is not None
    vectors = await EMBEDDER.embed(list(texts))
    records = [ChunkRecord(i, t, None, 0, len(t), vectors[i]) for i, t in enumerate(texts)]
    assert await ledger.queue.finish(claim, records, index=KEY)
    return await ledger.versions.publish(doc.document_id)


def searcher(ledger: Ledger, **kw: object) -> Searcher:
    """The ledger's search, the queries embedded as the index's vectors were."""
    s = Searcher(
        ledger.transactions,
        ledger.indexes,
        embedders=kw.pop("embedders", lambda index: EMBEDDER),  # type: ignore[arg-type]
    )
    ledger.reads.searcher = s
    return s


def test_rrf_adds_reciprocal_ranks_and_breaks_ties_by_the_first_ranking() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["c", "a", "d"]], k=60)
    assert [item for item, _ in fused] == ["a", "c", "b", "d"]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62)
    assert fused[2][1] == pytest.approx(1 / 62)
    # b (first ranking, rank 2) and d (second, rank 3): b's ranking comes first.
    assert reciprocal_rank_fusion([["x", "b"], ["y", "z", "d"]], k=1)[-1][0] == "d"


def index_of(embedder: str) -> IndexView:
    return IndexView(1, "i", embedder, "", "1", 256, {}, IndexState.ACTIVE, 0, 0.0, None, None)


def test_the_default_mode_is_hybrid_only_for_a_real_model() -> None:
    assert default_mode(None) == "keyword"
    assert default_mode(index_of("hashed")) == "keyword"
    assert default_mode(index_of("wordllama")) == "hybrid"


async def test_a_bad_mode_is_bad_input_naming_the_modes(ledger: Ledger) -> None:
    searcher(ledger)
    with pytest.raises(BadInput, match="search mode is one of keyword, vector, hybrid"):
        await ledger.reads.search("anything", mode="semantic")
    assert MODES == ("keyword", "vector", "hybrid")


async def test_vectors_written_after_the_first_search_are_found_without_a_restart(
    ledger: Ledger,
) -> None:
    s = searcher(ledger)
    await published(ledger, "a.md", "the cafeteria opens at noon")
    (hit,) = await ledger.reads.search("cafeteria noon", mode="vector", limit=5)
    assert hit.filename == "a.md" and hit.mode == "vector" and hit.vector_rank == 1
    (matrix,) = s.cache._matrices.values()
    assert (matrix.count, matrix.reloads) == (1, 0)

    await published(ledger, "b.md", "parking permits are issued by facilities", "bicycles too")
    hits = await ledger.reads.search("parking permits", mode="vector", limit=5)
    assert hits[0].filename == "b.md"
    assert {h.filename for h in hits} == {"a.md", "b.md"}
    assert (matrix.count, matrix.reloads) == (3, 0)  # loaded after the last row: no reload


async def test_a_deletion_reloads_and_publication_is_decided_at_query_time(
    ledger: Ledger,
) -> None:
    s = searcher(ledger)
    a = await published(ledger, "a.md", "the cafeteria opens at noon")
    b = await published(ledger, "b.md", "the cafeteria closes at three")
    assert len(await ledger.reads.search("cafeteria", mode="vector")) == 2

    await ledger.versions.withdraw(a.document_id, reason="outdated", actor="test")
    hits = await ledger.reads.search("cafeteria", mode="vector")
    assert [h.filename for h in hits] == ["b.md"]  # the vector is there; unpublished
    assert len(await ledger.reads.search("cafeteria", mode="vector", include_unpublished=True)) == 2

    await ledger.versions.delete(b.document_id, reason="gone", actor="test")
    assert await ledger.reads.search("cafeteria", mode="vector") == []
    matrix = next(iter(s.cache._matrices.values()))
    assert (matrix.count, matrix.reloads) == (1, 1)


async def test_a_hybrid_hit_says_which_index_answered_and_both_legs_scores(
    ledger: Ledger,
) -> None:
    searcher(ledger)
    await published(ledger, "a.md", "the cafeteria opens at noon", "lunch is served inside")
    answer = await ledger.reads.find("cafeteria noon")
    assert (answer.mode, answer.index, answer.asked) == ("hybrid", INDEX, "")
    assert answer.path == default_path()  # int8+rescore where numkong imports
    first = answer.hits[0]
    assert (first.mode, first.index, first.keyword_rank, first.vector_rank) == (
        "hybrid",
        INDEX,
        1,
        1,
    )
    assert first.keyword_score and first.vector_score and first.fused_score == first.score
    assert "**cafeteria**" in first.snippet  # the keyword leg's marks are kept
    vector_only = [h for h in answer.hits if h.keyword_rank is None]
    assert vector_only and vector_only[0].vector_rank == 2


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_an_unreachable_remote_embedder_fails_vector_search_and_hybrid_says_so(
    ledger: Ledger,
) -> None:
    remote = HttpProvider(
        f"http://127.0.0.1:{_closed_port()}", name="openai", version="m", dimensions=256
    )
    searcher(ledger, embedders=lambda index: remote)
    await published(ledger, "a.md", "the cafeteria opens at noon")
    with pytest.raises(ProviderUnreachable, match=r"^provider_unavailable: the index's embedder"):
        await ledger.reads.search("cafeteria", mode="vector")
    answer = await ledger.reads.find("cafeteria")
    assert answer.mode == "keyword" and answer.asked == ""
    assert answer.notice.startswith("keyword ranks only: provider_unavailable")
    assert [h.filename for h in answer.hits] == ["a.md"]
    assert "127.0.0.1" not in answer.notice  # no address in what a client is told
    await remote.aclose()


async def test_keyword_search_finds_an_identifier_as_written(ledger: Ledger) -> None:
    await published(ledger, "121.md", "Policy HR-121 covers the stipend.")
    await published(ledger, "120.md", "Policy HR-120 covers equipment; see section 121.")
    assert [h.filename for h in await ledger.reads.search("HR-121")] == ["121.md"]
    # Two words, not a term: each anywhere in the chunk.
    assert {h.filename for h in await ledger.reads.search("hr 121")} == {"121.md", "120.md"}
    assert [h.filename for h in await ledger.reads.search("E-4471")] == []
