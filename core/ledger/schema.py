"""The ledger's tables and the status conditions its statements share.

Times are epoch seconds (float) so both backends compare them the same way and the
clock can be injected in tests. The schema itself is versioned by the Alembic
migrations beside this module; these classes are what the migrations must produce.
"""

from __future__ import annotations

from typing import cast

from sqlalchemy import (
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from core.states import CANCELLABLE, CLAIMABLE, TaskStatus


def status_in_sql(statuses: frozenset[TaskStatus]) -> str:
    """``status IN (...)`` as SQL text, in the enum's declaration order.

    Spelled as text, not ``.in_()``: SQLite only uses a partial index when the query
    repeats the index's WHERE term literally, and ``.in_()`` sends bound parameters.
    The order is fixed so the index and every query spell the term identically.
    """
    ordered = [s for s in TaskStatus if s in statuses]
    if len(ordered) == 1:
        return f"status = '{ordered[0].value}'"
    return "status IN (" + ", ".join(f"'{s.value}'" for s in ordered) + ")"


# The state rules of core.states as the SQL conditions the statements use.
CLAIMABLE_SQL = status_in_sql(CLAIMABLE)
RUNNING_SQL = status_in_sql(frozenset({TaskStatus.RUNNING}))
CANCELLABLE_SQL = status_in_sql(CANCELLABLE)

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Document(Base):
    __tablename__ = "documents"
    __table_args__ = (UniqueConstraint("family_id", "version_no"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    # Display text only: never joined into a path.
    filename: Mapped[str] = mapped_column(String(255))
    sha256: Mapped[str] = mapped_column(String(64))
    object_key: Mapped[str] = mapped_column(String(128))
    size: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), index=True)
    # Optimistic-locking row version: every status change bumps it.
    version: Mapped[int] = mapped_column(Integer, default=1)
    # Versions: every row is one version of a document. The document is named by
    # its first version's id (``family_id``); ``version_no`` counts 1, 2, ... A
    # version's chunks are keyed by its own row, so two versions never mix, and at
    # most one version of a family is published (search reads only published rows).
    family_id: Mapped[str] = mapped_column(String(32), index=True)
    version_no: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class IngestionTask(Base):
    __tablename__ = "ingestion_tasks"
    __table_args__ = (
        Index(
            "ix_tasks_claimable",
            "next_attempt_at",
            "id",
            sqlite_where=text(CLAIMABLE_SQL),
            postgresql_where=text(CLAIMABLE_SQL),
        ),
        Index(
            "ix_tasks_running_lease",
            "lease_expires_at",
            sqlite_where=text(RUNNING_SQL),
            postgresql_where=text(RUNNING_SQL),
        ),
        # error_code leads: an index led by status tempts SQLite's planner away from
        # ix_tasks_claimable into sorting every claimable task for each claim.
        Index("ix_tasks_error_status", "error_code", "status"),
        Index("ix_tasks_created", "created_at", "id"),
        # "Is this result already made, or being made?": by key, then status.
        Index("ix_tasks_processing_key", "processing_key", "status"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    # No foreign key: a task outlives a deleted document so that it can fail
    # with document_not_found and still say which document it was for.
    document_id: Mapped[str] = mapped_column(String(32), index=True)
    status: Mapped[str] = mapped_column(String(16))
    # Set to the old status by every transition's UPDATE (the SET clause sees the
    # old row), so RETURNING can tell the event log where the task came from.
    previous_status: Mapped[str | None] = mapped_column(String(16))
    stage: Mapped[str] = mapped_column(String(16))
    completed: Mapped[int] = mapped_column(Integer, default=0)
    total: Mapped[int] = mapped_column(Integer, default=1)
    # Incremented by every claim and never reset, so it doubles as the fencing
    # token: a worker's writes are conditional on the attempt it claimed.
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer)
    error_code: Mapped[str | None] = mapped_column(String(32))
    error_detail: Mapped[str | None] = mapped_column(String(500))
    worker_id: Mapped[str | None] = mapped_column(String(128))
    lease_expires_at: Mapped[float | None] = mapped_column(Float)
    # Earliest time the next attempt may start; NULL while running or finished.
    next_attempt_at: Mapped[float | None] = mapped_column(Float)
    progress_at: Mapped[float | None] = mapped_column(Float)
    options: Mapped[str] = mapped_column(Text, default="{}")
    # What identifies this task's result (core.ingest.keys), set by the worker that
    # holds it once the options are known; NULL until then.
    processing_key: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    # Ledger-wide, monotonically increasing: "what changed since revision R".
    revision: Mapped[int] = mapped_column(Integer, index=True)


class Chunk(Base):
    __tablename__ = "chunks"
    __table_args__ = (UniqueConstraint("document_id", "ordinal"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    document_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("documents.id", ondelete="CASCADE")
    )
    ordinal: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    page: Mapped[int | None] = mapped_column(Integer)
    char_start: Mapped[int] = mapped_column(Integer)
    char_end: Mapped[int] = mapped_column(Integer)
    embedding: Mapped[bytes | None] = mapped_column(LargeBinary)


class TaskEvent(Base):
    """Append-only: rows are inserted, never updated or deleted."""

    __tablename__ = "task_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(String(32), index=True)
    at: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(128))
    from_status: Mapped[str | None] = mapped_column(String(16))
    to_status: Mapped[str] = mapped_column(String(16))
    stage: Mapped[str] = mapped_column(String(16))
    attempt: Mapped[int] = mapped_column(Integer)
    error_code: Mapped[str | None] = mapped_column(String(32))
    reason: Mapped[str | None] = mapped_column(String(500))


class DocumentEvent(Base):
    """A document's history (upload, publish, reject, withdraw, retire, delete):
    append-only, like the task history."""

    __tablename__ = "document_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    family_id: Mapped[str] = mapped_column(String(32), index=True)
    document_id: Mapped[str] = mapped_column(String(32))
    version_no: Mapped[int] = mapped_column(Integer)
    at: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(String(16))
    from_status: Mapped[str | None] = mapped_column(String(16))
    to_status: Mapped[str | None] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(String(500))


class Outbox(Base):
    """Events for a future message-queue relay; written, not yet consumed."""

    __tablename__ = "outbox"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    topic: Mapped[str] = mapped_column(String(64))
    payload: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    delivered_at: Mapped[float | None] = mapped_column(Float)


class WorkerRecord(Base):
    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[float] = mapped_column(Float)
    heartbeat_at: Mapped[float] = mapped_column(Float)
    stopped_at: Mapped[float | None] = mapped_column(Float)


class ApiToken(Base):
    """A bearer token for the HTTP API. Only the secret's sha256 is kept: the token
    itself is shown once, when it is created."""

    __tablename__ = "api_tokens"

    # The public half of a token ("idk_<id>.<secret>"): finds the row without
    # comparing secrets in SQL, so the secret is compared in constant time in Python.
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    secret_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float)


class IdempotencyKey(Base):
    """A client's idempotency key and what its first request did (see
    core.ledger.idempotency)."""

    __tablename__ = "idempotency_keys"

    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    document_id: Mapped[str] = mapped_column(String(32))
    task_id: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[float] = mapped_column(Float, index=True)


class ProviderRequest(Base):
    """One request to a remote embedding provider, by its request key: the evidence
    of whether a call outside the ledger happened (see
    core.ledger.provider_requests)."""

    __tablename__ = "provider_requests"
    __table_args__ = (Index("ix_provider_requests_due", "state", "next_lookup_at"),)

    request_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    provider: Mapped[str] = mapped_column(String(128))
    model: Mapped[str] = mapped_column(String(128))
    endpoint: Mapped[str | None] = mapped_column(String(500))
    # The task attempt that sent it: while that attempt still runs, the request is
    # in flight, not unknown.
    task_id: Mapped[str] = mapped_column(String(32), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    texts: Mapped[int] = mapped_column(Integer)
    request_id: Mapped[str | None] = mapped_column(String(128))
    result_key: Mapped[str | None] = mapped_column(String(128))
    result_sha256: Mapped[str | None] = mapped_column(String(64))
    dimensions: Mapped[int | None] = mapped_column(Integer)
    usage: Mapped[str | None] = mapped_column(Text)
    detail: Mapped[str | None] = mapped_column(String(500))
    sends: Mapped[int] = mapped_column(Integer, default=0)
    lookups: Mapped[int] = mapped_column(Integer, default=0)
    next_lookup_at: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


METADATA = Base.metadata
TASKS = cast(Table, IngestionTask.__table__)
DOCUMENTS = cast(Table, Document.__table__)
EVENTS = cast(Table, TaskEvent.__table__)
CHUNKS = cast(Table, Chunk.__table__)
OUTBOX = cast(Table, Outbox.__table__)
WORKERS = cast(Table, WorkerRecord.__table__)
API_TOKENS = cast(Table, ApiToken.__table__)
IDEMPOTENCY_KEYS = cast(Table, IdempotencyKey.__table__)
PROVIDER_REQUESTS = cast(Table, ProviderRequest.__table__)
DOCUMENT_EVENTS = cast(Table, DocumentEvent.__table__)
