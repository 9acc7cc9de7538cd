"""bench.scale: the ledger's reads and claims at 1 000 000 tasks against 1 000.

Two ledgers are built with :mod:`bench.million` (untimed set-up; the build time is
printed), 1 000 and 1 000 000 tasks (``--quick``: 100 000), on SQLite and, with
``--pg URL`` (a server where this may create and drop databases), on PostgreSQL too.
On each, through the public ledger API:

* the status counts (``Reads.counts``) and the failures-by-code view
  (``Reads.failure_groups``), what the dashboard and ``/metrics`` read;
* the first screenful (:data:`SCREENFUL` tasks) of each filter of :data:`FILTERS`
  (what the ``/`` bar, ``tasks --filter`` and ``GET /tasks?filter=`` ask), and
  :data:`PAGES` pages on by keyset (``before=`` the last task of the page);
* the first screenful of documents, newest first, of any status and published
  (``ingestdesk documents [--status]``);
* claim → finish cycles per second (``claim_next(limit=1)``, then ``finish``) with
  every queued task due (10 000 at 1 000 000);
* a prune, then a ``retry --all``, each while a worker claims: the claim p99 alone and
  during.

Each read is timed :data:`REPEATS` times (median and p99, ms); the ratio 1M/1k is
printed beside it. Every statement the ledger ran for it is captured and explained
(SQLite's ``EXPLAIN QUERY PLAN``, PostgreSQL's ``EXPLAIN``): a read whose plan scans
the task or document table (``SCAN ingestion_tasks`` without an index, a ``Seq Scan``)
is named.
Claim rounds alternate between the sizes so drift hits both alike; between rounds
(untimed) the claimed tasks are put back in the queue.

Run: ``python -m bench.scale [--quick] [--pg URL]``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import re
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from sqlalchemy import event, text
from sqlalchemy.engine import Connection, Engine, make_url

from bench.common import (
    Target,
    fmt_num,
    load_line,
    print_header,
    print_table,
    print_targets,
    ratio,
)
from bench.million import build
from core import Ledger, Settings, parse_filter, sqlite_url
from core.ledger.views import TaskPosition

T = TypeVar("T")

# --- tunables ---------------------------------------------------------------------------

SMALL = 1_000
LARGE = 1_000_000
QUICK_LARGE = 100_000
SCREENFUL = 50  # tasks a first screen shows (the dashboard's table at 160x50)
PAGES = 5  # keyset pages read after the first
REPEATS = 30  # timings of each read
CLAIM_ROUNDS = 40  # per size, alternating
CLAIM_CYCLES = 10  # claim → finish cycles per round (the small ledger queues 10)
WORKER = "bench-scale"
FILTERS = (
    "code:parse_error",
    "name:report",
    "name:zzz",  # no document's name: found (not) in the name index, not task by task
    "attempt:>1",
    "!status:succeeded",
    "status:queued",
    "status:cancelled",  # matches nothing: the whole ledger is searched
    # Kinds a sweep of the language found reading every task (core.ledger.filter_sql):
    "status:running",  # few, and pages of them by keyset
    "attempt:>3",  # none: tasks stop at 3 attempts (0021's index of retried tasks)
    "stage:indexing",  # none: every task has finished or not begun (the counters)
    "name:report !name:rep",  # contradicts itself (core.filters.TaskFilter.never_matches)
    "id:0",  # one task in 16: read in order, not gathered and sorted
    "3f2a",  # a bare word that may start a task id (PostgreSQL: a pattern index)
    "!name:a",  # half the names (PostgreSQL: estimated from the column)
    "status:failed code:parse_error",  # related columns (PostgreSQL: their statistics)
)

PRUNE_DAYS = 90  # the prune at the end deletes the tasks older than this (half of them)
ALONE_MAX_S = 30.0  # seconds of claims without a prune, at most, for the baseline p99

# Targets from the issue.
COUNTS_TARGET_MS = 20.0
SCREEN_TARGET_MS = 150.0
PAGE_P99_TARGET_MS = 50.0
CLAIM_RATIO_TARGET = 0.9
PRUNE_LOCK_MS = 50.0

_SCANS = re.compile(
    r"SCAN (ingestion_tasks|documents)\b(?! USING (COVERING )?INDEX)"
    r"|Seq Scan on (ingestion_tasks|documents)\b"
)


@dataclass
class Timing:
    samples: list[float]  # ms
    plans: list[str] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def p99(self) -> float:
        ordered = sorted(self.samples)
        return ordered[max(0, round(0.99 * len(ordered)) - 1)]

    @property
    def scans(self) -> bool:
        return any(_SCANS.search(p) for p in self.plans)


class PlanCapture:
    """The statements an engine runs while :meth:`capturing`, explained afterwards."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.statements: list[tuple[str, Any]] | None = None
        event.listen(engine, "before_cursor_execute", self._on_execute)

    def _on_execute(self, _conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        head = statement.lstrip()[:6].upper()
        if self.statements is not None and head.startswith(("SELECT", "WITH", "UPDATE")):
            self.statements.append((statement, params))

    @contextmanager
    def capturing(self) -> Iterator[list[tuple[str, Any]]]:
        self.statements = []
        try:
            yield self.statements
        finally:
            self.statements = None


def _explain(conn: Connection, statements: list[tuple[str, Any]]) -> list[str]:
    out = []
    for statement, params in statements:
        if conn.dialect.name == "sqlite":
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params).all()
            out.append("\n".join(str(r[-1]) for r in rows))
        else:
            rows = conn.exec_driver_sql("EXPLAIN " + statement, params).all()
            out.append("\n".join(str(r[0]) for r in rows))
    return out


