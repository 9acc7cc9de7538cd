"""bench.formats: every accepted format through one worker against its bare library.

For each format (DOCX, PPTX, XLSX, HTML, EPUB, CSV, PDF, Markdown, text) a corpus of
real files (:mod:`bench.formats_corpus`: real when a corpus folder is present, else
generated; the report says which) goes

* through **one worker**: an in-process :class:`core.ingest.worker.Worker` as
  ``ingestdesk worker`` builds it (concurrency 2, its default parser processes: one
  per CPU up to the concurrency; a real SQLite ledger file copied fresh for each
  round, ``ingestdesk worker``'s default embedder, the search index) draining the
  ledger, and
* through **the bare library** in this one process: the cheapest text walk the
  format's library offers (python-docx paragraphs and table cells, python-pptx shapes'
  text frames, tables and notes, openpyxl read-only rows, the standard library's
  ``html.parser`` that ingestdesk uses, zipfile + ``html.parser`` for EPUB chapters in
  spine order, the ``csv`` module, pypdf ``extract_text``, a UTF-8 decode for text),

and the row's ratio is units (or MB) per second through the worker over the bare
library's, target >= 0.8x.

Steady state: each format's files are measured at N and at 2N documents (the first
half of the copies, then all: every sample equally often in each half) on both sides,
and a row's ratio is the marginal one, (T(2N) - T(N)) bare over (T(2N) - T(N)) worker,
so what a worker pays once (its parser process's start and import of the format's
library, the ledger's first statements) cancels out; the whole 2N ratio is printed
beside. Each format's library is warmed up on both sides first. Each format has enough
distinct copies of its files that a bare round lasts ``min_round_s``, and the rounds
alternate bare, worker, bare, worker ...; the fastest round of each side and size
counts, so a slow moment of the shared machine cannot flatter either. Rows are judged
on wall time, as the issue words them; beside it the CPU of the bare library, of the
worker process and of its parser process show where the time goes (on a loaded machine
the worker's two processes get two shares of the CPUs, the bare library one).

What a format can reach is printed with each row: the worker's fixed cost c per
document (its marginal time a document on one-line text documents, parsed in the
worker: a claim, progress, embedding one chunk, the finish transaction) against the
bare library's marginal time b a document of the format: without overlap the ratio is
at most b / (b + c), whatever the parse costs.

Then the OCR rows (:mod:`bench.formats_ocr`), skipped while no OCR engine is installed.

Run: ``python -m bench.formats [--quick] [--formats xlsx,html]`` alone (``--formats`` measures
those kinds only, without the OCR rows), or as part of ``python -m bench.ingest``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import logging
import math
import os
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bench.common import (
    CpuTimes,
    Target,
    compile_bytecode,
    descendants,
    fmt_num,
    fmt_ratio,
    load_line,
    print_header,
    print_ratio,
    print_table,
    print_targets,
    process_role,
    ratio,
)
from bench.formats_bare import SPECS, Spec
from bench.formats_corpus import (
    GENERATED_FILES,
    FormatCorpus,
    Sample,
    corpora_root,
    generated,
    readable,
    real_candidates,
    write_copies,
)
from bench.ingest_runs import children_cpu_s, copy_ledger, settings_for, submit_all

if TYPE_CHECKING:
    from core.ingest.parse_pool import ParserPool

# --- tunables ---------------------------------------------------------------------------

RATIO_TARGET = 0.8  # worker units/s over bare library units/s, from the issue
WORKER_CONCURRENCY = 2  # ingestdesk worker's default: the next parse overlaps the last index
QUICK_MAX_FILE_BYTES = 300_000  # bytes; --quick leaves bigger real files out
# One-line text documents whose marginal time a document is the worker's fixed cost.
FIXED_DOCS, FIXED_DOCS_QUICK = 200, 20  # N (the runs take N and 2N)


@dataclass(frozen=True)
class FormatsPlan:
    rounds: int  # bare and worker rounds per format (alternating; the fastest counts)
    min_round_s: float  # seconds a bare round should last (copies are added to reach it)
    max_docs: int  # documents per format at most (copies included)
    max_samples: int  # distinct files per format at most
    max_file_bytes: int | None  # bigger real files are left out (None: none is)
    # A format whose bare round lasts longer than long_round_s (a 117-page PDF, an
    # 872-page handbook) gets long_rounds: a long round is less at the mercy of a moment.
    long_round_s: float = 4.0
    long_rounds: int = 3
    # What the worker embeds with: an embedder spec, or None for what `ingestdesk
    # worker` picks on a fresh ledger (core.ingest.embedders.worker_embedder).
    embedder: str | None = None


FULL_FORMATS = FormatsPlan(
    rounds=5, min_round_s=1.0, max_docs=240, max_samples=40, max_file_bytes=None
)
QUICK_FORMATS = FormatsPlan(
    rounds=1, min_round_s=0.03, max_docs=8, max_samples=4, max_file_bytes=QUICK_MAX_FILE_BYTES
)


# --- corpus -----------------------------------------------------------------------------


def _bare_seconds(spec: Spec, blobs: list[bytes]) -> float:
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # openpyxl's "unknown extension" on real files
        chars = sum(spec.bare(b) for b in blobs)
    seconds = time.perf_counter() - start
    assert chars > 0, f"bare {spec.label} found no text"
    return seconds


def _bare_reads(spec: Spec, data: bytes) -> bool:
    """Whether the bare library reads the file too: a file only ingestdesk reads (a
    Strict Open XML DOCX, which python-docx cannot open) has no bare side to race."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return spec.bare(data) > 0
    except Exception:
        return False


