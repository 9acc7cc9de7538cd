"""bench.ingest in steady state: whole processes on N and on 2N documents, so start-up
cancels out.

A user runs ``worker --loop`` for hours: what matters is the time each further
document costs, not the interpreter, imports, the parser process and the model
loading once. Each path (a bare parser process, one worker, two workers against two
bare processes on the same halves) runs over the first N documents of a corpus and
over all 2N; its **marginal** time T(2N) - T(N) is what the second N documents cost
once it is running, and 2 T(N) - T(2N) its start-up (printed on its own line). The
ratios judged are marginal over marginal on the same files; the whole-process ratios
(T(2N) over T(2N)) are printed beside them.

Workers embed with ``ingestdesk worker``'s default on a fresh ledger (wordllama where
it loads: core.ingest.embedders.worker_embedder) and again with the hashed bag of
words for reference. Rounds are interleaved (every path at both sizes once a round)
and the best time of each path and size counts, so a slow moment of the machine
cannot flatter either side.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import Target, fmt_num, fmt_ratio, load_line, print_table, python_env, ratio
from bench.ingest_runs import Corpus, children_cpu_s, run_workers, submit_all

BARE_TIMEOUT_S = 1_800.0  # seconds
HASHED = ("--embedder", "hashed:256")  # the reference embedder: no model, pure Python


@dataclass(frozen=True)
class Route:
    """One way through a corpus: a bare parser process (``bare``: pypdf or pdfium) or
    ``ingestdesk worker`` processes with ``args``."""

    label: str
    processes: int
    bare: str | None = None
    args: tuple[str, ...] = ()


BARE_PYPDF = Route("bare pypdf x1", 1, bare="pypdf")
WORKER = Route("worker x1", 1)
WORKER_HASHED = Route("worker x1, hashed embedder", 1, args=HASHED)
BARE_PDFIUM = Route("bare pdfium x1", 1, bare="pdfium")
WORKER_PDFIUM = Route("worker --parser pdfium x1", 1, args=("--parser", "pdfium"))
BARE_TWO = Route("bare pypdf x2 (halves)", 2, bare="pypdf")
WORKERS_TWO = Route("worker x2", 2)
# The hashed embedder's rows are a reference for one worker only: a round of the
# light corpus takes ~15 min on the loaded 2-core machine as it is.
PDF_PATHS = (
    BARE_PYPDF,
    WORKER,
    WORKER_HASHED,
    BARE_PDFIUM,
    WORKER_PDFIUM,
    BARE_TWO,
    WORKERS_TWO,
)
# Small documents: one-page PDFs and Markdown notes; the bare side reads a PDF with
# pypdf and decodes a note (bench.bare_extract).
SMALL_PATHS = (BARE_PYPDF, WORKER, WORKER_HASHED)

# (path, its bare baseline, target of marginal(path) / marginal(baseline)), from the
# issue; the hashed rows are printed for reference, not judged.
PDF_RATIOS = (
    (WORKER, BARE_PYPDF, 1.05),
    (WORKER_PDFIUM, BARE_PDFIUM, 1.10),
    (WORKERS_TWO, BARE_TWO, 1.20),
    (WORKER_HASHED, BARE_PYPDF, None),
)
SMALL_RATIO_TARGET = 0.5  # pipeline docs/s over bare docs/s, marginal


def bare_processes(parser: str, groups: Sequence[Sequence[Path]], run_dir: Path) -> float:
    """Wall seconds for one bare extraction process per group, started together."""
    run_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    start = time.perf_counter()
    for i, group in enumerate(groups):
        listing = run_dir / f"bare-{parser}-{len(groups)}-{i}-{len(group)}.txt"
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
class Steady:
    """Best wall seconds of each path at each size (N, 2N)."""

    corpus: Corpus
    n: int  # documents in the smaller run
    runs: defaultdict[tuple[str, int], list[float]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # CPU seconds (user + system) of every process of a run, parser processes included
    cpu: defaultdict[tuple[str, int], list[float]] = field(
        default_factory=lambda: defaultdict(list)
    )

    def best(self, path: Route, size: int) -> float:
        return min(self.runs[path.label, size])

    def marginal(self, path: Route) -> float:
        """What the second N documents cost: T(2N) - T(N)."""
        return self.best(path, 2 * self.n) - self.best(path, self.n)

    def paired_marginal(self, path: Route) -> float:
        """The median over rounds of T(2N) - T(N) within one round (the two runs were
        adjacent in time): a second estimate, less at the mercy of one slow run."""
        pairs = zip(self.runs[path.label, 2 * self.n], self.runs[path.label, self.n], strict=True)
        return statistics.median(big - small for big, small in pairs)

    def marginal_ratio(self, path: Route, base: Route) -> float:
        """marginal(path) / marginal(base); NaN (never a PASS) when either is not
        positive: the machine's noise was larger than the N documents' cost."""
        top, bottom = self.marginal(path), self.marginal(base)
        return top / bottom if top > 0 and bottom > 0 else float("nan")

    def marginal_cpu(self, path: Route) -> float:
        """CPU the second N documents cost, from the runs that used least."""
        return min(self.cpu[path.label, 2 * self.n]) - min(self.cpu[path.label, self.n])

    def startup(self, path: Route) -> float:
        """What a run costs before its first document: T(N) - marginal = 2T(N) - T(2N)."""
        return 2 * self.best(path, self.n) - self.best(path, 2 * self.n)


def measure(
    corpus: Corpus, paths: Sequence[Route], store: Path, run_dir: Path, rounds: int
) -> Steady:
    """Every path at N and 2N documents, ``rounds`` times, interleaved."""
    n = len(corpus.files) // 2
    files = {n: corpus.files[:n], 2 * n: corpus.files[: 2 * n]}
    per_doc = corpus.pages / len(corpus.files)
    subsets = {
        size: Corpus(corpus.name, subset, round(per_doc * size)) for size, subset in files.items()
    }
    templates = {}
    for size, subset in files.items():
        templates[size] = run_dir / "templates" / f"{corpus.name}-{size}.db"
        templates[size].parent.mkdir(parents=True, exist_ok=True)
        asyncio.run(submit_all(templates[size], store, subset))
    steady = Steady(corpus, n)
    for r in range(rounds):
        for path in paths:
            for size in (n, 2 * n):
                here = run_dir / f"round-{r}" / f"{path.label.replace(' ', '_')}-{size}"
                group = files[size]
                if path.bare is not None:
                    groups = [group] if path.processes == 1 else [group[0::2], group[1::2]]
                    cpu = children_cpu_s()
                    seconds = bare_processes(path.bare, groups, here)
                    cpu = children_cpu_s() - cpu
                else:
                    run = run_workers(
                        f"{corpus.name}-{r}-{size}",
                        templates[size],
                        store,
                        here,
                        path.processes,
                        subsets[size],
                        path.args,
                    )
                    if not run.ok:
                        raise RuntimeError(
                            f"{path.label}: {run.after.succeeded}/{run.docs} succeeded; "
                            f"{run.after.other}"
                        )
                    seconds, cpu = run.seconds, run.cpu_seconds
                steady.runs[path.label, size].append(seconds)
                steady.cpu[path.label, size].append(cpu)
        print(f"{corpus.name} steady state: round {r + 1}/{rounds} ({load_line()})", flush=True)
    return steady


def report(steady: Steady, paths: Sequence[Route], unit: str) -> None:
    """The table of one corpus: each path's best T(N), T(2N), marginal and start-up."""
    corpus, n = steady.corpus, steady.n
    units_n = corpus.pages * n / len(corpus.files) if unit == "pages" else n
    rows = []
    for path in paths:
        marginal = steady.marginal(path)
        rows.append(
            [
                path.label,
                f"{steady.best(path, n):.2f}",
                f"{steady.best(path, 2 * n):.2f}",
                " / ".join(f"{s:.2f}" for s in steady.runs[path.label, 2 * n]),
                f"{marginal:.2f}",
                f"{steady.paired_marginal(path):.2f}",
                f"{steady.startup(path):.2f}",
                f"{steady.marginal_cpu(path):.2f}",
                fmt_num(ratio(units_n, marginal), 0),
                fmt_num(ratio(2 * units_n, steady.best(path, 2 * n)), 0),
            ]
        )
    print_table(
        f"{corpus.name} corpus in steady state: {n} and {2 * n} documents "
        f"({corpus.pages:,} pages at 2N); whole processes, wall seconds, best of rounds",
        [
            "path",
            "T(N) s",
            "T(2N) s",
            "T(2N) rounds",
            "marginal s",
            "paired s",
            "start-up s",
            "marginal CPU s",
            f"marginal {unit}/s",
            f"whole {unit}/s",
        ],
        rows,
    )
    print(
        "marginal = best T(2N) - best T(N) (judged); paired = the median over rounds of "
        "T(2N) - T(N) within a round"
    )
    print(
        f"{corpus.name} start-up (2 T(N) - T(2N)): "
        + ", ".join(f"{p.label} {steady.startup(p):.2f} s" for p in paths)
    )


