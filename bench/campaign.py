"""Embedding through the pipeline and re-embedding campaigns, against the bare model.

Three sides, on the same chunk texts (real prose, chunked with the pipeline's defaults:
:func:`bench.embedders.real_chunks`), in the same run:

* **bare model**: ``wordllama``'s own ``embed`` over the chunk texts in the pipeline's
  batches, in this process: the floor.
* **ingestion through one worker**: Markdown documents made of those chunks, uploaded to
  a fresh SQLite ledger and drained by an in-process :class:`core.ingest.worker.Worker`
  embedding with wordllama (as ``ingestdesk worker`` builds it): chunks/s from the first
  claim to the last finish (parse, chunk, embed, index, finalize).
* **a re-embedding campaign**: the same versions, published in a ledger whose active index
  is the hashed bag of words; ``ledger.campaigns.create(wordllama)`` and one worker drain
  the campaign: chunks/s from the create to the index being ready (claim, read the
  stored chunks, embed, write the vectors, settle).

The model's load is outside every timing (each side loads it before its clock starts).
Rounds alternate the sides; each side's best round counts (the least disturbed by other
work on the machine). Targets (issue 21): ingestion >= 0.9x and a campaign >= 0.8x the
bare model's chunks/s.

Run: ``python -m bench.campaign [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bench.common import Target, fmt_num, print_header, print_ratio, print_table, print_targets
from bench.embedders import bare_side, real_chunks

if TYPE_CHECKING:
    from core import Ledger

INGEST_TARGET = 0.9
CAMPAIGN_TARGET = 0.8
CHUNKS_PER_DOCUMENT = 40  # chunks a generated document holds (paragraphs, as chunked)
ROUNDS = 3
QUICK_ROUNDS = 1
QUICK_CHUNKS = 640
CONCURRENCY = 2  # the worker's tasks in flight, as `ingestdesk worker` defaults


def documents(texts: Sequence[str]) -> list[bytes]:
    """Markdown documents of ``CHUNKS_PER_DOCUMENT`` paragraphs each."""
    out = []
    for start in range(0, len(texts), CHUNKS_PER_DOCUMENT):
        paragraphs = texts[start : start + CHUNKS_PER_DOCUMENT]
        out.append(("\n\n".join(p.replace("\n", " ") for p in paragraphs) + "\n").encode())
    return out


async def _ledger(folder: Path) -> Ledger:
    from core import Ledger, Settings
    from core.config import sqlite_url

    settings = Settings(db_url=sqlite_url(folder / "ledger.db"), store_root=folder / "objects")
    return await Ledger.open(settings)


async def ingest_round(folder: Path, docs: Sequence[bytes]) -> tuple[float, list[str]]:
    """Seconds for one worker to ingest ``docs`` with wordllama, and the chunks it
    stored (their texts: what the other sides embed)."""
    from core.ingest.wordllama_embedder import WordLlamaEmbedder
    from core.ingest.worker import Worker

    embedder = WordLlamaEmbedder()
    embedder.load()
    ledger = await _ledger(folder)
    try:
        for n, data in enumerate(docs):
            doc = await ledger.operator.upload(data, f"doc-{n:04d}.md")
            await ledger.operator.submit(doc.document_id)
        worker = Worker(
            ledger, "bench-ingest", embedder=embedder, concurrency=CONCURRENCY, register=False
        )
        start = time.perf_counter()
        await worker.run(until_idle=True)
        elapsed = time.perf_counter() - start
        active = await ledger.indexes.active()
        assert active is not None and active.embedder == "wordllama"
        ended = list(worker.stats.outcomes.values())
        if ended.count("succeeded") != len(docs):
            raise RuntimeError(f"ingestion: {ended} for {len(docs)} documents")
        texts = []
        for doc in await ledger.reads.list_documents(limit=None):
            texts += [r.text for r in await ledger.reads.chunk_records(doc.document_id)]
        return elapsed, texts
    finally:
        await ledger.close()


async def campaign_round(folder: Path, docs: Sequence[bytes]) -> tuple[float, int]:
    """Seconds from creating a wordllama index over ``docs`` (published, processed with
    the hashed embedder) to it being ready, through one worker; and its vectors."""
    from core.ingest.embedder import HashingEmbedder
    from core.ingest.embedding import index_key_of
    from core.ingest.wordllama_embedder import WordLlamaEmbedder
    from core.ingest.worker import Worker
    from core.states import IndexState

    ledger = await _ledger(folder)
    try:
        ids = []
        for n, data in enumerate(docs):
            doc = await ledger.operator.upload(data, f"doc-{n:04d}.md")
            await ledger.operator.submit(doc.document_id)
            ids.append(doc.document_id)
        hashed = Worker(ledger, "bench-hashed", embedder=HashingEmbedder(), register=False)
        await hashed.run(until_idle=True)
        for document_id in ids:
            await ledger.versions.publish(document_id, actor="bench")
        embedder = WordLlamaEmbedder()
        embedder.load()
        # The campaign's worker embeds with the hashed model of the active index; the
        # campaign's tasks get their wordllama embedder from the index's definition
        # (loaded above: the model is loaded once per process).
        worker = Worker(
            ledger,
            "bench-campaign",
            embedder=HashingEmbedder(),
            concurrency=CONCURRENCY,
            register=False,
        )
        start = time.perf_counter()
        progress = await ledger.campaigns.create(index_key_of(embedder))
        await worker.run(until_idle=True)
        elapsed = time.perf_counter() - start
        done = await ledger.campaigns.progress(progress.index.id)
        if done.index.state is not IndexState.READY:
            raise RuntimeError(f"the campaign did not finish: {done.by_status}")
        return elapsed, done.index.vectors
    finally:
        await ledger.close()


def run(quick: bool, workdir: Path) -> list[Target]:
    from core.ingest.pipeline import EMBED_BATCH

    texts, where = real_chunks(QUICK_CHUNKS if quick else None)
    docs = documents(texts)
    rates: dict[str, list[float]] = {"bare model": [], "ingestion": [], "campaign": []}
    stored: list[str] = []
    for n in range(QUICK_ROUNDS if quick else ROUNDS):
        folder = workdir / f"ingestion-{n}"
        folder.mkdir(parents=True)
        elapsed, stored = asyncio.run(ingest_round(folder, docs))
        shutil.rmtree(folder, ignore_errors=True)
        rates["ingestion"].append(len(stored) / elapsed)
        # The bare model on exactly the chunks the pipeline stored (model loaded first).
        bare = bare_side(stored)
        start = time.perf_counter()
        bare()
        rates["bare model"].append(len(stored) / (time.perf_counter() - start))
        folder = workdir / f"campaign-{n}"
        folder.mkdir(parents=True)
        elapsed, vectors = asyncio.run(campaign_round(folder, docs))
        shutil.rmtree(folder, ignore_errors=True)
        if vectors != len(stored):
            raise RuntimeError(f"the campaign embedded {vectors} chunks, not {len(stored)}")
        rates["campaign"].append(vectors / elapsed)
    print(
        f"chunks: {len(stored)} (as stored) from {len(docs)} documents of up to "
        f"{CHUNKS_PER_DOCUMENT} paragraphs of {where}; batches of {EMBED_BATCH}; one "
        f"worker, concurrency {CONCURRENCY}",
        flush=True,
    )
    print_table(
        "chunks/s (alternating rounds; model loads outside the timings)",
        ["side", "best", "median"],
        [(s, fmt_num(max(r)), fmt_num(statistics.median(r))) for s, r in rates.items()],
    )
    bare_best = max(rates["bare model"])
    ingest = max(rates["ingestion"]) / bare_best
    campaign = max(rates["campaign"]) / bare_best
    print_ratio("ingestion through one worker / bare model chunks/s", ingest, "best rounds")
    print_ratio("re-embedding campaign / bare model chunks/s", campaign, "best rounds")
    print()
    return [
        Target("ingestion (wordllama) / bare model chunks/s", ingest, INGEST_TARGET, ">="),
        Target("re-embedding campaign / bare model chunks/s", campaign, CAMPAIGN_TARGET, ">="),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.campaign", description=__doc__)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_CHUNKS} chunks, 1 round")
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    args = parser.parse_args(argv)
    workdir = Path(args.dir or tempfile.mkdtemp(prefix="bench-campaign-"))
    print_header("bench.campaign", args.quick, workdir)
    print_targets(run(args.quick, workdir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
