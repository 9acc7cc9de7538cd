"""The ledger: the one place that owns task and document SQL.

Every state change is a conditional UPDATE whose WHERE clause *is* the transition
rule, so two writers racing on one row can never both win: the loser's statement
matches zero rows and the ledger answers ``None`` (claims, worker writes) or raises
:class:`Conflict` (operator actions). Reads return frozen dataclasses, never ORM rows.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar, cast

from sqlalchemy import (
    ColumnElement,
    Row,
    Table,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal,
    select,
    text,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from core import db
from core.config import Settings
from core.errors import BadInput, ClaimBug, Conflict, NotFound
from core.filters import COMPARISONS, TaskFilter, Term
from core.models import (
    CLAIMABLE_SQL,
    RUNNING_SQL,
    Chunk,
    Document,
    IngestionTask,
    Outbox,
    TaskEvent,
)
from core.models import WorkerRecord as WorkerRow
from core.prepared import Prepared
from core.states import (
    CANCELLABLE,
    ERRORS,
    DocumentKind,
    DocumentStatus,
    ErrorCode,
    Stage,
    TaskStatus,
)
from core.store import ObjectStore

TASKS = cast(Table, IngestionTask.__table__)
DOCUMENTS = cast(Table, Document.__table__)
EVENTS = cast(Table, TaskEvent.__table__)
CHUNKS = cast(Table, Chunk.__table__)
OUTBOX = cast(Table, Outbox.__table__)
WORKERS = cast(Table, WorkerRow.__table__)

T = TypeVar("T")

LEDGER_THREADS = 4  # threads running SQLite transactions (writers still take turns)
ERROR_DETAIL_MAX = 500  # characters
NAME_MAX = 255  # characters of a display name
SHORT_ID_MIN = 4  # characters a task/document id prefix needs to be accepted
WORKER_GONE_AFTER_S = 90.0  # seconds without a heartbeat before a worker counts as vanished

_UNSAFE_NAME = re.compile(r"[\x00-\x1f\x7f]|\.\.|[/\\]")


def new_id() -> str:
    return uuid.uuid4().hex


def display_name(name: str) -> str:
    """Neutralise a user-supplied filename into display text.

    Path separators and ``..`` become ``_`` and control characters go, so the
    name can be shown anywhere and can never be mistaken for a path.
    """
    cleaned = _UNSAFE_NAME.sub("_", name).strip().lstrip(".")
    return cleaned[:NAME_MAX] or "unnamed"


def error_detail_of(exc: BaseException) -> str:
    """What a failure may say about an exception: its type name, nothing else."""
    return type(exc).__name__[:ERROR_DETAIL_MAX]


def read_upload(path: Path, max_bytes: int) -> bytes:
    """Read a file meant for upload, turning every way it can be wrong into BadInput."""
    if not path.exists():
        raise BadInput(f"{path}: no such file")
    if path.is_dir():
        raise BadInput(f"{path}: is a directory, not a file")
    size = path.stat().st_size
    if size > max_bytes:
        raise BadInput(f"{path}: {size} bytes is over the upload limit of {max_bytes} bytes")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise BadInput(f"{path}: cannot read ({exc.strerror or type(exc).__name__})") from exc


# --------------------------------------------------------------------------- views


class _View:
    """Views are frozen dataclasses; this gives each one its JSON-ready dict."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload, no-any-return]


@dataclass(frozen=True)
class DocumentView(_View):
    document_id: str
    filename: str
    sha256: str
    object_key: str
    size: int
    kind: DocumentKind
    status: DocumentStatus
    version: int
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class TaskView(_View):
    task_id: str
    document_id: str
    status: TaskStatus
    stage: Stage
    completed: int
    total: int
    attempt: int
    error_code: ErrorCode | None
    error_detail: str | None
    document_name: str | None = None
    max_attempts: int = 0
    worker_id: str | None = None
    lease_expires_at: float | None = None
    next_attempt_at: float | None = None
    progress_at: float | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    revision: int = 0
    options: Mapping[str, Any] = field(default_factory=dict)
    stalled: bool = False

    @property
    def short_id(self) -> str:
        return self.task_id[:8]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["options"] = dict(self.options)
        return out


@dataclass(frozen=True)
class TaskEventView(_View):
    event_id: int
    task_id: str
    at: float
    actor: str
    from_status: TaskStatus | None
    to_status: TaskStatus
    stage: Stage
    attempt: int
    error_code: ErrorCode | None
    reason: str | None


@dataclass(frozen=True)
class Claim:
    """Proof that a worker holds a task. ``attempt`` is the fencing token: every
    write the worker makes is conditional on it, so a worker presumed dead cannot
    overwrite a newer attempt."""

    task_id: str
    document_id: str
    worker_id: str
    attempt: int
    max_attempts: int
    lease_expires_at: float
    options: Mapping[str, Any] = field(default_factory=dict)
    # Renewals (heartbeats, progress) extend the lease by the length it was taken for.
    lease_s: float = 30.0
    # The task's document, read with the claim when asked for (None if gone).
    document: DocumentView | None = None


@dataclass(frozen=True)
class ChunkRecord:
    ordinal: int
    text: str
    page: int | None
    char_start: int
    char_end: int
    embedding: bytes | None = None


@dataclass(frozen=True)
class ChunkView(_View):
    document_id: str
    ordinal: int
    text: str
    page: int | None
    char_start: int
    char_end: int


@dataclass(frozen=True)
class SearchHit(_View):
    document_id: str
    filename: str
    ordinal: int
    page: int | None
    text: str


@dataclass(frozen=True)
class BulkResult(_View):
    """What a bulk action found (and, unless a dry run, did)."""

    matched: int
    eligible: int
    ineligible: dict[str, int]
    dry_run: bool
    done: int = 0
    refused: int = 0


@dataclass(frozen=True)
class FailureGroup:
    error_code: ErrorCode
    stage: Stage
    count: int
    first_seen: float
    last_seen: float


@dataclass(frozen=True)
class WorkerView(_View):
    worker_id: str
    host: str
    pid: int
    started_at: float
    heartbeat_at: float
    stopped_at: float | None
    alive: bool


@dataclass(frozen=True)
class Reaped:
    task_id: str
    status: TaskStatus
    attempt: int


# ---------------------------------------------------------------------- the ledger


def _next_revision() -> Any:
    # Writers are serialised (BEGIN IMMEDIATE on SQLite, an advisory lock on
    # PostgreSQL), so MAX+1 over the revision index is gap-free and commits in order.
    return select(func.coalesce(func.max(TASKS.c.revision), 0) + 1).scalar_subquery()