async def _timed(
    ledger: Ledger, capture: PlanCapture, call: Callable[[], Awaitable[object]]
) -> Timing:
    with capture.capturing() as statements:
        await call()
    captured = list(dict.fromkeys((s, _freeze(p)) for s, p in statements))
    plans = await ledger.transactions.read(
        lambda conn: _explain(conn, [(s, _thaw(p)) for s, p in captured])
    )
    samples = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - t0) * 1000)
    return Timing(samples, plans)


def _freeze(params: Any) -> Any:
    if isinstance(params, dict):
        return tuple(sorted(params.items()))
    return tuple(params) if isinstance(params, list) else params


def _thaw(params: Any) -> Any:
    if isinstance(params, tuple) and params and isinstance(params[0], tuple):
        return dict(params)
    return params


async def _pages(ledger: Ledger, expr: str) -> None:
    """The first screenful of a filter, then PAGES more by keyset."""
    task_filter = parse_filter(expr)
    page = await ledger.reads.list_tasks(filter=task_filter, limit=SCREENFUL)
    for _ in range(PAGES):
        if len(page) < SCREENFUL:
            return
        page = await ledger.reads.list_tasks(
            filter=task_filter, limit=SCREENFUL, before=TaskPosition.of(page[-1])
        )


def _engine(ledger: Ledger) -> Engine:
    engine: Any = getattr(ledger.transactions, "engine")  # noqa: B009 - not in the protocol
    return cast(Engine, getattr(engine, "sync_engine", engine))


async def measure_reads(ledger: Ledger) -> dict[str, Timing]:
    capture = PlanCapture(_engine(ledger))
    reads = ledger.reads
    out = {
        "counts": await _timed(ledger, capture, reads.counts),
        "failure groups": await _timed(ledger, capture, reads.failure_groups),
        "first page (no filter)": await _timed(
            ledger, capture, lambda: reads.list_tasks(limit=SCREENFUL)
        ),
    }
    # ``ingestdesk documents``: a million tasks are a million documents too.
    for status in (None, "published"):
        out[f"documents {status or 'all'} first screen"] = await _timed(
            ledger,
            capture,
            functools.partial(reads.list_documents, status=status, limit=SCREENFUL),
        )
    for expr in FILTERS:
        out[f"{expr} first screen"] = await _timed(
            ledger,
            capture,
            functools.partial(reads.list_tasks, filter=parse_filter(expr), limit=SCREENFUL),
        )
        out[f"{expr} +{PAGES} pages"] = await _timed(
            ledger, capture, functools.partial(_pages, ledger, expr)
        )
    return out


