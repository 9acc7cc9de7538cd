"""The worker's side of the ledger: claim, heartbeat, progress, finish, fail, hand
back, and reaping the tasks of workers that vanished.

Every write after a claim is fenced on it (:data:`~core.ledger.statements.HELD`):
the row must still be running, at the attempt this worker claimed, by this worker. A
worker that lost its task (cancelled, reaped) learns it from a write answering
False or None, with nothing written.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, update
from sqlalchemy.engine import Connection

from core.config import Settings
from core.errors import ERROR_DETAIL_MAX, BadInput, ClaimBug
from core.ledger import campaigns, rows
from core.ledger.chunk_writes import replace_chunks
from core.ledger.indexes import IndexKey, ensure_index
from core.ledger.pages import PageLike, drop_pages, replace_pages
from core.ledger.provider_requests import (
    request_goes_on,
    request_in_flight,
    waiting_reason,
)
from core.ledger.schema import DOCUMENTS, TASKS
from core.ledger.statements import (
    CLAIM_NEXT,
    CLAIM_NEXT_SKIP_LOCKED,
    CLAIM_ONE,
    EVENT_SOURCE_COLUMNS,
    FIND_KEY_HOLDER,
    FINISH,
    HEARTBEAT,
    HELD,
    HOLD_KEY,
    PROGRESS,
    PROGRESS_WITH_OPTIONS,
    REUSABLE_RESULT,
    TASK_COLUMNS,
    drop_chunks,
    held_params,
    next_revision,
    reap_statement,
    wake_waiters,
    wake_waiters_of,
)
from core.ledger.transactions import Transactions
from core.ledger.views import ChunkRecord, Claim, DocumentView, Reaped, ReusableResult, TaskView
from core.safe_text import check_identifier
from core.states import ERRORS, DocumentStatus, ErrorCode, Stage, TaskStatus

REAPER_ACTOR = "reaper"


def _new_task_id() -> str:
    return uuid.uuid4().hex


LOST = "lost"  # hold_key's answer when the worker no longer holds its task

# The stage an attempt reached and its progress in it: (stage, completed, total).
StageProgress = tuple[Stage, int, int]


@dataclass(frozen=True)
class KeyAnswer:
    """What :meth:`WorkQueue.hold_or_reuse` found for a processing key."""

    # None: this task now holds the key (it makes the result); a task id: another
    # running task is making it; LOST: this worker no longer holds its task.
    holder: str | None
    # The newest succeeded result with the key, to reuse once its chunks verify.
    reusable: ReusableResult | None


def _options_json(options: Mapping[str, Any] | None) -> str | None:
    return None if options is None else json.dumps(dict(options), sort_keys=True)


def _reached(progress: StageProgress | None, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The columns an attempt's end writes of what it reached: progress is coalesced
    (see core.ingest.progress.Progress), so the row may lag behind the attempt, and
    a failure or hand-back must not keep an earlier stage's numbers (a failure in
    embedding 0/9 showed ``embedding 0/1``, the claim's download total)."""
    values: dict[str, Any] = {}
    if progress is not None:
        stage, completed, total = progress
        values |= {"stage": Stage(stage).value, "completed": completed, "total": total}
    if options is not None:
        # Coalesced progress may never have written them (a quick failure): the
        # processing key is shown for failed and waiting tasks too.
        values["options"] = _options_json(options)
    return values


