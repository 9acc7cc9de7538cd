"""The task counters (migration 0016): counts and failure groups read from the rows
the triggers keep, equal to a grouping of the tasks after every kind of write, on an
old ledger brought up to date too, and read without scanning the task table."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import text

from core import ErrorCode, Ledger, Settings, Stage, TaskStatus, parse_filter, sqlite_url
from tests.conftest import FakeClock
from tests.old_ledgers import set_back

GROUPED = """SELECT status, coalesce(error_code, ''), stage, count(*) FROM ingestion_tasks
    GROUP BY 1, 2, 3"""
COUNTED = "SELECT status, error_code, stage, n FROM task_counters WHERE n <> 0"


async def _rows(ledger: Ledger, sql: str) -> set[tuple[object, ...]]:
    return await ledger.transactions.read(
        lambda conn: {tuple(r) for r in conn.execute(text(sql)).all()}
    )


async def assert_counted(ledger: Ledger) -> None:
    assert await _rows(ledger, COUNTED) == await _rows(ledger, GROUPED)


async def _submitted(ledger: Ledger, name: str) -> str:
    doc = await ledger.operator.upload(f"# {name}\n\nsome words to read\n".encode(), name)
    return (await ledger.operator.submit(doc.document_id, actor="test")).task_id


async def test_counts_follow_every_transition(ledger: Ledger, clock: FakeClock) -> None:
    ids = [await _submitted(ledger, f"doc-{i}.md") for i in range(5)]
    await assert_counted(ledger)
    assert (await ledger.reads.counts())[TaskStatus.QUEUED] == 5

    first = await ledger.queue.claim(ids[0], "w1")
    assert first is not None
    await ledger.queue.report_progress(first, Stage.PARSE, 1, 2)  # a change of stage
    await assert_counted(ledger)
    await ledger.queue.fail(first, ErrorCode.PARSE_ERROR, "cannot read")
    second = await ledger.queue.claim(ids[1], "w1")
    assert second is not None
    await ledger.queue.finish(second, [])
    await ledger.operator.cancel(ids[2], actor="test", reason="not wanted")
    await ledger.operator.retry(ids[0], actor="test", reason="try again")
    await ledger.operator.bulk_cancel(parse_filter("status:queued"), actor="test", reason="all")
    await assert_counted(ledger)

    counts = await ledger.reads.counts()
    assert set(counts) == set(TaskStatus)
    assert counts[TaskStatus.SUCCEEDED] == 1
    assert counts[TaskStatus.CANCELLED] == 4
    assert sum(counts.values()) == 5


async def test_failure_groups_come_from_the_counters(ledger: Ledger, clock: FakeClock) -> None:
    for code, stage in ((ErrorCode.PARSE_ERROR, Stage.PARSE),) * 2 + (
        (ErrorCode.EMPTY_DOCUMENT, Stage.PARSE),
    ):
        task_id = await _submitted(ledger, f"{code}-{clock.now}.md")
        claim = await ledger.queue.claim(task_id, "w1")
        assert claim is not None
        await ledger.queue.report_progress(claim, stage, 1, 1)
        clock.advance(10)
        await ledger.queue.fail(claim, code, "bad")
    groups = await ledger.reads.failure_groups()
    assert [(g.error_code, g.stage, g.count) for g in groups] == [
        (ErrorCode.PARSE_ERROR, Stage.PARSE, 2),
        (ErrorCode.EMPTY_DOCUMENT, Stage.PARSE, 1),
    ]
    parse = groups[0]
    assert parse.last_seen - parse.first_seen == 10  # the first and the second failure


async def test_an_old_ledger_gets_its_counters_filled_when_opened(tmp_path: Path) -> None:
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "o")
    ledger = await Ledger.open(settings)
    ids = [await _submitted(ledger, f"old-{i}.md") for i in range(4)]
    claim = await ledger.queue.claim(ids[0], "w1")
    assert claim is not None
    await ledger.queue.fail(claim, ErrorCode.PARSE_ERROR, "unreadable")
    await ledger.close()
    set_back(tmp_path / "ledger.db", "0015")
    with sqlite3.connect(tmp_path / "ledger.db") as raw:
        found = raw.execute("SELECT name FROM sqlite_master WHERE name = 'task_counters'")
        assert not found.fetchall()

    ledger = await Ledger.open(settings)
    try:
        await assert_counted(ledger)
        counts = await ledger.reads.counts()
        assert (counts[TaskStatus.QUEUED], counts[TaskStatus.FAILED]) == (3, 1)
        # ...and kept from then on.
        await ledger.operator.cancel(ids[1], actor="test", reason="no")
        await assert_counted(ledger)
    finally:
        await ledger.close()


async def test_counts_and_failure_groups_do_not_scan_the_tasks(tmp_path: Path) -> None:
    """The plans, not the times: a scan of the task table is what grows with it."""
    from core.ledger.counters import _FAILURE_GROUPS

    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "o")
    async with await Ledger.open(settings) as ledger:
        await _submitted(ledger, "one.md")

        def plans(conn: object) -> list[str]:
            from sqlalchemy.engine import Connection

            assert isinstance(conn, Connection)
            compiled = _FAILURE_GROUPS.compile(dialect=conn.dialect)
            out = []
            for sql, params in (
                ("SELECT status, sum(n) FROM task_counters GROUP BY status", ()),
                (compiled.string, tuple(compiled.params[k] for k in compiled.positiontup or ())),
            ):
                rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params).all()
                out.extend(str(r[-1]) for r in rows)
            return out

        found = await ledger.transactions.read(plans)
    assert found
    assert not [p for p in found if p.startswith("SCAN ingestion_tasks")], found
    assert any("ix_tasks_failed_at" in p for p in found), found


async def test_claims_and_failures_so_far_survive_a_prune(ledger: Ledger, clock: FakeClock) -> None:
    """/metrics' claims and failures so far count the history as it is written (no
    scan of it), and a prune deleting history does not take them back."""
    from core.ledger.retention import prune_tasks

    ids = [await _submitted(ledger, f"m-{i}.md") for i in range(3)]
    codes = (ErrorCode.PARSE_ERROR, None, ErrorCode.EMPTY_DOCUMENT)
    for task_id, code in zip(ids, codes, strict=True):
        claim = await ledger.queue.claim(task_id, "w1")
        assert claim is not None
        if code is None:
            await ledger.queue.finish(claim, [])
        else:
            await ledger.queue.fail(claim, code, "bad")
    stats = await ledger.reads.stats(clock.now)
    grouped = await ledger.transactions.read(
        lambda conn: conn.execute(
            text("SELECT count(*) FROM task_events WHERE to_status = 'running'")
        ).scalar_one()
    )
    assert stats.claims == grouped == 3
    assert stats.failures == {ErrorCode.PARSE_ERROR: 1, ErrorCode.EMPTY_DOCUMENT: 1}
    clock.advance(10 * 86_400)
    pruned = await prune_tasks(
        ledger.transactions, older_than_s=86_400, now=clock.now, include_failed=True
    )
    assert pruned.tasks == 3
    after = await ledger.reads.stats(clock.now)
    assert (after.claims, after.failures) == (stats.claims, stats.failures)
    assert sum(after.tasks.values()) == 0
