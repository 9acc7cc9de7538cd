"""Chunks stay byte for byte what they were before the ingest-throughput work: the
parse in-process, and what real ``ingestdesk worker`` processes store in the ledger
(with both PDF parsers and a non-default chunking), against digests written by the
code as it stood before (see tests/chunk_corpus.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from core import Ledger, Settings, TaskStatus, sqlite_url
from core.ingest.embedder import HashingEmbedder
from tests import chunk_corpus
from tests.core.test_worker import cli

GOLDEN = json.loads((Path(__file__).parent / "data" / "chunks_golden.json").read_text("utf-8"))


def pdfs_comparable() -> bool:
    """The PDF digests hold for the parser and PDF-writer versions they were made with;
    text and Markdown digests depend on this project's code alone."""
    return bool(chunk_corpus.parser_versions() == GOLDEN["versions"])


def test_every_document_and_chunking_is_in_the_golden_file() -> None:
    keys = set(chunk_corpus.digests())
    assert keys == set(GOLDEN["digests"])
    assert len(keys) == 2 * (3 * 2 + 2)  # two chunkings x (3 PDFs x 2 parsers + 2 texts)


@pytest.mark.parametrize("key", sorted(GOLDEN["digests"]))
def test_parsed_chunks_are_byte_identical_to_before(key: str) -> None:
    if ".pdf " in key and not pdfs_comparable():
        pytest.skip(f"parser versions {chunk_corpus.parser_versions()} != {GOLDEN['versions']}")
    assert chunk_corpus.digests()[key] == GOLDEN["digests"][key]


def test_the_digest_sees_a_one_character_change() -> None:
    from core.ingest.chunker import Chunk

    chunks = [Chunk(0, "alpha beta", 1, 0, 10), Chunk(1, "gamma", 1, 11, 16)]
    moved = [chunks[0], Chunk(1, "gamma", 1, 11, 17)]
    edited = [chunks[0], Chunk(1, "gammA", 1, 11, 16)]
    digests = {chunk_corpus.chunk_digest(c) for c in (chunks, moved, edited)}
    assert len(digests) == 3


async def _upload_all(settings: Settings) -> dict[str, str]:
    names = {}
    async with await Ledger.open(settings) as ledger:
        for name, _kind, data in chunk_corpus.documents():
            doc = await ledger.operator.upload(data, name)
            await ledger.operator.submit(doc.document_id)
            names[doc.document_id] = name
    return names


async def _stored(settings: Settings, names: dict[str, str]) -> dict[str, Any]:
    async with await Ledger.open(settings) as ledger:
        tasks = await ledger.reads.list_tasks(limit=100)
        assert {t.status for t in tasks} == {TaskStatus.SUCCEEDED}, [t.error_code for t in tasks]
        stored = {}
        active = await ledger.indexes.active()
        assert active is not None and active.embedder == "hashed"
        for document_id, name in names.items():
            records = await ledger.reads.chunk_records(document_id, active.id)
            stored[name] = records
    return stored


@pytest.mark.parametrize(
    ("parser", "size", "overlap"),
    [("pypdf", 1000, 150), ("pdfium", 1000, 150), ("pdfium", 200, 50)],
)
def test_a_worker_process_stores_the_same_chunks_and_vectors(
    tmp_path: Path, parser: str, size: int, overlap: int
) -> None:
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "objects")
    names = asyncio.run(_upload_all(settings))
    worker = cli(
        settings,
        "worker",
        "--until-idle",
        # The golden vectors are the hashed bag of words' (a fresh ledger's default
        # is the wordllama model, tested in test_wordllama).
        "--embedder",
        "hashed",
        "--parser",
        parser,
        "--chunk-size",
        str(size),
        "--chunk-overlap",
        str(overlap),
        timeout=120,
    )
    assert worker.returncode == 0, worker.stderr
    stored = asyncio.run(_stored(settings, names))
    embedder = HashingEmbedder()
    for name, kind, _data in chunk_corpus.documents():
        records = stored[name]
        # Text and Markdown go through the same chunker whatever --parser says.
        key = f"{name} {parser if kind == 'pdf' else 'pypdf'} {size}/{overlap}"
        if kind != "pdf" or pdfs_comparable():
            assert chunk_corpus.chunk_digest(records) == GOLDEN["digests"][key]["sha256"], key
        assert len(records) == GOLDEN["digests"][key]["chunks"]
        assert [r.embedding for r in records] == embedder.embed_now([r.text for r in records])
