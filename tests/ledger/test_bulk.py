"""Bulk cancel and retry at scale (core.ledger.bulk): counted in SQL as the rule says
task by task, acted on in bounded batches, a refusal undoing only its own task, the
tasks created after the start left alone; on a real ledger file built by
bench.million (and PostgreSQL), and through the command line with its progress."""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections import Counter
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Connection

from bench.million import build
from core import EVERY_TASK, BulkResult, Conflict, Ledger, Settings, TaskStatus, parse_filter
from core.cli import progress
from core.cli.app import main
from core.filters import TaskFilter
from core.ledger.actions import cancel_task
from core.ledger.bulk import BulkAction, run_bulk
from core.ledger.retention import BATCH_MAX
from core.states import CANCELLABLE, DocumentStatus
from tests.ledger.test_counters import assert_counted

TASKS = 20_000  # 200 queued, 20 running, 180 waiting for a retry, 600 failed
FILTERS = ("code:parse_error", "name:report", "!status:succeeded", "attempt:>1", "name:zzz")


async def _oracle(ledger: Ledger, task_filter: TaskFilter, action: str) -> BulkResult:
    """The single actions' rules, task by task, over every matching task in memory
    (what a bulk action did before it counted in SQL)."""
    tasks = await ledger.reads.list_tasks(filter=task_filter, limit=None)
    documents = {d.document_id: d.status for d in await ledger.reads.list_documents(limit=None)}
    why: Counter[str] = Counter()
    eligible = 0
    for t in tasks:
        if action == "cancel":
            reason = (
                None
                if t.status in CANCELLABLE
                else f"{t.status.value}: only queued, running or retry_wait tasks can be cancelled"
            )
        elif t.status is TaskStatus.CANCELLED:
            reason = "cancelled: submit the document again instead"
        elif t.status is not TaskStatus.FAILED:
            reason = f"{t.status.value}: only failed tasks can be retried"
        elif (document := documents.get(t.document_id)) is None:
            reason = "failed: its document no longer exists; upload it again"
        elif t.index_id is None and document is not DocumentStatus.FAILED:
            reason = f"failed: its document is {document.value}, not failed"
        else:
            reason = None
        if reason is None:
            eligible += 1
        else:
            why[reason] += 1
    return BulkResult(matched=len(tasks), eligible=eligible, ineligible=dict(why), dry_run=True)


async def _unusual(ledger: Ledger) -> None:
    """Failed tasks whose document is gone, or no longer failed, and a cancelled one."""
    failed = await ledger.reads.list_tasks(status=TaskStatus.FAILED, limit=3)
    await ledger.versions.delete(failed[0].document_id, actor="test")
    queued = await ledger.reads.list_tasks(status=TaskStatus.QUEUED, limit=1)
    await ledger.operator.cancel(queued[0].task_id)


async def test_dry_runs_count_what_the_rules_say_task_by_task(settings: Settings) -> None:
    await build(settings, TASKS)
    async with await Ledger.open(settings) as ledger:
        await _unusual(ledger)
        for text in ("every task", *FILTERS):
            task_filter = EVERY_TASK if text == "every task" else parse_filter(text)
            for action, bulk in (
                ("cancel", ledger.operator.bulk_cancel),
                ("retry", ledger.operator.bulk_retry),
            ):
                dry = await bulk(task_filter, dry_run=True)
                assert dry == await _oracle(ledger, task_filter, action), (text, action)


async def test_a_bulk_retry_goes_in_batches_and_leaves_the_rest(settings: Settings) -> None:
    await build(settings, TASKS)
    async with await Ledger.open(settings) as ledger:
        await _unusual(ledger)
        before = {t.task_id: t for t in await ledger.reads.list_tasks(limit=None)}
        expected = await _oracle(ledger, EVERY_TASK, "retry")
        heard: list[BulkResult] = []
        done = await ledger.operator.bulk_retry(
            EVERY_TASK, actor="op", reason="parser fixed", on_batch=heard.append
        )
        assert (done.eligible, done.done, done.refused) == (expected.eligible,) * 2 + (0,)
        assert done.ineligible == expected.ineligible
        assert len(heard) >= expected.eligible // BATCH_MAX  # bounded batches, each heard
        assert [h.done for h in heard] == sorted(h.done for h in heard)
        assert heard[-1] == done
        after = {t.task_id: t for t in await ledger.reads.list_tasks(limit=None)}
        requeued = {i for i, t in after.items() if t.status is not before[i].status}
        assert len(requeued) == expected.eligible
        assert all(before[i].status is TaskStatus.FAILED for i in requeued)
        assert all(after[i].status is TaskStatus.QUEUED for i in requeued)
        for task_id in list(requeued)[:20]:
            task = after[task_id]
            assert (await ledger.reads.get_document(task.document_id)).status is (
                DocumentStatus.PROCESSING
            )
            last = (await ledger.reads.task_history(task_id))[-1]
            assert (last.actor, last.reason, last.to_status) == ("op", "parser fixed", "queued")
        # The failed tasks left alone are the ones the dry run named.
        left = [t for t in after.values() if t.status is TaskStatus.FAILED]
        assert len(left) == sum(
            n for why, n in expected.ineligible.items() if why.startswith("failed:")
        )
        await assert_counted(ledger)


