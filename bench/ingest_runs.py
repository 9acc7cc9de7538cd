"""Running ``ingestdesk worker`` processes over a prepared ledger, for the ingest
benchmarks (:mod:`bench.ingest`, :mod:`bench.ingest_light`): ledgers made from a
corpus through the API, copied per run, workers timed as whole processes with their
CPU time, peak RSS and what they left in the ledger."""

from __future__ import annotations

import re
import resource
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common import CpuTimes, RSSMonitor, ingestdesk_command, python_env, ratio
from core import Ledger, Settings, TaskStatus, sqlite_url

WORKER_TIMEOUT_S = 1_800.0  # seconds a worker process may run before the bench gives up


@dataclass(frozen=True)
class Corpus:
    name: str
    files: list[Path]
    pages: int  # PDF pages, plus one per Markdown note

    @property
    def pdfs(self) -> list[Path]:
        return [f for f in self.files if f.suffix == ".pdf"]


def children_cpu_s() -> float:
    """CPU seconds (user + system) of all waited-for descendants so far: the worker
    processes and, through them, their parser processes."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# --- ledgers ---------------------------------------------------------------------------


def settings_for(db_path: Path, store: Path) -> Settings:
    return Settings(db_url=sqlite_url(db_path), store_root=store)


async def submit_all(db_path: Path, store: Path, files: Sequence[Path]) -> None:
    """Upload and submit every file through the ledger API (set-up, untimed)."""
    async with await Ledger.open(settings_for(db_path, store)) as ledger:
        for path in files:
            doc = await ledger.operator.upload_path(path)
            await ledger.operator.submit(doc.document_id)


def copy_ledger(src: Path, dst: Path) -> None:
    """A consistent copy of a ledger file (SQLite's backup API, WAL included)."""
    with sqlite3.connect(src) as source, sqlite3.connect(dst) as target:
        source.backup(target)
    source.close()
    target.close()


@dataclass
class LedgerFacts:
    succeeded: int
    other: dict[str, int]
    chunks: int
    events: int
    revision: int


def ledger_facts(db_path: Path) -> LedgerFacts:
    conn = sqlite3.connect(db_path)
    try:
        statuses = Counter(
            dict(conn.execute("SELECT status, count(*) FROM ingestion_tasks GROUP BY status"))
        )
        chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        events = conn.execute("SELECT count(*) FROM task_events").fetchone()[0]
        revision = conn.execute("SELECT coalesce(max(revision), 0) FROM ingestion_tasks")
        rev = revision.fetchone()[0]
        failures = dict(
            conn.execute(
                "SELECT error_code || ': ' || coalesce(error_detail, ''), count(*) "
                "FROM ingestion_tasks WHERE status != 'succeeded' GROUP BY 1"
            )
        )
    finally:
        conn.close()
    succeeded = statuses.pop(TaskStatus.SUCCEEDED.value, 0)
    other = {k: v for k, v in statuses.items() if v} | {
        f"  {k}": v for k, v in failures.items() if k
    }
    return LedgerFacts(succeeded, other, chunks, events, rev)


# --- worker processes ------------------------------------------------------------------


@dataclass
class WorkerRun:
    label: str
    processes: int
    docs: int
    pages: int
    seconds: float
    cpu_seconds: float  # workers and their parser processes together
    machine_idle: float  # idle share of all the machine's CPUs during the run
    claimed: list[int]  # tasks each worker process claimed, from its summary line
    worker_mb: float
    parser_mb: float
    parsers_seen: int
    before: LedgerFacts
    after: LedgerFacts

    @property
    def ok(self) -> bool:
        return self.after.succeeded == self.docs

    @property
    def pages_per_s(self) -> float:
        return ratio(self.pages, self.seconds)

    @property
    def docs_per_s(self) -> float:
        return ratio(self.docs, self.seconds)


def run_workers(
    label: str,
    template: Path,
    store: Path,
    run_dir: Path,
    processes: int,
    corpus: Corpus,
    extra_args: Sequence[str] = (),
) -> WorkerRun:
    """Copy the template ledger, start ``processes`` times ``ingestdesk worker --until-idle``
    (with ``extra_args``) together and time them until the last one exits."""
    run_dir.mkdir(parents=True)
    db_path = run_dir / "ledger.db"
    copy_ledger(template, db_path)
    before = ledger_facts(db_path)
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []
    cpu, machine = children_cpu_s(), CpuTimes.now()
    start = time.perf_counter()
    for i in range(processes):
        log = run_dir / f"worker-{i}.log"
        with log.open("wb") as out:
            procs.append(
                (
                    subprocess.Popen(
                        [
                            *ingestdesk_command(),
                            "worker",
                            "--until-idle",
                            "--worker-id",
                            f"bench-{label}-{i}",
                            "--db",
                            str(db_path),
                            "--store",
                            str(store),
                            *extra_args,
                        ],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=python_env(),
                    ),
                    log,
                )
            )
    try:
        with RSSMonitor([p.pid for p, _ in procs]) as monitor:
            for proc, _ in procs:
                proc.wait(WORKER_TIMEOUT_S)
        seconds = time.perf_counter() - start
        idle = CpuTimes.now().idle_since(machine)
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for proc, log in procs:
        if proc.returncode != 0:
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{label}: worker exited {proc.returncode}:\n{tail}")
    after = ledger_facts(db_path)
    peaks = monitor.result
    return WorkerRun(
        label=label,
        processes=processes,
        docs=len(corpus.files),
        pages=corpus.pages,
        seconds=seconds,
        cpu_seconds=children_cpu_s() - cpu,
        machine_idle=idle,
        claimed=[_claimed(log) for _, log in procs],
        worker_mb=peaks.peak_mb("worker"),
        parser_mb=peaks.peak_mb("parser"),
        parsers_seen=peaks.count("parser"),
        before=before,
        after=after,
    )


def _claimed(log: Path) -> int:
    """Tasks a worker claimed, from its ``stopped: claimed=N`` summary line."""
    found = re.findall(r"stopped: claimed=(\d+)", log.read_text(errors="replace"))
    return int(found[-1]) if found else -1
