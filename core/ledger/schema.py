"""The ledger's tables and the status conditions its statements share.

Times are epoch seconds (float) so both backends compare them the same way and the
clock can be injected in tests. The schema itself is versioned by the Alembic
migrations beside this module; these tables are what the migrations must produce
(``tests/core/test_schema.py`` compares them). Plain Core tables, no ORM: nothing maps
rows to objects here, and SQLAlchemy's ORM costs a worker ~60 ms of start-up.
"""

from __future__ import annotations

from sqlalchemy import (
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

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
FAILED_SQL = status_in_sql(frozenset({TaskStatus.FAILED}))
# Every status but running, spelled as ORs, not IN: see ix_tasks_status_created.
NOT_RUNNING_SQL = " OR ".join(
    status_in_sql(frozenset({s})) for s in TaskStatus if s is not TaskStatus.RUNNING
)
CANCELLABLE_SQL = status_in_sql(CANCELLABLE)
# A task claimed more than once: ix_tasks_retried's WHERE, which a filter's attempt
# bound past it repeats literally (core.ledger.filter_sql), so SQLite uses the index.
RETRIED_ABOVE = 1
RETRIED_SQL = f"attempt > {RETRIED_ABOVE}"

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


METADATA = MetaData(naming_convention=NAMING)


DOCUMENTS = Table(
    "documents",
    METADATA,
    Column("id", String(32), primary_key=True),
    # Display text only: never joined into a path.
    Column("filename", String(255), nullable=False),
    # The name as filters match it (core.filters.fold), written with the row: folding
    # in a filter's SQL costs a Python call per row and term on SQLite (0012). Indexed
    # by trigram outside these declarations (0017, core.ledger.name_index): on SQLite
    # an FTS5 table keyed by this table's rowid and kept by triggers, so a migration
    # that copies this table must rebuild it ('rebuild') and its triggers.
    Column("filename_folded", String(255), nullable=True),
    # Indexed: a claim asks whether another document holds the same bytes (only then
    # can a result to reuse, or a twin making it, exist).
    Column("sha256", String(64), index=True, nullable=False),
    Column("object_key", String(128), nullable=False),
    Column("size", Integer, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    # Optimistic-locking row version: every status change bumps it.
    Column("version", Integer, default=1, nullable=False),
    # Versions: every row is one version of a document. The document is named by
    # its first version's id (``family_id``); ``version_no`` counts 1, 2, ... A
    # version's chunks are keyed by its own row, so two versions never mix, and at
    # most one version of a family is published (search reads only published rows).
    Column("family_id", String(32), index=True, nullable=False),
    Column("version_no", Integer, default=1, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    UniqueConstraint("family_id", "version_no"),
    # The document list reads newest first, of any status or of one (0020).
    Index("ix_documents_created", "created_at", "id"),
    Index("ix_documents_status_created", "status", "created_at", "id"),
)


TASKS = Table(
    "ingestion_tasks",
    METADATA,
    Column("id", String(32), primary_key=True),
    # No foreign key: a task outlives a deleted document so that it can fail
    # with document_not_found and still say which document it was for.
    Column("document_id", String(32), index=True, nullable=False),
    Column("status", String(16), nullable=False),
    # Set to the old status by every transition's UPDATE (the SET clause sees the
    # old row), so RETURNING can tell the event log where the task came from.
    Column("previous_status", String(16), nullable=True),
    Column("stage", String(16), nullable=False),
    Column("completed", Integer, default=0, nullable=False),
    Column("total", Integer, default=1, nullable=False),
    # Incremented by every claim and never reset, so it doubles as the fencing
    # token: a worker's writes are conditional on the attempt it claimed.
    Column("attempt", Integer, default=0, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("error_code", String(32), nullable=True),
    Column("error_detail", String(500), nullable=True),
    Column("worker_id", String(128), nullable=True),
    Column("lease_expires_at", Float, nullable=True),
    # Earliest time the next attempt may start; NULL while running or finished.
    Column("next_attempt_at", Float, nullable=True),
    Column("progress_at", Float, nullable=True),
    Column("options", Text, default="{}", nullable=False),
    # What identifies this task's result (core.ingest.keys), set by the worker that
    # holds it once the options are known; NULL until then. While the task waits for
    # work another task is doing, the key of that work: the twin's processing key, or
    # the provider request's key (see WorkQueue.hand_back).
    Column("processing_key", String(64), nullable=True),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    # Ledger-wide, monotonically increasing: "what changed since revision R".
    Column("revision", Integer, index=True, nullable=False),
    # NULL for an ingestion task. A re-embedding task (an index's campaign) embeds the
    # version's stored chunks into this index and touches nothing else: not the
    # document's status, not its chunks, whatever becomes of the task.
    Column("index_id", Integer, nullable=True),
    # Partial indexes: PostgreSQL's spelling of the WHERE term is added by
    # with_postgresql_options(), not here (see there why).
    Index(
        "ix_tasks_claimable",
        "next_attempt_at",
        "id",
        sqlite_where=text(CLAIMABLE_SQL),
    ),
    Index(
        "ix_tasks_running_lease",
        "lease_expires_at",
        sqlite_where=text(RUNNING_SQL),
    ),
    # error_code leads: an index led by status tempts SQLite's planner away from
    # ix_tasks_claimable into sorting every claimable task for each claim.
    Index("ix_tasks_error_status", "error_code", "status"),
    # A failure group's first and last failure (core.ledger.counters): two seeks.
    # Partial, for the same reason error_code leads the index above.
    Index(
        "ix_tasks_failed_at",
        "error_code",
        "stage",
        "updated_at",
        sqlite_where=text(FAILED_SQL),
    ),
    # A campaign's progress: its tasks by status.
    Index("ix_tasks_index_status", "index_id", "status"),
    Index("ix_tasks_created", "created_at", "id"),
    # A status or error code filter's newest tasks, in the list's order, however rare
    # the value: without them a filter matching few of a million tasks walks
    # ix_tasks_created through all of them (1.1 s on SQLite). The status index is
    # partial, its WHERE every status but running spelled as ORs: SQLite uses it for
    # a query with a term equal to one of them (``status = 'failed'``, as filters
    # spell it, see filter_sql.status_is) and for no other, whereas a full index led
    # by status takes the claim (``status IN (...)``) off ix_tasks_claimable and the
    # reaper (``status = 'running'``) off ix_tasks_running_lease: measured, a sort of
    # every claimable task per claim. Running tasks are listed from the latter.
    Index(
        "ix_tasks_status_created",
        "status",
        "created_at",
        "id",
        sqlite_where=text(NOT_RUNNING_SQL),
    ),
    Index("ix_tasks_error_created", "error_code", "created_at", "id"),
    # The tasks that were retried, in the list's order, for attempt filters past the
    # first attempt (core.ledger.filter_sql._attempt_clauses): few, and attempt:>3 read
    # every task without it. Partial, so a claim of a fresh task (attempt 0 to 1)
    # changes no entry; the attempt is in it so the bound is tested in the index.
    Index(
        "ix_tasks_retried",
        "created_at",
        "id",
        "attempt",
        sqlite_where=text(RETRIED_SQL),
    ),
    # "Is this result already made, or being made?": by key, then status.
    Index("ix_tasks_processing_key", "processing_key", "status"),
    # The workers a ledger has seen, a seek each, for a worker: filter
    # (core.ledger.worker_index).
    Index("ix_tasks_worker", "worker_id"),
)


# How many tasks are in each (status, error code, stage): kept by triggers on the
# task table in the writing transaction (core.ledger.counters, migration 0016), so
# counts read a few dozen rows, never the tasks. '' is "no error code".
TASK_COUNTERS = Table(
    "task_counters",
    METADATA,
    Column("status", String(16), nullable=False),
    Column("error_code", String(32), nullable=False),
    Column("stage", String(16), nullable=False),
    Column("n", Integer, nullable=False),
    PrimaryKeyConstraint("status", "error_code", "stage"),
)


# How many history rows reached each (status, error code), ever: kept by a trigger on
# task_events' inserts and never decremented, so what /metrics reports as claims and
# failures so far neither scans the history nor drops when a prune deletes some.
EVENT_COUNTERS = Table(
    "event_counters",
    METADATA,
    Column("to_status", String(16), nullable=False),
    Column("error_code", String(32), nullable=False),
    Column("n", Integer, nullable=False),
    PrimaryKeyConstraint("to_status", "error_code"),
)


CHUNKS = Table(
    "chunks",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "document_id", String(32), ForeignKey("documents.id", ondelete="CASCADE"), nullable=False
    ),
    Column("ordinal", Integer, nullable=False),
    Column("text", Text, nullable=False),
    Column("page", Integer, nullable=True),
    Column("char_start", Integer, nullable=False),
    Column("char_end", Integer, nullable=False),
    # Where the chunk is in the document's own terms beyond its page (a slide and
    # whether it is its notes, a sheet's rows, a heading path), as JSON; NULL when the
    # page says it all. See core.ingest.chunker.Location.
    Column("location", Text, nullable=True),
    # What keyword search indexes instead of text where text holds Chinese, Japanese
    # or Korean: text with each such character between spaces (core.ledger.segment);
    # NULL where there is nothing to segment, and the index reads text (0018).
    Column("search_text", Text, nullable=True),
    UniqueConstraint("document_id", "ordinal"),
)


# A vector index: one embedder (its kind, model, version and dimensions, and the
# options that change its vectors) whose vectors search may compare with each other.
# Vectors of two indexes are never compared (two models' spaces have nothing in
# common, even at the same dimensions).
INDEXES = Table(
    "indexes",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(128), unique=True, nullable=False),
    Column("embedder", String(64), nullable=False),  # a kind of core.ingest.embedders
    Column("model", String(128), nullable=False),
    Column("version", String(128), nullable=False),
    Column("dimensions", Integer, nullable=False),
    Column("options", Text, default="{}", nullable=False),  # JSON; never a secret
    Column("state", String(16), nullable=False),  # core.states.IndexState
    # Bumped in the transaction that deletes any of its vectors: a search process
    # holding the index's vectors in memory reloads them when it changes (new vectors
    # only ever get higher ids, so those it loads incrementally).
    Column("deletions", Integer, default=0, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("built_at", Float, nullable=True),
    Column("activated_at", Float, nullable=True),
)


# Every vector of every index: little-endian float32, L2-normalised. A chunk has at
# most one vector per index; its row goes with the chunk (ON DELETE CASCADE).
CHUNK_VECTORS = Table(
    "chunk_vectors",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("index_id", Integer, ForeignKey("indexes.id", ondelete="CASCADE"), nullable=False),
    Column("chunk_id", Integer, ForeignKey("chunks.id", ondelete="CASCADE"), nullable=False),
    Column("vector", LargeBinary, nullable=False),
    # One vector per chunk and index; read by index in id order (a search process
    # loads what is new since the last id it saw).
    UniqueConstraint("index_id", "chunk_id"),
    Index("ix_chunk_vectors_index_order", "index_id", "id"),
    # The cascade from a deleted chunk finds its vectors by chunk.
    Index("ix_chunk_vectors_chunk", "chunk_id"),
)


# How each page of a version was read (core.states.PageDecision), written with its
# chunks when its task finishes and dropped wherever they are: the record a person
# reviews before trusting a scanned document's text. Formats without pages have none.
DOCUMENT_PAGES = Table(
    "document_pages",
    METADATA,
    Column(
        "document_id", String(32), ForeignKey("documents.id", ondelete="CASCADE"), nullable=False
    ),
    Column("page", Integer, nullable=False),
    Column("decision", String(16), nullable=False),
    Column("chars", Integer, nullable=False),
    # The OCR engine's mean word confidence, 0-100; NULL unless the page was OCR'd.
    Column("confidence", Float, nullable=True),
    Column("ocr_seconds", Float, nullable=False),
    Column("reason", String(500), nullable=True),
    PrimaryKeyConstraint("document_id", "page"),
    # The filters' EXISTS (ocr:low, pages:skipped) and the per-document summary seek
    # a version's pages by decision, then confidence: a 500-page text document is
    # skipped past in one seek rather than read page by page.
    Index("ix_document_pages_review", "document_id", "decision", "confidence"),
    # The other way round, for a page filter's few versions (core.ledger.pages,
    # few_versions): which versions have an OCR page under the threshold, or skipped.
    Index("ix_document_pages_decision", "decision", "confidence", "document_id"),
)


# Append-only: rows are inserted, never updated or deleted.
EVENTS = Table(
    "task_events",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("task_id", String(32), index=True, nullable=False),
    Column("at", Float, nullable=False),
    Column("actor", String(128), nullable=False),
    Column("from_status", String(16), nullable=True),
    Column("to_status", String(16), nullable=False),
    Column("stage", String(16), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("error_code", String(32), nullable=True),
    Column("reason", String(500), nullable=True),
)


# A document's history (upload, publish, reject, withdraw, retire, delete):
# append-only, like the task history.
DOCUMENT_EVENTS = Table(
    "document_events",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("family_id", String(32), index=True, nullable=False),
    Column("document_id", String(32), nullable=False),
    Column("version_no", Integer, nullable=False),
    Column("at", Float, nullable=False),
    Column("actor", String(128), nullable=False),
    Column("action", String(16), nullable=False),
    Column("from_status", String(16), nullable=True),
    Column("to_status", String(16), nullable=True),
    Column("reason", String(500), nullable=True),
)


# Events for a future message-queue relay; written, not yet consumed.
OUTBOX = Table(
    "outbox",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("topic", String(64), nullable=False),
    Column("payload", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("delivered_at", Float, nullable=True),
)


WORKERS = Table(
    "workers",
    METADATA,
    Column("id", String(128), primary_key=True),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started_at", Float, nullable=False),
    Column("heartbeat_at", Float, nullable=False),
    Column("stopped_at", Float, nullable=True),
)


# A bearer token for the HTTP API. Only the secret's sha256 is kept: the token
# itself is shown once, when it is created.
API_TOKENS = Table(
    "api_tokens",
    METADATA,
    # The public half of a token ("idk_<id>.<secret>"): finds the row without
    # comparing secrets in SQL, so the secret is compared in constant time in Python.
    Column("id", String(32), primary_key=True),
    Column("name", String(128), unique=True, nullable=False),
    Column("role", String(16), nullable=False),
    Column("secret_sha256", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("revoked_at", Float, nullable=True),
)


# A client's idempotency key and what its first request did (see
# core.ledger.idempotency).
IDEMPOTENCY_KEYS = Table(
    "idempotency_keys",
    METADATA,
    Column("key", String(255), primary_key=True),
    Column("fingerprint", String(64), nullable=False),
    Column("document_id", String(32), nullable=False),
    Column("task_id", String(32), nullable=True),
    Column("created_at", Float, index=True, nullable=False),
)


# One request to a remote embedding provider, by its request key: the evidence
# of whether a call outside the ledger happened (see
# core.ledger.provider_requests).
PROVIDER_REQUESTS = Table(
    "provider_requests",
    METADATA,
    Column("request_key", String(64), primary_key=True),
    Column("provider", String(128), nullable=False),
    Column("model", String(128), nullable=False),
    Column("endpoint", String(500), nullable=True),
    # The task attempt that sent it: while that attempt still runs, the request is
    # in flight, not unknown.
    Column("task_id", String(32), index=True, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("texts", Integer, nullable=False),
    Column("request_id", String(128), nullable=True),
    Column("result_key", String(128), nullable=True),
    Column("result_sha256", String(64), nullable=True),
    Column("dimensions", Integer, nullable=True),
    Column("usage", Text, nullable=True),
    Column("detail", String(500), nullable=True),
    Column("sends", Integer, default=0, nullable=False),
    Column("lookups", Integer, default=0, nullable=False),
    Column("next_lookup_at", Float, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Index("ix_provider_requests_due", "state", "next_lookup_at"),
)


PARTIAL_INDEXES = (
    ("ix_tasks_claimable", CLAIMABLE_SQL),
    ("ix_tasks_running_lease", RUNNING_SQL),
    ("ix_tasks_failed_at", FAILED_SQL),
    ("ix_tasks_status_created", NOT_RUNNING_SQL),
    ("ix_tasks_retried", RETRIED_SQL),
)


def with_postgresql_options() -> MetaData:
    """METADATA with the PostgreSQL ``WHERE`` of its partial indexes, for Alembic on a
    PostgreSQL ledger. Idempotent.

    Not declared with the tables: naming a ``postgresql_*`` option makes SQLAlchemy
    import its whole PostgreSQL dialect, ~20 ms of every SQLite worker's start-up, and
    nothing but Alembic reads these options (the migrations spell out the DDL).
    """
    for index in TASKS.indexes:
        for name, where in PARTIAL_INDEXES:
            if index.name == name:
                index.dialect_options["postgresql"]["where"] = text(where)
    return METADATA
