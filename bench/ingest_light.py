"""bench.ingest, light pages, pypdfium2 and small documents in steady state
(:mod:`bench.ingest_steady`: whole processes on N and 2N documents, marginal against
marginal), on three corpora:

* **light**: PDFs whose pages hold ~1.8 kB of text (as fpdf2 or a plain LaTeX article
  make them), where pypdf's own parse is cheap and the pipeline's per-page costs show;
* **large**: bench.ingest's large corpus (~4.5 kB a page), where pypdf dominates;
* **small**: bench.ingest's one-page PDFs and Markdown notes.

For each PDF corpus: ``python -m bench.bare_extract pypdf`` (and ``pdfium``) over the
files, one ``ingestdesk worker --until-idle`` (and ``--parser pdfium``), two bare
processes on the two halves of the files against two worker processes; workers with
the default embedder and with the hashed one.

Then where a light page's time goes, from an in-process Worker on a sample with every
stage timed: the parse and chunking (measured again in this process on the same files),
the round trip to the parser process (the pool's wall time less that), embedding, the
finish transaction (chunks, the FTS index, the task and document rows) with the FTS
index's own share measured on a scratch table, the other ledger calls, and how much of
the work beside parsing ran while a parse was in flight (the overlap a worker gets from
its parser process).
"""

from __future__ import annotations

import asyncio
import io
import random
import sqlite3
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import Target, print_table
from bench.ingest_runs import Corpus, settings_for, submit_all
from bench.ingest_steady import PDF_PATHS, SMALL_PATHS, measure, pdf_targets, report, small_targets
from core import Ledger

LIGHT_LINES_PER_PAGE = 20  # lines of 13 words: ~1.8 kB of text a page
WORDS_PER_LINE = 13
LIGHT_SEED = 2_024


@dataclass(frozen=True)
class LightPlan:
    docs: int  # 2N: the steady-state runs take the first half (N) and all of them
    pages: int
    rounds: int
    sample: int  # documents run in-process for the breakdown
    steady_large: bool = False  # the large corpus in steady state too


FULL_LIGHT = LightPlan(docs=100, pages=20, rounds=2, sample=20)
QUICK_LIGHT = LightPlan(docs=16, pages=10, rounds=1, sample=4)


def make_light_corpus(root: Path, plan: LightPlan) -> Corpus:
    from tests.hostile import make_pdf  # reportlab: a test dependency

    rng = random.Random(LIGHT_SEED)
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    words = ["".join(rng.choices(letters, k=rng.randint(2, 10))) for _ in range(3_000)]
    root.mkdir(parents=True)
    files = []
    for i in range(plan.docs):
        pages = [
            "\n".join(
                " ".join(rng.choice(words) for _ in range(WORDS_PER_LINE))
                for _ in range(LIGHT_LINES_PER_PAGE)
            )
            for _ in range(plan.pages)
        ]
        path = root / f"article-{i:04d}.pdf"
        path.write_bytes(make_pdf(pages))
        files.append(path)
    return Corpus("light", files, plan.docs * plan.pages)


# --- where a light page's time goes ---------------------------------------------------


