"""Vector indexes in the ledger: every vector names its index, a ledger's first index
is active, deleting chunks tells the indexes that held their vectors, and a ledger
from before indexes keeps its vectors, each in the index of the embedder that made it."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from array import array
from pathlib import Path
from typing import Any

import pytest

from core import Ledger, Settings
from core.ingest.embedder import HashingEmbedder
from core.ingest.embedding import index_key_of
from core.ingest.worker import Worker
from core.ledger import ChunkRecord, IndexKey
from core.ledger.migrate import SCHEMA_HEAD
from core.states import IndexState, TaskStatus

HASHED = index_key_of(HashingEmbedder())
OTHER = IndexKey("wordllama", "l2_supercat", "test-1", 4)


def vector(*values: float) -> bytes:
    return array("f", values).tobytes()


async def finished(ledger: Ledger, texts: list[str], key: IndexKey, name: str = "a.md") -> str:
    doc = await ledger.operator.upload("\n\n".join(texts).encode(), name)
    task = await ledger.operator.submit(doc.document_id)
    claim = await ledger.queue.claim(task.task_id, "w")
    assert claim is not None
    records = [
        ChunkRecord(i, t, None, 0, len(t), vector(*([1.0] + [0.0] * (key.dimensions - 1))))
        for i, t in enumerate(texts)
    ]
    assert await ledger.queue.finish(claim, records, index=key)
    return doc.document_id


async def test_a_ledgers_first_index_is_active_and_later_ones_build(ledger: Ledger) -> None:
    assert await ledger.indexes.active() is None
    await finished(ledger, ["alpha", "beta"], HASHED)
    [first] = await ledger.indexes.list()
    assert (first.embedder, first.dimensions, first.state) == ("hashed", 256, IndexState.ACTIVE)
    assert first.vectors == 2 and first.name == "hashed-256"
    other = await ledger.indexes.ensure(OTHER)
    assert other.state is IndexState.BUILDING
    assert (await ledger.indexes.active()) == first.__class__(**{**first.__dict__, "vectors": 0})
    # The same key again is the same index, whoever asks.
    assert (await ledger.indexes.ensure(OTHER)).id == other.id
    assert (await ledger.indexes.get("hashed-256")).vectors == 2
    assert (await ledger.indexes.get(str(other.id))).name == other.name


async def test_vectors_are_read_by_index_in_id_order_and_pages(ledger: Ledger) -> None:
    await finished(ledger, ["one", "two", "three"], HASHED)
    index = await ledger.indexes.active()
    assert index is not None
    rows = await ledger.indexes.vectors(index.id)
    assert [r[0] for r in rows] == sorted(r[0] for r in rows) and len(rows) == 3
    page = await ledger.indexes.vectors(index.id, after_id=rows[0][0], limit=1)
    assert page == [rows[1]]
    assert all(len(v) == 4 * 256 for _, _, v in rows)
    revision = await ledger.indexes.revision(index.id)
    assert revision.last_vector_id == rows[-1][0] and revision.deletions == 0


async def test_deleting_chunks_tells_the_indexes_that_held_their_vectors(ledger: Ledger) -> None:
    kept = await finished(ledger, ["kept"], HASHED, "kept.md")
    gone = await finished(ledger, ["gone"], HASHED, "gone.md")
    index = await ledger.indexes.active()
    assert index is not None
    untouched = await ledger.indexes.ensure(OTHER)
    before = await ledger.indexes.revision(index.id)
    await ledger.versions.delete(gone, actor="alice", reason="wrong file")
    after = await ledger.indexes.revision(index.id)
    assert after.deletions == before.deletions + 1
    # The deleted version's vectors went with its chunks; the other's stayed.
    assert (await ledger.indexes.get(index.id)).vectors == 1
    assert (await ledger.reads.chunk_records(kept, index.id))[0].embedding is not None
    assert (await ledger.indexes.revision(untouched.id)).deletions == 0


async def test_a_vector_without_its_index_is_refused(ledger: Ledger) -> None:
    doc = await ledger.operator.upload(b"text", "a.md")
    task = await ledger.operator.submit(doc.document_id)
    claim = await ledger.queue.claim(task.task_id, "w")
    assert claim is not None
    with pytest.raises(ValueError, match="need the index"):
        await ledger.queue.finish(claim, [ChunkRecord(0, "text", None, 0, 4, vector(1.0))])
    assert (await ledger.reads.get_task(task.task_id)).status is TaskStatus.RUNNING


async def test_a_worker_writes_its_embedders_vectors_into_its_index(ledger: Ledger) -> None:
    text = b"# Leases\n\nA lease expires after thirty seconds.\n"
    doc = await ledger.operator.upload(text, "l.md")
    await ledger.operator.submit(doc.document_id)
    await Worker(ledger, "w-index", concurrency=1, register=False).run(until_idle=True)
    index = await ledger.indexes.active()
    assert index is not None and index.key == HASHED
    records = await ledger.reads.chunk_records(doc.document_id, HASHED)
    assert records and all(r.embedding == HashingEmbedder().embed_now([r.text])[0] for r in records)
    assert await ledger.reads.chunk_records(doc.document_id, OTHER) == [
        r.__class__(**{**r.__dict__, "embedding": None}) for r in records
    ]


def _ledger_at_0013(path: Path, tmp_path: Path) -> None:
    """A ledger as 0013 left it: made at the head, 0015's and 0014's changes taken back."""

    async def made() -> None:
        settings = Settings(db_url=f"sqlite:///{path}", store_root=tmp_path / "o")
        async with await Ledger.open(settings):
            pass

    asyncio.run(made())
    with sqlite3.connect(path) as raw:
        raw.execute("DROP INDEX ix_tasks_index_status")  # 0015 undone
        raw.execute("ALTER TABLE ingestion_tasks DROP COLUMN index_id")
        raw.execute("DROP TABLE chunk_vectors")
        raw.execute("DROP TABLE indexes")
        raw.execute("ALTER TABLE chunks ADD COLUMN embedding BLOB")
        raw.execute("UPDATE alembic_version SET version_num = '0013'")


def test_a_ledger_from_before_indexes_keeps_each_vector_in_its_embedders_index(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    _ledger_at_0013(path, tmp_path)
    made_by = {
        "d-hashed-1": ("hashed-bag-of-words", "1", 2, 3),
        "d-hashed-2": ("hashed-bag-of-words", "1", 2, 2),
        "d-remote": ("demo-provider", "demo-3", 3, 1),
    }
    with sqlite3.connect(path) as raw:
        for n, (doc, (embedder, version, dims, chunks)) in enumerate(made_by.items()):
            raw.execute(
                "INSERT INTO documents (id, filename, sha256, object_key, size, kind, status, "
                "version, family_id, version_no, created_at, updated_at) VALUES "
                "(?, ?, ?, ?, 1, 'text', 'published', 1, ?, 1, 0, 0)",
                (doc, f"{doc}.txt", f"{n:064d}", f"k{n}", doc),
            )
            options = {
                "embedder": embedder,
                "embedder_version": version,
                "embedder_dimensions": str(dims),
            }
            raw.execute(
                "INSERT INTO ingestion_tasks (id, document_id, status, stage, completed, total, "
                "attempt, max_attempts, options, created_at, updated_at, revision) VALUES "
                "(?, ?, 'succeeded', 'finalize', 1, 1, 1, 3, ?, 0, 0, ?)",
                (f"t{n}", doc, json.dumps(options), n + 1),
            )
            for i in range(chunks):
                raw.execute(
                    "INSERT INTO chunks (document_id, ordinal, text, page, char_start, char_end, "
                    "embedding) VALUES (?, ?, ?, NULL, 0, 4, ?)",
                    (doc, i, f"chunk {i}", vector(*[float(i + 1)] * dims)),
                )

    async def opened() -> list[Any]:
        settings = Settings(db_url=f"sqlite:///{path}", store_root=tmp_path / "o")
        async with await Ledger.open(settings) as ledger:
            found = await ledger.indexes.list()
            by_index = {i.name: await ledger.indexes.vectors(i.id) for i in found}
            return [found, by_index]

    indexes, by_index = asyncio.run(opened())
    assert [(i.name, i.embedder, i.model, i.dimensions, i.state, i.vectors) for i in indexes] == [
        ("hashed-2", "hashed", "", 2, IndexState.ACTIVE, 5),
        ("demo-provider-3", "demo-provider", "demo-3", 3, IndexState.RETIRED, 1),
    ]
    assert {len(v) for _, _, v in by_index["hashed-2"]} == {8}
    assert by_index["demo-provider-3"][0][2] == vector(1.0, 1.0, 1.0)
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT version_num FROM alembic_version").fetchone() == (SCHEMA_HEAD,)
        columns = [r[1] for r in raw.execute("PRAGMA table_info(chunks)")]
        assert "embedding" not in columns