_EVENT_SOURCE_COLUMNS = (
    TASKS.c.id,
    TASKS.c.status,
    TASKS.c.previous_status,
    TASKS.c.stage,
    TASKS.c.attempt,
    TASKS.c.error_code,
)

_TASK_COLUMNS = (
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
)


# Hot-path statements are built once with bind parameters: building a statement
# costs more than executing it (profiled: coercion and cache-key work was ~60% of
# a claim/complete cycle when statements were built per call).
_HELD_PARAMS = (
    (TASKS.c.id == bindparam("p_task_id"))
    & (TASKS.c.status == TaskStatus.RUNNING.value)
    & (TASKS.c.attempt == bindparam("p_attempt"))
    & (TASKS.c.worker_id == bindparam("p_worker_id"))
)
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
)
_CLAIM_SET = update(TASKS).values(
    status=TaskStatus.RUNNING.value,
    previous_status=TASKS.c.status,
    stage=Stage.DOWNLOAD.value,
    completed=0,
    total=1,
    worker_id=bindparam("p_worker_id"),
    lease_expires_at=bindparam("p_lease_until"),
    attempt=TASKS.c.attempt + 1,
    error_code=None,
    error_detail=None,
    next_attempt_at=None,
    progress_at=bindparam("p_now"),
    updated_at=bindparam("p_now"),
    revision=_next_revision(),
)
CLAIM_ONE = Prepared(
    _CLAIM_SET.where(TASKS.c.id == bindparam("p_task_id"))
    .where(text("(status = 'queued' OR (status = 'retry_wait' AND next_attempt_at <= :p_now))"))
    .returning(*_CLAIM_RETURNING)
)


def _claim_next_statement(skip_locked: bool) -> Any:
    pick = (
        select(TASKS.c.id)
        .where(text(CLAIMABLE_SQL))
        .where(TASKS.c.next_attempt_at <= bindparam("p_now"))
        .order_by(TASKS.c.next_attempt_at, TASKS.c.id)
        .limit(bindparam("p_limit"))
    )
    if skip_locked:
        pick = pick.with_for_update(skip_locked=True)
    return Prepared(
        _CLAIM_SET.where(TASKS.c.id.in_(pick.scalar_subquery())).returning(*_CLAIM_RETURNING)
    )