@dataclass
class Timeline:
    """Intervals (start, end) of each timed call, on this process's clock."""

    spans: defaultdict[str, list[tuple[float, float]]] = field(
        default_factory=lambda: defaultdict(list)
    )

    def timed(self, name: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.spans[name].append((start, time.perf_counter()))

        return wrapper

    def timed_sync(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spans[name].append((start, time.perf_counter()))

        return wrapper

    def total(self, name: str) -> float:
        return sum(end - start for start, end in self.spans[name])

    def overlapped(self, name: str, other: str) -> float:
        """Seconds of ``name``'s spans during which some ``other`` span was open."""
        found = 0.0
        for start, end in self.spans[name]:
            for o_start, o_end in self.spans[other]:
                found += max(0.0, min(end, o_end) - max(start, o_start))
        return found


def in_process_parse(files: Sequence[Path]) -> tuple[float, float]:
    """(parse seconds, chunking seconds) of ``files`` in this process."""
    from pypdf import PdfReader

    from core.ingest.chunker import chunk_text
    from core.ingest.parsing import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE

    parse_s = chunk_s = 0.0
    for path in files:
        data = path.read_bytes()
        start = time.perf_counter()
        texts = [page.extract_text() for page in PdfReader(io.BytesIO(data)).pages]
        mid = time.perf_counter()
        for text in texts:
            chunk_text(text, chunk_size=DEFAULT_CHUNK_SIZE, overlap=DEFAULT_CHUNK_OVERLAP)
        parse_s += mid - start
        chunk_s += time.perf_counter() - mid
    return parse_s, chunk_s


def fts_seconds(documents: Sequence[Sequence[str]], scratch: Path) -> float:
    """Seconds the FTS index adds to writing ``documents``' chunks: the same writes
    (one transaction a document, as finish makes them) into a scratch ledger-shaped
    file, with the ledger's external-content FTS5 table filled as finish fills it
    (one INSERT ... SELECT a document, core.ledger.statements.INDEX_CHUNKS), less the
    same writes without it."""

    def write(with_index: bool) -> float:
        path = scratch / f"fts-{with_index}.db"
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("CREATE TABLE chunks (id INTEGER PRIMARY KEY, doc INT, text TEXT)")
        conn.execute("CREATE INDEX chunks_doc ON chunks (doc)")
        if with_index:
            conn.execute(
                "CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks', "
                "content_rowid='id')"
            )
        start = time.perf_counter()
        for n, texts in enumerate(documents):
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO chunks (doc, text) VALUES (?, ?)", [(n, t) for t in texts]
            )
            if with_index:
                conn.execute(
                    "INSERT INTO chunks_fts(rowid, text) SELECT id, text FROM chunks WHERE doc = ?",
                    (n,),
                )
            conn.execute("COMMIT")
        took = time.perf_counter() - start
        conn.close()
        return took

    return max(0.0, write(True) - write(False))


async def breakdown(corpus: Corpus, store: Path, run_dir: Path, sample: int) -> None:
    from core.ingest.embedder import HashingEmbedder
    from core.ingest.parse_pool import ParserPool
    from core.ingest.parser_process import ParserProcess
    from core.ingest.worker import Worker

    files = corpus.files[:sample]
    pages = sample * (corpus.pages // len(corpus.files))
    db_path = run_dir / "breakdown.db"
    await submit_all(db_path, store, files)
    line = Timeline()
    async with await Ledger.open(settings_for(db_path, store)) as ledger:
        for role_name, name in (
            ("queue", "claim_next"),
            ("queue", "report_progress"),
            ("queue", "heartbeat"),
            ("queue", "finish"),
        ):
            role = getattr(ledger, role_name)
            setattr(role, name, line.timed(f"ledger {name}", getattr(role, name)))
        async with ParserPool(workers=1) as pool:
            await pool.parse(b"warm-up\n", "text")
            pool.parse = line.timed("parse (parser process)", pool.parse)  # type: ignore[method-assign, assignment]
            # One exchange is a parse's round trip once the parser process is free
            # (the pool's own wall time also counts waiting for it).
            exchange = ParserProcess.exchange
            ParserProcess.exchange = line.timed_sync("exchange", exchange)  # type: ignore[method-assign]
            worker = Worker(ledger, "bench-breakdown", pool=pool, concurrency=2)
            embedder = worker.pipeline.embedder
            assert isinstance(embedder, HashingEmbedder)
            embedder.embed = line.timed("embedding", embedder.embed)  # type: ignore[method-assign, assignment]
            start = time.perf_counter()
            try:
                await worker.run(until_idle=True)
            finally:
                ParserProcess.exchange = exchange  # type: ignore[method-assign]
            wall = time.perf_counter() - start
        documents = [
            [c.text for c in await ledger.reads.chunks(d.document_id)]
            for d in await ledger.reads.list_documents(limit=None)
        ]
    parse_s, chunk_s = in_process_parse(files)
    pool_s = line.total("exchange")
    fts_s = fts_seconds(documents, run_dir)
    other_s = sum(line.total(f"ledger {n}") for n in ("claim_next", "report_progress", "heartbeat"))
    finish_s = line.total("ledger finish")
    rows: list[tuple[str, float, str]] = [
        ("pypdf parse (in the parser process)", parse_s, ""),
        ("chunking (in the parser process)", chunk_s, ""),
        ("transfer to and from the parser process", max(0.0, pool_s - parse_s - chunk_s), ""),
        ("embedding", line.total("embedding"), _share(line, "embedding")),
        ("FTS indexing (part of finish)", min(fts_s, finish_s), ""),
        (
            "finish: chunks, task and document rows",
            max(0.0, finish_s - fts_s),
            _share(line, "ledger finish"),
        ),
        (
            "other ledger writes (claims, progress, heartbeats)",
            other_s,
            "",
        ),
    ]
    print_table(
        f"where a light page's time goes: in-process Worker (concurrency 2, 1 parser process) "
        f"over {sample} documents, {pages} pages, {wall:.2f} s wall ({1000 * wall / pages:.2f} ms "
        "a page); 'overlapped' = share of that work done while a parse was in flight",
        ["part", "ms / page", "overlapped"],
        [(name, f"{1000 * s / pages:.3f}", shared) for name, s, shared in rows],
    )


def _share(line: Timeline, name: str) -> str:
    total = line.total(name)
    if not total:
        return ""
    return f"{100 * line.overlapped(name, 'parse (parser process)') / total:.0f}%"


def run_light(
    plan: LightPlan, heavy: Corpus, small: Corpus, store: Path, workdir: Path
) -> list[Target]:
    """The light, large and small corpora in steady state, then the light breakdown.
    Returns the targets for bench.ingest's table."""
    started = time.perf_counter()
    light = make_light_corpus(workdir / "corpus-light", plan)
    print(
        f"light corpus: {plan.docs} PDFs x {plan.pages} pages, made in "
        f"{time.perf_counter() - started:.1f} s",
        flush=True,
    )
    targets: list[Target] = []
    # The large corpus's steady state only with --steady-large (bench.ingest prints its
    # whole-process rows): each corpus's rounds take ~15 min on the loaded machine.
    for corpus in (light, heavy) if plan.steady_large else (light,):
        steady = measure(corpus, PDF_PATHS, store, workdir / f"steady-{corpus.name}", plan.rounds)
        report(steady, PDF_PATHS, "pages")
        targets += pdf_targets(steady)
        print(flush=True)
    steady = measure(small, SMALL_PATHS, store, workdir / "steady-small", plan.rounds)
    report(steady, SMALL_PATHS, "docs")
    targets += small_targets(steady)
    print(flush=True)
    (workdir / "breakdown").mkdir(parents=True, exist_ok=True)
    asyncio.run(breakdown(light, store, workdir / "breakdown", plan.sample))
    print(
        f"(steady-state comparisons took {time.perf_counter() - started:.0f} s; "
        "1.000x means as fast as bare)",
        flush=True,
    )
    return targets