def build_corpus(spec: Spec, plan: FormatsPlan, real: list[Path], folder: Path) -> FormatCorpus:
    """The format's samples (real if any parse, else generated) and enough distinct
    copies of them that one bare round lasts ``plan.min_round_s``."""
    samples: list[Sample] = []
    for path in real:
        if len(samples) == plan.max_samples:
            break
        if plan.max_file_bytes is not None and path.stat().st_size > plan.max_file_bytes:
            continue
        sample = readable(path, spec.kind)
        if sample is not None and _bare_reads(spec, sample.data):
            samples.append(sample)
    source = "real"
    if not samples:
        samples, source = generated(spec.kind, min(GENERATED_FILES, plan.max_samples)), "generated"
    blobs = [s.data for s in samples]
    _bare_seconds(spec, blobs[:1])  # import the library outside the estimate
    once = _bare_seconds(spec, blobs)
    copies = max(
        1, min(math.ceil(plan.min_round_s / max(once, 1e-6)), plan.max_docs // len(samples))
    )
    # An even number, at least 2: the first half of the files (N) holds every sample
    # as often as the second, so T(2N) - T(N) costs what T(N) does.
    copies = max(2, copies + copies % 2)
    files = write_copies(samples, spec.kind, copies, folder)
    units = copies * sum(s.units for s in samples)
    megabytes = sum(f.stat().st_size for f in files) / 1e6
    names = ", ".join(s.name for s in samples[:3]) + (", ..." if len(samples) > 3 else "")
    return FormatCorpus(
        spec.kind,
        spec.label,
        f"{source}: {len(samples)} files x {copies} ({names})",
        files,
        units,
        megabytes,
    )


# --- the two sides ----------------------------------------------------------------------


def bare_round(spec: Spec, files: list[Path]) -> tuple[float, float]:
    """Wall and CPU seconds for the bare library over every file, read from disk."""
    start, cpu = time.perf_counter(), time.process_time()
    chars = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # openpyxl's "unknown extension" on real files
        for path in files:
            chars += spec.bare(path.read_bytes())
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert chars > 0
    return seconds, cpu


def parser_cpu_s() -> float:
    """CPU seconds used so far by this process's parser processes: the live ones, read
    from /proc, and those that retired (a child is replaced after 500 parses) and were
    waited for, from this process's children's rusage."""
    total = children_cpu_s()
    for pid in descendants(os.getpid()):
        if process_role(pid) != "parser":
            continue
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


@dataclass
class WorkerRound:
    seconds: float
    succeeded: int
    worker_cpu_s: float  # this process: the event loop and aiosqlite's thread
    parser_cpu_s: float
    machine_idle: float
    outcomes: dict[str, int] = field(default_factory=dict)


def fresh_ledger(template: Path, run_dir: Path) -> Path:
    """A copy of the format's ledger, all its documents queued, for one round."""
    run_dir.mkdir(parents=True)
    db_path = run_dir / "ledger.db"
    copy_ledger(template, db_path)
    return db_path


def embedder_label(spec: str | None) -> str:
    from core.ingest.embedders import default_spec

    return f"embedder {spec}" if spec else f"embedder {default_spec()} (the default)"


async def worker_round(
    template: Path,
    run_dir: Path,
    store: Path,
    pool: ParserPool,
    worker_id: str,
    embedder: str | None,
) -> WorkerRound:
    """Wall seconds for one Worker draining a fresh copy of the format's ledger."""
    from core import Ledger
    from core.ingest.embedders import worker_embedder
    from core.ingest.worker import Worker

    db_path = fresh_ledger(template, run_dir)
    async with await Ledger.open(settings_for(db_path, store)) as ledger:
        worker = Worker(
            ledger,
            worker_id,
            pool=pool,
            concurrency=WORKER_CONCURRENCY,
            embedder=await worker_embedder(ledger, embedder),
        )
        # As ingestdesk worker does once started (core/gc_tuning.py): start-up objects,
        # here the bench's own, are not the collector's business during the run.
        gc.collect()
        gc.freeze()
        try:
            machine, cpu, parser_cpu = CpuTimes.now(), time.process_time(), parser_cpu_s()
            start = time.perf_counter()
            stats = await worker.run(until_idle=True)
            seconds = time.perf_counter() - start
            cpu, parser_cpu = time.process_time() - cpu, parser_cpu_s() - parser_cpu
            idle = CpuTimes.now().idle_since(machine)
        finally:
            gc.unfreeze()
    outcomes: dict[str, int] = {}
    for result in stats.outcomes.values():
        outcomes[str(result)] = outcomes.get(str(result), 0) + 1
    return WorkerRound(seconds, outcomes.get("succeeded", 0), cpu, parser_cpu, idle, outcomes)


@dataclass
class FormatResult:
    """A format's rounds at N and 2N documents, bare and through the worker."""

    spec: Spec
    corpus: FormatCorpus
    bare_s: dict[int, list[float]] = field(default_factory=dict)
    bare_cpu_s: dict[int, list[float]] = field(default_factory=dict)
    worker: dict[int, list[WorkerRound]] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.corpus.files) // 2

    def best_bare(self, size: int) -> float:
        return min(self.bare_s[size])

    def best_round(self, size: int) -> WorkerRound:
        return min(self.worker[size], key=lambda r: r.seconds)

    def least_cpu_round(self, size: int) -> WorkerRound:
        """The worker round that used least CPU: compared with the bare round that did
        (a loaded machine inflates CPU time too, sharing cores and caches)."""
        return min(self.worker[size], key=lambda r: r.worker_cpu_s + r.parser_cpu_s)

    @property
    def marginal_bare(self) -> float:
        return self.best_bare(2 * self.n) - self.best_bare(self.n)

    @property
    def marginal_worker(self) -> float:
        return self.best_round(2 * self.n).seconds - self.best_round(self.n).seconds

    def marginal_cpu(self) -> tuple[float, float, float]:
        """(bare, worker process, parser process) CPU seconds of the second N."""
        big, small = self.least_cpu_round(2 * self.n), self.least_cpu_round(self.n)
        bare = min(self.bare_cpu_s[2 * self.n]) - min(self.bare_cpu_s[self.n])
        return bare, big.worker_cpu_s - small.worker_cpu_s, big.parser_cpu_s - small.parser_cpu_s

    @property
    def cpu_ratio(self) -> float:
        """Bare CPU over the worker's and its parser process's, marginal: what the
        pipeline's work costs in all, whether or not it ran beside the parse."""
        bare, worker, parser = self.marginal_cpu()
        return ratio(bare, worker + parser)

    @property
    def ratio(self) -> float:
        """Worker units/s over bare units/s in steady state: marginal time over
        marginal time on the same files; NaN when noise made either not positive."""
        bare, worker = self.marginal_bare, self.marginal_worker
        return bare / worker if bare > 0 and worker > 0 else float("nan")

    @property
    def whole_ratio(self) -> float:
        return ratio(self.best_bare(2 * self.n), self.best_round(2 * self.n).seconds)

    @property
    def ok(self) -> bool:
        return all(r.succeeded == size for size, rounds in self.worker.items() for r in rounds)

    def per_s(self, seconds: float) -> str:
        """The second half's units (or MB) per second."""
        amount = (self.corpus.megabytes if self.spec.unit == "MB" else self.corpus.units) / 2
        digits = 2 if self.spec.unit == "MB" else 1
        return f"{fmt_num(ratio(amount, seconds), digits)} {self.spec.unit}/s"