def pdf_targets(steady: Steady) -> list[Target]:
    """The ratio lines of a PDF corpus: marginal over marginal (judged), whole
    process beside it."""
    from bench.common import print_ratio

    name, n = steady.corpus.name, steady.n
    targets = []
    for path, base, goal in PDF_RATIOS:
        value = steady.marginal_ratio(path, base)
        whole = ratio(steady.best(path, 2 * n), steady.best(base, 2 * n))
        print_ratio(
            f"steady {name}: {path.label} / {base.label}, marginal time",
            value,
            f"T(2N)-T(N), lower is better; whole process {fmt_ratio(whole)}"
            + ("" if goal is not None else "; for reference"),
        )
        if goal is not None:
            targets.append(Target(f"steady {name}: {path.label} / {base.label}", value, goal, "<="))
    # Two workers and two bare processes share the machine's cores: the workers can
    # finish the second N documents no sooner than their CPU spread over every core.
    cores = os.cpu_count() or 1
    for path in (WORKERS_TWO,):
        floor = steady.marginal_cpu(path) / cores
        print(
            f"steady {name}: {path.label} used {steady.marginal_cpu(path):.2f} s of CPU "
            f"on the second N documents (bare x2 {steady.marginal_cpu(BARE_TWO):.2f} s): on "
            f"{cores} CPUs at least {floor:.2f} s of wall, "
            f"{fmt_ratio(ratio(floor, steady.marginal(BARE_TWO)))} of the bare marginal"
        )
    return targets


def small_targets(steady: Steady) -> list[Target]:
    """Documents/s in steady state, pipeline over bare (higher is better)."""
    from bench.common import print_ratio

    n = steady.n
    targets = []
    for path, judged in ((WORKER, True), (WORKER_HASHED, False)):
        value = steady.marginal_ratio(BARE_PYPDF, path)
        whole = ratio(steady.best(BARE_PYPDF, 2 * n), steady.best(path, 2 * n))
        print_ratio(
            f"steady small: {path.label} docs/s / bare docs/s, marginal",
            value,
            f"higher is better; whole process {fmt_ratio(whole)}"
            + ("" if judged else "; for reference"),
        )
        if judged:
            targets.append(
                Target("steady small: worker / bare docs/s", value, SMALL_RATIO_TARGET, ">=")
            )
    return targets
