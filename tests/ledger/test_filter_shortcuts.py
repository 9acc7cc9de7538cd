"""Filters the ledger answers without reading every task, found by trying the filter
language at a million tasks (each read every task before, 0.2-6 s):

* terms no task can meet together (``name:report !name:rep``, ``attempt:>3
  attempt:<2``) are answered from the terms alone;
* status, error code and stage terms the counters say no task meets (``stage:indexing``
  once every task has finished) are answered from the counters, and when the few that
  do share a status the list starts from that status's index;
* an attempt past the first (``attempt:>3``) reads 0021's index of retried tasks;
* a page of running tasks after the first keeps to their lease index;
* a short id prefix (``id:0``, one task in 16) is read in the list's order rather than
  gathered from its range and sorted.

How much a read does is counted in SQLite's own virtual machine instructions (its
progress handler), which do not depend on the machine's load; the answer is always
what deciding each task in memory gives."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from bench.million import build
from core import Ledger, Settings, parse_filter, sqlite_url
from core.ledger import filter_sql
from core.ledger.views import TaskPosition, TaskView

TASKS = 5_000
STEP = 100  # SQLite instructions between two calls of the progress handler


@pytest.fixture
async def big(tmp_path: Path) -> AsyncIterator[Ledger]:
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "o")
    await build(settings, TASKS)
    async with await Ledger.open(settings) as ledger:
        yield ledger


class Steps:
    """SQLite instructions run by a ledger's connections (a progress handler on each)."""

    def __init__(self, ledger: Ledger) -> None:
        self.count = 0
        engine = ledger.transactions.engine  # type: ignore[attr-defined]  # SQLite's
        event.listen(engine, "before_cursor_execute", self._watch)

    def _watch(self, conn: Any, *_: Any) -> None:
        conn.connection.dbapi_connection.set_progress_handler(self._tick, STEP)

    def _tick(self) -> int:
        self.count += STEP
        return 0  # go on

    async def of(self, call: Callable[[], Awaitable[Any]]) -> tuple[int, Any]:
        self.count = 0
        result = await call()
        return self.count, result


async def _answer(ledger: Ledger, expr: str) -> list[str]:
    found = await ledger.reads.list_tasks(filter=parse_filter(expr), limit=50)
    return [t.task_id for t in found]


def _expected(everything: list[TaskView], expr: str) -> list[str]:
    flt = parse_filter(expr)
    return [t.task_id for t in everything if flt.matches(t)][:50]


async def test_filters_no_task_meets_are_answered_without_reading_the_tasks(
    big: Ledger,
) -> None:
    everything = await big.reads.list_tasks(limit=None)
    steps = Steps(big)
    # Empty too, but a name in none of the documents' names is only found so by
    # reading every task: what each of the filters below cost before.
    every_task, found = await steps.of(lambda: _answer(big, "!name:."))
    assert found == []
    for expr in (
        "name:report !name:rep",
        "report !rep",
        "name:invoice !invoice",
        "attempt:>3 attempt:<2",
        "attempt:>5",
        "stage:indexing",
        "status:succeeded stage:download",
        "code:parse_error stage:download",
    ):
        cost, found = await steps.of(lambda e=expr: _answer(big, e))  # type: ignore[misc]
        assert found == _expected(everything, expr) == [], expr
        assert cost < every_task / 20, (expr, cost, every_task)


async def test_a_stage_few_tasks_are_at_starts_from_their_one_status(big: Ledger) -> None:
    everything = await big.reads.list_tasks(limit=None)
    steps = Steps(big)
    for expr, every_task_expr in (
        # Running tasks (5 of 5 000, all parsing) and the failures at download (50).
        ("stage:parse !status:failed !status:retry_wait", "!name:."),
        ("stage:download !status:queued", "!name:."),
    ):
        every_task, _ = await steps.of(lambda e=every_task_expr: _answer(big, e))  # type: ignore[misc]
        cost, found = await steps.of(lambda e=expr: _answer(big, e))  # type: ignore[misc]
        assert found == _expected(everything, expr) and found, expr
        assert cost < every_task / 5, (expr, cost, every_task)


