"""A ledger of a million tasks for the benches, built in SQL in minutes.

:func:`build` opens a ledger through :class:`core.Ledger` (so its schema is exactly
what the migrations make, triggers and counters included) and fills it with
``INSERT … SELECT`` statements over a generated series (a recursive CTE on SQLite,
``generate_series`` on PostgreSQL), one statement per table, with every column
computed from the task's number ``i``:

* **tasks**: of every 100, 95 succeeded, 3 failed (across :data:`FAILURE_CODES`, each
  at the stage that code fails in; a third on their first attempt, the others on their
  second or third), 1 queued (due), and of every 1 000 one running (a lease that does
  not expire during the bench) and nine waiting for a retry (not due during it); 1 % of
  succeeded tasks took two attempts. Created over
  :data:`SPAN_S`, oldest first, one revision each;
* **documents**: one version per task, named from :data:`NAMES` (so ``name:report``
  matches one task in 12); :data:`FAMILIES` documents have a second version (the
  first retired, the second published);
* **history**: three rows a task (queued, running, and how it ended); a queued task
  has one, a running one two.

Nothing else is made (no chunks, no objects in the store): the benches that use it
read and claim tasks. Run ``python -m bench.million [--size N] [--db URL]`` to time
a build; the benches import :func:`build`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import Connection

from core import Ledger, Settings, sqlite_url
from core.ledger.transactions import sqlite_ledger_path

# --- tunables ---------------------------------------------------------------------------

SPAN_S = 180 * 86_400.0  # seconds: the tasks were created over the last 180 days
RUN_S = 30.0  # seconds from a task's creation to its end
FAMILIES = 1_000  # documents with two versions (fewer in a small ledger: one per 100 tasks)
RUNNING_LEASE_S = 365 * 86_400.0  # seconds: the running tasks' leases outlast any bench
RETRY_S = 365 * 86_400.0  # seconds: the tasks waiting for a retry are not due in any bench
NAMES = (
    "report",
    "invoice",
    "contract",
    "minutes",
    "manual",
    "notes",
    "slides",
    "budget",
    "policy",
    "handbook",
    "summary",
    "letter",
)
# Six codes, each with the stage it fails in.
FAILURE_CODES = (
    ("parse_error", "parse"),
    ("empty_document", "parse"),
    ("object_read_error", "download"),
    ("provider_unavailable", "embedding"),
    ("lease_expired", "parse"),
    ("parser_killed", "parse"),
)
WORKERS = 4  # worker ids the finished tasks name


@dataclass(frozen=True)
class Built:
    size: int
    seconds: float
    tasks: int
    documents: int
    events: int


def _hex(dialect: str, expr: str, width: int) -> str:
    if dialect == "sqlite":
        return f"printf('%0{width}x', {expr})"
    return f"lpad(to_hex({expr}), {width}, '0')"


def _series(dialect: str) -> str:
    """``FROM`` a series of ``i`` = 0 … :n - 1 with ``r`` = i mod 100, ``b`` = i div 100."""
    if dialect == "sqlite":
        return (
            "(WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < :n - 1) "
            "SELECT i, i % 100 AS r, i / 100 AS b FROM s) AS g"
        )
    return (
        "(SELECT i, i % 100 AS r, i / 100 AS b FROM generate_series(0::bigint, :n - 1) AS i) AS g"
    )


def _ids(dialect: str) -> tuple[str, str, str]:
    """Task id, document id and the document id of task i - 1, from ``i``: 32 hex
    digits each, the first 8 scattered (as a uuid's are) and unique by the rest."""

    def one(expr: str, salt: int) -> str:
        scattered = _hex(dialect, f"(({expr}) * 2654435761 + {salt}) % 4294967296", 8)
        return f"{scattered} || {_hex(dialect, f'({expr}) * 2 + {salt % 2}', 24)}"

    return one("i", 0), one("i", 1), one("i - 1", 1)


def _case(pairs: list[tuple[str, str]], default: str) -> str:
    return "CASE " + " ".join(f"WHEN {w} THEN {v}" for w, v in pairs) + f" ELSE {default} END"


def _statements(dialect: str) -> list[str]:
    task_id, doc_id, prev_doc_id = _ids(dialect)
    succeeded, failed, queued = "r < 95", "r BETWEEN 95 AND 97", "r = 98"
    running = "(r = 99 AND b % 10 = 0)"  # else r = 99 waits for a retry
    code_of = "(b + r) % 6"
    code = _case([(f"{code_of} = {k}", f"'{c}'") for k, (c, _) in enumerate(FAILURE_CODES)], "''")
    fail_stage = _case(
        [(f"{code_of} = {k}", f"'{s}'") for k, (_, s) in enumerate(FAILURE_CODES)], "''"
    )
    status = _case(
        [
            (succeeded, "'succeeded'"),
            (failed, "'failed'"),
            (queued, "'queued'"),
            (running, "'running'"),
        ],
        "'retry_wait'",
    )
    stage = _case(
        [(succeeded, "'finalizing'"), (failed, fail_stage), (queued, "'download'")], "'parse'"
    )
    attempt = _case(
        [
            (succeeded, "CASE WHEN b % 100 = 7 THEN 2 ELSE 1 END"),
            (failed, "1 + b % 3"),
            (queued, "0"),
        ],
        "1",
    )
    pages = "1 + i % 20"
    created = "(CAST(:base AS DOUBLE PRECISION) + i * CAST(:step AS DOUBLE PRECISION))"
    updated = f"({created} + CASE WHEN r >= 98 THEN 0 ELSE CAST(:run AS DOUBLE PRECISION) END)"
    # Every FAMILY_STEP-th block of 100: task 1 is the second version of task 0's document.
    second = "(r = 1 AND b % :family_step = 0)"
    first_retired = "(r = 0 AND b % :family_step = 0)"
    tasks = f"""
        INSERT INTO ingestion_tasks (id, document_id, status, previous_status, stage,
            completed, total, attempt, max_attempts, error_code, error_detail, worker_id,
            lease_expires_at, next_attempt_at, progress_at, options, processing_key,
            created_at, updated_at, revision, index_id)
        SELECT {task_id}, {doc_id}, {status},
            CASE WHEN {queued} THEN NULL ELSE 'running' END,
            {stage},
            CASE WHEN {succeeded} THEN {pages} WHEN {failed} THEN 1 ELSE 0 END,
            CASE WHEN {succeeded} THEN {pages} ELSE 1 END,
            {attempt}, 3,
            CASE WHEN {failed} THEN {code} WHEN r = 99 AND NOT {running} THEN 'parser_killed'
            END,
            CASE WHEN {failed} THEN 'bench: ' || {code}
                WHEN r = 99 AND NOT {running} THEN 'bench: parser_killed' END,
            CASE WHEN {queued} THEN NULL WHEN {running} THEN 'bench-running'
                ELSE 'worker-' || (i % {WORKERS}) END,
            CASE WHEN {running} THEN CAST(:now AS DOUBLE PRECISION) + {RUNNING_LEASE_S} END,
            CASE WHEN {queued} THEN {created}
                WHEN r = 99 AND NOT {running} THEN CAST(:now AS DOUBLE PRECISION) + {RETRY_S}
            END,
            CASE WHEN {queued} THEN NULL ELSE {updated} END,
            '{{}}', NULL, {created}, {updated}, i + 1, NULL
        FROM {_series(dialect)}"""
    doc_status = _case(
        [
            (first_retired, "'retired'"),
            (succeeded, "'published'"),
            (failed, "'failed'"),
        ],
        "'processing'",
    )
    name = _case([(f"i % {len(NAMES)} = {k}", f"'{n}'") for k, n in enumerate(NAMES)], "''")
    filename = f"{name} || '-' || {_hex(dialect, 'i', 6)} || '.pdf'"
    documents = f"""
        INSERT INTO documents (id, filename, filename_folded, sha256, object_key, size, kind,
            status, version, family_id, version_no, created_at, updated_at)
        SELECT {doc_id}, {filename}, {filename}, {_hex(dialect, "i", 64)},
            'bench/' || {_hex(dialect, "i", 16)}, 10000 + i % 5000, 'pdf', {doc_status}, 3,
            CASE WHEN {second} THEN {prev_doc_id} ELSE {doc_id} END,
            CASE WHEN {second} THEN 2 ELSE 1 END,
            {created}, {updated}
        FROM {_series(dialect)}"""
    # The history, from the tasks just written: queued, then running, then the end.
    events = [
        """INSERT INTO task_events (task_id, at, actor, from_status, to_status, stage,
            attempt, error_code, reason)
        SELECT id, created_at, 'bench', NULL, 'queued', 'download', 0, NULL, NULL
        FROM ingestion_tasks""",
        """INSERT INTO task_events (task_id, at, actor, from_status, to_status, stage,
            attempt, error_code, reason)
        SELECT id, created_at + 1, worker_id, 'queued', 'running', 'download', attempt,
            NULL, NULL
        FROM ingestion_tasks WHERE status <> 'queued'""",
        """INSERT INTO task_events (task_id, at, actor, from_status, to_status, stage,
            attempt, error_code, reason)
        SELECT id, updated_at, worker_id, 'running', status, stage, attempt, error_code,
            NULL
        FROM ingestion_tasks WHERE status IN ('succeeded', 'failed')""",
    ]
    return [documents, tasks, *events]


def _fill(conn: Connection, size: int, now: float) -> tuple[int, int, int]:
    dialect = conn.dialect.name
    if dialect == "sqlite":
        conn.exec_driver_sql("PRAGMA cache_size = -262144")  # KiB: 256 MiB while building
    params = {
        "n": size,
        "base": now - SPAN_S,
        "step": SPAN_S / max(size, 1),
        "run": RUN_S,
        "now": now,
        "family_step": max(1, size // 100 // FAMILIES),
    }
    for statement in _statements(dialect):
        conn.execute(text(statement), params)

    def count(table: str) -> int:
        return int(conn.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar() or 0)

    return count("ingestion_tasks"), count("documents"), count("task_events")


async def build(settings: Settings, size: int, *, now: float | None = None) -> Built:
    """Fill the (new, empty) ledger ``settings`` names with ``size`` tasks."""
    started = time.perf_counter()
    at = time.time() if now is None else now
    async with await Ledger.open(settings) as ledger:
        tasks, documents, events = await ledger.transactions.write(
            lambda conn: _fill(conn, size, at)
        )
        if ledger.backend == "postgresql":
            # What autovacuum would do soon after a load this size: the planner's
            # statistics (without them it guesses, and the guesses are the bench's).
            await ledger.transactions.write(lambda conn: conn.exec_driver_sql("ANALYZE"))
    path = sqlite_ledger_path(settings.db_url)
    if path is not None:
        # The load's WAL into the file (readers would look through it otherwise).
        with contextlib.closing(sqlite3.connect(path)) as raw:
            raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    if tasks != size:
        raise RuntimeError(f"built {tasks} tasks, wanted {size}")
    return Built(size, time.perf_counter() - started, tasks, documents, events)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.million", description=__doc__)
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--db", default=None, help="a ledger URL or SQLite path (new, empty)")
    args = parser.parse_args(argv)
    db = args.db or str(Path(f"/tmp/bench-million-{args.size}.db"))
    url = db if "://" in db else sqlite_url(Path(db))
    settings = Settings(db_url=url, store_root=Path(f"/tmp/bench-million-{args.size}-objects"))
    built = asyncio.run(build(settings, args.size))
    print(
        f"{built.tasks} tasks, {built.documents} documents, {built.events} history rows "
        f"in {built.seconds:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
