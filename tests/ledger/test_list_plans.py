"""Lists at scale: a status or error code filter seeks its own index in the list's
order, the claim and the reaper keep theirs, running tasks are listed from their
lease index, and a capped count stops counting. Plans are read from SQLite itself
(EXPLAIN QUERY PLAN) on a real ledger file built by bench.million."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Connection

from bench.million import build
from core import Ledger, Settings, TaskStatus, parse_filter, sqlite_url
from core.ledger import rows
from core.ledger.filter_sql import filter_clauses
from core.ledger.reads import HISTORIES_SLICE, TASK_HISTORIES, term_clause
from core.ledger.schema import TASKS
from core.ledger.statements import CLAIM_NEXT, reap_statement


@pytest.fixture
async def big(tmp_path: Path) -> Settings:
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "o")
    await build(settings, 5_000)
    return settings


def _plan(conn: Connection, statement: Any, params: dict[str, Any]) -> str:
    compiled = statement.compile(dialect=conn.dialect)
    values = compiled.construct_params(params)
    args = tuple(values[k] for k in compiled.positiontup or ())
    found = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + compiled.string, args).all()
    return "\n".join(str(r[-1]) for r in found)


def _listing(expr: str) -> Any:
    return (
        rows.tasks_with_names()
        .where(*filter_clauses(parse_filter(expr), term_clause))
        .order_by(TASKS.c.created_at.desc(), TASKS.c.id.desc())
        .limit(50)
    )


async def test_status_and_code_filters_seek_their_index(big: Settings) -> None:
    async with await Ledger.open(big) as ledger:
        for expr, index in (
            ("status:cancelled", "ix_tasks_status_created"),
            ("status:queued", "ix_tasks_status_created"),
            ("status:failed", "ix_tasks_status_created"),
            ("code:parse_error", "ix_tasks_error_created"),
        ):
            plan = await ledger.transactions.read(
                lambda conn, e=expr: _plan(conn, _listing(e), {})  # type: ignore[misc]
            )
            assert f"USING INDEX {index}" in plan, (expr, plan)
            assert "TEMP B-TREE" not in plan, (expr, plan)  # in the list's order


async def test_the_claim_and_the_reaper_keep_their_partial_indexes(big: Settings) -> None:
    now = time.time()
    params = {"p_worker_id": "w", "p_now": now, "p_lease_until": now + 30, "p_limit": 1}
    async with await Ledger.open(big) as ledger:
        claim = await ledger.transactions.read(lambda c: _plan(c, CLAIM_NEXT.statement, params))
        reap = await ledger.transactions.read(lambda c: _plan(c, reap_statement(now), {}))
    assert "ix_tasks_claimable" in claim and "TEMP B-TREE" not in claim, claim
    assert "ix_tasks_running_lease" in reap, reap


async def test_lists_of_one_status_hold_what_a_full_read_holds(big: Settings) -> None:
    async with await Ledger.open(big) as ledger:
        everything = await ledger.reads.list_tasks(limit=None)
        for status in TaskStatus:
            expected = [t.task_id for t in everything if t.status is status][:50]
            by_filter = await ledger.reads.list_tasks(
                filter=parse_filter(f"status:{status.value}"), limit=50
            )
            by_status = await ledger.reads.list_tasks(status=status, limit=50)
            assert [t.task_id for t in by_filter] == expected, status
            assert [t.task_id for t in by_status] == expected, status


async def test_a_capped_count_stops_past_its_cap(big: Settings) -> None:
    async with await Ledger.open(big) as ledger:
        name = parse_filter("name:report")
        exact = await ledger.reads.count_tasks(name)
        assert exact == 5_000 // 12 + 1  # one name in twelve, the first included
        assert await ledger.reads.count_tasks(name, at_most=100) == 101
        assert await ledger.reads.count_tasks(name, at_most=exact) == exact
        assert await ledger.reads.count_tasks(name, at_most=exact + 5) == exact


async def test_histories_of_many_tasks_walk_the_task_index(big: Settings) -> None:
    async with await Ledger.open(big) as ledger:
        ids = [t.task_id for t in await ledger.reads.list_tasks(limit=30)]

        def plan(conn: Connection) -> str:
            query = TASK_HISTORIES.params(p_ids=ids).compile(
                dialect=conn.dialect, compile_kwargs={"literal_binds": True}
            )
            found = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {query}").all()
            return "\n".join(str(r[-1]) for r in found)

        found = await ledger.transactions.read(plan)
        assert "USING INDEX ix_task_events_task_id" in found, found
        assert "TEMP B-TREE" not in found, found  # (task, id) is the index's own order


async def test_histories_of_many_tasks_are_each_tasks_history(big: Settings) -> None:
    async with await Ledger.open(big) as ledger:
        ids = [t.task_id for t in await ledger.reads.list_tasks(limit=40)]
        gone = "f" * 32  # no such task: an empty history, not a refusal
        asked = [*reversed(ids), gone, ids[0]]
        histories = await ledger.reads.task_histories(asked)
        assert list(histories) == [*reversed(ids), gone]
        assert histories[gone] == []
        for task_id in ids:
            assert histories[task_id] == await ledger.reads.task_history(task_id)
            assert histories[task_id], task_id  # every task has a history
        many = [t.task_id for t in await ledger.reads.list_tasks(limit=HISTORIES_SLICE + 100)]
        read = await ledger.reads.task_histories(many)  # more than one statement's worth
        assert list(read) == many and all(read.values())
        assert read[ids[0]] == histories[ids[0]]


async def test_the_document_list_reads_its_page_from_an_index(big: Settings) -> None:
    """``ingestdesk documents`` newest first, of any status or of one: the page comes
    from an index in its order, not from sorting every document (1.8 s at 1M before
    0020), and holds what sorting them all would give."""
    async with await Ledger.open(big) as ledger:
        engine = ledger.transactions.engine  # type: ignore[attr-defined]  # SQLite's
        everything = await ledger.reads.list_documents(limit=None)
        assert len(everything) == 5_000  # a version per task
        newest = sorted(everything, key=lambda d: (d.created_at, d.document_id), reverse=True)
        for status in (None, "published", "failed"):
            sent: list[tuple[str, Any]] = []

            def keep(_c: Any, _cur: Any, statement: str, params: Any, *_: Any, into=sent) -> None:
                into.append((statement, params))

            event.listen(engine, "before_cursor_execute", keep)
            try:
                page = await ledger.reads.list_documents(status=status, limit=20)
            finally:
                event.remove(engine, "before_cursor_execute", keep)
            expected = [d for d in newest if status is None or d.status.value == status][:20]
            assert [d.document_id for d in page] == [d.document_id for d in expected]
            ((statement, params),) = [s for s in sent if s[0].lstrip().startswith("SELECT")]
            plan = await ledger.transactions.read(
                lambda conn, s=statement, a=params: "\n".join(  # type: ignore[misc]
                    str(r[-1]) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + s, a)
                )
            )
            assert "USING INDEX ix_documents_" in plan and "TEMP B-TREE" not in plan, plan