async def test_pages_of_running_tasks_keep_to_their_index(big: Ledger) -> None:
    everything = await big.reads.list_tasks(limit=None)
    running = [t.task_id for t in everything if t.status.value == "running"]
    assert len(running) >= 4
    steps = Steps(big)
    every_task, _ = await steps.of(lambda: _answer(big, "!name:."))
    flt = parse_filter("status:running")
    pages: list[str] = []
    page = await big.reads.list_tasks(filter=flt, limit=2)
    while page:
        pages += [t.task_id for t in page]
        after = TaskPosition.of(page[-1])
        cost, page = await steps.of(
            lambda a=after: big.reads.list_tasks(filter=flt, limit=2, before=a)  # type: ignore[misc]
        )
        # Before, a page after the first walked ix_tasks_created past every older task.
        assert cost < every_task / 20, (cost, every_task)
    assert pages == running


async def test_a_short_id_prefix_is_read_in_order_and_a_long_one_from_its_range(
    big: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    everything = await big.reads.list_tasks(limit=None)
    # At 5 000 tasks, a one-digit prefix holds ~310: "many" as 62 500 are at a million.
    monkeypatch.setattr(filter_sql, "FEW_PREFIXED", 100)
    steps = Steps(big)
    for expr in ("id:0", "id:0a", "doc:f", "doc:f3", "task:7 status:succeeded"):
        _, found = await steps.of(lambda e=expr: _answer(big, e))  # type: ignore[misc]
        assert found == _expected(everything, expr) and found, expr
    # One in 16 is read in order: a page within ~800 tasks, not 312 gathered and sorted.
    sorted_range, _ = await steps.of(lambda: _answer(big, "id:0"))
    monkeypatch.setattr(filter_sql, "FEW_PREFIXED", 100_000)
    gathered, found = await steps.of(lambda: _answer(big, "id:0"))
    assert found == _expected(everything, "id:0")
    assert sorted_range < gathered, (sorted_range, gathered)


# --- PostgreSQL -------------------------------------------------------------------------


class Sent:
    """The statements a ledger's PostgreSQL connections run, with their parameters."""

    def __init__(self, ledger: Ledger) -> None:
        self.statements: list[tuple[str, Any]] = []
        engine = ledger.transactions.engine.sync_engine  # type: ignore[attr-defined]
        event.listen(engine, "before_cursor_execute", self._keep)

    def _keep(self, _c: Any, _cur: Any, statement: str, params: Any, *_: Any) -> None:
        self.statements.append((statement, params))


def _tasks_read(plan: dict[str, Any]) -> float:
    """Task rows a JSON EXPLAIN ANALYZE read: those its scans of the task table
    returned or removed, over every loop."""
    read = 0.0
    if plan.get("Relation Name") == "ingestion_tasks":
        rows = plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)
        read += rows * plan.get("Actual Loops", 1)
    for child in plan.get("Plans", ()):
        read += _tasks_read(child)
    return read


async def _list_plan(ledger: Ledger, expr: str) -> tuple[list[str], dict[str, Any]]:
    """A first screen of ``expr`` as the ledger reads it, and the plan (EXPLAIN
    ANALYZE) of its list statement, run again with the same values."""
    sent = Sent(ledger)
    found = await _answer(ledger, expr)
    statement, params = next(
        (s, p) for s, p in reversed(sent.statements) if "FROM ingestion_tasks LEFT OUTER" in s
    )

    def explain(conn: Any) -> Any:
        return conn.exec_driver_sql(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + statement, tuple(params)
        ).scalar()

    (plan,) = await ledger.transactions.read(explain)
    return found, plan["Plan"]


@pytest.fixture
async def big_pg(pg_url: str, tmp_path: Path) -> AsyncIterator[Ledger]:
    settings = Settings(db_url=pg_url, store_root=tmp_path / "o")
    await build(settings, 6_000)  # analysed at the end
    async with await Ledger.open(settings) as ledger:
        yield ledger


