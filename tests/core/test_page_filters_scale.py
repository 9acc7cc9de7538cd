"""Page filters (``ocr:low``, ``pages:skipped``) on a large ledger: when the versions
with such a page are few, a list starts from them (migration 0019's index of pages
by decision), not from every task in order; the answer is the same either way.

At a million tasks with 250 low-confidence versions, ``ocr:low``'s first screen and
capped count read every task: 2.4 s of CPU; from the versions, 17 ms."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Connection

from bench.million import build
from core import Ledger, Settings, parse_filter, sqlite_url
from core.ledger import pages
from tests.core.test_name_index import _explain

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
    from core.ledger.filter_sql import filter_clauses
    from core.ledger.reads import term_clause

    clauses = filter_clauses(
        parse_filter(expr), lambda t: term_clause(t, review_below), conn, review_below
    )
    found = _explain(conn, clauses, "EXPLAIN QUERY PLAN").all()
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