async def measure_all(
    corpora: list[tuple[Spec, FormatCorpus]], plan: FormatsPlan, workdir: Path
) -> list[FormatResult]:
    from core.ingest.parse_pool import ParserPool, default_parsers

    store = workdir / "objects"
    results = []
    async with ParserPool(workers=default_parsers(WORKER_CONCURRENCY)) as pool:
        for spec, corpus in corpora:
            n = len(corpus.files) // 2
            templates = {}
            for size in (n, 2 * n):
                templates[size] = workdir / "templates" / f"{spec.kind}-{size}.db"
                templates[size].parent.mkdir(parents=True, exist_ok=True)
                await submit_all(templates[size], store, corpus.files[:size])
            # The parser process imports the format's library on its first document.
            await pool.parse(corpus.files[0].read_bytes(), spec.kind)
            bare_round(spec, corpus.files[:1])
            result = FormatResult(spec, corpus)
            first_wall, _ = bare_round(spec, corpus.files)
            long = first_wall > plan.long_round_s
            rounds = min(plan.rounds, plan.long_rounds) if long else plan.rounds
            for r in range(rounds):
                for size in (n, 2 * n):
                    wall, cpu = bare_round(spec, corpus.files[:size])
                    result.bare_s.setdefault(size, []).append(wall)
                    result.bare_cpu_s.setdefault(size, []).append(cpu)
                    result.worker.setdefault(size, []).append(
                        await worker_round(
                            templates[size],
                            workdir / f"run-{spec.kind}-{r}-{size}",
                            store,
                            pool,
                            f"bench-{spec.kind}-{r}-{size}",
                            plan.embedder,
                        )
                    )
            print(
                f"{spec.label}: bare N/2N {result.best_bare(n):.2f}/{result.best_bare(2 * n):.2f} "
                f"s, worker N/2N {result.best_round(n).seconds:.2f}/"
                f"{result.best_round(2 * n).seconds:.2f} s ({load_line()})",
                flush=True,
            )
            results.append(result)
    return results