CLAIM_NEXT = _claim_next_statement(skip_locked=False)
CLAIM_NEXT_SKIP_LOCKED = _claim_next_statement(skip_locked=True)
HEARTBEAT = Prepared(
    update(TASKS).where(_HELD_PARAMS).values(lease_expires_at=bindparam("p_lease_until"))
)
_PROGRESS_VALUES = {
    "stage": bindparam("p_stage"),
    "completed": bindparam("p_completed"),
    "total": bindparam("p_total"),
    "progress_at": bindparam("p_now"),
    "updated_at": bindparam("p_now"),
    "lease_expires_at": bindparam("p_lease_until"),
    "revision": _next_revision(),
}
PROGRESS = Prepared(update(TASKS).where(_HELD_PARAMS).values(**_PROGRESS_VALUES))
PROGRESS_WITH_OPTIONS = Prepared(
    update(TASKS).where(_HELD_PARAMS).values(**_PROGRESS_VALUES, options=bindparam("p_options"))
)
COMPLETE = Prepared(
    update(TASKS)
    .where(_HELD_PARAMS)
    .values(
        status=TaskStatus.SUCCEEDED.value,
        previous_status=TASKS.c.status,
        stage=Stage.FINALIZING.value,
        completed=TASKS.c.total,
        lease_expires_at=None,
        progress_at=bindparam("p_now"),
        updated_at=bindparam("p_now"),
        revision=_next_revision(),
    )
    .returning(*_EVENT_SOURCE_COLUMNS)
)
FINISH = Prepared(
    update(TASKS)
    .where(_HELD_PARAMS)
    .values(
        status=TaskStatus.SUCCEEDED.value,
        previous_status=TASKS.c.status,
        stage=Stage.FINALIZING.value,
        completed=bindparam("p_total"),
        total=bindparam("p_total"),
        options=func.coalesce(bindparam("p_options"), TASKS.c.options),
        lease_expires_at=None,
        progress_at=bindparam("p_now"),
        updated_at=bindparam("p_now"),
        revision=_next_revision(),
    )
    .returning(*_EVENT_SOURCE_COLUMNS)
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
INSERT_CHUNKS = Prepared(
    insert(CHUNKS).values({c.name: bindparam(c.name) for c in CHUNKS.c if c.name != "id"})
)
INSERT_EVENTS = Prepared(
    insert(EVENTS).values({c.name: bindparam(c.name) for c in EVENTS.c if c.name != "id"})
)


def _held_params(claim: Claim) -> dict[str, Any]:
    return {"p_task_id": claim.task_id, "p_attempt": claim.attempt, "p_worker_id": claim.worker_id}


class Ledger:
    """Tasks, documents, chunks and their history on one SQLite file or PostgreSQL
    database. Safe to use from many coroutines: each call is its own transaction."""

    def __init__(
        self,
        engine: AsyncEngine,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
        ids: Callable[[], str] = new_id,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.store = ObjectStore(settings.store_root)
        self.clock = clock
        self._ids = ids
        self._postgres = engine.dialect.name == "postgresql"
        if self._postgres:
            self.sync_engine = engine.sync_engine
            self._threads: ThreadPoolExecutor | None = None
        else:
            self.sync_engine = db.sqlite_twin(engine, settings)
            self._threads = ThreadPoolExecutor(LEDGER_THREADS, thread_name_prefix="ledger")
        self._writer = engine.execution_options(**{db.WRITE_OPTION: True})
        self._sync_writer = self.sync_engine.execution_options(**{db.WRITE_OPTION: True})

    @classmethod
    async def open(
        cls,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
        ids: Callable[[], str] = new_id,
    ) -> Ledger:
        """Open (creating or upgrading) the ledger the settings point at."""
        engine = db.make_engine(settings)
        try:
            await db.prepare(engine)
        except BaseException:
            await engine.dispose()
            raise
        return cls(engine, settings, clock=clock, ids=ids)

    async def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=True)
            self.sync_engine.dispose()
        await self.engine.dispose()

    async def __aenter__(self) -> Ledger:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def backend(self) -> str:
        return self.engine.dialect.name

    # ------------------------------------------------------------ transactions

    async def _run(self, tx: Callable[[Connection], T], *, write: bool) -> T:
        """Run one transaction function: on SQLite in one hop to a ledger thread,
        on PostgreSQL through asyncpg via ``run_sync``. The SQL is the same.

        Reads are short-lived on purpose: an open read transaction pins the WAL
        and blocks checkpoints, so none is ever held across a sleep.
        """
        if self._threads is not None:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._threads, self._run_sqlite, tx, write)
        engine = self._writer if write else self.engine
        async with engine.begin() as conn:
            if write:
                await conn.execute(
                    text("SELECT pg_advisory_xact_lock(:k)"), {"k": db.PG_WRITE_LOCK_KEY}
                )
            return await conn.run_sync(tx)

    def _run_sqlite(self, tx: Callable[[Connection], T], write: bool) -> T:
        with (self._sync_writer if write else self.sync_engine).begin() as conn:
            return tx(conn)

    def _event(
        self,
        conn: Connection,
        rows: Iterable[Mapping[Any, Any]],
        actor: str,
        reason: str | None = None,
    ) -> None:
        now = self.clock()
        events = [
            {
                "task_id": r["id"],
                "at": now,
                "actor": actor,
                "from_status": r["previous_status"],
                "to_status": r["status"],
                "stage": r["stage"],
                "attempt": r["attempt"],
                "error_code": r["error_code"],
                "reason": reason,
            }
            for r in rows
        ]
        if events:
            INSERT_EVENTS.many(conn, events)

    # ---------------------------------------------------------------- documents

    async def upload(self, data: bytes, name: str) -> DocumentView:
        """Store the original and record a draft document.

        The object is written (and fsynced) before the row commits: an orphaned
        object is harmless, a row without its object is not.
        """
        kind = self.check_upload(data, name)
        # fsync can take tens of milliseconds: keep it off the event loop.
        key, digest = await asyncio.to_thread(self.store.put, data)
        now = self.clock()
        doc = {
            "id": self._ids(),
            "filename": display_name(name),
            "sha256": digest,
            "object_key": key,
            "size": len(data),
            "kind": kind.value,
            "status": DocumentStatus.DRAFT.value,
            "version": 1,
            "created_at": now,
            "updated_at": now,
        }

        def _tx(conn: Connection) -> Any:
            conn.execute(insert(DOCUMENTS), doc)
            return _document(doc)

        return await self._run(_tx, write=True)

    def check_upload(self, data: bytes, name: str) -> DocumentKind:
        """Judge an upload without writing anything: its kind, or BadInput saying why not."""
        from core.parsing import sniff_kind

        if not data:
            raise BadInput(f"{display_name(name)}: the file is empty (0 bytes)")
        if len(data) > self.settings.max_upload_bytes:
            raise BadInput(
                f"{display_name(name)}: {len(data)} bytes is over the upload limit "
                f"of {self.settings.max_upload_bytes} bytes"
            )
        kind = sniff_kind(data, name)
        if kind is None:
            raise BadInput(
                f"{display_name(name)}: unsupported file type (judged by content); "
                "ingestdesk takes PDF, Markdown and plain text"
            )
        return kind

    async def upload_path(
        self, path: str | os.PathLike[str], name: str | None = None
    ) -> DocumentView:
        """Upload a file from disk, refusing anything that is not a readable file."""
        data = await asyncio.to_thread(read_upload, Path(path), self.settings.max_upload_bytes)
        return await self.upload(data, name or Path(path).name)

    async def submit(
        self, document_id: str, *, actor: str = "system", expected_version: int | None = None
    ) -> TaskView:
        """Create a queued task for a draft document and move it to processing, in
        one transaction. Anything but a draft is a conflict."""
        now = self.clock()

        def _tx(conn: Connection) -> Any:
            nonlocal document_id
            document_id = self._resolve(conn, DOCUMENTS, document_id, "document")
            cond = (DOCUMENTS.c.id == document_id) & (
                DOCUMENTS.c.status == DocumentStatus.DRAFT.value
            )
            if expected_version is not None:
                cond &= DOCUMENTS.c.version == expected_version
            doc = (
                conn.execute(
                    update(DOCUMENTS)
                    .where(cond)
                    .values(
                        status=DocumentStatus.PROCESSING.value,
                        version=DOCUMENTS.c.version + 1,
                        updated_at=now,
                    )
                    .returning(DOCUMENTS.c.id, DOCUMENTS.c.filename)
                )
            ).first()
            if doc is None:
                current = self._document_row(conn, document_id)
                if expected_version is not None and current.version != expected_version:
                    raise Conflict(
                        f"document {document_id[:8]} changed (version {current.version}, "
                        f"expected {expected_version}); reload and try again"
                    )
                raise Conflict(
                    f"document {document_id[:8]} is {current.status}; only draft documents "
                    "can be submitted"
                )
            task = {
                "id": self._ids(),
                "document_id": document_id,
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
            row = (
                conn.execute(
                    insert(TASKS).values(revision=_next_revision()).returning(*_TASK_COLUMNS),
                    task,
                )
            ).one()
            self._event(conn, [task], actor)
            conn.execute(
                insert(OUTBOX),
                {
                    "topic": "task.submitted",
                    "payload": json.dumps({"task_id": task["id"], "document_id": document_id}),
                    "created_at": now,
                    "delivered_at": None,
                },
            )
            return _task(row, document_name=doc.filename)

        return await self._run(_tx, write=True)

    async def publish(self, document_id: str, *, actor: str = "system") -> DocumentView:
        """A human approved the chunks: review_pending → published (searchable)."""
        return await self._document_transition(
            document_id,
            DocumentStatus.REVIEW_PENDING,
            DocumentStatus.PUBLISHED,
            "only documents waiting for review can be published",
        )

    async def _document_transition(
        self, document_id: str, source: DocumentStatus, target: DocumentStatus, rule: str
    ) -> DocumentView:
        now = self.clock()

        def _tx(conn: Connection) -> Any:
            nonlocal document_id
            document_id = self._resolve(conn, DOCUMENTS, document_id, "document")
            row = (
                conn.execute(
                    update(DOCUMENTS)
                    .where((DOCUMENTS.c.id == document_id) & (DOCUMENTS.c.status == source.value))
                    .values(status=target.value, version=DOCUMENTS.c.version + 1, updated_at=now)
                    .returning(*DOCUMENTS.c)
                )
            ).first()
            if row is None:
                current = self._document_row(conn, document_id)
                raise Conflict(f"document {document_id[:8]} is {current.status}; {rule}")
            return _document(row._mapping)

        # ------------------------------------------------------------------ claims
        return await self._run(_tx, write=True)

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
        now = self.clock()
        params = {
            "p_task_id": task_id,
            "p_worker_id": worker_id,
            "p_now": now,
            "p_lease_until": now + self._lease(lease_s),
        }

        def _tx(conn: Connection) -> Any:
            rows = CLAIM_ONE.rows(conn, params)
            if len(rows) > 1:
                raise ClaimBug(f"claim of {task_id} matched {len(rows)} rows")
            self._event(conn, [r._asdict() for r in rows], worker_id)
            documents = self._documents_of(conn, rows) if with_document else {}
            if not rows:
                return None
            return _claim(rows[0], worker_id, self._lease(lease_s), documents)

        return await self._run(_tx, write=True)

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
        now = self.clock()
        statement = CLAIM_NEXT_SKIP_LOCKED if self._postgres else CLAIM_NEXT
        params = {
            "p_worker_id": worker_id,
            "p_now": now,
            "p_lease_until": now + self._lease(lease_s),
            "p_limit": limit,
        }

        def _tx(conn: Connection) -> Any:
            rows = statement.rows(conn, params)
            self._event(conn, [r._asdict() for r in rows], worker_id)
            # RETURNING order is unspecified on PostgreSQL; hand claims out oldest first.
            ordered = sorted(rows, key=lambda r: (r.created_at, r.id))
            documents = self._documents_of(conn, rows) if with_document else {}
            return [_claim(r, worker_id, self._lease(lease_s), documents) for r in ordered]

        return await self._run(_tx, write=True)

    def _documents_of(self, conn: Connection, rows: Sequence[Any]) -> dict[str, DocumentView]:
        ids = [r.document_id for r in rows]
        if not ids:
            return {}
        found = conn.execute(select(DOCUMENTS).where(DOCUMENTS.c.id.in_(ids))).all()
        return {r.id: _document(r._mapping) for r in found}

    def _lease(self, lease_s: float | None) -> float:
        return self.settings.lease_s if lease_s is None else lease_s

    # ------------------------------------------------------- worker-side writes

    async def heartbeat(self, claim: Claim, *, lease_s: float | None = None) -> bool:
        """Renew the lease. False means the worker no longer holds the task and must
        stop without writing anything else."""
        now = self.clock()
        lease = claim.lease_s if lease_s is None else lease_s

        params = _held_params(claim) | {"p_lease_until": now + lease}

        def _tx(conn: Connection) -> Any:
            return bool(HEARTBEAT.rowcount(conn, params))

        return await self._run(_tx, write=True)

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
        params = _held_params(claim) | {
            "p_stage": Stage(stage).value,
            "p_completed": completed,
            "p_total": total,
            "p_now": now,
            "p_lease_until": now + lease,
        }
        statement = PROGRESS
        if options is not None:
            params["p_options"] = json.dumps(dict(options), sort_keys=True)
            statement = PROGRESS_WITH_OPTIONS

        def _tx(conn: Connection) -> Any:
            return bool(statement.rowcount(conn, params))

        return await self._run(_tx, write=True)

    async def replace_chunks(self, claim: Claim, chunks: Sequence[ChunkRecord]) -> bool:
        """Replace the document's chunks in one transaction (delete old, insert
        new), fenced on the claim: a worker that lost its task writes nothing."""
        params = _held_params(claim) | {
            "p_stage": Stage.INDEXING.value,
            "p_completed": len(chunks),
            "p_total": len(chunks),
            "p_now": self.clock(),
            "p_lease_until": self.clock() + claim.lease_s,
        }

        def _tx(conn: Connection) -> Any:
            if not PROGRESS.rowcount(conn, params):
                return False
            self._write_chunks(conn, claim.document_id, chunks)
            return True

        return await self._run(_tx, write=True)

    async def finish(
        self,
        claim: Claim,
        chunks: Sequence[ChunkRecord],
        *,
        options: Mapping[str, Any] | None = None,
    ) -> bool:
        """Index and finalize in ONE transaction: replace the document's chunks,
        task → succeeded, document → review_pending. Fenced on the claim, so a
        cancel lands wholly before (nothing written) or after (it deletes the
        chunks). False, with nothing written, if the worker lost the task."""
        params = _held_params(claim) | {
            "p_now": self.clock(),
            "p_total": len(chunks),
            "p_options": None if options is None else json.dumps(dict(options), sort_keys=True),
        }

        def _tx(conn: Connection) -> Any:
            found = FINISH.rows(conn, params)
            if not found:
                return False
            self._write_chunks(conn, claim.document_id, chunks)
            self._move_document(
                conn, claim.document_id, DocumentStatus.PROCESSING, DocumentStatus.REVIEW_PENDING
            )
            self._event(conn, [found[0]._asdict()], claim.worker_id)
            return True

        return await self._run(_tx, write=True)

    def _write_chunks(
        self, conn: Connection, document_id: str, chunks: Sequence[ChunkRecord]
    ) -> None:
        DELETE_CHUNKS.rowcount(conn, {"p_document_id": document_id})
        if chunks:
            INSERT_CHUNKS.many(
                conn,
                [
                    {
                        "document_id": document_id,
                        "ordinal": c.ordinal,
                        "text": c.text,
                        "page": c.page,
                        "char_start": c.char_start,
                        "char_end": c.char_end,
                        "embedding": c.embedding,
                    }
                    for c in chunks
                ],
            )

    async def complete(self, claim: Claim) -> bool:
        """Finalize: task → succeeded, document → review_pending, in one transaction.
        False (and nothing written) if the worker no longer holds the task."""
        now = self.clock()

        params = _held_params(claim) | {"p_now": now}

        def _tx(conn: Connection) -> Any:
            found = COMPLETE.rows(conn, params)
            row = found[0] if found else None
            if row is None:
                return False
            self._move_document(
                conn, claim.document_id, DocumentStatus.PROCESSING, DocumentStatus.REVIEW_PENDING
            )
            self._event(conn, [row._asdict()], claim.worker_id)
            return True

        return await self._run(_tx, write=True)

    async def fail(
        self,
        claim: Claim,
        error_code: ErrorCode,
        detail: str | None = None,
        *,
        stage: Stage | None = None,
    ) -> TaskView | None:
        """Record a failure of the held attempt.

        Transient codes go to retry_wait with exponential backoff and jitter while
        attempts remain; permanent codes (and exhausted attempts) go to failed and
        take the document with them. None if the worker no longer holds the task.
        """
        error_code = ErrorCode(error_code)
        now = self.clock()
        retry = ERRORS[error_code].transient and claim.attempt < claim.max_attempts
        values: dict[str, Any] = {
            "previous_status": TASKS.c.status,
            "error_code": error_code.value,
            "error_detail": (detail or "")[:ERROR_DETAIL_MAX] or None,
            "lease_expires_at": None,
            "updated_at": now,
            "revision": _next_revision(),
        }
        if stage is not None:
            values["stage"] = Stage(stage).value  # where it failed, if progress lagged
        if retry:
            values["status"] = TaskStatus.RETRY_WAIT.value
            values["next_attempt_at"] = now + self.backoff_s(claim.attempt)
        else:
            values["status"] = TaskStatus.FAILED.value

        def _tx(conn: Connection) -> Any:
            row = (
                conn.execute(
                    update(TASKS).where(_HELD_PARAMS).values(**values).returning(*_TASK_COLUMNS),
                    _held_params(claim),
                )
            ).first()
            if row is None:
                return None
            # An attempt that did not finish leaves no chunks behind (only the old
            # replace_chunks API could have written some before failing).
            DELETE_CHUNKS.rowcount(conn, {"p_document_id": claim.document_id})
            if not retry:
                self._move_document(
                    conn, claim.document_id, DocumentStatus.PROCESSING, DocumentStatus.FAILED
                )
            mapping = dict(row._mapping)
            mapping["previous_status"] = TaskStatus.RUNNING.value
            self._event(conn, [mapping], claim.worker_id)
            return _task(row)

        return await self._run(_tx, write=True)

    async def hand_back(self, claim: Claim, *, reason: str = "handed back on shutdown") -> bool:
        """Give a held task back (worker shutting down, or a claim taken ahead and
        not started): claimable again at once. ``reason`` goes into its history."""
        now = self.clock()

        def _tx(conn: Connection) -> Any:
            row = (
                conn.execute(
                    update(TASKS)
                    .where(_HELD_PARAMS)
                    .values(
                        status=TaskStatus.RETRY_WAIT.value,
                        previous_status=TASKS.c.status,
                        # A handed-back attempt was not a failure: it does not
                        # count against the automatic retry budget.
                        max_attempts=TASKS.c.max_attempts + 1,
                        lease_expires_at=None,
                        next_attempt_at=now,
                        updated_at=now,
                        revision=_next_revision(),
                    )
                    .returning(*_EVENT_SOURCE_COLUMNS),
                    _held_params(claim),
                )
            ).first()
            if row is None:
                return False
            self._event(conn, [row._mapping], claim.worker_id, reason)
            return True

        return await self._run(_tx, write=True)

    def backoff_s(self, attempt: int) -> float:
        """Seconds to wait before the next automatic attempt: exponential, capped,
        with 'equal jitter' so a burst of failures does not retry in lockstep."""
        ceiling = min(
            self.settings.backoff_max_s,
            self.settings.backoff_base_s * 2.0 ** max(attempt - 1, 0),
        )
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    async def reap(self) -> list[Reaped]:
        """Take back tasks whose lease expired (their worker vanished): retry_wait
        while attempts remain, else failed with lease_expired."""
        now = self.clock()
        exhausted = TASKS.c.attempt >= TASKS.c.max_attempts

        def _tx(conn: Connection) -> Any:
            rows = (
                conn.execute(
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
                        revision=_next_revision(),
                    )
                    .returning(*_EVENT_SOURCE_COLUMNS, TASKS.c.document_id)
                )
            ).all()
            for r in rows:  # a vanished worker's unfinished attempt leaves no chunks
                DELETE_CHUNKS.rowcount(conn, {"p_document_id": r.document_id})
            failed_docs = [r.document_id for r in rows if r.status == TaskStatus.FAILED.value]
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
            self._event(conn, [r._mapping for r in rows], "reaper", "lease expired")
            return [Reaped(r.id, TaskStatus(r.status), r.attempt) for r in rows]

        # --------------------------------------------------------- operator actions
        return await self._run(_tx, write=True)

    async def cancel(
        self, task_id: str, *, actor: str = "system", reason: str | None = None
    ) -> TaskView:
        """Cancel a queued, running or retry_wait task; its document returns to draft
        and loses any chunks a running attempt already wrote."""
        now = self.clock()

        def _tx(conn: Connection) -> Any:
            nonlocal task_id
            task_id = self._resolve(conn, TASKS, task_id, "task")
            row = (
                conn.execute(
                    update(TASKS)
                    .where(TASKS.c.id == task_id)
                    .where(text("status IN ('queued', 'running', 'retry_wait')"))
                    .values(
                        status=TaskStatus.CANCELLED.value,
                        previous_status=TASKS.c.status,
                        lease_expires_at=None,
                        next_attempt_at=None,
                        updated_at=now,
                        revision=_next_revision(),
                    )
                    .returning(*_TASK_COLUMNS, TASKS.c.previous_status)
                )
            ).first()
            if row is None:
                current = self._task_row(conn, task_id)
                allowed = ", ".join(sorted(s.value for s in CANCELLABLE))
                raise Conflict(
                    f"task {task_id[:8]} is {current.status}; only {allowed} tasks can be cancelled"
                )
            self._move_document(
                conn, row.document_id, DocumentStatus.PROCESSING, DocumentStatus.DRAFT
            )
            # A draft never keeps a half-built index from the abandoned run.
            DELETE_CHUNKS.rowcount(conn, {"p_document_id": row.document_id})
            self._event(conn, [row._mapping], actor, reason)
            return _task(row)

        return await self._run(_tx, write=True)

    async def retry(
        self, task_id: str, *, actor: str = "system", reason: str | None = None
    ) -> TaskView:
        """Requeue a failed task (same row) when its document is failed too. The
        attempt counter is left alone; the next claim increments it."""
        now = self.clock()

        def _tx(conn: Connection) -> Any:
            nonlocal task_id
            task_id = self._resolve(conn, TASKS, task_id, "task")
            doc_failed = (
                select(DOCUMENTS.c.id)
                .where(DOCUMENTS.c.id == TASKS.c.document_id)
                .where(DOCUMENTS.c.status == DocumentStatus.FAILED.value)
                .exists()
            )
            row = (
                conn.execute(
                    update(TASKS)
                    .where(TASKS.c.id == task_id)
                    .where(TASKS.c.status == TaskStatus.FAILED.value)
                    .where(doc_failed)
                    .values(
                        status=TaskStatus.QUEUED.value,
                        # A human decided to try again: the automatic retry budget
                        # starts afresh from the attempt the task has reached.
                        max_attempts=TASKS.c.attempt + self.settings.max_attempts,
                        previous_status=TASKS.c.status,
                        stage=Stage.DOWNLOAD.value,
                        completed=0,
                        total=1,
                        error_code=None,
                        error_detail=None,
                        worker_id=None,
                        lease_expires_at=None,
                        next_attempt_at=now,
                        progress_at=None,
                        updated_at=now,
                        revision=_next_revision(),
                    )
                    .returning(*_TASK_COLUMNS, TASKS.c.previous_status)
                )
            ).first()
            if row is None:
                current = self._task_row(conn, task_id)
                raise Conflict(self._why_not_retry(conn, current))
            self._move_document(
                conn, row.document_id, DocumentStatus.FAILED, DocumentStatus.PROCESSING
            )
            self._event(conn, [row._mapping], actor, reason)
            return _task(row)

        return await self._run(_tx, write=True)

    def _why_not_retry(self, conn: Connection, task: Row[Any]) -> str:
        short = task.id[:8]
        if task.status == TaskStatus.CANCELLED.value:
            return f"task {short} was cancelled; submit the document again instead of retrying"
        if task.status != TaskStatus.FAILED.value:
            return f"task {short} is {task.status}; only failed tasks can be retried"
        doc = (
            conn.execute(select(DOCUMENTS.c.status).where(DOCUMENTS.c.id == task.document_id))
        ).first()
        if doc is None:
            return f"task {short}'s document no longer exists; upload it again"
        return f"task {short}'s document is {doc.status}, not failed; it cannot be retried"

    def _move_document(
        self,
        conn: Connection,
        document_id: str,
        source: DocumentStatus,
        target: DocumentStatus,
    ) -> None:
        moved = MOVE_DOCUMENT.rowcount(
            conn,
            {
                "p_document_id": document_id,
                "p_source": source.value,
                "p_target": target.value,
                "p_now": self.clock(),
            },
        )
        if moved != 1:
            gone = (
                conn.execute(select(DOCUMENTS.c.id).where(DOCUMENTS.c.id == document_id))
            ).first() is None
            if gone:
                # A task outlives its deleted document (document_not_found): there
                # is no document status left to pair with.
                return
            # The document left the state the task implies; refusing rolls the
            # whole transition back instead of splitting the pair.
            raise Conflict(
                f"document {document_id[:8]} is not {source}; the task change was not applied"
            )

    # ------------------------------------------------------------------ lookups

    def _resolve(self, conn: Connection, table: Any, ident: str, what: str) -> str:
        """Accept a full id or a unique prefix (as the dashboard shows them)."""
        ident = ident.strip().lower()
        if not re.fullmatch(rf"[0-9a-f]{{{SHORT_ID_MIN},32}}", ident):
            raise NotFound(
                f"no {what} {ident!r} (ids are hexadecimal, at least {SHORT_ID_MIN} characters)"
            )
        if len(ident) == 32:
            found = (conn.execute(select(table.c.id).where(table.c.id == ident))).first()
            if found is None:
                raise NotFound(f"no {what} {ident}")
            return ident
        matches = (
            conn.execute(
                select(table.c.id)
                .where(table.c.id >= ident)
                .where(table.c.id < ident + "g")
                .limit(2)
            )
        ).all()
        if not matches:
            raise NotFound(f"no {what} {ident}")
        if len(matches) > 1:
            raise BadInput(f"{what} id {ident} is ambiguous; give more characters")
        return str(matches[0].id)

    def _task_row(self, conn: Connection, task_id: str) -> Row[Any]:
        row = (conn.execute(select(TASKS).where(TASKS.c.id == task_id))).first()
        if row is None:
            raise NotFound(f"no task {task_id}")
        return row

    def _document_row(self, conn: Connection, document_id: str) -> Row[Any]:
        row = (conn.execute(select(DOCUMENTS).where(DOCUMENTS.c.id == document_id))).first()
        if row is None:
            raise NotFound(f"no document {document_id}")
        return row

    def _task_query(self) -> Any:
        return select(*_TASK_COLUMNS, DOCUMENTS.c.filename).select_from(
            TASKS.outerjoin(DOCUMENTS, DOCUMENTS.c.id == TASKS.c.document_id)
        )

    def _view(self, row: Row[Any], now: float) -> TaskView:
        stalled = (
            row.status == TaskStatus.RUNNING.value
            and row.progress_at is not None
            and now - row.progress_at > self.settings.stall_after_s
        )
        return _task(row, document_name=row.filename, stalled=stalled)

    async def get_task(self, task_id: str) -> TaskView:
        def _tx(conn: Connection) -> Any:
            nonlocal task_id
            task_id = self._resolve(conn, TASKS, task_id, "task")
            row = (conn.execute(self._task_query().where(TASKS.c.id == task_id))).one()
            return self._view(row, self.clock())

        return await self._run(_tx, write=False)

    async def list_tasks(
        self,
        *,
        status: TaskStatus | str | None = None,
        error_code: ErrorCode | str | None = None,
        document_id: str | None = None,
        filter: TaskFilter | None = None,
        limit: int | None = 1000,
        offset: int = 0,
    ) -> list[TaskView]:
        """Tasks, newest first, optionally by status / error code / document / filter."""
        query = self._task_query()
        if filter:
            query = query.where(*(_term_clause(t) for t in filter.terms))
        if status is not None:
            query = query.where(TASKS.c.status == TaskStatus(status).value)
        if error_code is not None:
            query = query.where(TASKS.c.error_code == ErrorCode(error_code).value)
        if document_id is not None:
            query = query.where(TASKS.c.document_id == document_id)
        query = query.order_by(TASKS.c.created_at.desc(), TASKS.c.id.desc()).offset(offset)
        if limit is not None:
            query = query.limit(limit)

        def _tx(conn: Connection) -> Any:
            rows = (conn.execute(query)).all()
            now = self.clock()
            return [self._view(r, now) for r in rows]

        return await self._run(_tx, write=False)

    async def count_tasks(self, filter: TaskFilter | None = None) -> int:
        """How many tasks match a filter (all of them, not just a page)."""
        query = select(func.count()).select_from(
            TASKS.outerjoin(DOCUMENTS, DOCUMENTS.c.id == TASKS.c.document_id)
        )
        if filter:
            query = query.where(*(_term_clause(t) for t in filter.terms))

        def _tx(conn: Connection) -> Any:
            return int((conn.execute(query)).scalar() or 0)

        return await self._run(_tx, write=False)

    async def bulk_cancel(
        self,
        filter: TaskFilter,
        *,
        actor: str = "system",
        reason: str | None = None,
        dry_run: bool = False,
    ) -> BulkResult:
        """Cancel every task matching the filter. The dry run counts what is eligible
        and why the rest is not; the real run re-checks each task with the same
        conditional update as a single cancel, so a task that moved meanwhile is
        refused rather than overwritten."""
        return await self._bulk(
            filter,
            lambda t: t.status in CANCELLABLE,
            lambda t: (
                f"{t.status.value}: only queued, running or retry_wait tasks can be cancelled"
            ),
            lambda task_id: self.cancel(task_id, actor=actor, reason=reason),
            dry_run,
        )

    async def bulk_retry(
        self,
        filter: TaskFilter,
        *,
        actor: str = "system",
        reason: str | None = None,
        dry_run: bool = False,
    ) -> BulkResult:
        """Requeue every failed task matching the filter (see :meth:`bulk_cancel`)."""

        def why(t: TaskView) -> str:
            if t.status is TaskStatus.CANCELLED:
                return "cancelled: submit the document again instead"
            return f"{t.status.value}: only failed tasks can be retried"

        return await self._bulk(
            filter,
            lambda t: t.status is TaskStatus.FAILED,
            why,
            lambda task_id: self.retry(task_id, actor=actor, reason=reason),
            dry_run,
        )

    async def _bulk(
        self,
        filter: TaskFilter,
        eligible: Callable[[TaskView], bool],
        why_not: Callable[[TaskView], str],
        act: Callable[[str], Awaitable[TaskView]],
        dry_run: bool,
    ) -> BulkResult:
        tasks = await self.list_tasks(filter=filter, limit=None)
        chosen = [t.task_id for t in tasks if eligible(t)]
        ineligible: dict[str, int] = {}
        for t in tasks:
            if not eligible(t):
                ineligible[why_not(t)] = ineligible.get(why_not(t), 0) + 1
        result = BulkResult(
            matched=len(tasks), eligible=len(chosen), ineligible=ineligible, dry_run=dry_run
        )
        if dry_run:
            return result
        done = refused = 0
        for task_id in chosen:
            try:
                await act(task_id)
                done += 1
            except (Conflict, NotFound):
                refused += 1
        return replace(result, done=done, refused=refused)

    async def tasks_since(self, revision: int, *, limit: int = 5000) -> list[TaskView]:
        """Tasks changed after ``revision``, oldest change first. A reader keeps the
        highest revision it has seen and asks again: cost follows the change rate,
        not the ledger's size."""
        query = (
            self._task_query()
            .where(TASKS.c.revision > revision)
            .order_by(TASKS.c.revision)
            .limit(limit)
        )

        def _tx(conn: Connection) -> Any:
            rows = (conn.execute(query)).all()
            now = self.clock()
            return [self._view(r, now) for r in rows]

        return await self._run(_tx, write=False)

    async def revision(self) -> int:
        def _tx(conn: Connection) -> Any:
            value = (conn.execute(select(func.max(TASKS.c.revision)))).scalar()
            return int(value or 0)

        return await self._run(_tx, write=False)

    async def task_history(self, task_id: str) -> list[TaskEventView]:
        def _tx(conn: Connection) -> Any:
            nonlocal task_id
            task_id = self._resolve(conn, TASKS, task_id, "task")
            rows = (
                conn.execute(
                    select(EVENTS).where(EVENTS.c.task_id == task_id).order_by(EVENTS.c.id)
                )
            ).all()
            return [
                TaskEventView(
                    event_id=r.id,
                    task_id=r.task_id,
                    at=r.at,
                    actor=r.actor,
                    from_status=TaskStatus(r.from_status) if r.from_status else None,
                    to_status=TaskStatus(r.to_status),
                    stage=Stage(r.stage),
                    attempt=r.attempt,
                    error_code=ErrorCode(r.error_code) if r.error_code else None,
                    reason=r.reason,
                )
                for r in rows
            ]

        return await self._run(_tx, write=False)

    async def counts(self) -> dict[TaskStatus, int]:
        """Number of tasks in each status (every status present, zeros included)."""

        def _tx(conn: Connection) -> Any:
            rows = (
                conn.execute(select(TASKS.c.status, func.count()).group_by(TASKS.c.status))
            ).all()
            out = dict.fromkeys(TaskStatus, 0)
            for status, n in rows:
                out[TaskStatus(status)] = n
            return out

        return await self._run(_tx, write=False)

    async def failure_groups(self) -> list[FailureGroup]:
        """Failed tasks grouped by error code then stage, largest group first."""

        def _tx(conn: Connection) -> Any:
            rows = (
                conn.execute(
                    select(
                        TASKS.c.error_code,
                        TASKS.c.stage,
                        func.count(),
                        func.min(TASKS.c.updated_at),
                        func.max(TASKS.c.updated_at),
                    )
                    .where(TASKS.c.status == TaskStatus.FAILED.value)
                    .group_by(TASKS.c.error_code, TASKS.c.stage)
                    .order_by(func.count().desc(), TASKS.c.error_code)
                )
            ).all()
            return [
                FailureGroup(
                    ErrorCode(code or ErrorCode.INTERNAL_ERROR), Stage(stage), n, first, last
                )
                for code, stage, n, first, last in rows
            ]

        return await self._run(_tx, write=False)

    async def get_document(self, document_id: str) -> DocumentView:
        def _tx(conn: Connection) -> Any:
            nonlocal document_id
            document_id = self._resolve(conn, DOCUMENTS, document_id, "document")
            row = self._document_row(conn, document_id)
            return _document(row._mapping)

        return await self._run(_tx, write=False)

    async def list_documents(
        self, *, status: DocumentStatus | str | None = None, limit: int | None = 1000
    ) -> list[DocumentView]:
        query = select(DOCUMENTS).order_by(DOCUMENTS.c.created_at.desc(), DOCUMENTS.c.id.desc())
        if status is not None:
            query = query.where(DOCUMENTS.c.status == DocumentStatus(status).value)
        if limit is not None:
            query = query.limit(limit)

        def _tx(conn: Connection) -> Any:
            rows = (conn.execute(query)).all()
            return [_document(r._mapping) for r in rows]

        return await self._run(_tx, write=False)

    async def delete_document(self, document_id: str) -> None:
        """Remove a document row and its chunks (its tasks keep their history)."""

        def _tx(conn: Connection) -> Any:
            nonlocal document_id
            document_id = self._resolve(conn, DOCUMENTS, document_id, "document")
            conn.execute(delete(DOCUMENTS).where(DOCUMENTS.c.id == document_id))

        return await self._run(_tx, write=True)

    async def chunks(self, document_id: str, *, limit: int | None = None) -> list[ChunkView]:
        def _tx(conn: Connection) -> Any:
            nonlocal document_id
            document_id = self._resolve(conn, DOCUMENTS, document_id, "document")
            query = (
                select(
                    CHUNKS.c.ordinal,
                    CHUNKS.c.text,
                    CHUNKS.c.page,
                    CHUNKS.c.char_start,
                    CHUNKS.c.char_end,
                )
                .where(CHUNKS.c.document_id == document_id)
                .order_by(CHUNKS.c.ordinal)
            )
            if limit is not None:
                query = query.limit(limit)
            rows = (conn.execute(query)).all()
            return [
                ChunkView(document_id, r.ordinal, r.text, r.page, r.char_start, r.char_end)
                for r in rows
            ]

        return await self._run(_tx, write=False)

    async def search(
        self, query: str, *, limit: int = 20, include_unpublished: bool = False
    ) -> list[SearchHit]:
        """Full-text search over chunks (FTS5 on SQLite, tsvector on PostgreSQL).

        Only published documents are searchable unless ``include_unpublished``:
        review_pending chunks exist but a human has not approved them yet.
        """
        words = re.findall(r"\w+", query)
        if not words:
            return []
        visible = DOCUMENTS.c.status == DocumentStatus.PUBLISHED.value
        columns = (
            CHUNKS.c.document_id,
            DOCUMENTS.c.filename,
            CHUNKS.c.ordinal,
            CHUNKS.c.page,
            CHUNKS.c.text,
        )
        if self._postgres:
            match = text("chunks.search @@ plainto_tsquery('simple', :q)").bindparams(
                q=" ".join(words)
            )
            stmt = (
                select(*columns)
                .select_from(CHUNKS.join(DOCUMENTS, DOCUMENTS.c.id == CHUNKS.c.document_id))
                .where(match)
            )
        else:
            # Quoted terms: user text must never be read as FTS5 query syntax.
            fts_query = " ".join('"' + w.replace('"', "") + '"' for w in words)
            stmt = (
                select(*columns)
                .select_from(
                    CHUNKS.join(DOCUMENTS, DOCUMENTS.c.id == CHUNKS.c.document_id).join(
                        text("chunks_fts"), text("chunks_fts.rowid = chunks.id")
                    )
                )
                .where(text("chunks_fts MATCH :q").bindparams(q=fts_query))
                .order_by(text("chunks_fts.rank"))
            )
        if not include_unpublished:
            stmt = stmt.where(visible)

        def _tx(conn: Connection) -> Any:
            rows = (conn.execute(stmt.limit(limit))).all()
            return [SearchHit(r.document_id, r.filename, r.ordinal, r.page, r.text) for r in rows]

        # ------------------------------------------------------------------ workers
        return await self._run(_tx, write=False)

    async def register_worker(self, worker_id: str) -> None:
        """Record a worker (id, host, pid) so others can see it alive or vanished."""
        now = self.clock()
        values = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": now,
            "heartbeat_at": now,
            "stopped_at": None,
        }

        def _tx(conn: Connection) -> Any:
            updated = conn.execute(
                update(WORKERS).where(WORKERS.c.id == worker_id).values(**values)
            )
            if not updated.rowcount:
                conn.execute(insert(WORKERS).values(id=worker_id, **values))

        return await self._run(_tx, write=True)

    async def worker_heartbeat(self, worker_id: str, *, stopped: bool = False) -> None:
        now = self.clock()
        values: dict[str, Any] = {"heartbeat_at": now}
        if stopped:
            values["stopped_at"] = now

        def _tx(conn: Connection) -> Any:
            conn.execute(update(WORKERS).where(WORKERS.c.id == worker_id).values(**values))

        return await self._run(_tx, write=True)

    async def list_workers(self) -> list[WorkerView]:
        now = self.clock()

        def _tx(conn: Connection) -> Any:
            rows = (conn.execute(select(WORKERS).order_by(WORKERS.c.id))).all()
            return [
                WorkerView(
                    worker_id=r.id,
                    host=r.host,
                    pid=r.pid,
                    started_at=r.started_at,
                    heartbeat_at=r.heartbeat_at,
                    stopped_at=r.stopped_at,
                    alive=r.stopped_at is None and now - r.heartbeat_at < WORKER_GONE_AFTER_S,
                )
                for r in rows
            ]

        return await self._run(_tx, write=False)