# --- claims -----------------------------------------------------------------------------


def _requeue(conn: Connection, task_ids: list[str], since_event: int) -> None:
    """Put claimed-and-finished tasks back in the queue as the builder made them."""
    params = {"ids": task_ids}
    for statement in (
        """UPDATE ingestion_tasks SET status = 'queued', previous_status = NULL,
            stage = 'download', completed = 0, total = 1, attempt = 0, worker_id = NULL,
            lease_expires_at = NULL, next_attempt_at = created_at, progress_at = NULL,
            error_code = NULL, error_detail = NULL WHERE id IN :ids""",
        """UPDATE documents SET status = 'processing' WHERE id IN
            (SELECT document_id FROM ingestion_tasks WHERE id IN :ids)""",
    ):
        conn.execute(text(statement).bindparams(_expanding("ids")), params)
    conn.execute(text("DELETE FROM task_events WHERE id > :id"), {"id": since_event})


def _expanding(name: str) -> Any:
    from sqlalchemy import bindparam

    return bindparam(name, expanding=True)


def _claim_plan(conn: Connection) -> str:
    """The plan of the claim statement a worker sends (SQLite's is sent past
    SQLAlchemy's events, straight to the driver, so it is compiled here)."""
    from core.ledger.statements import CLAIM_NEXT, CLAIM_NEXT_SKIP_LOCKED

    prepared = CLAIM_NEXT if conn.dialect.name == "sqlite" else CLAIM_NEXT_SKIP_LOCKED
    compiled = prepared.statement.compile(dialect=conn.dialect)
    now = time.time()
    values = compiled.construct_params(
        {"p_worker_id": WORKER, "p_now": now, "p_lease_until": now + 30, "p_limit": 1}
    )
    params = tuple(values[k] for k in compiled.positiontup or ())
    return _explain(conn, [(compiled.string, params)])[0]


async def claim_round(ledger: Ledger) -> tuple[float, float]:
    """Wall and CPU seconds (this process's, the ledger's threads included) for
    CLAIM_CYCLES claim → finish cycles, the ledger put back after."""
    mark = await ledger.transactions.read(
        lambda conn: int(conn.exec_driver_sql("SELECT max(id) FROM task_events").scalar() or 0)
    )
    claimed: list[str] = []
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(CLAIM_CYCLES):
        (claim,) = await ledger.queue.claim_next(WORKER, limit=1)
        await ledger.queue.finish(claim, [])
        claimed.append(claim.task_id)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    await ledger.transactions.write(lambda conn: _requeue(conn, claimed, mark))
    return seconds, cpu


# --- claims during a prune ----------------------------------------------------------------


async def _claim_latencies(ledger: Ledger, stop: asyncio.Event) -> list[float]:
    """claim_next → finish until ``stop``, every claim's latency (ms); tasks put back
    in the queue a round at a time, as in :func:`claim_round`."""
    out: list[float] = []
    while not stop.is_set():
        mark = await ledger.transactions.read(
            lambda conn: int(conn.exec_driver_sql("SELECT max(id) FROM task_events").scalar() or 0)
        )
        claimed = []
        for _ in range(CLAIM_CYCLES):
            t0 = time.perf_counter()
            (claim,) = await ledger.queue.claim_next(WORKER, limit=1)
            out.append((time.perf_counter() - t0) * 1000)
            await ledger.queue.finish(claim, [])
            claimed.append(claim.task_id)

        def put_back(conn: Connection, c: list[str] = claimed, m: int = mark) -> None:
            _requeue(conn, c, m)

        await ledger.transactions.write(put_back)
    return out


