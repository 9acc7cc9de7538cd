"""Bulk cancel and retry at any size: counted in SQL, acted on a bounded batch at a time.

``cancel``/``retry --filter EXPR`` (or ``--all``) and the dashboard's bulk screen act
on every task a filter matches. At a million tasks, listing them all as task views
first took 20.5 s and 840 MB for ``retry --all --dry-run``, and the run was one write
transaction per task with nothing said on the way (5 000 retries: 11.1 s; quiet machine). Now:

* **what matches, and why the rest is not eligible**, in one read: the filter's tasks
  counted by status (every task: the counters the task table's triggers keep,
  :mod:`core.ledger.counters`), and, when eligibility also depends on the document
  (retry), the failed ones counted by their document's status. A dry run is that alone;
* **the run**: the eligible tasks created before it started (one submitted meanwhile
  is left alone, as when the list was read first), one status at a time, picked
  :data:`PICK` at a time in created order by keyset outside the write lock, then acted
  on in write transactions that each hold the lock about
  :data:`~core.ledger.retention.BATCH_TARGET_S`, as prune's batches do, so that workers
  keep claiming. Each task goes through the single action's own conditional update in
  a savepoint: one that moved since it was picked is refused and counted, and the rest
  of its batch stands. Between batches the writers get the lock at least as long as
  the batch had it. ``on_batch`` hears how far the run got after each batch (the
  result so far): the command line's progress lines, the dashboard's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import func, select, tuple_
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from core.errors import Conflict, NotFound
from core.gc_tuning import collection_paused
from core.ledger import counters
from core.ledger.filter_sql import FILTERED, status_is
from core.ledger.retention import BATCH_MAX, BATCH_TARGET_S, PAUSE_MIN_S
from core.ledger.schema import DOCUMENTS, TASKS
from core.ledger.transactions import Transactions
from core.ledger.views import BulkResult
from core.states import DocumentStatus, TaskStatus

PICK = 500  # eligible tasks picked (outside the lock) at a time

# The filter's WHERE clauses, made in the transaction that uses them (a rare name is
# looked up first: core.ledger.name_index).
Clauses = Callable[[Connection], list[ColumnElement[bool]]]
# A failed task's (is a re-embedding task, its document's status or None when gone):
# None when it may be retried, else why not.
JudgeFailed = Callable[[bool, DocumentStatus | None], str | None]
# One task, a full id, in the caller's transaction; raises Conflict or NotFound when
# the task (or its document) no longer allows it.
Act = Callable[[Connection, str, float], object]


@dataclass(frozen=True)
class BulkAction:
    """What a bulk action may act on, why it may not, and the act itself.

    Attributes:
        statuses: The task statuses an eligible task is in.
        why_not: Why a task in another status is not eligible.
        act: The single action's transaction body for one task.
        judge_failed: For an action that also asks the document (retry): a failed
            task's eligibility by its document; ``document_rule`` is then the same
            rule in SQL, for picking.
    """

    statuses: tuple[TaskStatus, ...]
    why_not: Callable[[TaskStatus], str]
    act: Act
    judge_failed: JudgeFailed | None = None
    document_rule: Callable[[], ColumnElement[bool]] | None = None


_JOINED = TASKS.outerjoin(DOCUMENTS, DOCUMENTS.c.id == TASKS.c.document_id)


def _count(
    conn: Connection, action: BulkAction, clauses: Clauses, everything: bool
) -> tuple[int, int, dict[str, int]]:
    """(matched, eligible, {why not: how many}) for the filter now."""
    where = [] if everything else clauses(conn)
    if where:
        by_status = dict.fromkeys(TaskStatus, 0)
        query = (
            select(TASKS.c.status, func.count())
            .select_from(_JOINED)
            .where(*where)
            .group_by(TASKS.c.status)
        )
        for status, n in conn.execute(query, execution_options=FILTERED):
            by_status[TaskStatus(status)] = int(n)
    else:
        by_status = counters.status_counts(conn)
    matched = sum(by_status.values())
    eligible, ineligible = 0, dict[str, int]()
    for status, n in by_status.items():
        if not n:
            continue
        if status not in action.statuses:
            ineligible[action.why_not(status)] = ineligible.get(action.why_not(status), 0) + n
        elif action.judge_failed is None or status is not TaskStatus.FAILED:
            eligible += n
    if action.judge_failed is not None and by_status[TaskStatus.FAILED]:
        plain = TASKS.c.index_id.is_(None).label("plain")
        query = (
            select(plain, DOCUMENTS.c.status, func.count())
            .select_from(_JOINED)
            .where(*where, status_is(TaskStatus.FAILED.value))
            .group_by(plain, DOCUMENTS.c.status)
        )
        for is_plain, document, n in conn.execute(query, execution_options=FILTERED):
            why = action.judge_failed(
                not is_plain, None if document is None else DocumentStatus(document)
            )
            if why is None:
                eligible += int(n)
            else:
                ineligible[why] = ineligible.get(why, 0) + int(n)
    return matched, eligible, ineligible


def _pick(
    conn: Connection,
    action: BulkAction,
    clauses: Clauses,
    status: TaskStatus,
    started: float,
    after: tuple[float, str] | None,
) -> list[tuple[float, str]]:
    query = (
        select(TASKS.c.created_at, TASKS.c.id)
        .select_from(_JOINED)
        .where(*clauses(conn), status_is(status.value), TASKS.c.created_at <= started)
        .order_by(TASKS.c.created_at, TASKS.c.id)
        .limit(PICK)
    )
    if action.document_rule is not None:
        query = query.where(action.document_rule())
    if after is not None:
        query = query.where(tuple_(TASKS.c.created_at, TASKS.c.id) > tuple_(*after))
    return [(r.created_at, r.id) for r in conn.execute(query, execution_options=FILTERED)]


@dataclass(frozen=True)
class _Batch:
    done: int
    refused: int
    through: int  # picked tasks this batch went through
    seconds: float  # the write lock, from the first act to the last


def _batch(
    conn: Connection,
    action: BulkAction,
    task_ids: list[str],
    now: float,
    target_s: float,
    clock: Callable[[], float],
) -> _Batch:
    done = refused = through = 0
    started = clock()
    with collection_paused():  # a collection would hold the lock with it
        for task_id in task_ids:
            if through and clock() - started >= target_s:
                break
            through += 1
            try:
                with conn.begin_nested():  # a refusal undoes that task's writes alone
                    action.act(conn, task_id, now)
                done += 1
            except (Conflict, NotFound):
                refused += 1
    return _Batch(done, refused, through, clock() - started)


async def run_bulk(
    transactions: Transactions,
    action: BulkAction,
    clauses: Clauses,
    *,
    everything: bool,
    dry_run: bool,
    now: Callable[[], float],
    on_batch: Callable[[BulkResult], None] | None = None,
    batch_target_s: float = BATCH_TARGET_S,
    clock: Callable[[], float] = time.perf_counter,
) -> BulkResult:
    """Count what the filter matches and, unless ``dry_run``, act on every eligible
    task (see the module). ``now`` is the ledger's clock, read at the start (tasks
    created later are left alone) and for each batch's acts; ``clock`` times the
    batches against ``batch_target_s``."""
    started = now()
    matched, eligible, ineligible = await transactions.read(
        lambda conn: _count(conn, action, clauses, everything)
    )
    result = BulkResult(matched=matched, eligible=eligible, ineligible=ineligible, dry_run=dry_run)
    if dry_run or not eligible:
        return result
    done = refused = 0
    for status in action.statuses:
        after: tuple[float, str] | None = None
        while True:

            def pick(conn: Connection, s: TaskStatus = status, a: Any = after) -> Any:
                return _pick(conn, action, clauses, s, started, a)

            picked = await transactions.read(pick)
            ids = [task_id for _, task_id in picked]
            gone = 0
            while gone < len(ids):

                def tx(conn: Connection, rest: list[str] = ids[gone : gone + BATCH_MAX]) -> _Batch:
                    return _batch(conn, action, rest, now(), batch_target_s, clock)

                batch = await transactions.write(tx)
                gone += batch.through
                done += batch.done
                refused += batch.refused
                if on_batch is not None:
                    on_batch(replace(result, done=done, refused=refused))
                # Writers (the workers' claims) get the lock at least as long.
                await asyncio.sleep(max(PAUSE_MIN_S, batch.seconds))
            if len(picked) < PICK:
                break
            after = picked[-1]
    return replace(result, done=done, refused=refused)
