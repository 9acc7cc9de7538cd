"""Page and worker filters on a large ledger: when the versions with such a page
(``ocr:low``, ``pages:skipped``), or the tasks of the matching workers
(``worker:vm``), are few, a list starts from them (migration 0019's indexes), not
from every task in order; a worker filter no worker matches is empty at once. The
answer is the same either way.

At a million tasks: ``ocr:low`` with 250 low-confidence versions, first screen and
capped count, 2.4 s of CPU -> 17 ms; ``worker:nobody`` 1.35 s -> 2.5 ms."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Connection

from bench.million import build
from core import Ledger, Settings, parse_filter, sqlite_url
from core.ledger import pages, worker_index

TASKS = 5_000
PAGE_EXPRS = ("ocr:low", "pages:skipped", "pages:flagged", "ocr:low status:succeeded")


def _with_pages(db: Path) -> None:
    """Pages as scans leave them: most versions read from their text layer, one in
    ten by OCR with a good confidence, a few old ones low or skipped."""
    with sqlite3.connect(db) as conn:
        insert = (
            "INSERT INTO document_pages (document_id, page, decision, chars, confidence,"
            " ocr_seconds, reason) SELECT id, ?, ?, 100, ?, 0, NULL FROM documents"
        )
        conn.execute(insert + " WHERE rowid % 2 = 0", (1, "text", None))
        conn.execute(insert + " WHERE rowid % 10 = 1", (2, "ocr", 92.0))
        conn.execute(insert + " WHERE rowid < 1000 AND rowid % 97 = 5", (3, "ocr", 40.0))
        conn.execute(insert + " WHERE rowid < 1000 AND rowid % 89 = 7", (4, "skipped", None))


def _plan(conn: Connection, expr: str, review_below: float) -> str:
    """SQLite's plan of a first screen of ``expr`` as the list builds it."""
    from core.ledger import rows
    from core.ledger.filter_sql import filter_clauses
    from core.ledger.reads import term_clause
    from core.ledger.schema import TASKS

    clauses = filter_clauses(
        parse_filter(expr), lambda t: term_clause(t, review_below), conn, review_below
    )
    statement = (
        rows.tasks_with_names()
        .where(*clauses)
        .order_by(TASKS.c.created_at.desc(), TASKS.c.id.desc())
        .limit(50)
    )
    sql = statement.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True})
    found = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}").all()
    return "\n".join(str(r[-1]) for r in found)


async def _ids(ledger: Ledger, expr: str) -> list[str]:
    return [t.task_id for t in await ledger.reads.list_tasks(filter=parse_filter(expr), limit=None)]


async def test_a_page_filter_few_versions_match_starts_from_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "o")
    await build(settings, TASKS)
    _with_pages(tmp_path / "ledger.db")
    async with await Ledger.open(settings) as ledger:
        below = ledger.reads.review_below
        driven: dict[str, Any] = {}
        for expr in PAGE_EXPRS:
            plan = await ledger.transactions.read(lambda c, e=expr: _plan(c, e, below))  # type: ignore[misc]
            assert "ix_document_pages_decision" in plan, (expr, plan)
            assert "SEARCH ingestion_tasks USING INDEX ix_ingestion_tasks_document_id" in plan
            driven[expr] = await _ids(ledger, expr)
            assert driven[expr], expr
        # Many versions read by OCR (one in ten): found soon in the list's order.
        plan = await ledger.transactions.read(lambda c: _plan(c, "ocr:any", below))
        assert "ix_document_pages_decision" not in plan.split("\n")[0], plan
        # The same tasks, in the same order, read every task in order.
        monkeypatch.setattr(pages, "FEW_VERSIONS", -1)
        for expr in PAGE_EXPRS:
            plan = await ledger.transactions.read(lambda c, e=expr: _plan(c, e, below))  # type: ignore[misc]
            assert "ix_ingestion_tasks_document_id" not in plan, (expr, plan)
            assert await _ids(ledger, expr) == driven[expr], expr
            counted = await ledger.reads.count_tasks(parse_filter(expr))
            assert counted == len(driven[expr])


WORKER_EXPRS = (
    "worker:vm-rare",
    "worker:VM-RARE",  # folded as the test folds it
    "worker:rare status:failed",
    "worker:vm worker:rare",  # both must be held
    "worker:nobody",
    "worker:worker-1",  # common: read in order
    "!worker:worker-1 worker:vm",
    "worker:wörker",  # not ASCII: read in order
)


async def test_a_worker_filter_few_tasks_match_starts_from_their_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "o")
    await build(settings, TASKS)
    with sqlite3.connect(tmp_path / "ledger.db") as conn:
        conn.execute("UPDATE ingestion_tasks SET worker_id = 'vm-rare-7' WHERE rowid % 400 = 3")
        conn.execute("UPDATE ingestion_tasks SET worker_id = 'wörker-2' WHERE rowid % 500 = 4")
        (rare,) = conn.execute(
            "SELECT count(*) FROM ingestion_tasks WHERE worker_id = 'vm-rare-7'"
        ).fetchone()
    async with await Ledger.open(settings) as ledger:
        below = ledger.reads.review_below
        plan = await ledger.transactions.read(lambda c: _plan(c, "worker:vm-rare", below))
        assert "SEARCH ingestion_tasks USING INDEX ix_tasks_worker" in plan, plan
        # A worker that ran more than FEW_TASKS: read in order.
        monkeypatch.setattr(worker_index, "FEW_TASKS", 100)
        plan = await ledger.transactions.read(lambda c: _plan(c, "worker:worker-1", below))
        assert "ix_tasks_worker" not in plan, plan
        monkeypatch.undo()
        driven = {expr: await _ids(ledger, expr) for expr in WORKER_EXPRS}
        assert len(driven["worker:vm-rare"]) == rare > 0
        assert driven["worker:VM-RARE"] == driven["worker:vm-rare"]
        assert driven["worker:nobody"] == []
        assert driven["worker:wörker"]
        # The same tasks, in the same order, read every task in order.
        monkeypatch.setattr(worker_index, "DISTINCT_MAX", 0)
        for expr in WORKER_EXPRS:
            assert await _ids(ledger, expr) == driven[expr], expr
            assert await ledger.reads.count_tasks(parse_filter(expr)) == len(driven[expr])
