"""The operator's side of the ledger: upload, submit, cancel, retry and bulk actions
(versions, publishing and deleting: :mod:`core.ledger.versions`).

Each action is one conditional UPDATE whose WHERE clause is the transition rule; when
it matches nothing, the action re-reads the row and raises :class:`Conflict` saying
which rule refused it. A read-only process simply has no :class:`Operator`.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from sqlalchemy import bindparam, insert, text, update
from sqlalchemy.engine import Connection

from core.config import Settings
from core.errors import BadInput, Conflict
from core.filters import TaskFilter
from core.intake import check_upload, display_name, read_upload
from core.ledger import idempotency, rows, version_reads
from core.ledger.bulk import BulkAction, run_bulk
from core.ledger.idempotency import Once
from core.ledger.pages import drop_pages
from core.ledger.reads import Reads
from core.ledger.requeue import requeue_failed, retryable
from core.ledger.schema import CANCELLABLE_SQL, DOCUMENT_EVENTS, DOCUMENTS, OUTBOX, TASKS
from core.ledger.statements import TASK_COLUMNS, drop_chunks, next_revision, wake_waiters_of
from core.ledger.transactions import Transactions
from core.ledger.views import BulkResult, DocumentView, TaskView
from core.safe_text import check_identifier, neutralise
from core.states import CANCELLABLE, DocumentKind, DocumentStatus, Stage, TaskStatus
from core.store import Original, Store, StoredObject

REASON_MAX = 500  # characters of a reason kept in the history
# Originals of one batch stored at once: a bucket's round trips (and a folder's
# fsyncs) overlap, where one at a time left the link idle while each file was hashed
# and each reply awaited.
STORE_IN_FLIGHT = 4


def _one_of(names: list[str]) -> str:
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]


# "only queued, running or retry_wait": the refusal is worded from the rule itself.
CANCEL_RULE = "only " + _one_of([s.value for s in TaskStatus if s in CANCELLABLE])
CANCELLABLE_IN_ORDER = tuple(s for s in TaskStatus if s in CANCELLABLE)


class Operator:
    """Actions a person (CLI, dashboard, HTTP) takes; each is in the task history."""

    def __init__(
        self,
        transactions: Transactions,
        settings: Settings,
        store: Store,
        reads: Reads,
        clock: Callable[[], float],
        ids: Callable[[], str],
    ) -> None:
        self._tx = transactions
        self.settings = settings
        self.store = store
        self.reads = reads
        self.clock = clock
        self._ids = ids

    # ---------------------------------------------------------------- uploads

    async def upload(self, data: bytes, name: str, *, actor: str = "system") -> DocumentView:
        """Store the original and record a draft document (``actor`` in its history).

        The object is written (and fsynced) before the row commits: an orphaned
        object is harmless, a row without its object is not.
        """
        [(document, _)] = await self.add_many([(data, name)], submit=False, actor=actor)
        return document

    async def upload_path(
        self, path: str | os.PathLike[str], name: str | None = None, *, actor: str = "system"
    ) -> DocumentView:
        """Upload a file from disk, refusing anything that is not a readable file."""
        data = await asyncio.to_thread(read_upload, Path(path), self.settings.max_upload_bytes)
        return await self.upload(data, name or Path(path).name, actor=actor)

    async def add_many(
        self,
        files: Sequence[tuple[Original, str]],
        *,
        submit: bool,
        actor: str = "system",
    ) -> list[tuple[DocumentView, TaskView | None]]:
        """Upload a batch as draft documents (and, with ``submit``, queue a task for
        each), all or nothing.

        Every file is judged before anything is written; one bad file refuses the
        batch with one line naming each problem. The originals are stored first,
        then every row commits in ONE transaction: a batch interrupted at any point
        (Ctrl-C, a crash, a full disk) leaves no document behind, only unreferenced
        objects, which are harmless and shared by the next upload of the same bytes.
        """
        check_identifier(actor, "actor")
        documents = await self.stored_drafts(files)
        task_ids = [self._ids() for _ in documents] if submit else []
        now = self.clock()

        def tx(conn: Connection) -> list[tuple[DocumentView, TaskView | None]]:
            return self._insert_documents(conn, documents, task_ids, now, actor)

        return await self._tx.write(tx)

    async def add_once(
        self,
        data: Original,
        name: str,
        *,
        key: str,
        submit: bool,
        actor: str = "system",
    ) -> Once[tuple[DocumentView, TaskView | None]]:
        """:meth:`add_many` of one file under a client's idempotency key: the first
        request with ``key`` adds the document; a repeat with the same content gets
        the original answer back (``replayed``) and adds nothing; the same key with
        other content is a conflict. The key is recorded in the same transaction as
        the document, so no second request can slip in between."""
        check_identifier(actor, "actor")
        key = idempotency.check_key(key)
        [document] = await self.stored_drafts([(data, name)])
        fingerprint = idempotency.fingerprint(
            "add" if submit else "upload", sha256=str(document["sha256"])
        )
        task_ids = [self._ids()] if submit else []
        now = self.clock()

        def tx(conn: Connection) -> Once[tuple[DocumentView, TaskView | None]]:
            earlier = idempotency.find(conn, key, fingerprint)
            if earlier is not None:
                doc = DocumentView.from_row(rows.document_row(conn, earlier.document_id))
                task = None if earlier.task_id is None else rows.task_view(conn, earlier.task_id)
                return Once((doc, task), replayed=True)
            [(doc, task)] = self._insert_documents(conn, [document], task_ids, now, actor)
            idempotency.record(
                conn, key, fingerprint, doc.document_id, task.task_id if task else None, now
            )
            return Once((doc, task), replayed=False)

        return await self._tx.write(tx)

    async def stored_drafts(self, files: Sequence[tuple[Original, str]]) -> list[dict[str, object]]:
        """Judge every file (one line naming each problem), store the originals, and
        make their draft rows (not yet written)."""
        kinds: list[DocumentKind] = []
        problems: list[str] = []
        for data, name in files:
            try:
                kinds.append(check_upload(data, name, self.settings.max_upload_bytes))
            except BadInput as exc:
                problems.append(exc.message)
        if problems:
            raise BadInput("; ".join(problems))
        stored = await self._stored_all([data for data, _ in files])
        now = self.clock()
        ids = [self._ids() for _ in files]
        return [
            rows.draft_row(doc_id, display_name(name), kind, key, digest, size, now)
            for doc_id, (_, name), kind, (key, digest, size) in zip(
                ids, files, kinds, stored, strict=True
            )
        ]

    async def _stored_all(self, originals: Sequence[Original]) -> list[tuple[str, str, int]]:
        """Store a batch's originals, STORE_IN_FLIGHT at a time, and only then raise
        the first failure: every object stored is noted for a take-back by then."""
        gate = asyncio.Semaphore(STORE_IN_FLIGHT)

        async def one(data: Original) -> tuple[str, str, int]:
            async with gate:
                return await self._stored(data)

        results = await asyncio.gather(*(one(data) for data in originals), return_exceptions=True)
        stored = []
        for result in results:
            if isinstance(result, BaseException):
                raise result
            stored.append(result)
        return stored

    async def _stored(self, data: Original) -> tuple[str, str, int]:
        """(key, sha256, size) of an original, stored now unless it came as a stream
        and is stored already."""
        if isinstance(data, StoredObject):
            return data.key, data.sha256, data.size
        # fsync can take tens of milliseconds: keep it off the event loop.
        key, digest = await asyncio.to_thread(self.store.put, data)
        return key, digest, len(data)

    def _insert_documents(
        self,
        conn: Connection,
        documents: Sequence[dict[str, object]],
        task_ids: Sequence[str],
        now: float,
        actor: str,
    ) -> list[tuple[DocumentView, TaskView | None]]:
        """Write the drafts, and submit each when ``task_ids`` names their tasks."""
        if documents:
            conn.execute(insert(DOCUMENTS), list(documents))
            conn.execute(
                insert(DOCUMENT_EVENTS),
                [
                    {
                        "family_id": doc["family_id"],
                        "document_id": doc["id"],
                        "version_no": doc["version_no"],
                        "at": now,
                        "actor": actor,
                        "action": "upload",
                        "from_status": None,
                        "to_status": DocumentStatus.DRAFT.value,
                        "reason": None,
                    }
                    for doc in documents
                ],
            )
        out: list[tuple[DocumentView, TaskView | None]] = []
        for i, doc in enumerate(documents):
            task = (
                self._submit_in(conn, str(doc["id"]), task_ids[i], now, actor, None)
                if task_ids
                else None
            )
            out.append((DocumentView.from_row(doc), task))
        return out

    # --------------------------------------------------------- document moves

    async def submit(
        self, document_id: str, *, actor: str = "system", expected_version: int | None = None
    ) -> TaskView:
        """Create a queued task for a draft document and move it to processing, in
        one transaction. Anything but a draft is a conflict."""
        check_identifier(actor, "actor")
        now = self.clock()
        task_id = self._ids()

        def tx(conn: Connection) -> TaskView:
            doc_id = version_reads.draft_to_submit(
                conn, document_id, exact=expected_version is not None
            )
            return self._submit_in(conn, doc_id, task_id, now, actor, expected_version)

        return await self._tx.write(tx)

    async def submit_once(
        self, document_id: str, *, key: str, actor: str = "system"
    ) -> Once[TaskView]:
        """:meth:`submit` under a client's idempotency key: a repeat for the same
        document gets the original task back (``replayed``), even after that task
        moved on; the same key for another document is a conflict."""
        check_identifier(actor, "actor")
        key = idempotency.check_key(key)
        now = self.clock()
        task_id = self._ids()

        def tx(conn: Connection) -> Once[TaskView]:
            # The request as the client made it (the id it named) is what a repeat
            # matches: by then the draft it reached is processing, and the
            # document's name reaches no draft.
            named = rows.resolve_id(conn, DOCUMENTS, document_id, "document")
            fingerprint = idempotency.fingerprint("submit", document_id=named)
            earlier = idempotency.find(conn, key, fingerprint)
            if earlier is not None and earlier.task_id is not None:
                task = rows.task_view(conn, earlier.task_id)
                if task is not None:
                    return Once(task, replayed=True)
            doc_id = version_reads.draft_to_submit(conn, named, exact=False)
            task = self._submit_in(conn, doc_id, task_id, now, actor, None)
            idempotency.record(conn, key, fingerprint, named, task.task_id, now)
            return Once(task, replayed=False)

        return await self._tx.write(tx)

    def _submit_in(
        self,
        conn: Connection,
        doc_id: str,
        task_id: str,
        now: float,
        actor: str,
        expected_version: int | None,
    ) -> TaskView:
        cond = (DOCUMENTS.c.id == doc_id) & (DOCUMENTS.c.status == DocumentStatus.DRAFT.value)
        if expected_version is not None:
            cond &= DOCUMENTS.c.version == expected_version
        doc = conn.execute(
            update(DOCUMENTS)
            .where(cond)
            .values(
                status=DocumentStatus.PROCESSING.value,
                version=DOCUMENTS.c.version + 1,
                updated_at=now,
            )
            .returning(DOCUMENTS.c.id, DOCUMENTS.c.filename)
        ).first()
        if doc is None:
            current = rows.document_row(conn, doc_id)
            if expected_version is not None and current.version != expected_version:
                raise Conflict(
                    f"document {doc_id[:8]} changed (version {current.version}, "
                    f"expected {expected_version}); reload and try again"
                )
            raise Conflict(
                f"document {doc_id[:8]} is {current.status}; only draft documents can be submitted"
            )
        task = {
            "id": task_id,
            "document_id": doc_id,
            "status": TaskStatus.QUEUED.value,
            "previous_status": None,
            "stage": Stage.DOWNLOAD.value,
            "completed": 0,
            "total": 1,
            "attempt": 0,
            "max_attempts": self.settings.max_attempts,
            "error_code": None,
            "error_detail": None,
            "worker_id": None,
            "lease_expires_at": None,
            "next_attempt_at": now,
            "progress_at": None,
            "options": "{}",
            "created_at": now,
            "updated_at": now,
        }
        row = conn.execute(
            insert(TASKS).values(revision=next_revision()).returning(*TASK_COLUMNS), task
        ).one()
        rows.record_events(conn, [task], actor=actor, at=now)
        conn.execute(
            insert(OUTBOX),
            {
                "topic": "task.submitted",
                "payload": json.dumps({"task_id": task_id, "document_id": doc_id}),
                "created_at": now,
                "delivered_at": None,
            },
        )
        return TaskView.from_row(row, document_name=doc.filename)

    # ------------------------------------------------------------ task moves

    async def cancel(
        self, task_id: str, *, actor: str = "system", reason: str | None = None
    ) -> TaskView:
        """Cancel a queued, running or retry_wait task; its document returns to draft
        and loses any chunks a running attempt already wrote."""
        check_identifier(actor, "actor")
        reason = history_reason(reason)
        now = self.clock()

        def tx(conn: Connection) -> TaskView:
            resolved = rows.resolve_id(conn, TASKS, task_id, "task")
            return cancel_task(conn, resolved, now=now, actor=actor, reason=reason)

        return await self._tx.write(tx)

    async def retry(
        self, task_id: str, *, actor: str = "system", reason: str | None = None
    ) -> TaskView:
        """Requeue a failed task (same row) when its document is failed too. The
        attempt counter is left alone; the next claim increments it."""
        check_identifier(actor, "actor")
        reason = history_reason(reason)
        now = self.clock()
        max_attempts = self.settings.max_attempts

        def tx(conn: Connection) -> TaskView:
            resolved = rows.resolve_id(conn, TASKS, task_id, "task")
            return requeue_failed(
                conn, resolved, now=now, max_attempts=max_attempts, actor=actor, reason=reason
            )

        return await self._tx.write(tx)

    # ------------------------------------------------------------------ bulk

    async def bulk_cancel(
        self,
        filter: TaskFilter,
        *,
        actor: str = "system",
        reason: str | None = None,
        dry_run: bool = False,
        on_batch: Callable[[BulkResult], None] | None = None,
    ) -> BulkResult:
        """Cancel every task matching the filter. The dry run counts what is eligible
        and why the rest is not; the real run re-checks each task with the same
        conditional update as a single cancel, so a task that moved meanwhile is
        refused rather than overwritten. In bounded batches (:mod:`core.ledger.bulk`);
        ``on_batch`` hears of each, with the result so far."""
        check_identifier(actor, "actor")
        reason = history_reason(reason)

        def act(conn: Connection, task_id: str, now: float) -> object:
            return cancel_task(conn, task_id, now=now, actor=actor, reason=reason)

        action = BulkAction(
            statuses=CANCELLABLE_IN_ORDER,
            why_not=lambda status: f"{status.value}: {CANCEL_RULE} tasks can be cancelled",
            act=act,
        )
        return await self._bulk(filter, action, dry_run, on_batch)

    async def bulk_retry(
        self,
        filter: TaskFilter,
        *,
        actor: str = "system",
        reason: str | None = None,
        dry_run: bool = False,
        on_batch: Callable[[BulkResult], None] | None = None,
    ) -> BulkResult:
        """Requeue every failed task matching the filter (see :meth:`bulk_cancel`)."""
        check_identifier(actor, "actor")
        reason = history_reason(reason)
        max_attempts = self.settings.max_attempts

        def act(conn: Connection, task_id: str, now: float) -> object:
            return requeue_failed(
                conn, task_id, now=now, max_attempts=max_attempts, actor=actor, reason=reason
            )

        def why_not(status: TaskStatus) -> str:
            if status is TaskStatus.CANCELLED:
                return "cancelled: submit the document again instead"
            return f"{status.value}: only failed tasks can be retried"

        # The single retry's rule (requeue_failed): the task is failed and so is its
        # document. A failed task whose document moved on (a newer version retired
        # it, or it was deleted) is not eligible, and the dry run says so rather
        # than counting it and the real run refusing it.
        def judge_failed(reembedding: bool, document: DocumentStatus | None) -> str | None:
            if document is None:
                return "failed: its document no longer exists; upload it again"
            if reembedding or document is DocumentStatus.FAILED:
                return None  # a re-embedding task only needs its version there
            return f"failed: its document is {document.value}, not failed"

        action = BulkAction(
            statuses=(TaskStatus.FAILED,),
            why_not=why_not,
            act=act,
            judge_failed=judge_failed,
            document_rule=retryable,
        )
        return await self._bulk(filter, action, dry_run, on_batch)

    async def _bulk(
        self,
        filter: TaskFilter,
        action: BulkAction,
        dry_run: bool,
        on_batch: Callable[[BulkResult], None] | None,
    ) -> BulkResult:
        if not filter.names_tasks:
            raise BadInput(
                "an empty filter would match every task; give a filter, or say "
                "explicitly that the action is for every task (--all)"
            )
        return await run_bulk(
            self._tx,
            action,
            lambda conn: self.reads.filter_clauses(filter, conn),
            everything=filter.everything and not filter.terms,
            dry_run=dry_run,
            now=self.clock,
            on_batch=on_batch,
        )


# Built once: a bulk cancel runs it for every task (see core.ledger.requeue.REQUEUE).
CANCEL = (
    update(TASKS)
    .where(TASKS.c.id == bindparam("p_task_id"))
    .where(text(CANCELLABLE_SQL))
    .values(
        status=TaskStatus.CANCELLED.value,
        previous_status=TASKS.c.status,
        lease_expires_at=None,
        next_attempt_at=None,
        updated_at=bindparam("p_now"),
        revision=next_revision(),
    )
    .returning(*TASK_COLUMNS, TASKS.c.previous_status, TASKS.c.processing_key)
)


def cancel_task(
    conn: Connection, task_id: str, *, now: float, actor: str, reason: str | None
) -> TaskView:
    """Cancel the task ``task_id`` (a full id) in the caller's transaction.

    Raises:
        Conflict: The task is not queued, running or retry_wait (the rule is named).
    """
    row = conn.execute(CANCEL, {"p_task_id": task_id, "p_now": now}).first()
    if row is None:
        current = rows.task_row(conn, task_id)
        raise Conflict(
            f"task {task_id[:8]} is {current.status}; {CANCEL_RULE} tasks can be cancelled"
        )
    if row.previous_status == TaskStatus.RUNNING.value:
        # Its twins and the tasks waiting on a request it sent go on now.
        wake_waiters_of(conn, task_id, row.attempt, row.processing_key, now)
    if row.index_id is None:
        rows.move_document(
            conn, row.document_id, DocumentStatus.PROCESSING, DocumentStatus.DRAFT, at=now
        )
        # A draft never keeps a half-built index from the abandoned run.
        drop_chunks(conn, row.document_id)
        drop_pages(conn, [row.document_id])
    # (A re-embedding task's version keeps its status, chunks and vectors: its
    # vectors in the campaign's index are written only when it succeeds.)
    rows.record_events(conn, [row._mapping], actor=actor, at=now, reason=reason)
    return TaskView.from_row(row, document_name=rows.document_name(conn, row.document_id))


def history_reason(reason: str | None) -> str | None:
    """A reason as the history keeps it: one line of visible text, at most
    REASON_MAX characters (a newline in a reason could forge a history line)."""
    if reason is None:
        return None
    return neutralise(reason).strip()[:REASON_MAX] or None
