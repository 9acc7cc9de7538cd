"""bench.search: how well and how fast the ledger's search answers.

Prints, in one run:

1. the labelled retrieval set (tests/retrieval/: 36 documents ingested by a real
   worker with wordllama vectors): recall@3 (and the first hit, @1) of keyword,
   vector and hybrid search on paraphrases and on exact rare tokens, and of a
   hybrid search whose keyword leg ORs the query's words (the fusion the issue
   warns about), beside the AND leg the ledger uses;
2. search latency on SQLite at 10k, 100k and 1M chunks (``--quick``: 10k): a ledger
   filled in bulk (raw SQL: documents, chunks, their full-text index and random unit
   vectors of 256 dimensions; set-up, not measurement), searched by a separate
   process started on it: the matrix's load time, then p50/p99 of keyword, vector
   and hybrid queries through ``ledger.reads.find``, once per vector structure
   (``int8+rescore``, the default, and ``exact-f32``, the reference and fallback:
   core.ledger.vector_search), each in a process of its own: the load time, the
   search process's peak resident memory (VmHWM), recall@10 of the chosen
   structure's vector search against the exact one's on the same queries, and beside
   them the floors: the bare scan of each structure's matrix (no ledger, no
   embedder), float32 ``matrix @ query`` + ``argpartition`` being the exact floor.

Embedding throughput (the pipeline's and a re-embedding campaign's chunks/s against
the bare model) is measured by other rows; this bench leaves them to their owners.

Run: ``python -m bench.search [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    REPO_ROOT,
    Target,
    compile_bytecode,
    fmt_num,
    peak_rss_kb,
    print_header,
    print_ratio,
    print_table,
    print_targets,
    python_env,
    ratio,
)

SIZES_FULL = (10_000, 100_000, 1_000_000)  # chunks
SIZES_QUICK = (10_000,)
QUERIES_FULL = 200  # timed queries per mode and size
QUERIES_QUICK = 60
WARM_QUERIES = 5  # untimed, after the first (which loads the matrix)
DIMENSIONS = 256
WORDS_PER_CHUNK = 40
CHUNKS_PER_DOCUMENT = 10
VOCABULARY = 20_000  # distinct words, drawn by a Zipf-like law (rank ** -1.0)
QUERY_WORDS = 2  # words a timed query asks for (all required by the keyword leg)
FILL_BATCH = 50_000  # rows per executemany while filling
CHILD_TIMEOUT_S = 1800.0  # seconds a search process may take at 1M chunks
TARGET_P99_MS = {10_000: 50.0, 100_000: 50.0, 1_000_000: 250.0}


# ------------------------------------------------------------------ retrieval set


async def retrieval_figures(workdir: Path) -> dict[tuple[str, str], tuple[float, float]]:
    """(kind, mode) -> (recall@3, recall@1) on tests/retrieval/, SQLite."""
    from core import Ledger, Settings, Worker, sqlite_url
    from core.ledger.hybrid import Searcher
    from tests.retrieval.corpus import ingest, questions, recall, wordllama

    settings = Settings(db_url=sqlite_url(workdir / "retrieval.db"), store_root=workdir / "o")
    ledger = await Ledger.open(settings)
    out = {}
    try:
        worker = Worker(ledger, "bench-retrieval", embedder=wordllama(), register=False)
        await ingest(ledger, lambda: worker.run(until_idle=True))
        for label, mode, or_leg in (
            ("keyword", "keyword", False),
            ("vector", "vector", False),
            ("hybrid", "hybrid", False),
            ("hybrid, OR leg", "hybrid", True),
        ):
            ledger.reads.searcher = Searcher(ledger.transactions, ledger.indexes, or_leg=or_leg)
            for kind in ("paraphrase", "exact"):

                async def search(ask: str, mode: str = mode) -> Any:
                    return await ledger.reads.search(ask, mode=mode, limit=10)

                at3, _ = await recall(search, questions(kind))
                at1, _ = await recall(search, questions(kind), at=1)
                out[kind, label] = (at3, at1)
    finally:
        await ledger.close()
    return out


# ---------------------------------------------------------------------- bulk fill


def vocabulary(n: int) -> list[str]:
    """Pronounceable made-up words: none is a stop word, each is its own term."""
    rng = random.Random(7)
    consonants, vowels = "bcdfghjklmnprstvz", "aeiou"
    words: set[str] = set()
    while len(words) < n:
        syllables = rng.randint(2, 4)
        words.add("".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(syllables)))
    return sorted(words, key=lambda w: (len(w), w))


def fill(db: Path, chunks: int) -> float:
    """A ledger of ``chunks`` published chunks with vectors, in bulk; seconds taken."""
    from core import Ledger, Settings, sqlite_url

    started = time.perf_counter()

    async def create() -> None:
        await (await Ledger.open(Settings(db_url=sqlite_url(db), store_root=db.parent))).close()

    asyncio.run(create())
    words = np.array(vocabulary(VOCABULARY))
    weights = 1.0 / np.arange(1, VOCABULARY + 1)
    weights /= weights.sum()
    rng = np.random.default_rng(11)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")
    now = time.time()
    with conn:
        conn.execute(
            "INSERT INTO indexes (id, name, embedder, model, version, dimensions, options,"
            " state, deletions, created_at, built_at, activated_at)"
            " VALUES (1, 'wordllama-256', 'wordllama', 'l2_supercat', 'bench', ?,"
            " '{}', 'active', 0,"
            " ?, ?, ?)",
            (DIMENSIONS, now, now, now),
        )
        documents = (chunks + CHUNKS_PER_DOCUMENT - 1) // CHUNKS_PER_DOCUMENT
        conn.executemany(
            "INSERT INTO documents (id, filename, filename_folded, sha256, object_key, size,"
            " kind, status, version, family_id, version_no, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, 1, 'text', 'published', 1, ?, 1, ?, ?)",
            (
                (
                    f"{d:032x}",
                    f"doc-{d}.txt",
                    f"doc-{d}.txt",
                    f"{d:064x}",
                    f"k{d}",
                    f"{d:032x}",
                    now,
                    now,
                )
                for d in range(documents)
            ),
        )
        for start in range(0, chunks, FILL_BATCH):
            n = min(FILL_BATCH, chunks - start)
            picks = rng.choice(VOCABULARY, size=(n, WORDS_PER_CHUNK), p=weights)
            vectors = rng.standard_normal((n, DIMENSIONS), dtype=np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            rows = []
            for i in range(n):
                c = start + i
                text = " ".join(words[picks[i]])
                document = f"{c // CHUNKS_PER_DOCUMENT:032x}"
                rows.append((c + 1, document, c % CHUNKS_PER_DOCUMENT, text, len(text)))
            conn.executemany(
                "INSERT INTO chunks (id, document_id, ordinal, text, page, char_start,"
                " char_end) VALUES (?, ?, ?, ?, NULL, 0, ?)",
                rows,
            )
            conn.executemany(
                "INSERT INTO chunk_vectors (id, index_id, chunk_id, vector) VALUES (?, 1, ?, ?)",
                (
                    (start + i + 1, start + i + 1, vectors[i].astype("<f4").tobytes())
                    for i in range(n)
                ),
            )
        conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return time.perf_counter() - started


def queries(n: int, seed: int) -> list[str]:
    """Queries of QUERY_WORDS words drawn from the vocabulary's upper middle: words
    that many chunks hold (the keyword leg has work) but not every chunk."""
    words = vocabulary(VOCABULARY)
    rng = random.Random(seed)
    middle = words[10:200]
    return [" ".join(rng.sample(middle, QUERY_WORDS)) for _ in range(n)]


# ------------------------------------------------------------- the search process


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def search_process(db: Path, n: int, path: str) -> dict[str, Any]:
    """Runs in the child: open the ledger, search with the vector structure ``path``,
    report."""
    from core import Ledger, Settings, sqlite_url
    from core.ledger.hybrid import HYBRID_CANDIDATES, Searcher
    from core.ledger.vector_search import EXACT_F32, as_query, best, int8_scores

    ledger = await Ledger.open(Settings(db_url=sqlite_url(db), store_root=db.parent), create=False)
    ledger.reads.searcher = searcher = Searcher(
        ledger.transactions, ledger.indexes, vector_path=path
    )
    out: dict[str, Any] = {"modes": {}, "path": path}
    try:
        asked = queries(n + WARM_QUERIES + 1, seed=3)
        started = time.perf_counter()
        await ledger.reads.find(asked[0], mode="vector")  # loads the matrix
        out["load_s"] = time.perf_counter() - started
        index = await searcher.active()
        assert index is not None
        matrix = await searcher.cache.current(index)
        out["matrix_mb"] = matrix.nbytes / 2**20
        out["vectors"] = matrix.count
        timed = asked[1 + WARM_QUERIES :]
        for mode in ("keyword", "vector", "hybrid"):
            for q in asked[1 : 1 + WARM_QUERIES]:
                await ledger.reads.find(q, mode=mode)
            times, hits, tops = [], 0, []
            for q in timed:
                t = time.perf_counter()
                answer = await ledger.reads.find(q, mode=mode, limit=10)
                times.append(time.perf_counter() - t)
                hits += len(answer.hits)
                tops.append([[h.document_id, h.ordinal] for h in answer.hits])
            out["modes"][mode] = {
                "p50_ms": percentile(times, 0.5) * 1000,
                "p99_ms": percentile(times, 0.99) * 1000,
                "hits": hits / len(times),
            }
            if mode == "vector":
                out["vector_top10"] = tops
        # The floor: the same matrix scanned bare for as many candidates as hybrid
        # search's vector leg asks, no ledger and no embedder.
        embedder = searcher._embedder_for(index)
        vectors = [(await embedder.embed([q]))[0] for q in timed]
        k = HYBRID_CANDIDATES * 2
        times = []
        for raw in vectors:
            q = as_query(bytes(raw), DIMENSIONS)
            t = time.perf_counter()
            if path == EXACT_F32:
                best(matrix.matrix @ q, k)
            else:
                best(int8_scores(matrix.matrix, matrix._scales[: matrix.count], q), k)
            times.append(time.perf_counter() - t)
        out["modes"]["floor"] = {
            "p50_ms": percentile(times, 0.5) * 1000,
            "p99_ms": percentile(times, 0.99) * 1000,
            "hits": k,
        }
    finally:
        await ledger.close()
    out["peak_rss_mb"] = (peak_rss_kb(os.getpid()) or 0) / 1024
    return out


def run_search_process(db: Path, n: int, path: str) -> dict[str, Any]:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.search",
            "--child",
            str(db),
            "--queries",
            str(n),
            "--path",
            path,
        ],
        cwd=REPO_ROOT,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    if run.returncode != 0:
        raise RuntimeError(f"the search process failed:\n{run.stderr}")
    return dict(json.loads(run.stdout.splitlines()[-1]))


def recall_at_10(found: list[list[Any]], exact: list[list[Any]]) -> float:
    """Mean share of the exact top 10 that ``found`` holds, query by query."""
    shares = [
        len({tuple(h) for h in f} & {tuple(h) for h in e}) / len(e)
        for f, e in zip(found, exact, strict=True)
        if e
    ]
    return sum(shares) / len(shares) if shares else float("nan")


# --------------------------------------------------------------------------- main


def run(quick: bool, workdir: Path) -> int:
    print_header("bench.search", quick, workdir)
    figures = asyncio.run(retrieval_figures(workdir))
    print_table(
        "retrieval set (tests/retrieval/, SQLite, wordllama 256): recall@3 / first hit",
        ["search", "paraphrases @3", "@1", "exact tokens @3", "@1"],
        [
            (label, f"{p[0]:.2f}", f"{p[1]:.2f}", f"{e[0]:.2f}", f"{e[1]:.2f}")
            for label in ("keyword", "vector", "hybrid", "hybrid, OR leg")
            for p, e in [(figures["paraphrase", label], figures["exact", label])]
        ],
    )
    print_ratio(
        "hybrid / vector recall@3, paraphrases",
        ratio(figures["paraphrase", "hybrid"][0], figures["paraphrase", "vector"][0]),
        "hybrid loses nothing to vector search on its ground",
    )
    print_ratio(
        "hybrid OR leg / AND leg recall@3, paraphrases",
        ratio(figures["paraphrase", "hybrid, OR leg"][0], figures["paraphrase", "hybrid"][0]),
        "a keyword leg ORing every word outvotes the vector ranking",
    )
    targets = [
        Target(
            "hybrid / keyword recall@3, exact tokens",
            ratio(figures["exact", "hybrid"][0], figures["exact", "keyword"][0]),
            1.0,
            ">=",
        ),
        Target(
            "hybrid / keyword first hit, exact tokens",
            ratio(figures["exact", "hybrid"][1], figures["exact", "keyword"][1]),
            1.0,
            ">=",
        ),
    ]
    from core.ledger.vector_search import EXACT_F32, PATHS, default_path

    chosen = default_path()
    paths = [p for p in PATHS if p in (chosen, EXACT_F32)]
    rows, floors, memory = [], {}, []
    n = QUERIES_QUICK if quick else QUERIES_FULL
    for size in SIZES_QUICK if quick else SIZES_FULL:
        db = workdir / f"search-{size}.db"
        fill_s = fill(db, size)
        got = {path: run_search_process(db, n, path) for path in paths}
        for path in paths:
            modes = got[path]["modes"]
            for mode in ("keyword", "vector", "hybrid", "floor"):
                rows.append(
                    (
                        f"{fmt_num(size, 0)} chunks, {path}, {mode}",
                        f"{modes[mode]['p50_ms']:.1f}",
                        f"{modes[mode]['p99_ms']:.1f}",
                        f"{modes[mode]['hits']:.1f}",
                    )
                )
            memory.append(
                (
                    f"{fmt_num(size, 0)} chunks, {path}",
                    f"{got[path]['load_s']:.2f}",
                    f"{got[path]['matrix_mb']:.0f}",
                    f"{got[path]['peak_rss_mb']:.0f}",
                    f"{fill_s:.1f}",
                )
            )
        mine, exact = got[chosen]["modes"], got[EXACT_F32]["modes"]
        floors[size] = (mine["hybrid"]["p99_ms"], exact["floor"]["p99_ms"], mine["floor"]["p99_ms"])
        recall = recall_at_10(got[chosen]["vector_top10"], got[EXACT_F32]["vector_top10"])
        targets.append(
            Target(
                f"hybrid p99 at {fmt_num(size, 0)} chunks ({chosen}, ms) <= "
                f"{TARGET_P99_MS[size]:.0f}",
                mine["hybrid"]["p99_ms"] / 1000,
                TARGET_P99_MS[size] / 1000,
                "<=",
                show="seconds",
            )
        )
        targets.append(
            Target(
                f"recall@10 of {chosen} against exact-f32 at {fmt_num(size, 0)} chunks",
                recall,
                0.95,
                ">=",
            )
        )
        db.unlink(missing_ok=True)
        for suffix in ("-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    print(f"vector structure chosen here: {chosen} (reference and fallback: {EXACT_F32})\n")
    print_table(
        f"search latency on SQLite ({n} queries of {QUERY_WORDS} words per mode; limit 10;"
        " floor: the bare scan of the same matrix for 200 candidates)",
        ["size, structure and mode", "p50 ms", "p99 ms", "hits"],
        rows,
    )
    print_table(
        "search process: load of the matrix (first query), memory",
        ["size and structure", "load s", "matrix MB", "peak RSS MB", "fill s (set-up)"],
        memory,
    )
    for size, (hybrid, floor, scan) in floors.items():
        print_ratio(
            f"hybrid p99 / exact floor p99 at {fmt_num(size, 0)} chunks",
            ratio(hybrid, floor),
            f"the ledger's hybrid search ({chosen}) against bare float32 numpy over the same "
            "vectors",
        )
        print_ratio(
            f"{chosen} scan p99 / exact floor p99 at {fmt_num(size, 0)} chunks",
            ratio(scan, floor),
            "the chosen structure's bare scan against float32 BLAS's",
        )
    print("embedding throughput rows: measured by bench.ingest's owners (not here)\n")
    print_targets(targets)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.search", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="reduced run (10k chunks)")
    parser.add_argument("--dir", type=Path, help="parent of the work directory (default: temp)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--queries", type=int, default=QUERIES_QUICK, help=argparse.SUPPRESS)
    parser.add_argument("--path", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(asyncio.run(search_process(args.child, args.queries, args.path))))
        return 0
    compile_bytecode()
    parent = args.dir or Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench-search-", dir=parent))
    os.chdir(REPO_ROOT)
    try:
        return run(args.quick, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