def _term_clause(term: Term) -> ColumnElement[bool]:
    """SQL for one filter term; NULLs are coalesced so negation means what
    :meth:`Term.matches` means."""
    name = func.lower(func.coalesce(DOCUMENTS.c.filename, ""))
    code = func.coalesce(TASKS.c.error_code, "")
    value = term.value
    clause: ColumnElement[bool]
    if term.field is None:
        v = value.lower()
        clause = (
            name.contains(v, autoescape=True)
            | TASKS.c.id.startswith(v, autoescape=True)
            | code.contains(v, autoescape=True)
        )
    elif term.field == "status":
        clause = TASKS.c.status == value
    elif term.field == "code":
        clause = code == value
    elif term.field == "stage":
        clause = TASKS.c.stage == value
    elif term.field == "attempt":
        compare: Callable[[Any, int], Any] = COMPARISONS[term.op]
        clause = compare(TASKS.c.attempt, int(value))
    elif term.field == "worker":
        clause = func.lower(func.coalesce(TASKS.c.worker_id, "")).contains(
            value.lower(), autoescape=True
        )
    elif term.field == "name":
        clause = name.contains(value.lower(), autoescape=True)
    elif term.field == "id":
        clause = TASKS.c.id.startswith(value.lower(), autoescape=True)
    else:
        clause = TASKS.c.document_id.startswith(value.lower(), autoescape=True)
    return ~clause if term.negate else clause


