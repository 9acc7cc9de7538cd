"""bench.ingest, light pages and pypdfium2: one worker process against bare parser
processes, both timed as whole processes, on two corpora.

* **light**: PDFs whose pages hold ~1.8 kB of text (as fpdf2 or a plain LaTeX article
  make them), where pypdf's own parse is cheap and the pipeline's per-page costs show;
* **large**: bench.ingest's large corpus (~4.5 kB a page), where pypdf dominates.

For each: ``python -m bench.bare_extract pypdf`` (and ``pdfium``) over every file, one
``ingestdesk worker --until-idle`` (and ``--parser pdfium``), two bare processes on the
two halves of the files against two worker processes. Rounds are interleaved and the
best of each path counts, so a slow moment of the machine cannot flatter either side.

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
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import Target, fmt_ratio, print_ratio, print_table, python_env, ratio
from bench.ingest_runs import Corpus, run_workers, settings_for, submit_all
from core import Ledger

LIGHT_LINES_PER_PAGE = 20  # lines of 13 words: ~1.8 kB of text a page
WORDS_PER_LINE = 13
LIGHT_SEED = 2_024
BARE_TIMEOUT_S = 1_800.0  # seconds


@dataclass(frozen=True)
class LightPlan:
    docs: int
    pages: int
    rounds: int
    sample: int  # documents run in-process for the breakdown


FULL_LIGHT = LightPlan(docs=100, pages=20, rounds=3, sample=20)
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


# --- whole-process runs ----------------------------------------------------------------


def bare_processes(parser: str, groups: Sequence[Sequence[Path]], run_dir: Path) -> float:
    """Wall seconds for one bare extraction process per group, started together."""
    run_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    start = time.perf_counter()
    for i, group in enumerate(groups):
        listing = run_dir / f"bare-{parser}-{len(groups)}-{i}.txt"
        listing.write_text("\n".join(str(p) for p in group), encoding="utf-8")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "bench.bare_extract", parser, str(listing)],
                stdout=subprocess.DEVNULL,
                env=python_env(),
            )
        )
    for proc in procs:
        if proc.wait(BARE_TIMEOUT_S) != 0:
            raise RuntimeError(f"bare {parser} extraction failed ({proc.returncode})")
    return time.perf_counter() - start


@dataclass
class Paths:
    """Best-of-rounds wall seconds per path."""

    runs: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def add(self, label: str, seconds: float) -> None:
        self.runs[label].append(seconds)

    def best(self, label: str) -> float:
        return min(self.runs[label])


def compare(corpus: Corpus, template: Path, store: Path, run_dir: Path, rounds: int) -> Paths:
    """The six paths over ``corpus``, ``rounds`` times, interleaved."""
    halves = [corpus.files[0::2], corpus.files[1::2]]
    paths = Paths()
    for r in range(rounds):
        here = run_dir / f"round-{r}"
        paths.add("bare pypdf x1", bare_processes("pypdf", [corpus.files], here))
        one = run_workers(f"{corpus.name}-{r}-1", template, store, here / "w1", 1, corpus)
        paths.add("worker x1", one.seconds)
        paths.add("bare pdfium x1", bare_processes("pdfium", [corpus.files], here))
        pdfium = run_workers(
            f"{corpus.name}-{r}-p", template, store, here / "wp", 1, corpus, ("--parser", "pdfium")
        )
        paths.add("worker --parser pdfium x1", pdfium.seconds)
        paths.add("bare pypdf x2 (halves)", bare_processes("pypdf", halves, here))
        two = run_workers(f"{corpus.name}-{r}-2", template, store, here / "w2", 2, corpus)
        paths.add("worker x2", two.seconds)
        for run in (one, pdfium, two):
            if not run.ok:
                raise RuntimeError(f"{run.label}: {run.after.succeeded}/{run.docs} succeeded")
        print(f"{corpus.name}: round {r + 1}/{rounds} done", flush=True)
    return paths


RATIOS = (
    ("worker x1", "bare pypdf x1", 1.15),
    ("worker --parser pdfium x1", "bare pdfium x1", 1.35),
    ("worker x2", "bare pypdf x2 (halves)", 1.35),
)


def report(corpus: Corpus, paths: Paths) -> list[Target]:
    rows = []
    for label, runs in paths.runs.items():
        rows.append(
            [
                label,
                f"{min(runs):.2f}",
                " / ".join(f"{s:.2f}" for s in runs),
                f"{corpus.pages / min(runs):,.0f}",
            ]
        )
    print_table(
        f"{corpus.name} corpus: {len(corpus.files)} PDFs, {corpus.pages:,} pages; whole "
        "processes, wall seconds (best counts)",
        ["path", "best s", "rounds", "pages/s"],
        rows,
    )
    targets = []
    for path, base, goal in RATIOS:
        value = ratio(paths.best(path), paths.best(base))
        print_ratio(f"{corpus.name}: {path} / {base}", value, "wall clock, lower is better")
        targets.append(Target(f"{corpus.name}: {path} / {base}", value, goal, "<="))
    return targets


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
    plan: LightPlan, heavy: Corpus, heavy_template: Path, store: Path, workdir: Path
) -> list[Target]:
    """Both corpora through the six paths, then the light breakdown. Returns the
    targets for bench.ingest's table."""
    started = time.perf_counter()
    light = make_light_corpus(workdir / "corpus-light", plan)
    template = workdir / "templates" / "light.db"
    template.parent.mkdir(parents=True, exist_ok=True)
    asyncio.run(submit_all(template, store, light.files))
    print(
        f"light corpus: {plan.docs} PDFs x {plan.pages} pages, made in "
        f"{time.perf_counter() - started:.1f} s",
        flush=True,
    )
    targets: list[Target] = []
    for corpus, tmpl in ((light, template), (heavy, heavy_template)):
        paths = compare(corpus, tmpl, store, workdir / f"compare-{corpus.name}", plan.rounds)
        targets += report(corpus, paths)
    (workdir / "breakdown").mkdir(parents=True, exist_ok=True)
    asyncio.run(breakdown(light, store, workdir / "breakdown", plan.sample))
    print(
        f"(light and heavy comparisons took {time.perf_counter() - started:.0f} s; "
        f"{fmt_ratio(1.0)} means as fast as bare)",
        flush=True,
    )
    return targets
