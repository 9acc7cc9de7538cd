"""Reading the ledger: task and document lists, the revision feed, counts, history,
chunks and search. Nothing here writes; every read is one short transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select, bindparam, func, select, text, tuple_
from sqlalchemy.engine import Connection

from core.config import DEFAULT_OCR_REVIEW_BELOW
from core.filters import COMPARISONS, PAGE_FIELDS, TaskFilter, Term, fold
from core.ledger import counters, pages, rows, version_reads
from core.ledger.filter_sql import (
    FILTERED,
    filter_clauses,
    folded,
    lists_running,
    status_is,
)
from core.ledger.hybrid import SearchAnswer, Searcher, SearchMode
from core.ledger.indexes import IndexKey, find_index, vectors_by_ordinal
from core.ledger.pages import PageSummary, PageView
from core.ledger.registry import WORKER_GONE_AFTER_S
from core.ledger.review_diff import VersionDiff, diff_versions
from core.ledger.schema import (
    CHUNKS,
    CLAIMABLE_SQL,
    DOCUMENTS,
    EVENTS,
    PROVIDER_REQUESTS,
    TASKS,
    WORKERS,
)
from core.ledger.transactions import Transactions
from core.ledger.views import (
    ChunkRecord,
    ChunkView,
    DocumentEventView,
    DocumentView,
    FailureGroup,
    LedgerStats,
    ReusableResult,
    SearchHit,
    TaskEventView,
    TaskPosition,
    TaskView,
)
from core.states import DocumentStatus, ErrorCode, TaskStatus

FEED_LIMIT = 5000  # tasks per "what changed since R" answer
# Tasks a filtered read asks for at most to be read as a screenful, without
# PostgreSQL's parallel workers (filter_sql.SCREENFUL_PLANS): the dashboard's window
# (200), an API page (at most 1 000), a capped count (1 000).
SCREENFUL_MAX = 1000

UNREFERENCED_SLICE = 500  # object keys asked about per statement
HISTORIES_SLICE = 500  # tasks whose history is read per statement

# Ordered by task then id, which the task-id index gives as it is walked (id is its
# rowid); by id alone SQLite would sort every event read in a temporary B-tree.
TASK_HISTORIES = (
    select(EVENTS)
    .where(EVENTS.c.task_id.in_(bindparam("p_ids", expanding=True)))
    .order_by(EVENTS.c.task_id, EVENTS.c.id)
)


def _views(
    conn: Connection, query: Select[Any], options: dict[str, Any] | None = None
) -> list[TaskView]:
    return [
        TaskView.from_row(r, document_name=r.filename)
        for r in conn.execute(query, execution_options=options or {})
    ]


class Reads:
    """Questions about the ledger's current state."""

    def __init__(
        self, transactions: Transactions, *, review_below: float = DEFAULT_OCR_REVIEW_BELOW
    ) -> None:
        self._tx = transactions
        # Keyword search until the ledger hands it its indexes (Ledger.__init__).
        self.searcher = Searcher(transactions, None)
        # Settings.ocr_review_below: what ``ocr:low`` and the page flag judge by.
        self.review_below = review_below

    def _term_clause(self, term: Term) -> ColumnElement[bool]:
        """A term no group of core.ledger.filter_sql folds (the page terms), judged
        against this ledger's review threshold."""
        return term_clause(term, self.review_below)

    def filter_clauses(
        self, task_filter: TaskFilter, conn: Connection, *, screenful: bool = False
    ) -> list[Any]:
        """The filter's WHERE clauses over the tasks joined to their documents, for
        this transaction (see :func:`core.ledger.filter_sql.filter_clauses`)."""
        return filter_clauses(
            task_filter, self._term_clause, conn, self.review_below, screenful=screenful
        )

    # ------------------------------------------------------------------ tasks

    async def get_task(self, task_id: str) -> TaskView:
        def tx(conn: Connection) -> TaskView:
            view = rows.task_view(conn, rows.resolve_id(conn, TASKS, task_id, "task"))
            assert view is not None  # resolve_id found it in this transaction
            return view

        return await self._tx.read(tx)

    async def list_tasks(
        self,
        *,
        status: TaskStatus | str | None = None,
        error_code: ErrorCode | str | None = None,
        document_id: str | None = None,
        filter: TaskFilter | None = None,
        limit: int | None = 1000,
        offset: int = 0,
        before: TaskPosition | None = None,
    ) -> list[TaskView]:
        """Tasks, newest first, optionally by status / error code / document / filter.

        ``before`` continues a listing after the last task of the previous page
        (keyset pagination: the page after a position costs the same however deep it
        is, and tasks added meanwhile neither repeat nor shift a page).
        """
        query = rows.tasks_with_names()
        if status is not None:
            query = query.where(status_is(TaskStatus(status).value))
        if error_code is not None:
            query = query.where(TASKS.c.error_code == ErrorCode(error_code).value)
        if document_id is not None:
            query = query.where(TASKS.c.document_id == document_id)
        options = FILTERED if filter else None
        status_value = None if status is None else TaskStatus(status).value

        def tx(conn: Connection) -> list[TaskView]:
            # The filter's clauses in the transaction: a rare name is looked up first
            # (core.ledger.name_index), the counters asked (core.ledger.counted_terms).
            # A page, or every task (limit None): only a page is a screenful.
            screenful = limit is not None and limit <= SCREENFUL_MAX
            clauses = self.filter_clauses(filter, conn, screenful=screenful) if filter else []
            listing = query.where(*clauses)
            # Running tasks only: the same order, which no index provides, and the
            # keyset spelled alike, or SQLite seeks ix_tasks_created for the page's
            # position and walks every older task (160 ms a page at a million); see
            # filter_sql.lists_running.
            created: ColumnElement[float] = TASKS.c.created_at
            if lists_running(filter, status_value, clauses):
                created = TASKS.c.created_at + 0
            if before is not None:
                position = tuple_(before.created_at, before.task_id)
                listing = listing.where(tuple_(created, TASKS.c.id) < position)
            listing = listing.order_by(created.desc(), TASKS.c.id.desc()).offset(offset)
            if limit is not None:
                listing = listing.limit(limit)
            return _views(conn, listing, options)

        return await self._tx.read(tx)

    async def reusable_result(self, key: str) -> ReusableResult | None:
        """The newest succeeded task with this processing key whose document still
        holds its chunks (waiting for review or published), or None."""
        query = (
            select(TASKS.c.id, TASKS.c.document_id, TASKS.c.total, TASKS.c.options)
            .select_from(TASKS.join(DOCUMENTS, DOCUMENTS.c.id == TASKS.c.document_id))
            .where(TASKS.c.processing_key == key)
            .where(TASKS.c.status == TaskStatus.SUCCEEDED.value)
            .where(
                DOCUMENTS.c.status.in_(
                    [DocumentStatus.REVIEW_PENDING.value, DocumentStatus.PUBLISHED.value]
                )
            )
            .order_by(TASKS.c.updated_at.desc())
            .limit(1)
        )

        def tx(conn: Connection) -> ReusableResult | None:
            row = conn.execute(query).first()
            if row is None:
                return None
            options = json.loads(row.options or "{}")
            return ReusableResult(row.id, row.document_id, row.total, options.get("result_sha256"))

        return await self._tx.read(tx)

    async def chunk_records(
        self, document_id: str, index: IndexKey | int | None = None
    ) -> list[ChunkRecord]:
        """A document's chunks as a worker writes them, with their vectors in
        ``index`` (its key or id; none without one, or if the ledger has no such
        index)."""
        query = (
            select(
                CHUNKS.c.ordinal,
                CHUNKS.c.text,
                CHUNKS.c.page,
                CHUNKS.c.char_start,
                CHUNKS.c.char_end,
                CHUNKS.c.location,
            )
            .where(CHUNKS.c.document_id == document_id)
            .order_by(CHUNKS.c.ordinal)
        )

        def tx(conn: Connection) -> list[ChunkRecord]:
            index_id = find_index(conn, index) if isinstance(index, IndexKey) else index
            vectors = {} if index_id is None else vectors_by_ordinal(conn, index_id, document_id)
            return [
                ChunkRecord(
                    r.ordinal,
                    r.text,
                    r.page,
                    r.char_start,
                    r.char_end,
                    vectors.get(r.ordinal),
                    r.location,
                )
                for r in conn.execute(query)
            ]

        return await self._tx.read(tx)

    async def stats(self, now: float) -> LedgerStats:
        """The figures a monitor scrapes: tasks by status, claims and failures so far
        (the history's counters: a prune does not take them back), the oldest
        claimable task's wait, workers alive."""
        claimable = text(CLAIMABLE_SQL)

        def tx(conn: Connection) -> LedgerStats:
            by_status = counters.status_counts(conn)
            claims, failures = counters.history_totals(conn)
            oldest = conn.execute(
                select(func.min(TASKS.c.next_attempt_at)).where(claimable)
            ).scalar()
            alive = conn.execute(
                select(func.count())
                .select_from(WORKERS)
                .where(WORKERS.c.stopped_at.is_(None))
                .where(WORKERS.c.heartbeat_at > now - WORKER_GONE_AFTER_S)
            ).scalar()
            return LedgerStats(
                tasks=by_status,
                claims=int(claims or 0),
                failures=failures,
                oldest_claimable_age_s=max(0.0, now - oldest) if oldest is not None else 0.0,
                workers_alive=int(alive or 0),
            )

        return await self._tx.read(tx)

    async def count_tasks(
        self, filter: TaskFilter | None = None, *, at_most: int | None = None
    ) -> int:
        """How many tasks match a filter (all of them, not just a page). With
        ``at_most``, counting stops past that many and answers ``at_most + 1`` ("more
        than"): a name filter's exact count reads every one of a million tasks (26 s
        measured on a loaded machine), the first thousand matches a few thousand."""
        matching = select(TASKS.c.id).select_from(
            TASKS.outerjoin(DOCUMENTS, DOCUMENTS.c.id == TASKS.c.document_id)
        )
        options = FILTERED if filter else {}

        def tx(conn: Connection) -> int:
            counted = matching
            if filter:
                capped = at_most is not None and at_most <= SCREENFUL_MAX
                counted = counted.where(*self.filter_clauses(filter, conn, screenful=capped))
            if at_most is not None:
                counted = counted.limit(at_most + 1)
            query = select(func.count()).select_from(counted.subquery())
            return int(conn.execute(query, execution_options=options).scalar() or 0)

        return await self._tx.read(tx)

    async def tasks_since(self, revision: int, *, limit: int = FEED_LIMIT) -> list[TaskView]:
        """Tasks changed after ``revision``, oldest change first. A reader keeps the
        highest revision it has seen and asks again: cost follows the change rate,
        not the ledger's size."""
        query = (
            rows.tasks_with_names()
            .where(TASKS.c.revision > revision)
            .order_by(TASKS.c.revision)
            .limit(limit)
        )
        return await self._tx.read(lambda conn: _views(conn, query))

    async def revision(self) -> int:
        """The ledger's newest revision (0 when empty)."""

        def tx(conn: Connection) -> int:
            return int(conn.execute(select(func.max(TASKS.c.revision))).scalar() or 0)

        return await self._tx.read(tx)

    async def task_history(self, task_id: str) -> list[TaskEventView]:
        """A task's audit history, oldest first."""

        def tx(conn: Connection) -> list[TaskEventView]:
            resolved = rows.resolve_id(conn, TASKS, task_id, "task")
            query = select(EVENTS).where(EVENTS.c.task_id == resolved).order_by(EVENTS.c.id)
            return [TaskEventView.from_row(r) for r in conn.execute(query)]

        return await self._tx.read(tx)

    async def task_histories(self, task_ids: Sequence[str]) -> dict[str, list[TaskEventView]]:
        """The audit histories of several tasks (full ids), oldest event first, in one
        transaction: every id asked is a key, with an empty list for a task the ledger
        does not hold (gone since it was seen).

        One statement for all of them, walking the task-id index in (task, id) order:
        the dashboard looks up the history of every old task it sees change, and under
        a stream of changes to many tasks one transaction each was most of its ledger
        threads' time and a thread hop each on its event loop.
        """
        wanted = list(dict.fromkeys(task_ids))
        histories: dict[str, list[TaskEventView]] = {task_id: [] for task_id in wanted}
        if not wanted:
            return histories

        def tx(conn: Connection) -> dict[str, list[TaskEventView]]:
            for part in range(0, len(wanted), HISTORIES_SLICE):
                query = TASK_HISTORIES.params(p_ids=wanted[part : part + HISTORIES_SLICE])
                for r in conn.execute(query):
                    histories[r.task_id].append(TaskEventView.from_row(r))
            return histories

        return await self._tx.read(tx)

    async def counts(self) -> dict[TaskStatus, int]:
        """Number of tasks in each status (every status present, zeros included):
        read from the counters the task table's triggers keep (core.ledger.counters),
        not by grouping the tasks."""
        return await self._tx.read(counters.status_counts)

    async def failure_groups(self) -> list[FailureGroup]:
        """Failed tasks grouped by error code then stage, largest group first (from
        the counters, with two index seeks a group for its first and last failure)."""
        return await self._tx.read(counters.failure_groups)

    # -------------------------------------------------------------- documents

    async def get_document(self, document_id: str) -> DocumentView:
        def tx(conn: Connection) -> DocumentView:
            resolved = rows.resolve_id(conn, DOCUMENTS, document_id, "document")
            return DocumentView.from_row(rows.document_row(conn, resolved))

        return await self._tx.read(tx)

    async def list_documents(
        self, *, status: DocumentStatus | str | None = None, limit: int | None = 1000
    ) -> list[DocumentView]:
        query = select(DOCUMENTS).order_by(DOCUMENTS.c.created_at.desc(), DOCUMENTS.c.id.desc())
        if status is not None:
            query = query.where(DOCUMENTS.c.status == DocumentStatus(status).value)
        if limit is not None:
            query = query.limit(limit)

        def tx(conn: Connection) -> list[DocumentView]:
            return [DocumentView.from_row(r) for r in conn.execute(query)]

        return await self._tx.read(tx)

    async def chunks(self, document_id: str, *, limit: int | None = None) -> list[ChunkView]:
        def tx(conn: Connection) -> list[ChunkView]:
            resolved = rows.resolve_id(conn, DOCUMENTS, document_id, "document")
            query = (
                select(
                    CHUNKS.c.ordinal,
                    CHUNKS.c.text,
                    CHUNKS.c.page,
                    CHUNKS.c.char_start,
                    CHUNKS.c.char_end,
                    CHUNKS.c.location,
                )
                .where(CHUNKS.c.document_id == resolved)
                .order_by(CHUNKS.c.ordinal)
            )
            if limit is not None:
                query = query.limit(limit)
            return [ChunkView.of(resolved, r) for r in conn.execute(query)]

        return await self._tx.read(tx)

    # ----------------------------------------------------------------- pages

    async def pages(self, document_id: str) -> tuple[PageSummary, list[PageView]]:
        """How each page of the version ``document_id`` names was read, in page order,
        with their summary and review flag, in one snapshot (no pages: the format has
        none, or the version keeps no chunks). See :mod:`core.ledger.pages`."""

        def tx(conn: Connection) -> tuple[PageSummary, list[PageView]]:
            resolved = rows.resolve_id(conn, DOCUMENTS, document_id, "document")
            return (
                pages.summary(conn, resolved, self.review_below),
                pages.page_views(conn, resolved),
            )

        return await self._tx.read(tx)

    async def page_summaries(self, document_ids: list[str]) -> dict[str, PageSummary]:
        """The page summary of each of these versions that has pages (by full id):
        two grouped statements, cheap enough for every row of a list."""
        return await self._tx.read(
            lambda conn: pages.summaries(conn, document_ids, self.review_below)
        )

    # -------------------------------------------------------------- versions

    async def versions(self, document_id: str) -> list[DocumentView]:
        """Every version of a document (any version's id names it), oldest first."""
        return await self._tx.read(lambda conn: version_reads.versions(conn, document_id))

    async def document_history(self, document_id: str) -> list[DocumentEventView]:
        """A document's history: uploads, publishes, rejects, withdrawals, retirements
        and deletion, with actor, time and reason, oldest first."""
        return await self._tx.read(lambda conn: version_reads.history(conn, document_id))

    async def review_queue(self) -> list[DocumentView]:
        """Versions waiting for a person, the longest-waiting first."""
        return await self._tx.read(version_reads.review_queue)

    async def document_chunks(self, document_id: str) -> tuple[DocumentView, list[ChunkView]]:
        """What ``chunks ID`` shows, in one snapshot: the version whose chunks they are
        (the one the id names if it keeps chunks; for a document's name whose first
        version keeps none, the version search finds), and its chunks. See
        :func:`core.ledger.version_reads.document_chunks`; :meth:`chunks` is exactly
        the version the id names."""
        return await self._tx.read(lambda conn: version_reads.document_chunks(conn, document_id))

    async def review(self, document_id: str) -> VersionDiff:
        """A version as a reviewer sees it: its chunks against those of the version
        publishing it would retire (the published one, else a withdrawn one). For a
        document's name, the version waiting for review, by the rule actions follow
        (:func:`core.ledger.version_reads.acting_version`)."""

        def tx(conn: Connection) -> VersionDiff:
            acting = version_reads.acting_version(
                conn, document_id, (DocumentStatus.REVIEW_PENDING,)
            )
            shown = acting.named if acting.target is None else acting.target
            resolved = shown.id
            candidate = DocumentView.from_row(shown)
            published = version_reads.retired_by_publishing(conn, candidate.family_id)
            if published is not None and published.document_id == candidate.document_id:
                published = None
            return diff_versions(
                candidate,
                version_reads.chunk_views(conn, resolved),
                version_reads.page_count(conn, resolved),
                published,
                version_reads.chunk_views(conn, published.document_id) if published else (),
                version_reads.page_count(conn, published.document_id) if published else 0,
            )

        return await self._tx.read(tx)

    async def search(
        self,
        query: str,
        *,
        limit: int = 20,
        include_unpublished: bool = False,
        mode: str | SearchMode | None = None,
    ) -> list[SearchHit]:
        """Ranked search over chunks: only published versions unless
        ``include_unpublished`` (review_pending chunks exist, but a person has not
        approved them yet). ``mode`` keyword, vector or hybrid (None: the default for
        the active index); see :meth:`find` for how the hits were found."""
        answer = await self.find(
            query, limit=limit, include_unpublished=include_unpublished, mode=mode
        )
        return answer.hits

    async def find(
        self,
        query: str,
        *,
        limit: int = 20,
        include_unpublished: bool = False,
        mode: str | SearchMode | None = None,
    ) -> SearchAnswer:
        """A search's hits with its mode, the index that answered, the vector path
        and any notice (:mod:`core.ledger.hybrid`)."""
        return await self.searcher.find(
            query, mode=mode, limit=limit, include_unpublished=include_unpublished
        )