def _document(m: Mapping[Any, Any]) -> DocumentView:
    return DocumentView(
        document_id=m["id"],
        filename=m["filename"],
        sha256=m["sha256"],
        object_key=m["object_key"],
        size=m["size"],
        kind=DocumentKind(m["kind"]),
        status=DocumentStatus(m["status"]),
        version=m["version"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
    )


def _task(row: Any, *, document_name: str | None = None, stalled: bool = False) -> TaskView:
    m = row._mapping if hasattr(row, "_mapping") else row
    return TaskView(
        task_id=m["id"],
        document_id=m["document_id"],
        status=TaskStatus(m["status"]),
        stage=Stage(m["stage"]),
        completed=m["completed"],
        total=m["total"],
        attempt=m["attempt"],
        error_code=ErrorCode(m["error_code"]) if m["error_code"] else None,
        error_detail=m["error_detail"],
        document_name=document_name,
        max_attempts=m["max_attempts"],
        worker_id=m["worker_id"],
        lease_expires_at=m["lease_expires_at"],
        next_attempt_at=m["next_attempt_at"],
        progress_at=m["progress_at"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        revision=m["revision"],
        options=json.loads(m["options"] or "{}"),
        stalled=stalled,
    )


def _claim(
    row: Any,
    worker_id: str,
    lease_s: float,
    documents: Mapping[str, DocumentView] | None = None,
) -> Claim:
    return Claim(
        task_id=row.id,
        document_id=row.document_id,
        worker_id=worker_id,
        attempt=row.attempt,
        max_attempts=row.max_attempts,
        lease_expires_at=row.lease_expires_at,
        options=json.loads(row.options or "{}"),
        lease_s=lease_s,
        document=(documents or {}).get(row.document_id),
    )