def parsers_label() -> str:
    from core.ingest.parse_pool import default_parsers

    n = default_parsers(WORKER_CONCURRENCY)
    return "one parser process" if n == 1 else f"{n} parser processes"


def ceiling(result: FormatResult, fixed_s: float) -> float:
    """b / (b + c): the most a worker can reach on this format without overlapping its
    fixed cost c a document with the parse (b: the bare library's time a document)."""
    b = result.marginal_bare / result.n
    return ratio(b, b + fixed_s) if b > 0 else float("nan")


async def fixed_cost_s(workdir: Path, n: int, rounds: int, embedder: str | None) -> float:
    """The worker's marginal seconds a document on one-line text documents (parsed in
    the worker, one chunk each): what every document costs the pipeline, whatever its
    format (claim, progress, embedding, the finish transaction)."""
    from core.ingest.parse_pool import ParserPool

    folder = workdir / "fixed"
    folder.mkdir(parents=True)
    files = []
    for i in range(2 * n):
        path = folder / f"line-{i:05d}.txt"
        path.write_text(f"one line of text, number {i}\n", encoding="utf-8")
        files.append(path)
    store = workdir / "objects"
    templates = {}
    for size in (n, 2 * n):
        templates[size] = workdir / "templates" / f"fixed-{size}.db"
        templates[size].parent.mkdir(parents=True, exist_ok=True)
        await submit_all(templates[size], store, files[:size])
    best: dict[int, float] = {}
    async with ParserPool(workers=1) as pool:
        for r in range(rounds):
            for size in (n, 2 * n):
                got = await worker_round(
                    templates[size],
                    folder / f"run-{r}-{size}",
                    store,
                    pool,
                    f"fixed-{r}-{size}",
                    embedder,
                )
                best[size] = min(best.get(size, math.inf), got.seconds)
    return (best[2 * n] - best[n]) / n