async def _claims_beside(
    worker: Ledger, work: Callable[[], Awaitable[T]]
) -> tuple[T, float, list[float], list[float]]:
    """``work``'s result and seconds, with the worker's claim latencies during it and
    then alone for as long (at most ALONE_MAX_S)."""
    stop = asyncio.Event()
    claiming = asyncio.create_task(_claim_latencies(worker, stop))
    t0 = time.perf_counter()
    result = await work()
    seconds = time.perf_counter() - t0
    stop.set()
    during = await claiming
    stop = asyncio.Event()
    claiming = asyncio.create_task(_claim_latencies(worker, stop))
    await asyncio.sleep(min(seconds, ALONE_MAX_S))
    stop.set()
    return result, seconds, during, await claiming


@dataclass
class PruneRun:
    alone_p99_ms: float
    during_p99_ms: float
    claims_during: int
    claims_alone: int
    tasks: int
    seconds: float
    batches: int
    longest_batch_ms: float  # the write lock, first statement to COMMIT's return
    longest_batch_cpu_ms: float  # that batch's thread: CPU time
    longest_batch_wait_ms: float  # ...and time runnable but waiting for a CPU
    longest_batch_commit_ms: float
    longest_own_ms: float  # the longest hold less its run-queue wait: the prune's part
    over_bound: int  # batches past PRUNE_LOCK_MS
    over_bound_own: int  # ...even without their run-queue wait
    load_before: str
    load_after: str


async def prune_while_claiming(settings: Settings) -> PruneRun:
    """A worker's claim p99 alone for as long as the prune then takes, and during
    it (``prune --tasks-older-than PRUNE_DAYS``, failed tasks included)."""
    from core.ledger.retention import prune_tasks

    async with await Ledger.open(settings) as worker, await Ledger.open(settings) as pruner:
        load_before = load_line()
        pruned, seconds, during, alone = await _claims_beside(
            worker,
            lambda: prune_tasks(
                pruner.transactions,
                older_than_s=PRUNE_DAYS * 86_400.0,
                now=time.time(),
                include_failed=True,
            ),
        )
    return PruneRun(
        Timing(alone).p99,
        Timing(during).p99,
        len(during),
        len(alone),
        pruned.tasks,
        seconds,
        pruned.batches,
        pruned.longest_batch_s * 1000,
        pruned.longest_batch_cpu_s * 1000,
        pruned.longest_batch_wait_s * 1000,
        pruned.longest_batch_commit_s * 1000,
        pruned.longest_own_s * 1000,
        pruned.over_bound,
        pruned.over_bound_own,
        load_before,
        load_line(),
    )


async def bulk_retry_while_claiming(settings: Settings) -> str:
    """``retry --all`` (after the prune: the failed tasks it kept) with a worker
    claiming meanwhile: its dry run's time, its rate, and the claim p99 alone (as long
    as the retry took, at most ALONE_MAX_S) and during. Not one of the issue's
    targets: what a bulk action costs the workers, as the prune's line says."""
    from core import EVERY_TASK

    async with await Ledger.open(settings) as worker, await Ledger.open(settings) as operator:
        t0 = time.perf_counter()
        dry = await operator.operator.bulk_retry(EVERY_TASK, dry_run=True)
        dry_ms = (time.perf_counter() - t0) * 1000
        done, seconds, during, alone = await _claims_beside(
            worker, lambda: operator.operator.bulk_retry(EVERY_TASK)
        )
    return (
        f"retry --all: dry run {dry_ms:.0f} ms ({dry.eligible} of {dry.matched}); "
        f"{done.done} requeued in {seconds:.1f} s ({done.done / max(seconds, 1e-9):.0f}/s); "
        f"claim p99 alone {Timing(alone).p99:.1f} ms ({len(alone)}), during "
        f"{Timing(during).p99:.1f} ms ({len(during)}); {load_line()}"
    )


# --- the run ----------------------------------------------------------------------------