class WorkQueue:
    """Claims and the fenced writes of the worker holding a claim."""

    def __init__(
        self, transactions: Transactions, settings: Settings, clock: Callable[[], float]
    ) -> None:
        self._tx = transactions
        self.settings = settings
        self.clock = clock
        self._claim_next = (
            CLAIM_NEXT_SKIP_LOCKED if transactions.backend == "postgresql" else CLAIM_NEXT
        )

    def _lease(self, lease_s: float | None) -> float:
        return self.settings.lease_s if lease_s is None else lease_s

    # ------------------------------------------------------------------ claims

    async def claim(
        self,
        task_id: str,
        worker_id: str,
        *,
        lease_s: float | None = None,
        with_document: bool = False,
    ) -> Claim | None:
        """Claim one task if it is claimable. None means another worker got it
        first (or it is not claimable): that is an answer, not an error.

        ``with_document`` reads the task's document in the same transaction, saving
        a worker a round trip before it can start.
        """
        check_identifier(worker_id, "worker id")
        now = self.clock()
        lease = self._lease(lease_s)
        params = {
            "p_task_id": task_id,
            "p_worker_id": worker_id,
            "p_now": now,
            "p_lease_until": now + lease,
        }

        def tx(conn: Connection) -> Claim | None:
            found = CLAIM_ONE.rows(conn, params)
            if len(found) > 1:
                raise ClaimBug(f"claim of {task_id} matched {len(found)} rows")
            if not found:
                return None
            rows.record_events(conn, [found[0]._asdict()], actor=worker_id, at=now)
            documents = self._documents(conn, found) if with_document else {}
            shared = self._shared(conn, documents) if with_document else None
            return Claim.from_row(found[0], worker_id, lease, documents, shared)

        return await self._tx.write(tx)

    async def claim_next(
        self,
        worker_id: str,
        *,
        limit: int = 1,
        lease_s: float | None = None,
        with_document: bool = False,
    ) -> list[Claim]:
        """Claim up to ``limit`` of the claimable tasks that have waited longest, in
        one statement. A worker with k free slots should ask for k at once."""
        if limit < 1:
            raise BadInput("limit must be at least 1")
        check_identifier(worker_id, "worker id")
        now = self.clock()
        lease = self._lease(lease_s)
        params = {
            "p_worker_id": worker_id,
            "p_now": now,
            "p_lease_until": now + lease,
            "p_limit": limit,
        }

        def tx(conn: Connection) -> list[Claim]:
            found = self._claim_next.rows(conn, params)
            rows.record_events(conn, [r._asdict() for r in found], actor=worker_id, at=now)
            # RETURNING order is unspecified on PostgreSQL; hand claims out oldest first.
            ordered = sorted(found, key=lambda r: (r.created_at, r.id))
            documents = self._documents(conn, found) if with_document else {}
            shared = self._shared(conn, documents) if with_document else None
            return [Claim.from_row(r, worker_id, lease, documents, shared) for r in ordered]

        return await self._tx.write(tx)

    @staticmethod
    def _documents(conn: Connection, found: Sequence[Any]) -> dict[str, DocumentView]:
        return rows.documents_by_id(conn, (r.document_id for r in found))

    @staticmethod
    def _shared(conn: Connection, documents: Mapping[str, DocumentView]) -> set[str]:
        return rows.shared_contents(conn, (d.sha256 for d in documents.values()))

    # -------------------------------------------------------- fenced writes

    async def heartbeat(self, claim: Claim, *, lease_s: float | None = None) -> bool:
        """Renew the lease. False means the worker no longer holds the task and must
        stop without writing anything else."""
        lease = claim.lease_s if lease_s is None else lease_s
        params = held_params(claim) | {"p_lease_until": self.clock() + lease}

        def tx(conn: Connection) -> bool:
            return bool(HEARTBEAT.rowcount(conn, params))

        return await self._tx.write(tx)

    async def report_progress(
        self,
        claim: Claim,
        stage: Stage,
        completed: int,
        total: int,
        *,
        lease_s: float | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> bool:
        """Record stage progress (and renew the lease with it). Only the holder of a
        running task is heard; for anyone else this is a no-op returning False."""
        now = self.clock()
        lease = claim.lease_s if lease_s is None else lease_s
        params = held_params(claim) | {
            "p_stage": Stage(stage).value,
            "p_completed": completed,
            "p_total": total,
            "p_now": now,
            "p_lease_until": now + lease,
        }
        statement = PROGRESS
        if options is not None:
            params["p_options"] = _options_json(options)
            statement = PROGRESS_WITH_OPTIONS

        def tx(conn: Connection) -> bool:
            return bool(statement.rowcount(conn, params))

        return await self._tx.write(tx)

    async def finish(
        self,
        claim: Claim,
        chunks: Sequence[ChunkRecord],
        *,
        readings: Sequence[PageLike] = (),
        options: Mapping[str, Any] | None = None,
        index: IndexKey | None = None,
    ) -> bool:
        """Index and finalize in ONE transaction: replace the document's chunks (their
        vectors into the index of ``index``, made if the ledger has none: required when
        a chunk has a vector) and its page record (``readings``: how each page was read, see
        :mod:`core.ledger.pages`), task → succeeded, document → review_pending.
        Fenced on the claim, so a cancel lands wholly before (nothing written) or
        after (it deletes the chunks and pages). False, with nothing written, if the
        worker lost the task."""
        if claim.index_id is not None:
            raise ValueError("a re-embedding task finishes with finish_reembedding()")
        now = self.clock()
        params = held_params(claim) | {
            "p_now": now,
            "p_total": len(chunks),
            "p_options": _options_json(options),
            "p_key": None if options is None else options.get("processing_key"),
        }

        def tx(conn: Connection) -> bool:
            found = FINISH.rows(conn, params)
            if not found:
                return False
            wake_waiters(conn, found[0].processing_key, now, ended=claim.task_id)
            index_id = None if index is None else ensure_index(conn, index, now)
            replace_chunks(conn, claim.document_id, chunks, index_id)
            if chunks:  # the other indexes kept current get their re-embedding tasks
                campaigns.keep_current(
                    conn,
                    claim.document_id,
                    index_id,
                    now=now,
                    max_attempts=self.settings.max_attempts,
                    new_id=_new_task_id,
                    actor=claim.worker_id,
                )
            replace_pages(conn, claim.document_id, readings)
            rows.move_document(
                conn,
                claim.document_id,
                DocumentStatus.PROCESSING,
                DocumentStatus.REVIEW_PENDING,
                at=now,
            )
            rows.record_events(conn, [found[0]._asdict()], actor=claim.worker_id, at=now)
            return True

        return await self._tx.write(tx)

    async def finish_reembedding(self, claim: Claim, vectors: Mapping[int, bytes]) -> str:
        """A re-embedding task's end: its version's vectors (by chunk ordinal) into the
        task's index and the task succeeded, in ONE fenced transaction; the version's
        status, chunks and other vectors untouched. The index is ready once nothing
        of its campaign is left.

        Answers "succeeded", "lost" (the worker no longer holds the task: nothing
        written) or "changed" (the version's chunks are not those the vectors were
        made from, or the version is gone: nothing written; the caller reads again)."""
        if claim.index_id is None:
            raise ValueError("an ingestion task finishes with finish()")
        index_id = claim.index_id
        now = self.clock()
        params = held_params(claim) | {
            "p_now": now,
            "p_total": len(vectors),
            "p_options": None,
            "p_key": None,
        }

        def tx(conn: Connection) -> str:
            return campaigns.finish_in(conn, claim, index_id, vectors, params, now)

        try:
            return await self._tx.write(tx)
        except campaigns.ChunksChanged:
            return "changed"

    async def fail(
        self,
        claim: Claim,
        error_code: ErrorCode,
        detail: str | None = None,
        *,
        progress: StageProgress | None = None,
        waits_for_request: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> TaskView | None:
        """Record a failure of the held attempt, with the stage and progress it
        reached (``progress``) and its ``options``, in the same fenced write.

        Transient codes go to retry_wait with exponential backoff and jitter while
        attempts remain; permanent codes (and exhausted attempts) go to failed and
        take the document with them. None if the worker no longer holds the task.

        ``waits_for_request``: the provider request the attempt failed on; its
        history line names it, which links the task to the request (see
        :mod:`core.ledger.provider_requests`). An outcome_unknown on a request that
        was settled meanwhile (a reconcile recovered it while this attempt looked it
        up) is not the task's failure: it goes back to retry_wait, not counted. The
        attempt's end makes due the tasks waiting for that request (see hand_back).
        """
        error_code = ErrorCode(error_code)
        now = self.clock()
        transient = ERRORS[error_code].transient
        values: dict[str, Any] = {
            "previous_status": TASKS.c.status,
            "error_code": error_code.value,
            "error_detail": (detail or "")[:ERROR_DETAIL_MAX] or None,
            "lease_expires_at": None,
            "updated_at": now,
            "revision": next_revision(),
        } | _reached(progress, options)
        reason = None if waits_for_request is None else waiting_reason(waits_for_request)

        def tx(conn: Connection) -> TaskView | None:
            retry = transient and claim.attempt < claim.max_attempts
            change = dict(values)
            if (
                waits_for_request is not None
                and error_code is ErrorCode.OUTCOME_UNKNOWN
                and request_goes_on(conn, waits_for_request)
            ):
                retry = True
                change["max_attempts"] = TASKS.c.max_attempts + 1
            if retry:
                change["status"] = TaskStatus.RETRY_WAIT.value
                change["next_attempt_at"] = now + self.backoff_s(claim.attempt)
            else:
                change["status"] = TaskStatus.FAILED.value
            statement = (
                update(TASKS)
                .where(HELD)
                .values(**change)
                .returning(*TASK_COLUMNS, TASKS.c.processing_key)
            )
            row = conn.execute(statement, held_params(claim)).first()
            if row is None:
                return None
            wake_waiters(conn, row.processing_key, now, ended=claim.task_id)
            if waits_for_request is not None:
                wake_waiters(conn, waits_for_request, now, ended=claim.task_id)
            # An unfinished attempt leaves no chunks (ledgers written before finish()
            # wrote chunks in a separate transaction could hold some). A re-embedding
            # task wrote nothing, and its version is not its to change.
            if claim.index_id is None:
                drop_chunks(conn, claim.document_id)
                drop_pages(conn, [claim.document_id])
            if not retry and claim.index_id is None:
                rows.move_document(
                    conn,
                    claim.document_id,
                    DocumentStatus.PROCESSING,
                    DocumentStatus.FAILED,
                    at=now,
                )
            event = dict(row._mapping) | {"previous_status": TaskStatus.RUNNING.value}
            rows.record_events(conn, [event], actor=claim.worker_id, at=now, reason=reason)
            return TaskView.from_row(row, document_name=rows.document_name(conn, row.document_id))

        return await self._tx.write(tx)

    async def hold_key(self, claim: Claim, key: str) -> str | None:
        """Record the held task's processing key, unless another running task holds
        the same key: then that task's id (this worker should wait, not start a second
        execution of the same work). Raises nothing; a worker that lost its task gets
        ``LOST``.

        One conditional UPDATE: writers are serialised, so two workers holding tasks
        with the same key cannot both see the other as absent.
        """
        params = held_params(claim) | {"p_key": key}
        return await self._tx.write(lambda conn: _hold(conn, params))

    async def hold_or_reuse(self, claim: Claim, key: str) -> KeyAnswer:
        """:meth:`hold_key` and the newest succeeded result with the same key, in one
        write transaction (one round trip: cheap enough to ask for every document).

        A result found is to be reused whoever holds the key (it is only verified
        outside, against its checksum); a task waiting for a twin never holds it.
        """
        params = held_params(claim) | {"p_key": key}

        def tx(conn: Connection) -> KeyAnswer:
            held = HOLD_KEY.rows(conn, params)
            if held:
                if held[0].reusable is None:
                    return KeyAnswer(None, None)  # the usual answer, in one statement
                holder = None
            else:
                holder = _holder(conn, params)
            found = REUSABLE_RESULT.rows(conn, params)
            if not found:
                return KeyAnswer(holder, None)
            r = found[0]
            result_sha256 = json.loads(r.options or "{}").get("result_sha256")
            return KeyAnswer(holder, ReusableResult(r.id, r.document_id, r.total, result_sha256))

        return await self._tx.write(tx)

    async def hand_back(
        self,
        claim: Claim,
        *,
        reason: str = "handed back on shutdown",
        delay_s: float = 0.0,
        waits_for_key: str | None = None,
        waits_for_request: str | None = None,
        progress: StageProgress | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> bool:
        """Give a held task back (worker shutting down, a claim taken ahead and not
        started, or work another task is already doing): claimable again after
        ``delay_s``. ``reason`` goes into its history, ``progress`` and ``options``
        (what the attempt reached) onto its row.

        A task waiting for work another task is doing names it: ``waits_for_key``,
        the processing key of the running task making its result, or
        ``waits_for_request``, a provider request another running attempt sent. It is
        kept in the row's processing_key while the task waits, so the end of that
        work makes it due at once (see WAKE_KEY_WAITERS); if the work ended between
        this task's look-up and now (and its end woke nobody), it is due at once.

        A task handed back without waiting for anything ends its part: the tasks
        waiting for the result it was making, or for a request it sent, are due now.
        """
        if waits_for_key is not None and waits_for_request is not None:
            raise BadInput("a task waits for one thing at a time")
        waits_for = waits_for_key or waits_for_request
        now = self.clock()
        values: dict[str, Any] = {
            "status": TaskStatus.RETRY_WAIT.value,
            "previous_status": TASKS.c.status,
            # A handed-back attempt was not a failure: it does not count against the
            # automatic retry budget.
            "max_attempts": TASKS.c.max_attempts + 1,
            "lease_expires_at": None,
            "next_attempt_at": now + delay_s,
            "updated_at": now,
            "revision": next_revision(),
        } | _reached(progress, options)
        if waits_for is not None:
            values["processing_key"] = waits_for

        def ended(conn: Connection) -> bool:
            """Whether the work this task would wait for has ended already."""
            if waits_for_request is not None:
                return not request_in_flight(conn, waits_for_request, now)
            holders = FIND_KEY_HOLDER.rows(conn, {"p_key": waits_for, "p_task_id": claim.task_id})
            return not holders

        def tx(conn: Connection) -> bool:
            change = values
            if waits_for is not None and ended(conn):
                change = values | {"next_attempt_at": now}  # due at once, to go on
            statement = update(TASKS).where(HELD).values(**change)
            row = conn.execute(
                statement.returning(*EVENT_SOURCE_COLUMNS, TASKS.c.processing_key),
                held_params(claim),
            ).first()
            if row is None:
                return False
            if waits_for is None:
                wake_waiters_of(conn, claim.task_id, claim.attempt, row.processing_key, now)
            rows.record_events(conn, [row._mapping], actor=claim.worker_id, at=now, reason=reason)
            return True

        return await self._tx.write(tx)

    def backoff_s(self, attempt: int) -> float:
        """Seconds to wait before the next automatic attempt: exponential, capped,
        with 'equal jitter' so a burst of failures does not retry in lockstep."""
        ceiling = min(
            self.settings.backoff_max_s,
            self.settings.backoff_base_s * 2.0 ** max(attempt - 1, 0),
        )
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    # ------------------------------------------------------------------ reaping

    async def reap(self) -> list[Reaped]:
        """Take back tasks whose lease expired (their worker vanished): retry_wait
        while attempts remain, else failed with lease_expired."""
        now = self.clock()
        statement = reap_statement(now)

        def tx(conn: Connection) -> list[Reaped]:
            found: Sequence[Row[Any]] = conn.execute(statement).all()
            for r in found:  # a vanished worker's unfinished attempt leaves no chunks
                if r.index_id is None:  # (a re-embedding attempt wrote none)
                    drop_chunks(conn, r.document_id)
                    drop_pages(conn, [r.document_id])
                wake_waiters_of(conn, r.id, r.attempt, r.processing_key, now)
            failed_docs = [
                r.document_id
                for r in found
                if r.status == TaskStatus.FAILED.value and r.index_id is None
            ]
            if failed_docs:
                conn.execute(
                    update(DOCUMENTS)
                    .where(DOCUMENTS.c.id.in_(failed_docs))
                    .where(DOCUMENTS.c.status == DocumentStatus.PROCESSING.value)
                    .values(
                        status=DocumentStatus.FAILED.value,
                        version=DOCUMENTS.c.version + 1,
                        updated_at=now,
                    )
                )
            rows.record_events(
                conn,
                [r._mapping for r in found],
                actor=REAPER_ACTOR,
                at=now,
                reason="lease expired",
            )
            return [Reaped(r.id, TaskStatus(r.status), r.attempt) for r in found]

        return await self._tx.write(tx)


def _hold(conn: Connection, params: Mapping[str, Any]) -> str | None:
    """See WorkQueue.hold_key."""
    return None if HOLD_KEY.rows(conn, params) else _holder(conn, params)


def _holder(conn: Connection, params: Mapping[str, Any]) -> str:
    """The task holding the key this task could not hold, or LOST if none does (then
    this worker no longer holds its task)."""
    holder = FIND_KEY_HOLDER.rows(conn, params)
    return str(holder[0].id) if holder else LOST
