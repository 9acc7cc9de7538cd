"""Embedding chunks/s: ``WordLlamaEmbedder.embed`` as the pipeline calls it (batches of
``EMBED_BATCH`` chunks, awaited on an event loop) against the bare ``wordllama``
model (``WordLlamaInference.embed`` on the same batches), in the same run.

The chunks are real prose, chunked with the pipeline's defaults: the shared corpus's
documents where present (``INGESTDESK_CORPORA``), else this repository's Markdown and
Debian's licence texts. Rounds alternate between the two sides so a change in the
machine's load falls on both; each side's best round is compared (the figure least
disturbed by the other engineers' work on the same two cores), and the median is
printed beside it. Start-up (import + weights + tokenizer) is measured apart, in a
fresh process, with that process's peak memory; so is the event loop's longest gap
while a batch is embedded in a thread.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    REPO_ROOT,
    Target,
    fmt_num,
    print_header,
    print_ratio,
    print_table,
    print_targets,
    ratio,
)
from bench.formats_corpus import SYSTEM_TEXTS, corpora_root

RATIO_TARGET = 0.9  # issue 21: pipeline embedding >= 0.9x the bare model
ROUNDS = 7
QUICK_ROUNDS = 3
QUICK_CHUNKS = 640  # ten pipeline batches
# Real documents of the shared corpus: (file, kind).
CORPUS_FILES = (
    ("formats/alice.epub", "epub"),
    ("formats/handbook-872p.docx", "docx"),
    ("formats/wikipedia.html", "html"),
    ("formats/lemonde-1.html", "html"),
    ("formats/bbc-1.html", "html"),
    ("formats/heise.html", "html"),
)
LOOP_TICK_S = 0.001  # seconds the loop-gap probe sleeps between ticks


def real_chunks(limit: int | None) -> tuple[list[str], str]:
    """Chunk texts of real documents, chunked as the pipeline does by default."""
    from core.ingest.parsing import parse_document

    root = corpora_root(None)
    sources: list[tuple[bytes, str]] = []
    for name, kind in CORPUS_FILES:
        path = root / name
        if path.is_file():
            sources.append((path.read_bytes(), kind))
    where = f"shared corpus ({len(sources)} documents)"
    if not sources:
        docs = [REPO_ROOT / "README.md", REPO_ROOT / "CHANGELOG.md"]
        docs += sorted(SYSTEM_TEXTS.glob("*"))[:8] if SYSTEM_TEXTS.is_dir() else []
        sources = [(p.read_bytes(), "markdown") for p in docs if p.is_file()]
        where = f"README, CHANGELOG and licence texts ({len(sources)} documents)"
    texts = [c.text for data, kind in sources for c in parse_document(data, kind).chunks]
    return (texts[:limit] if limit else texts), where


def rate(run: Callable[[], object], chunks: int) -> float:
    start = time.perf_counter()
    run()
    return chunks / (time.perf_counter() - start)


def pipeline_side(texts: Sequence[str]) -> Callable[[], object]:
    from core.ingest.pipeline import EMBED_BATCH
    from core.ingest.wordllama_embedder import WordLlamaEmbedder

    embedder = WordLlamaEmbedder()
    embedder.load()

    async def embed_all() -> None:
        for start in range(0, len(texts), EMBED_BATCH):
            await embedder.embed(texts[start : start + EMBED_BATCH])

    return lambda: asyncio.run(embed_all())


def import_wordllama() -> Any:
    """``wordllama.WordLlama``, the root logger put back as it was: wordllama's modules
    call ``logging.basicConfig(level=INFO)`` on import. (ingestdesk itself reads the
    package's files without importing it: core.ingest.wordllama_embedder._load.)"""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        from wordllama import WordLlama
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
    return WordLlama


def bare_side(texts: Sequence[str]) -> Callable[[], object]:
    from core.ingest.pipeline import EMBED_BATCH
    from core.ingest.wordllama_embedder import package_dir

    WordLlama = import_wordllama()  # the library's own loader and embed: the baseline

    model = WordLlama.load(dim=256, cache_dir=package_dir(), disable_download=True)
    listed = list(texts)

    def embed_all() -> None:
        for start in range(0, len(listed), EMBED_BATCH):
            model.embed(listed[start : start + EMBED_BATCH])

    return embed_all


def hashed_side(texts: Sequence[str]) -> Callable[[], object]:
    from core.ingest.embedder import HashingEmbedder
    from core.ingest.pipeline import EMBED_BATCH

    embedder = HashingEmbedder()

    async def embed_all() -> None:
        for start in range(0, len(texts), EMBED_BATCH):
            await embedder.embed(texts[start : start + EMBED_BATCH])

    return lambda: asyncio.run(embed_all())


def loop_gap_ms(texts: Sequence[str]) -> tuple[float, float]:
    """The event loop's longest gap (ms) past its LOOP_TICK_S sleeps while batches
    are embedded, and the same with nothing embedding (the machine's own noise)."""
    from core.ingest.pipeline import EMBED_BATCH
    from core.ingest.wordllama_embedder import WordLlamaEmbedder

    embedder = WordLlamaEmbedder()
    embedder.load()

    async def probe(work: Callable[[], Awaitable[None]]) -> float:
        worst = 0.0
        done = asyncio.Event()

        async def tick() -> None:
            nonlocal worst
            while not done.is_set():
                start = time.perf_counter()
                await asyncio.sleep(LOOP_TICK_S)
                worst = max(worst, time.perf_counter() - start - LOOP_TICK_S)

        ticker = asyncio.create_task(tick())
        await work()
        done.set()
        await ticker
        return worst * 1000

    async def embed_all() -> None:
        for start in range(0, len(texts), EMBED_BATCH):
            await embedder.embed(texts[start : start + EMBED_BATCH])

    async def idle() -> None:
        await asyncio.sleep(0.5)

    return asyncio.run(probe(embed_all)), asyncio.run(probe(idle))


# VmHWM, not ru_maxrss: Linux carries a process's ru_maxrss over exec, so a child
# would report the bench's own peak.
_STARTUP = """
import json, os, sys, time
from bench.common import peak_rss_kb
texts = json.loads(sys.stdin.read())
from core.ingest.wordllama_embedder import WordLlamaEmbedder
embedder = WordLlamaEmbedder()
base = peak_rss_kb(os.getpid())
start = time.perf_counter()
embedder.load()
load_s = time.perf_counter() - start
for at in range(0, len(texts), 64):
    embedder.embed_now(texts[at:at + 64])
peak = peak_rss_kb(os.getpid())
print(json.dumps({"load_s": load_s, "before_mb": base / 1024, "peak_mb": peak / 1024}))
"""


def startup(texts: Sequence[str]) -> dict[str, float]:
    """Model load time and peak memory, in a fresh process."""
    result = subprocess.run(
        [sys.executable, "-c", _STARTUP],
        input=json.dumps(list(texts)),
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
    )
    figures: dict[str, float] = json.loads(result.stdout)
    return figures


def run(quick: bool) -> list[Target]:
    from core.ingest.pipeline import EMBED_BATCH
    from core.ingest.wordllama_embedder import WordLlamaEmbedder

    texts, where = real_chunks(QUICK_CHUNKS if quick else None)
    tokens = WordLlamaEmbedder().count_tokens(texts)
    chars = [len(t) for t in texts]
    print(
        f"chunks: {len(texts)} from {where}, {fmt_num(statistics.mean(chars), 0)} characters "
        f"and {fmt_num(statistics.mean(tokens), 0)} tokens on average (max {max(tokens)}; "
        f"{sum(n > 256 for n in tokens) / len(tokens):.0%} over the 256 it was trained on); "
        f"batches of {EMBED_BATCH}",
        flush=True,
    )
    bare_name = "bare wordllama (WordLlamaInference.embed)"
    ours_name = "WordLlamaEmbedder.embed (pipeline)"
    sides = {
        bare_name: bare_side(texts),
        ours_name: pipeline_side(texts),
        "HashingEmbedder.embed (for scale)": hashed_side(texts),
    }
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(QUICK_ROUNDS if quick else ROUNDS):
        for name, side in sides.items():
            rates[name].append(rate(side, len(texts)))
    print_table(
        "chunks/s (same chunks, same batches, alternating rounds)",
        ["embedder", "best", "median", "worst"],
        [
            (name, fmt_num(max(r)), fmt_num(statistics.median(r)), fmt_num(min(r)))
            for name, r in rates.items()
        ],
    )
    bare, ours = max(rates[bare_name]), max(rates[ours_name])
    ours_vs_bare = ratio(ours, bare)
    print_ratio(
        "wordllama embed, pipeline / bare model chunks/s",
        ours_vs_bare,
        f"{fmt_num(ours)} vs {fmt_num(bare)} chunks/s, best rounds",
    )
    median_ratio = ratio(statistics.median(rates[ours_name]), statistics.median(rates[bare_name]))
    print_ratio("wordllama embed median, pipeline / bare", median_ratio, "median rounds")

    gap, idle_gap = loop_gap_ms(texts)
    print(
        f"event loop's longest gap while embedding: {gap:.1f} ms "
        f"(idle on this machine: {idle_gap:.1f} ms)",
        flush=True,
    )
    figures = startup(texts)
    print(
        f"start-up in a fresh process: model load {figures['load_s']:.2f} s; peak RSS "
        f"{figures['peak_mb']:.0f} MB after embedding (before loading: "
        f"{figures['before_mb']:.0f} MB)",
        flush=True,
    )
    print()
    return [
        Target("embedding, pipeline / bare wordllama chunks/s", ours_vs_bare, RATIO_TARGET, ">="),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.embedders", description=__doc__)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_CHUNKS} chunks, 3 rounds")
    parser.add_argument("--dir", type=Path, help="unused: this bench writes no files")
    args = parser.parse_args(argv)
    print_header("bench.embedders", args.quick, args.dir or Path.cwd())
    print_targets(run(args.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