async def test_a_refused_task_undoes_only_its_own_writes(settings: Settings) -> None:
    """A task that moved after it was picked is refused inside its batch: its
    savepoint is rolled back, the batch's other tasks stay done."""
    await build(settings, 2_000)
    async with await Ledger.open(settings) as ledger:
        queued = {t.task_id for t in await ledger.reads.list_tasks(status="queued", limit=None)}
        seen: list[str] = []

        def act(conn: Connection, task_id: str, now: float) -> object:
            cancelled = cancel_task(conn, task_id, now=now, actor="test", reason=None)
            seen.append(task_id)
            if len(seen) % 3 == 0:  # written, then refused: must leave no trace
                raise Conflict("moved meanwhile")
            return cancelled

        action = BulkAction(
            statuses=(TaskStatus.QUEUED,), why_not=lambda s: f"{s.value}: not queued", act=act
        )
        result = await run_bulk(
            ledger.transactions,
            action,
            lambda conn: ledger.reads.filter_clauses(parse_filter("status:queued"), conn),
            everything=False,
            dry_run=False,
            now=ledger.clock,
        )
        refused = set(seen[2::3])
        assert set(seen) == queued and (result.done, result.refused) == (
            len(queued) - len(refused),
            len(refused),
        )
        for task in await ledger.reads.list_tasks(status="queued", limit=None):
            assert task.task_id in refused
        for task_id in refused:
            history = await ledger.reads.task_history(task_id)
            assert history[-1].to_status == "queued"  # no cancel line kept
            document = (await ledger.reads.get_task(task_id)).document_id
            assert (await ledger.reads.get_document(document)).status is (DocumentStatus.PROCESSING)
        await assert_counted(ledger)


async def test_tasks_created_after_the_start_are_left_alone(settings: Settings) -> None:
    await build(settings, 2_000)
    async with await Ledger.open(settings) as ledger:
        queued = await ledger.reads.list_tasks(status="queued", limit=None)
        cutoff = sorted(t.created_at for t in queued)[len(queued) // 2]

        def act(conn: Connection, task_id: str, now: float) -> object:
            return cancel_task(conn, task_id, now=now, actor="test", reason=None)

        action = BulkAction(statuses=(TaskStatus.QUEUED,), why_not=lambda s: s.value, act=act)
        result = await run_bulk(
            ledger.transactions,
            action,
            lambda conn: [],
            everything=True,
            dry_run=False,
            now=lambda: cutoff,  # the run "started" when the older half was there
        )
        older = [t for t in queued if t.created_at <= cutoff]
        assert result.done == len(older) and result.done < len(queued)
        still = {t.task_id for t in await ledger.reads.list_tasks(status="queued", limit=None)}
        assert still == {t.task_id for t in queued if t.created_at > cutoff}


def _plans(engine: Any, statements: list[tuple[str, Any]]) -> list[str]:
    with engine.connect() as conn:
        return [
            "\n".join(str(r[-1]) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + s, p))
            for s, p in statements
        ]


async def test_a_dry_run_of_every_task_reads_no_task_but_the_failed(tmp_path: Any) -> None:
    """At a million tasks, listing every one to count them took 20.5 s and 840 MB: the
    counts by status come from the counters, and only the failed tasks are read (for
    their documents' status), from the status index."""
    from core import sqlite_url

    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "o")
    await build(settings, 5_000)
    async with await Ledger.open(settings) as ledger:
        engine = ledger.transactions.engine  # type: ignore[attr-defined]  # SQLite's
        sent: list[tuple[str, Any]] = []

        def keep(_c: Any, _cur: Any, statement: str, params: Any, *_: Any) -> None:
            if statement.lstrip().upper().startswith("SELECT"):
                sent.append((statement, params))

        event.listen(engine, "before_cursor_execute", keep)
        try:
            for bulk in (ledger.operator.bulk_cancel, ledger.operator.bulk_retry):
                assert (await bulk(EVERY_TASK, dry_run=True)).matched == 5_000
        finally:
            event.remove(engine, "before_cursor_execute", keep)
        plans = _plans(engine, sent)
        reading_tasks = [p for p in plans if "ingestion_tasks" in p]
        assert len(reading_tasks) == 1, plans  # retry's failed tasks, by document
        assert (
            "SEARCH ingestion_tasks USING INDEX ix_tasks_status_created (status=?)"
            in (reading_tasks[0])
        ), reading_tasks


def test_a_long_bulk_retry_says_how_far_it_got(
    settings: Settings, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line every PROGRESS_EVERY_S (here every batch), then the summary; --json
    keeps stdout one value."""
    asyncio.run(build(settings, TASKS))
    monkeypatch.setattr(progress, "PROGRESS_EVERY_S", 0.0)
    for name in [k for k in os.environ if k.startswith("INGESTDESK_")]:
        monkeypatch.delenv(name)
    common = ["--db", settings.db_url, "--store", str(settings.store_root)]
    assert main([*common, "--json", "cancel", "--filter", "status:retry_wait"]) == 0
    answer = json.loads(capsys.readouterr().out)  # one value, no progress lines
    assert answer["done"] == answer["eligible"] > 0

    assert main([*common, "retry", "--all", "--reason", "parser fixed"]) == 0
    lines = capsys.readouterr().out.splitlines()
    line = re.compile(
        r"^requeueing: (\d+) of (\d+) tasks \((\d+) %\) \(\d+ tasks/s, about \d+ (s|min) left\)$"
    )
    summary = next(i for i, text in enumerate(lines) if text.startswith("requeued "))
    said = [line.match(text) for text in lines[:summary]]
    assert len(said) >= 2 and all(said), lines
    total = int(lines[summary].split()[1])  # "requeued N of M matching tasks"
    assert total == int(said[-1].group(1)) > 0  # type: ignore[union-attr]
    for match in said:
        assert match is not None
        done, of, share = map(int, match.groups()[:3])
        assert of == total and share == 100 * done // total, match.group(0)
