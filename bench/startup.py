"""bench.startup: how long a command takes to start, as a person at the keyboard feels it.

Each figure is a whole process, from exec to exit (or, for a worker, to the log line of
its first claim), the minimum of several runs taken in rounds (every command once a
round, so a slow moment of the shared machine hits all of them alike), printed beside
``python -c pass`` run the same way, on a small ledger built first:

* ``--version``, ``--help``, ``errors``: nothing to open; targets <= 0.08 s;
* ``tasks``, ``task ID``, ``documents``, ``search WORDS`` (the default mode, and
  ``--mode keyword``): one short read of the ledger; targets <= 0.15 s;
* ``worker --until-idle`` with one queued task: seconds from exec to its ``claimed``
  line; target <= 0.25 s. And the same worker on an empty queue, exec to exit.

Then, once per command, which heavy libraries its process imported (from ``python -X
importtime``): the light commands must load none of them.

Run: ``python -m bench.startup [--quick] [--runs N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common import (
    Target,
    compile_bytecode,
    ingestdesk_command,
    load_line,
    print_header,
    print_ratio,
    print_table,
    print_targets,
    python_env,
    ratio,
)
from bench.ingest_runs import copy_ledger, settings_for

RUNS_FULL, RUNS_QUICK = 9, 3  # rounds; the fastest run of each command counts
TIMEOUT_S = 120.0  # seconds one command may take before the bench gives up
# Libraries a command loads only when it needs them; the importtime table lists each
# command's share of them.
HEAVY = ("sqlalchemy", "numpy", "wordllama", "textual", "fastapi", "uvicorn", "pypdf", "httpx")
# The imports no read of the ledger can do without (see the floor probe in run()).
READ_GOAL_S = 0.15  # seconds, whole process: the target for a read
READ_FLOOR = "asyncio, concurrent.futures, sqlalchemy, sqlalchemy.dialects.sqlite.pysqlite"
NOTE_WORDS = ["quarterly", "revenue", "grew", "in", "every", "region", "while", "costs", "fell"]


@dataclass(frozen=True)
class Probe:
    label: str
    argv: tuple[str, ...]  # after the ingestdesk command (empty: python -c pass)
    goal_s: float | None  # the target, whole process
    first_claim: bool = False  # time to the worker's "claimed" line, not to exit
    fresh_ledger: bool = False  # a fresh copy of the queued ledger each run
    python_code: str = "pass"  # what `python -c` runs when argv is empty


async def _build(db_path: Path, store: Path, notes: int) -> str:
    """A small ledger: ``notes`` Markdown notes, ingested and published. Returns a task
    id."""
    from core import Ledger
    from core.ingest.embedders import worker_embedder
    from core.ingest.worker import Worker

    async with await Ledger.open(settings_for(db_path, store)) as ledger:
        task_id = ""
        for i in range(notes):
            words = " ".join(NOTE_WORDS[(i + j) % len(NOTE_WORDS)] for j in range(60))
            doc = await ledger.operator.upload(f"# Note {i}\n\n{words}\n".encode(), f"note-{i}.md")
            task_id = (await ledger.operator.submit(doc.document_id)).task_id
        # The embedder `ingestdesk worker` picks on a fresh ledger (wordllama where it
        # loads): its index becomes the active one, and search's default mode follows it.
        embedder = await worker_embedder(ledger)
        await Worker(ledger, "bench-startup", embedder=embedder).run(until_idle=True)
        documents = await ledger.reads.list_documents(limit=None)
        for doc in documents:
            await ledger.versions.publish(doc.document_id, actor="bench")
        return task_id


async def _queue_one(db_path: Path, store: Path) -> None:
    from core import Ledger

    async with await Ledger.open(settings_for(db_path, store)) as ledger:
        doc = await ledger.operator.upload(b"one queued note\n", "queued.md")
        await ledger.operator.submit(doc.document_id)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(probe: Probe, base: Sequence[str], workdir: Path, n: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of ``probe``."""
    if not probe.argv:
        argv = [sys.executable, "-c", probe.python_code]
    else:
        db = workdir / "ledger.db"
        if probe.fresh_ledger:
            db = workdir / "runs" / f"{probe.label.split()[0]}-{n}.db"
            copy_ledger(workdir / "queued.db", db)
        argv = [*base, *probe.argv, "--db", str(db), "--store", str(workdir / "objects")]
    cpu = _children_cpu_s()
    start = time.perf_counter()
    if probe.first_claim:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=python_env()
        )
        assert proc.stdout is not None
        wall = None
        for raw in proc.stdout:
            if wall is None and b" claimed task=" in raw:
                wall = time.perf_counter() - start
        if proc.wait(TIMEOUT_S) != 0 or wall is None:
            raise RuntimeError(f"{probe.label}: no claim (exit {proc.returncode})")
    else:
        done = subprocess.run(argv, capture_output=True, env=python_env(), timeout=TIMEOUT_S)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"{probe.label}: exit {done.returncode}: {done.stderr[-500:]!r}")
    return wall, _children_cpu_s() - cpu