@dataclass
class Backend:
    name: str
    settings: dict[int, Settings]


def _sqlite(workdir: Path, sizes: tuple[int, int]) -> Backend:
    return Backend(
        "sqlite",
        {
            n: Settings(db_url=sqlite_url(workdir / f"ledger-{n}.db"), store_root=workdir / "o")
            for n in sizes
        },
    )


async def _pg_databases(base_url: str, sizes: tuple[int, int], workdir: Path) -> Backend:
    """One fresh database per size on the server ``base_url`` names."""
    from sqlalchemy.ext.asyncio import create_async_engine

    url = make_url(base_url)
    admin = create_async_engine(url, isolation_level="AUTOCOMMIT")
    settings = {}
    try:
        async with admin.connect() as conn:
            for n in sizes:
                name = f"bench_scale_{n}_{uuid.uuid4().hex[:8]}"
                await conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
                settings[n] = Settings(
                    db_url=url.set(database=name).render_as_string(hide_password=False),
                    store_root=workdir / "o",
                )
    finally:
        await admin.dispose()
    return Backend("postgresql", settings)


async def _drop_pg(base_url: str, backend: Backend) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    admin = create_async_engine(make_url(base_url), isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            for s in backend.settings.values():
                name = make_url(s.db_url).database
                await conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.dispose()


async def run_backend(backend: Backend, sizes: tuple[int, int]) -> list[Target]:
    small, large = sizes
    for n in sizes:
        built = await build(backend.settings[n], n)
        print(
            f"{backend.name}: built {built.tasks} tasks, {built.documents} documents, "
            f"{built.events} history rows in {built.seconds:.1f} s",
            flush=True,
        )
    results: dict[int, dict[str, Timing]] = {}
    rates: dict[int, list[float]] = {n: [] for n in sizes}
    cpu_rates: dict[int, list[float]] = {n: [] for n in sizes}
    ledgers = {n: await Ledger.open(backend.settings[n]) for n in sizes}
    try:
        for n in sizes:
            results[n] = await measure_reads(ledgers[n])
        for n in sizes:
            plan = await ledgers[n].transactions.read(_claim_plan)
            results[n]["claim (statement plan)"] = Timing([float("nan")], [plan])
        for _ in range(CLAIM_ROUNDS):
            for n in sizes:
                wall, cpu = await claim_round(ledgers[n])
                rates[n].append(CLAIM_CYCLES / wall)
                cpu_rates[n].append(CLAIM_CYCLES / cpu)
    finally:
        for ledger in ledgers.values():
            await ledger.close()
    rows = []
    for name, timing in results[large].items():
        little = results[small][name]
        rows.append(
            [
                name,
                fmt_num(little.median, 2),
                fmt_num(timing.median, 2),
                fmt_num(timing.p99, 2),
                f"{ratio(timing.median, little.median):.2f}x",
                "SCAN" if timing.scans else "-",
            ]
        )
    label = f"{large // 1000}k"
    print_table(
        f"{backend.name}: reads, ms ({load_line()})",
        ["read", "1k median", f"{label} median", f"{label} p99", f"{label}/1k", "scans"],
        rows,
    )
    for name, timing in results[large].items():
        print(f"-- plan at {label}: {name}")
        for plan in timing.plans:
            print("   " + plan.replace("\n", "\n   "))
    rate_small, rate_large = (statistics.median(rates[n]) for n in sizes)
    cpu_small, cpu_large = (statistics.median(cpu_rates[n]) for n in sizes)
    wall_ratio = ratio(rate_large, rate_small)
    # Judged per CPU-second of this process (the ledger's threads included): other
    # load on the machine stretches wall time of either size at random, not CPU time.
    claim_ratio = ratio(cpu_large, cpu_small)
    print(
        f"{backend.name}: claim→finish cycles per wall second: 1k {rate_small:.0f}, {label} "
        f"{rate_large:.0f} ({wall_ratio:.2f}x); per CPU-second: 1k {cpu_small:.0f}, {label} "
        f"{cpu_large:.0f} ({claim_ratio:.2f}x); {load_line()}",
        flush=True,
    )
    pruned = await prune_while_claiming(backend.settings[large])
    print(
        f"{backend.name}: prune at {label}: {pruned.tasks} tasks in {pruned.seconds:.1f} s "
        f"({pruned.tasks / max(pruned.seconds, 1e-9):.0f}/s), {pruned.batches} batches; "
        f"longest held the lock {pruned.longest_batch_ms:.1f} ms (COMMIT "
        f"{pruned.longest_batch_commit_ms:.1f}; its thread's CPU "
        f"{pruned.longest_batch_cpu_ms:.1f}, waiting for a CPU "
        f"{pruned.longest_batch_wait_ms:.1f}); longest less that wait (the prune's own) "
        f"{pruned.longest_own_ms:.1f} ms; past {PRUNE_LOCK_MS:.0f} ms: {pruned.over_bound} "
        f"batches, {pruned.over_bound_own} without the wait; claim p99 alone "
        f"{pruned.alone_p99_ms:.1f} ms ({pruned.claims_alone}), during the prune "
        f"{pruned.during_p99_ms:.1f} ms ({pruned.claims_during}); "
        f"{pruned.load_before} -> {pruned.load_after}",
        flush=True,
    )
    retried = await bulk_retry_while_claiming(backend.settings[large])
    print(f"{backend.name}: at {label}, {retried}", flush=True)
    big = results[large]
    screens = [v for k, v in big.items() if k.endswith("first screen")]
    who = f"{backend.name} {label}:"
    return [
        Target(f"{who} counts, ms", big["counts"].median, COUNTS_TARGET_MS, "<=", "ms"),
        Target(f"{who} counts' plans scanning tasks", big["counts"].scans, 0, "==", "count"),
        Target(
            f"{who} failures by code, ms",
            big["failure groups"].median,
            COUNTS_TARGET_MS,
            "<=",
            "ms",
        ),
        Target(
            f"{who} failures' plans scanning tasks", big["failure groups"].scans, 0, "==", "count"
        ),
        Target(
            f"{who} slowest filter's first screen, ms",
            max(v.median for v in screens),
            SCREEN_TARGET_MS,
            "<=",
            "ms",
        ),
        Target(
            f"{who} slowest first page p99, ms",
            max(v.p99 for v in screens),
            PAGE_P99_TARGET_MS,
            "<=",
            "ms",
        ),
        Target(f"{who} claim rate {label}/1k (CPU)", claim_ratio, CLAIM_RATIO_TARGET, ">="),
        Target(f"{who} claim rate {label}/1k (wall)", wall_ratio, CLAIM_RATIO_TARGET, ">="),
        Target(
            f"{who} prune's longest batch, ms", pruned.longest_batch_ms, PRUNE_LOCK_MS, "<=", "ms"
        ),
        # The same less its thread's run-queue wait: what the prune itself held (the
        # rest is other processes' CPU turns on a loaded machine).
        Target(
            f"{who} prune's longest batch without CPU wait, ms",
            pruned.longest_own_ms,
            PRUNE_LOCK_MS,
            "<=",
            "ms",
        ),
    ]


async def run(quick: bool, pg: str | None, workdir: Path) -> None:
    sizes = (SMALL, QUICK_LARGE if quick else LARGE)
    targets = await run_backend(_sqlite(workdir, sizes), sizes)
    if pg:
        backend = await _pg_databases(pg, sizes, workdir)
        try:
            targets += await run_backend(backend, sizes)
        finally:
            await _drop_pg(pg, backend)
    print_targets(targets)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="100 000 tasks, not 1 000 000")
    parser.add_argument("--pg", default=None, help="a PostgreSQL server URL (databases made)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        workdir = Path(tmp)
        print_header("bench.scale", args.quick, workdir)
        asyncio.run(run(args.quick, args.pg, workdir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