# --- the run ----------------------------------------------------------------------------


def run_formats(
    plan: FormatsPlan,
    workdir: Path,
    corpora: Path | None = None,
    kinds: frozenset[str] | None = None,
) -> list[Target]:
    """Build the corpora, measure every format (or those of ``kinds``), print the table
    and ratio lines, and return the targets for the caller's targets table."""
    from bench.formats_ocr import run_ocr

    started = time.perf_counter()
    # The real files' own warnings (a cp1252 page, openpyxl's unknown extensions) are
    # logged by every parse; they would bury the report.
    for name in ("core.ingest.parsing", "pypdf"):
        logging.getLogger(name).setLevel(logging.ERROR)
    root = corpora_root(corpora)
    candidates = real_candidates(root) if root.is_dir() else {}
    built = [
        (
            spec,
            build_corpus(spec, plan, candidates.get(spec.kind, []), workdir / "corpus" / spec.kind),
        )
        for spec in SPECS
        if kinds is None or spec.kind in kinds
    ]
    print(
        f"formats corpus ({root}{'' if root.is_dir() else ': absent, all generated'}), "
        f"made in {time.perf_counter() - started:.1f} s:",
        flush=True,
    )
    for spec, corpus in built:
        size = f"{len(corpus.files)} documents, {corpus.megabytes:.2f} MB"
        print(f"  {spec.label}: {corpus.source}; {size}")
    results = asyncio.run(measure_all(built, plan, workdir))
    fixed_s = asyncio.run(
        fixed_cost_s(
            workdir,
            FIXED_DOCS_QUICK if plan.rounds == 1 else FIXED_DOCS,
            plan.rounds,
            plan.embedder,
        )
    )
    print(flush=True)
    print_table(
        f"formats in steady state: one worker (in-process Worker, concurrency "
        f"{WORKER_CONCURRENCY}, {parsers_label()}, SQLite ledger, "
        f"{embedder_label(plan.embedder)}) against "
        f"the bare library in this process, at N and 2N documents; best of {plan.rounds} "
        "alternating rounds each side and size"
        + (
            f" ({plan.long_rounds} where a bare round lasts over {plan.long_round_s:g} s)"
            if plan.long_rounds < plan.rounds
            else ""
        ),
        [
            "format",
            "docs 2N",
            "units",
            "MB",
            "bare T(2N)-T(N)",
            "worker T(2N)-T(N)",
            "bare rate",
            "worker rate",
            "ratio",
            "whole 2N",
            "b ms/doc",
            "ceiling b/(b+c)",
            "CPU bare/worker/parser",
            "CPU ratio",
            "idle",
        ],
        [
            (
                r.spec.label,
                len(r.corpus.files),
                r.corpus.units if r.spec.unit != "MB" else "",
                f"{r.corpus.megabytes:.2f}",
                f"{r.marginal_bare:.3f}",
                f"{r.marginal_worker:.3f}",
                r.per_s(r.marginal_bare),
                r.per_s(r.marginal_worker),
                fmt_ratio(r.ratio),
                fmt_ratio(r.whole_ratio),
                f"{1000 * r.marginal_bare / r.n:.2f}",
                fmt_ratio(ceiling(r, fixed_s)),
                "/".join(f"{c:.2f}" for c in r.marginal_cpu()),
                fmt_ratio(r.cpu_ratio),
                f"{100 * r.best_round(2 * r.n).machine_idle:.0f}%",
            )
            for r in results
        ],
    )
    print(
        "bare = the library alone: "
        + "; ".join(f"{spec.label} {spec.library}" for spec, _ in built)
        + ". Rates are of the second N documents (marginal); whole 2N = the ratio of the "
        "whole 2N runs. b = the bare library's marginal time a document; c = the worker's "
        f"fixed cost a document, {1000 * fixed_s:.2f} ms (marginal, one-line text "
        "documents); without overlap a worker reaches at most b/(b+c). CPU = marginal CPU "
        "seconds of the bare library, of this process (event loop, aiosqlite's thread: "
        "ledger, chunks, embedding, search index) and of the parser process (parse + "
        "chunking); CPU ratio = bare / (worker + parser); idle = share of the machine's CPU "
        "left idle during the fastest 2N worker round (near 0%: other load competed)."
    )
    targets = []
    for r in results:
        per_doc_ms = 1000 * (r.marginal_worker - r.marginal_bare) / r.n
        print_ratio(
            f"formats {r.spec.label}, worker / bare {r.spec.unit}/s",
            r.ratio,
            f"marginal (T(2N)-T(N)), higher is better; whole 2N {fmt_ratio(r.whole_ratio)}; "
            f"N = {r.n} documents; the worker adds {per_doc_ms:.1f} ms a document "
            f"(fixed cost c {1000 * fixed_s:.1f} ms); ceiling b/(b+c) "
            f"{fmt_ratio(ceiling(r, fixed_s))}; per CPU-second {fmt_ratio(r.cpu_ratio)}",
        )
        if not r.ok:
            bad = {
                k: v
                for rounds in r.worker.values()
                for k, v in rounds[-1].outcomes.items()
                if k != "succeeded"
            }
            print(f"WARNING formats {r.spec.label}: not every document succeeded: {bad}")
        targets.append(
            Target(f"formats {r.spec.label}: worker / bare library", r.ratio, RATIO_TARGET, ">=")
        )
    failed = sum(not r.ok for r in results)
    targets.append(
        Target("formats: rounds where a document did not succeed", failed, 0, "==", "count")
    )
    if kinds is None:  # a run of chosen formats leaves OCR out
        targets += run_ocr(plan.rounds == 1, workdir / "ocr")
    print(f"(formats took {time.perf_counter() - started:.0f} s; {load_line()})", flush=True)
    return targets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.formats", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="reduced run (a few seconds)")
    parser.add_argument("--dir", type=Path, help="parent of the work directory (default: temp)")
    parser.add_argument(
        "--corpora", type=Path, help="folder of real corpora (formats/, real-pdfs/)"
    )
    parser.add_argument(
        "--embedder", help="the worker's embedder spec (default: ingestdesk worker's)"
    )
    parser.add_argument(
        "--formats",
        help="comma-separated kinds to measure, e.g. xlsx,html (default: all, and OCR)",
    )
    args = parser.parse_args(argv)
    kinds = None
    if args.formats:
        kinds = frozenset(k.strip().lower() for k in args.formats.split(",") if k.strip())
        unknown = kinds - {spec.kind for spec in SPECS}
        if unknown:
            parser.error(f"unknown formats {sorted(unknown)}; known: {[s.kind for s in SPECS]}")
    compile_bytecode()
    # As `ingestdesk worker` sets it before its threads start (core/cli/worker.py).
    from core.ingest.wordllama_embedder import tokenize_on_one_thread

    tokenize_on_one_thread()
    workdir = Path(tempfile.mkdtemp(prefix="bench-formats-", dir=args.dir))
    started = time.perf_counter()
    try:
        print_header("bench.formats", args.quick, workdir)
        plan = dataclasses.replace(
            QUICK_FORMATS if args.quick else FULL_FORMATS, embedder=args.embedder
        )
        targets = run_formats(plan, workdir, args.corpora, kinds)
        print(flush=True)
        print_targets(targets)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"bench.formats finished in {time.perf_counter() - started:.1f} s ({load_line()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
