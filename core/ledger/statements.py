"""The hot statements of the worker's side, built once with bind parameters.

Building a statement costs more than executing it (profiled: coercion and cache-key
work was ~60% of a claim/complete cycle when statements were built per call), so the
statements a worker runs per task are built here at import and executed through
:class:`~core.ledger.prepared.Prepared`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ScalarSelect,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.engine import Connection

from core.ledger.prepared import Prepared
from core.ledger.schema import (
    CHUNK_VECTORS,
    CHUNKS,
    CLAIMABLE_SQL,
    DOCUMENTS,
    EVENTS,
    INDEXES,
    PROVIDER_REQUESTS,
    RUNNING_SQL,
    TASKS,
)
from core.ledger.views import Claim
from core.states import DocumentStatus, ErrorCode, RequestState, Stage, TaskStatus


def next_revision() -> ScalarSelect[Any]:
    """The revision a write hands out: MAX + 1 over the revision index.

    Writers are serialised (BEGIN IMMEDIATE on SQLite, an advisory lock on
    PostgreSQL), so this is gap-free and commits in order: a reader asking "what
    changed since R" never skips a revision committed late.
    """
    return select(func.coalesce(func.max(TASKS.c.revision), 0) + 1).scalar_subquery()


# What the event log needs from a transition's RETURNING.
EVENT_SOURCE_COLUMNS = (
    TASKS.c.id,
    TASKS.c.status,
    TASKS.c.previous_status,
    TASKS.c.stage,
    TASKS.c.attempt,
    TASKS.c.error_code,
)

# Every column a TaskView is built from.
TASK_COLUMNS = (
    TASKS.c.id,
    TASKS.c.document_id,
    TASKS.c.status,
    TASKS.c.stage,
    TASKS.c.completed,
    TASKS.c.total,
    TASKS.c.attempt,
    TASKS.c.error_code,
    TASKS.c.error_detail,
    TASKS.c.max_attempts,
    TASKS.c.worker_id,
    TASKS.c.lease_expires_at,
    TASKS.c.next_attempt_at,
    TASKS.c.progress_at,
    TASKS.c.created_at,
    TASKS.c.updated_at,
    TASKS.c.revision,
    TASKS.c.options,
    TASKS.c.index_id,
)

# The fence: the row is still running, at the attempt this worker claimed, by it.
HELD = (
    (TASKS.c.id == bindparam("p_task_id"))
    & (TASKS.c.status == TaskStatus.RUNNING.value)
    & (TASKS.c.attempt == bindparam("p_attempt"))
    & (TASKS.c.worker_id == bindparam("p_worker_id"))
)


def held_params(claim: Claim) -> dict[str, Any]:
    """The parameters of :data:`HELD` for ``claim``."""
    return {"p_task_id": claim.task_id, "p_attempt": claim.attempt, "p_worker_id": claim.worker_id}


_CLAIM_RETURNING = (
    TASKS.c.id,
    TASKS.c.document_id,
    TASKS.c.attempt,
    TASKS.c.max_attempts,
    TASKS.c.lease_expires_at,
    TASKS.c.options,
    TASKS.c.status,
    TASKS.c.previous_status,
    TASKS.c.stage,
    TASKS.c.error_code,
    TASKS.c.created_at,
    TASKS.c.index_id,
)
# The stage a task starts (again) in. A re-embedding task has one stage: it never
# downloads (core.ledger.campaigns).
FIRST_STAGE = case(
    (TASKS.c.index_id.is_(None), literal(Stage.DOWNLOAD.value)),
    else_=literal(Stage.EMBEDDING.value),
)
_CLAIM_SET = update(TASKS).values(
    status=TaskStatus.RUNNING.value,
    previous_status=TASKS.c.status,
    stage=FIRST_STAGE,
    completed=0,
    total=1,
    worker_id=bindparam("p_worker_id"),
    lease_expires_at=bindparam("p_lease_until"),
    attempt=TASKS.c.attempt + 1,
    # A claimed task holds no processing key until it says so (WorkQueue.hold_or_reuse):
    # a task that was only waiting for a twin keeps the key it waited on until it is
    # claimed, and must not look like the one making the result once it runs again
    # (two such waiters took each other for the holder and waited in a cycle).
    processing_key=None,
    error_code=None,
    error_detail=None,
    next_attempt_at=None,
    progress_at=bindparam("p_now"),
    updated_at=bindparam("p_now"),
    revision=next_revision(),
)
# A named task is claimable when queued, or waiting for a retry that is due.
CLAIM_ONE = Prepared(
    _CLAIM_SET.where(TASKS.c.id == bindparam("p_task_id"))
    .where(
        text(
            f"(status = '{TaskStatus.QUEUED.value}' OR "
            f"(status = '{TaskStatus.RETRY_WAIT.value}' AND next_attempt_at <= :p_now))"
        )
    )
    .returning(*_CLAIM_RETURNING)
)


def _claim_next(skip_locked: bool) -> Prepared:
    pick = (
        select(TASKS.c.id)
        .where(text(CLAIMABLE_SQL))
        .where(TASKS.c.next_attempt_at <= bindparam("p_now"))
        .order_by(TASKS.c.next_attempt_at, TASKS.c.id)
        .limit(bindparam("p_limit"))
    )
    if skip_locked:
        # PostgreSQL: concurrent claimers skip rows another claim has locked
        # instead of queueing behind it.
        pick = pick.with_for_update(skip_locked=True)
    return Prepared(
        _CLAIM_SET.where(TASKS.c.id.in_(pick.scalar_subquery())).returning(*_CLAIM_RETURNING)
    )


CLAIM_NEXT = _claim_next(skip_locked=False)
CLAIM_NEXT_SKIP_LOCKED = _claim_next(skip_locked=True)

HEARTBEAT = Prepared(update(TASKS).where(HELD).values(lease_expires_at=bindparam("p_lease_until")))
_PROGRESS_VALUES = {
    "stage": bindparam("p_stage"),
    "completed": bindparam("p_completed"),
    "total": bindparam("p_total"),
    "progress_at": bindparam("p_now"),
    "updated_at": bindparam("p_now"),
    "lease_expires_at": bindparam("p_lease_until"),
    "revision": next_revision(),
}
PROGRESS = Prepared(update(TASKS).where(HELD).values(**_PROGRESS_VALUES))
PROGRESS_WITH_OPTIONS = Prepared(
    update(TASKS).where(HELD).values(**_PROGRESS_VALUES, options=bindparam("p_options"))
)
FINISH = Prepared(
    update(TASKS)
    .where(HELD)
    .values(
        status=TaskStatus.SUCCEEDED.value,
        previous_status=TASKS.c.status,
        stage=Stage.FINALIZING.value,
        completed=bindparam("p_total"),
        total=bindparam("p_total"),
        options=func.coalesce(bindparam("p_options"), TASKS.c.options),
        processing_key=func.coalesce(bindparam("p_key"), TASKS.c.processing_key),
        lease_expires_at=None,
        progress_at=bindparam("p_now"),
        updated_at=bindparam("p_now"),
        revision=next_revision(),
    )
    .returning(*EVENT_SOURCE_COLUMNS, TASKS.c.processing_key)
)
# Tasks handed back to wait for work another task is doing are due at once when that
# work ends, either way: the task making their result (the same processing key, see
# Pipeline._reuse_or_wait) ended, so its result is there to reuse or the work is
# theirs to do; or the provider request another attempt sent was settled or its
# attempt ended (its request key, kept in processing_key while they wait, see
# WorkQueue.hand_back). Without this a burst worker (--until-idle) found nothing
# claimable and left them waiting.
# The key is a parameter, not looked up by a subquery: SQLite then finds the waiters
# through ix_tasks_processing_key (the subquery form cost a claim->finish cycle 20%).
_KEY_WAITING = (
    TASKS.c.processing_key == bindparam("p_key"),
    TASKS.c.status == TaskStatus.RETRY_WAIT.value,
    TASKS.c.id != bindparam("p_task_id"),
    TASKS.c.next_attempt_at > bindparam("p_now"),
)
WAKE_KEY_WAITERS = Prepared(
    update(TASKS)
    .where(*_KEY_WAITING)
    .values(
        next_attempt_at=bindparam("p_now"),
        updated_at=bindparam("p_now"),
        revision=next_revision(),
    )
)


# Whether WAKE_KEY_WAITERS would change a row: the same conditions, read through the
# same index. Nearly every task that ends has nobody waiting for it, and the UPDATE
# that finds nobody costs more than this read: 45 us against 25 us in a loop, 77 us
# against 54 us measured inside finishes (1 000 small documents, ledger thread).
KEY_WAITER = Prepared(select(TASKS.c.id).where(*_KEY_WAITING).limit(1))


def wake_waiters(conn: Connection, key: str | None, now: float, *, ended: str = "") -> None:
    """The one home of waking waiters: the tasks waiting for the work known by ``key``
    (a processing key, or a provider request's key), which has just ended, are due
    ``now`` (see WAKE_KEY_WAITERS). ``ended``: the task whose end it is, which may
    itself be waiting now with that key and is not woken. No key, no waiters.

    Looked for first (KEY_WAITER), in the same write transaction: its answer cannot
    change before the UPDATE, so the UPDATE runs exactly when it would change a row."""
    if key is None:
        return
    params = {"p_key": key, "p_task_id": ended, "p_now": now}
    if KEY_WAITER.rows(conn, params):
        WAKE_KEY_WAITERS.rowcount(conn, params)


def wake_waiters_of(
    conn: Connection, task_id: str, attempt: int, key: str | None, now: float
) -> None:
    """Attempt ``attempt`` of ``task_id`` ended unfinished (handed back, reaped,
    cancelled): the tasks waiting for the result it was making (processing key
    ``key``) and for the provider requests it sent that are still unknown (no longer
    in flight) are due ``now``."""
    wake_waiters(conn, key, now, ended=task_id)
    sent = conn.execute(
        select(PROVIDER_REQUESTS.c.request_key)
        .where(PROVIDER_REQUESTS.c.task_id == task_id)
        .where(PROVIDER_REQUESTS.c.attempt == attempt)
        .where(PROVIDER_REQUESTS.c.state == RequestState.UNKNOWN.value)
    ).scalars()
    for request_key in list(sent):
        wake_waiters(conn, request_key, now, ended=task_id)


# Another task, in the subqueries below that look at tasks beside the one updated.
_OTHER = TASKS.alias("other_task")
# The running task making the result of processing key p_key, other than p_task_id.
# Only a task that held the key while running counts: claiming clears the key (see
# _CLAIM_SET), so a waiter that is claimed again is not taken for a holder.
_KEY_HOLDER = (
    select(_OTHER.c.id)
    .where(_OTHER.c.processing_key == bindparam("p_key"))
    .where(_OTHER.c.status == TaskStatus.RUNNING.value)
    .where(_OTHER.c.id != bindparam("p_task_id"))
    .limit(1)
)
FIND_KEY_HOLDER = Prepared(_KEY_HOLDER)
# The newest succeeded task with processing key p_key (not p_task_id) whose document
# still holds its chunks (waiting for review or published): a result to reuse once its
# chunks verify. Found through ix_tasks_processing_key.
_REUSABLE = (
    select(_OTHER.c.id, _OTHER.c.document_id, _OTHER.c.total, _OTHER.c.options)
    .select_from(_OTHER.join(DOCUMENTS, DOCUMENTS.c.id == _OTHER.c.document_id))
    .where(_OTHER.c.processing_key == bindparam("p_key"))
    .where(_OTHER.c.status == TaskStatus.SUCCEEDED.value)
    .where(_OTHER.c.id != bindparam("p_task_id"))
    .where(
        # Not IN (...): a list becomes an expanding parameter, which Prepared's
        # compiled-once SQL cannot carry.
        or_(
            DOCUMENTS.c.status == DocumentStatus.REVIEW_PENDING.value,
            DOCUMENTS.c.status == DocumentStatus.PUBLISHED.value,
        )
    )
    .order_by(_OTHER.c.updated_at.desc())
    .limit(1)
)
REUSABLE_RESULT = Prepared(_REUSABLE)
# The held task takes processing key p_key, unless another running task holds it; its
# RETURNING says whether a result to reuse exists, so the usual answer (held, nothing
# to reuse) is one statement: every document asks, so it must be cheap. Spelled out
# in SQL: SQLAlchemy writes a RETURNING clause's columns without their table for
# SQLite, which makes the join in the subquery ambiguous.
_RUNNING, _SUCCEEDED = TaskStatus.RUNNING.value, TaskStatus.SUCCEEDED.value
_HAS_CHUNKS = f"'{DocumentStatus.REVIEW_PENDING.value}', '{DocumentStatus.PUBLISHED.value}'"
HOLD_KEY = Prepared(
    text(
        f"UPDATE {TASKS.name} SET processing_key = :p_key "
        f"WHERE id = :p_task_id AND status = '{_RUNNING}' AND attempt = :p_attempt "
        "AND worker_id = :p_worker_id AND NOT EXISTS ("
        f"SELECT 1 FROM {TASKS.name} AS other_task WHERE other_task.processing_key = :p_key "
        f"AND other_task.status = '{_RUNNING}' AND other_task.id != :p_task_id) "
        f"RETURNING (SELECT other_task.id FROM {TASKS.name} AS other_task "
        f"JOIN {DOCUMENTS.name} AS document ON document.id = other_task.document_id "
        "WHERE other_task.processing_key = :p_key "
        f"AND other_task.status = '{_SUCCEEDED}' AND other_task.id != :p_task_id "
        f"AND document.status IN ({_HAS_CHUNKS}) LIMIT 1) AS reusable"
    )
)
MOVE_DOCUMENT = Prepared(
    update(DOCUMENTS)
    .where(DOCUMENTS.c.id == bindparam("p_document_id"))
    .where(DOCUMENTS.c.status == bindparam("p_source"))
    .values(
        status=bindparam("p_target"),
        version=DOCUMENTS.c.version + 1,
        updated_at=bindparam("p_now"),
    )
)
DELETE_CHUNKS = Prepared(delete(CHUNKS).where(CHUNKS.c.document_id == bindparam("p_document_id")))
# Their vectors go by cascade; the indexes that held some learn it first, so a search
# process holding vectors in memory reloads (core.ledger.indexes). A document without
# chunks (every first finish) matches no index row.
NOTE_VECTORS_DELETED = Prepared(
    update(INDEXES)
    .where(
        INDEXES.c.id.in_(
            select(CHUNK_VECTORS.c.index_id)
            .where(
                CHUNK_VECTORS.c.chunk_id.in_(
                    select(CHUNKS.c.id).where(CHUNKS.c.document_id == bindparam("p_document_id"))
                )
            )
            .distinct()
        )
    )
    .values(deletions=INDEXES.c.deletions + 1)
)


# Whether a document has any chunk (through uq_chunks_document_id).
HAS_CHUNKS = Prepared(
    select(CHUNKS.c.id).where(CHUNKS.c.document_id == bindparam("p_document_id")).limit(1)
)


def drop_chunks(conn: Connection, document_id: str) -> int:
    """Delete a document's chunks (their vectors and search entries go with them);
    how many there were.

    A document without chunks (every first finish, and most failures) is told by one
    index seek, in the caller's write transaction, so nothing can add a chunk before
    the statements it skips: the UPDATE of the indexes and the DELETE would change
    nothing (~40 us of the ledger thread a finish, against ~10 us for the look)."""
    params = {"p_document_id": document_id}
    if not HAS_CHUNKS.rows(conn, params):
        return 0
    NOTE_VECTORS_DELETED.rowcount(conn, params)
    return DELETE_CHUNKS.rowcount(conn, params)


INSERT_CHUNKS = Prepared(
    insert(CHUNKS).values({c.name: bindparam(c.name) for c in CHUNKS.c if c.name != "id"})
)
# SQLite's search index is written here, in the transaction that writes the chunks,
# not by a trigger per row: FTS5 flushes its pending terms to disk at every statement
# savepoint, and each trigger run opens one, so a trigger made one index segment per
# chunk (measured: 83 us a chunk through the trigger, 39 us with this one statement a
# document; three quarters of the finish transaction on light PDF pages). Deleting
# chunks still goes through chunks_fts_delete, which keeps the index exact. It reads
# what the index's content view (chunks_fts_content, 0018) shows for the row.
INDEX_CHUNKS = Prepared(
    text(
        "INSERT INTO chunks_fts(rowid, text) "
        "SELECT id, coalesce(search_text, text) FROM chunks WHERE document_id = :p_document_id"
    )
)
INSERT_EVENTS = Prepared(
    insert(EVENTS).values({c.name: bindparam(c.name) for c in EVENTS.c if c.name != "id"})
)


def reap_statement(now: float) -> Any:
    """Tasks whose lease ended before ``now`` (their worker vanished): retry_wait while
    attempts remain, else failed with lease_expired (see WorkQueue.reap)."""
    exhausted = TASKS.c.attempt >= TASKS.c.max_attempts
    return (
        update(TASKS)
        .where(text(RUNNING_SQL))
        .where(TASKS.c.lease_expires_at < now)
        .values(
            status=case(
                (exhausted, literal(TaskStatus.FAILED.value)),
                else_=literal(TaskStatus.RETRY_WAIT.value),
            ),
            previous_status=TASKS.c.status,
            error_code=ErrorCode.LEASE_EXPIRED.value,
            error_detail="lease expired",
            next_attempt_at=case((exhausted, None), else_=literal(now)),
            lease_expires_at=None,
            updated_at=now,
            revision=next_revision(),
        )
        .returning(
            *EVENT_SOURCE_COLUMNS,
            TASKS.c.document_id,
            TASKS.c.processing_key,
            TASKS.c.index_id,
        )
    )