def heavy_imports(probe: Probe, workdir: Path) -> str:
    """The heavy libraries ``probe``'s process imports, with their import seconds."""
    if not probe.argv:
        return ""
    db = workdir / "ledger.db"
    if probe.fresh_ledger:
        db = workdir / "runs" / "importtime.db"
        copy_ledger(workdir / "queued.db", db)
    argv = [sys.executable, "-X", "importtime", "-m", "tui.cli", *probe.argv]
    argv += ["--db", str(db), "--store", str(workdir / "objects")]
    done = subprocess.run(argv, capture_output=True, env=python_env(), timeout=TIMEOUT_S)
    found: dict[str, int] = {}
    for line in done.stderr.decode(errors="replace").splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)$", line)
        if m and m.group(3) in HEAVY:
            found[m.group(3)] = max(found.get(m.group(3), 0), int(m.group(1)))
    return ", ".join(f"{name} {us / 1e6:.2f}" for name, us in found.items()) or "none"


def run(runs: int, quick: bool, workdir: Path) -> None:
    print_header("bench.startup", quick, workdir)
    store = workdir / "objects"
    started = time.perf_counter()
    task_id = asyncio.run(_build(workdir / "ledger.db", store, 4 if quick else 20))
    copy_ledger(workdir / "ledger.db", workdir / "queued.db")
    asyncio.run(_queue_one(workdir / "queued.db", store))
    (workdir / "runs").mkdir()
    print(f"ledger built in {time.perf_counter() - started:.1f} s", flush=True)
    probes = [
        Probe("python -c pass", (), None),
        # What every read imports whatever it reads: the event loop, SQLAlchemy (whose
        # package imports all of its Core on any import) and its SQLite dialect. A
        # read's start-up is this plus the command line and the ledger's own modules.
        Probe("reads' floor: python -c 'import …'", (), None, python_code=f"import {READ_FLOOR}"),
        Probe("--version", ("--version",), 0.08),
        Probe("--help", ("--help",), 0.08),
        Probe("errors", ("errors",), 0.08),
        Probe("tasks", ("tasks",), READ_GOAL_S),
        Probe("task ID", ("task", task_id), READ_GOAL_S),
        Probe("documents", ("documents",), READ_GOAL_S),
        Probe("search (default mode)", ("search", "quarterly revenue"), READ_GOAL_S),
        Probe(
            "search --mode keyword",
            ("search", "quarterly revenue", "--mode", "keyword"),
            READ_GOAL_S,
        ),
        Probe(
            "worker: exec to first claim",
            ("worker", "--until-idle"),
            0.25,
            first_claim=True,
            fresh_ledger=True,
        ),
        Probe("worker --until-idle, empty queue", ("worker", "--until-idle"), None),
    ]
    base = ingestdesk_command()
    walls: defaultdict[str, list[float]] = defaultdict(list)
    cpus: defaultdict[str, list[float]] = defaultdict(list)
    for n in range(runs):
        for probe in probes:
            wall, cpu = run_once(probe, base, workdir, n)
            walls[probe.label].append(wall)
            cpus[probe.label].append(cpu)
        print(f"round {n + 1}/{runs} done ({load_line()})", flush=True)
    floor = min(walls["python -c pass"])
    rows, targets = [], []
    for probe in probes:
        best = min(walls[probe.label])
        rows.append(
            [
                probe.label,
                f"{best:.3f}",
                f"{statistics.median(walls[probe.label]):.3f}",
                f"{min(cpus[probe.label]):.3f}",
                f"{best - floor:+.3f}" if probe.argv or probe.python_code != "pass" else "",
                f"<= {probe.goal_s:g}" if probe.goal_s else "",
                heavy_imports(probe, workdir),
            ]
        )
        if probe.goal_s is not None:
            targets.append(Target(f"start-up: {probe.label}", best, probe.goal_s, "<=", "seconds"))
    print_table(
        f"whole processes, {runs} rounds ({' '.join(base)}); the empty-queue worker's CPU "
        "includes its parser process",
        ["command", "best s", "median s", "CPU s", "vs pass", "target", "heavy imports (s)"],
        rows,
    )
    print(
        f"python -c pass: {floor:.3f} s best; 'vs pass' is the command's best less it. "
        "Heavy imports: each library's cumulative import time in one -X importtime run."
    )
    read_floor = min(walls[probes[1].label])
    reads = [p for p in probes if p.goal_s == READ_GOAL_S]
    print(
        f"the reads' floor ({READ_FLOOR}): {read_floor:.3f} s best, "
        f"{min(cpus[probes[1].label]):.3f} s CPU; each read's best less it: "
        + ", ".join(f"{p.label} {min(walls[p.label]) - read_floor:+.3f}" for p in reads)
    )
    for probe in probes[1:]:
        print_ratio(
            f"start-up {probe.label} / python -c pass",
            ratio(min(walls[probe.label]), floor),
            "whole process, best of the rounds; lower is better",
        )
    print(flush=True)
    print_targets(targets)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__)
    parser.add_argument("--quick", action="store_true", help=f"{RUNS_QUICK} rounds")
    parser.add_argument("--runs", type=int, help="rounds (default 9, --quick 3)")
    parser.add_argument("--dir", type=Path, help="parent of the work directory (default: temp)")
    args = parser.parse_args(argv)
    compile_bytecode()
    runs = args.runs or (RUNS_QUICK if args.quick else RUNS_FULL)
    workdir = Path(tempfile.mkdtemp(prefix="bench-startup-", dir=args.dir))
    started = time.perf_counter()
    try:
        run(runs, args.quick, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"bench.startup finished in {time.perf_counter() - started:.1f} s ({load_line()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