def unreferenced_objects(conn: Connection, keys: list[str]) -> list[str]:
    """Those of ``keys`` (object store keys) that nothing in the ledger references (no
    document version's original, no provider request's result vectors), in the
    caller's transaction."""
    used: set[str] = set()
    # In slices: a prune asks about every object in the store, and a statement's
    # parameters are bounded (SQLite: 32 766).
    for start in range(0, len(keys), UNREFERENCED_SLICE):
        part = keys[start : start + UNREFERENCED_SLICE]
        used.update(
            conn.execute(
                select(DOCUMENTS.c.object_key).where(DOCUMENTS.c.object_key.in_(part))
            ).scalars()
        )
        used.update(
            conn.execute(
                select(PROVIDER_REQUESTS.c.result_key).where(
                    PROVIDER_REQUESTS.c.result_key.in_(part)
                )
            ).scalars()
        )
    return [key for key in keys if key not in used]


def term_clause(term: Term, review_below: float = DEFAULT_OCR_REVIEW_BELOW) -> ColumnElement[bool]:
    """SQL for one filter term; NULLs are coalesced so negation means what
    :meth:`Term.matches` means, and text is case-folded as it folds it. The page
    terms (``ocr:``, ``pages:``) are an EXISTS on the task's version's page record,
    judged against ``review_below`` (Settings.ocr_review_below)."""
    # Stored folded (documents.filename_folded): no fold call per row and term.
    name = func.coalesce(DOCUMENTS.c.filename_folded, "")
    code = func.coalesce(TASKS.c.error_code, "")
    value = term.value
    clause: ColumnElement[bool]
    if term.field is None:
        v = fold(value)
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
        clause = folded(func.coalesce(TASKS.c.worker_id, "")).contains(fold(value), autoescape=True)
    elif term.field == "name":
        clause = name.contains(fold(value), autoescape=True)
    elif term.field == "id":
        clause = TASKS.c.id.startswith(value.lower(), autoescape=True)
    elif term.field in PAGE_FIELDS:
        clause = pages.has_page(TASKS.c.document_id, pages.term_condition(term, review_below))
    else:
        clause = TASKS.c.document_id.startswith(value.lower(), autoescape=True)
    return ~clause if term.negate else clause
