"""Requeueing a failed task: a person decided to try again (``retry``, a provider
review's resend, a campaign resumed), in the caller's transaction."""

from __future__ import annotations

from sqlalchemy import Row, and_, bindparam, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from core.errors import Conflict
from core.ledger import rows
from core.ledger.schema import DOCUMENTS, TASKS
from core.ledger.statements import FIRST_STAGE, TASK_COLUMNS, next_revision
from core.ledger.views import TaskView
from core.states import DocumentStatus, TaskStatus


def _why_not_retry(conn: Connection, task: Row[object]) -> str:
    short = task.id[:8]
    if task.status == TaskStatus.CANCELLED.value:
        return f"task {short} was cancelled; submit the document again instead of retrying"
    if task.status != TaskStatus.FAILED.value:
        return f"task {short} is {task.status}; only failed tasks can be retried"
    doc = conn.execute(select(DOCUMENTS.c.status).where(DOCUMENTS.c.id == task.document_id)).first()
    if doc is None:
        return f"task {short}'s document no longer exists; upload it again"
    return f"task {short}'s document is {doc.status}, not failed; it cannot be retried"


def retryable() -> ColumnElement[bool]:
    """The document side of the retry rule, for a failed task: its document failed
    too; a re-embedding task never moved its document, so it is retried while the
    version is there to embed (and the version stays as it is)."""
    # An alias: a query that joins the documents already (a bulk retry's pick) must
    # not have its own documents correlated into these subqueries.
    doc = DOCUMENTS.alias("retried_document")
    doc_failed = (
        select(doc.c.id)
        .where(doc.c.id == TASKS.c.document_id)
        .where(doc.c.status == DocumentStatus.FAILED.value)
        .exists()
    )
    doc_there = select(doc.c.id).where(doc.c.id == TASKS.c.document_id).exists()
    return or_(
        and_(TASKS.c.index_id.is_(None), doc_failed),
        and_(TASKS.c.index_id.is_not(None), doc_there),
    )


# Built once: a bulk retry runs it for every task, and building it (the rule's
# subqueries, the values) was half of each task's time under the write lock.
REQUEUE = (
    update(TASKS)
    .where(TASKS.c.id == bindparam("p_task_id"))
    .where(TASKS.c.status == TaskStatus.FAILED.value)
    .where(retryable())
    .values(
        status=TaskStatus.QUEUED.value,
        # A human decided to try again: the automatic retry budget starts
        # afresh from the attempt the task has reached.
        max_attempts=TASKS.c.attempt + bindparam("p_max_attempts"),
        previous_status=TASKS.c.status,
        stage=FIRST_STAGE,
        completed=0,
        total=1,
        error_code=None,
        error_detail=None,
        worker_id=None,
        lease_expires_at=None,
        next_attempt_at=bindparam("p_now"),
        progress_at=None,
        updated_at=bindparam("p_now"),
        revision=next_revision(),
    )
    .returning(*TASK_COLUMNS, TASKS.c.previous_status)
)


def requeue_failed(
    conn: Connection,
    task_id: str,
    *,
    now: float,
    max_attempts: int,
    actor: str,
    reason: str | None,
) -> TaskView:
    """Requeue a failed task (same row) whose document is failed too, in the
    caller's transaction: a person decided to try again.

    Raises:
        Conflict: The task is not failed (the rule that refused it is named).
    """
    row = conn.execute(
        REQUEUE, {"p_task_id": task_id, "p_now": now, "p_max_attempts": max_attempts}
    ).first()
    if row is None:
        raise Conflict(_why_not_retry(conn, rows.task_row(conn, task_id)))
    if row.index_id is None:
        rows.move_document(
            conn, row.document_id, DocumentStatus.FAILED, DocumentStatus.PROCESSING, at=now
        )
    rows.record_events(conn, [row._mapping], actor=actor, at=now, reason=reason)
    return TaskView.from_row(row, document_name=rows.document_name(conn, row.document_id))