@pytest.mark.postgres
async def test_postgres_reads_few_tasks_for_an_id_prefix_and_a_word_that_may_start_one(
    big_pg: Ledger,
) -> None:
    """Under a collation other than C the primary key cannot serve ``LIKE 'ab%'``: a
    bare word that may start a task id read every task (4-5 s at a million), and so
    did ``id:``/``doc:`` (0.13 s). 0021's pattern indexes serve the prefix, and a bare
    word's tasks are gathered from its documents and its id prefix."""
    everything = await big_pg.reads.list_tasks(limit=None)
    task = next(t for t in everything[100:] if not t.task_id[:4].isalpha())
    for expr in (task.task_id[:4], f"id:{task.task_id[:3]}", f"doc:{task.document_id[:4]}"):
        found, plan = await _list_plan(big_pg, expr)
        assert found == _expected(everything, expr) and found, expr
        assert _tasks_read(plan) <= 100, (expr, plan)


@pytest.mark.postgres
async def test_postgres_estimates_status_and_code_together(big_pg: Ledger) -> None:
    """status:failed and code:parse_error are not independent (every parse_error is a
    failure or waits for a retry): multiplied as if they were, the planner expected
    one task for 30 and at a million sorted 5 000 where reading in order finds a page
    at once. 0021's statistics of the three columns together estimate them."""
    everything = await big_pg.reads.list_tasks(limit=None)
    expr = "status:failed code:parse_error"
    found, plan = await _list_plan(big_pg, expr)
    assert found == _expected(everything, expr) and found
    actual = sum(1 for t in everything if parse_filter(expr).matches(t))

    def scans(p: dict[str, Any]) -> list[dict[str, Any]]:
        own = [p] if p.get("Relation Name") == "ingestion_tasks" else []
        return own + [s for c in p.get("Plans", ()) for s in scans(c)]

    (scan,) = scans(plan)
    assert scan["Plan Rows"] >= actual / 3, (actual, plan)


@pytest.mark.postgres
async def test_postgres_reads_a_negated_name_in_order(big_pg: Ledger) -> None:
    """!name:a (half the names): written as the negated coalesce, the planner guessed
    it at a fixed fraction near none and hashed every document; on the bare column it
    estimates from the column's statistics and reads in order to its page."""
    everything = await big_pg.reads.list_tasks(limit=None)
    for expr in ("!name:a", "!report"):
        found, plan = await _list_plan(big_pg, expr)
        assert found == _expected(everything, expr) and found, expr
        assert _tasks_read(plan) <= 500, (expr, plan)


@pytest.mark.postgres
async def test_postgres_reads_a_screenful_without_parallel_workers(big_pg: Ledger) -> None:
    """A page is found within a few hundred tasks read in order; two parallel workers
    took 16 ms to start for a 25 ms read of status:failed report at a million. With
    parallel plans made as cheap as a million tasks make them, a screenful's read
    still plans none, where a read of every match (a bulk action's count) may."""
    from core.ledger import rows
    from core.ledger.schema import TASKS

    cheap = (
        "SET LOCAL parallel_setup_cost = 0",
        "SET LOCAL parallel_tuple_cost = 0",
        "SET LOCAL min_parallel_table_scan_size = 0",
        "SET LOCAL min_parallel_index_scan_size = 0",
    )
    flt = parse_filter("status:failed report")

    def plan(conn: Any, screenful: bool) -> str:
        for setting in cheap:
            conn.exec_driver_sql(setting)
        clauses = big_pg.reads.filter_clauses(flt, conn, screenful=screenful)
        listing = (
            rows.tasks_with_names()
            .where(*clauses)
            .order_by(TASKS.c.created_at.desc(), TASKS.c.id.desc())
            .limit(50)
        )
        sql = listing.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True})
        return str(conn.exec_driver_sql(f"EXPLAIN {sql}").all())

    assert "Gather" in await big_pg.transactions.read(lambda c: plan(c, False))
    assert "Gather" not in await big_pg.transactions.read(lambda c: plan(c, True))
