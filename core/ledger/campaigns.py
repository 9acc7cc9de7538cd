"""Re-embedding campaigns: a new index gets the vectors of every version search may
serve, through ordinary tasks, and is switched to in one transaction.

Creating an index queues one **re-embedding task** per published or review-pending
version that has chunks (``ingestion_tasks.index_id`` names the index). They are
claimed, leased, fenced, retried, cancelled and reaped like any task, and run only the
embedding stage over the stored chunks: no download, no parse. Whatever becomes of
one, its version keeps its status, chunks and other vectors: its vectors in the new
index are written only by its success, in one transaction.

While an index is building (or ready, waiting to be activated), every ingestion that
finishes queues a re-embedding task for it in the same transaction, so a version
submitted during the campaign ends in both indexes. The active index is kept current
the same way when a worker embeds with another model (a worker left on an old
model's embedder still feeds the index search answers from). A retired index is not
kept current: ``resume`` catches it up before it is activated again.

An index is **ready** once no task of its campaign is left to run or failed; only a
ready index can be activated. ``activate`` retires the active index and activates the
new one in one conditional UPDATE pair: a search reads the active index once per
query, so it sees the old index or the new, never neither or a mix.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, bindparam, delete, exists, func, insert, or_, select, update
from sqlalchemy.engine import Connection

from core.config import Settings
from core.errors import Conflict
from core.ledger import rows
from core.ledger.indexes import (
    IndexKey,
    IndexView,
    ensure_index,
    find_index,
    index_row,
    index_view,
)
from core.ledger.prepared import Prepared
from core.ledger.schema import CHUNK_VECTORS, CHUNKS, DOCUMENTS, INDEXES, TASKS
from core.ledger.transactions import Transactions
from core.ledger.views import Claim
from core.states import DocumentStatus, IndexState, Stage, TaskStatus

I = INDEXES.c  # noqa: E741
T = TASKS.c
# The versions search may serve, now or once a person approves them.
SERVABLE = (DocumentStatus.PUBLISHED.value, DocumentStatus.REVIEW_PENDING.value)
# The indexes kept current by every finished ingestion.
KEPT_CURRENT = (IndexState.ACTIVE.value, IndexState.BUILDING.value, IndexState.READY.value)
LIVE = (TaskStatus.QUEUED.value, TaskStatus.RUNNING.value, TaskStatus.RETRY_WAIT.value)
INSERT_BATCH = 1000  # tasks a statement queues at most
# Asked by every finished ingestion: compiled once (building it per call cost ~0.3 ms
# of a small document's finish). OR, not IN: a list becomes an expanding parameter,
# which compiled-once SQL cannot carry (see core.ledger.statements).
_KEPT_CURRENT_OTHERS = Prepared(
    select(I.id).where(
        or_(*(I.state == state for state in KEPT_CURRENT)), I.id != bindparam("p_written")
    )
)


@dataclass(frozen=True)
class CampaignProgress:
    """An index's campaign: its tasks by status."""

    index: IndexView
    by_status: Mapping[str, int]

    @property
    def total(self) -> int:
        return sum(self.by_status.values())

    @property
    def done(self) -> int:
        return self.by_status.get(TaskStatus.SUCCEEDED.value, 0)

    def to_dict(self) -> dict[str, Any]:
        return self.index.to_dict() | {
            "campaign": {"total": self.total, "done": self.done, "by_status": dict(self.by_status)}
        }


def queue_reembedding(
    conn: Connection,
    index_id: int,
    document_ids: Sequence[str],
    *,
    now: float,
    max_attempts: int,
    new_id: Callable[[], str],
    actor: str,
) -> int:
    """One re-embedding task per version, queued in the caller's transaction."""
    if not document_ids:
        return 0
    # Writers are serialised (core.ledger.statements.next_revision), so the block of
    # revisions after the current highest is this transaction's.
    revision = conn.execute(select(func.coalesce(func.max(T.revision), 0))).scalar_one()
    tasks = []
    for n, document_id in enumerate(document_ids, start=1):
        tasks.append(
            {
                "id": new_id(),
                "document_id": document_id,
                "status": TaskStatus.QUEUED.value,
                "previous_status": None,
                "stage": Stage.EMBEDDING.value,
                "completed": 0,
                "total": 1,
                "attempt": 0,
                "max_attempts": max_attempts,
                "error_code": None,
                "error_detail": None,
                "worker_id": None,
                "lease_expires_at": None,
                "next_attempt_at": now,
                "progress_at": None,
                "options": json.dumps({"index": str(index_id)}),
                "created_at": now,
                "updated_at": now,
                "revision": revision + n,
                "index_id": index_id,
            }
        )
    for start in range(0, len(tasks), INSERT_BATCH):
        part = tasks[start : start + INSERT_BATCH]
        conn.execute(insert(TASKS), part)
        rows.record_events(
            conn, part, actor=actor, at=now, reason=f"re-embedding into index {index_id}"
        )
    # A ready index with work again is building until that work is done.
    conn.execute(
        update(INDEXES)
        .where(I.id == index_id, I.state == IndexState.READY.value)
        .values(state=IndexState.BUILDING.value, built_at=None)
    )
    return len(tasks)


def missing_versions(conn: Connection, index_id: int) -> list[str]:
    """The servable versions with chunks, no vectors in the index and no live task
    of its campaign: what a campaign still has to queue."""
    has_chunks = exists().where(CHUNKS.c.document_id == DOCUMENTS.c.id)
    has_vectors = (
        select(CHUNKS.c.id)
        .join(CHUNK_VECTORS, CHUNK_VECTORS.c.chunk_id == CHUNKS.c.id)
        .where(CHUNKS.c.document_id == DOCUMENTS.c.id, CHUNK_VECTORS.c.index_id == index_id)
        .exists()
    )
    live_task = (
        select(T.id)
        .where(T.document_id == DOCUMENTS.c.id, T.index_id == index_id, T.status.in_(LIVE))
        .exists()
    )
    query = (
        select(DOCUMENTS.c.id)
        .where(DOCUMENTS.c.status.in_(SERVABLE), has_chunks, ~has_vectors, ~live_task)
        .order_by(DOCUMENTS.c.created_at, DOCUMENTS.c.id)
    )
    return list(conn.execute(query).scalars())


def keep_current(
    conn: Connection,
    document_id: str,
    written_index_id: int | None,
    *,
    now: float,
    max_attempts: int,
    new_id: Callable[[], str],
    actor: str,
) -> None:
    """After an ingestion wrote its chunks (and vectors into ``written_index_id``):
    a re-embedding task for every other index kept current. With one index (the
    usual case) this is one look-up in a table of a few rows."""
    others = _KEPT_CURRENT_OTHERS.rows(conn, {"p_written": written_index_id or -1})
    for (index_id,) in others:
        queue_reembedding(
            conn,
            index_id,
            [document_id],
            now=now,
            max_attempts=max_attempts,
            new_id=new_id,
            actor=actor,
        )


def settle(conn: Connection, index_id: int, now: float) -> None:
    """A building index with nothing left to run or failed is ready."""
    unfinished = (
        select(T.id)
        .where(
            T.index_id == index_id,
            T.status.in_((*LIVE, TaskStatus.FAILED.value)),
        )
        .exists()
    )
    conn.execute(
        update(INDEXES)
        .where(I.id == index_id, I.state == IndexState.BUILDING.value, ~unfinished)
        .values(state=IndexState.READY.value, built_at=now)
    )


def replace_vectors(
    conn: Connection, index_id: int, document_id: str, vectors: Mapping[int, bytes]
) -> bool:
    """A version's vectors in one index, by chunk ordinal, replacing any it had
    there. False (nothing written) if its chunks are not those the vectors were
    made from (ordinals differ)."""
    ids = dict(
        conn.execute(
            select(CHUNKS.c.ordinal, CHUNKS.c.id).where(CHUNKS.c.document_id == document_id)
        ).all()
    )
    if set(ids) != set(vectors):
        return False
    old = select(CHUNK_VECTORS.c.id).where(
        CHUNK_VECTORS.c.index_id == index_id, CHUNK_VECTORS.c.chunk_id.in_(list(ids.values()))
    )
    if conn.execute(old.limit(1)).first() is not None:
        conn.execute(update(INDEXES).where(I.id == index_id).values(deletions=I.deletions + 1))
        conn.execute(delete(CHUNK_VECTORS).where(CHUNK_VECTORS.c.id.in_(old.scalar_subquery())))
    if vectors:
        conn.execute(
            insert(CHUNK_VECTORS),
            [
                {"index_id": index_id, "chunk_id": ids[ordinal], "vector": vector}
                for ordinal, vector in sorted(vectors.items())
            ],
        )
    return True


class ChunksChanged(Exception):
    """Rolls a re-embedding finish back: the version's chunks changed under it."""


def finish_in(
    conn: Connection,
    claim: Claim,
    index_id: int,
    vectors: Mapping[int, bytes],
    params: Mapping[str, Any],
    now: float,
) -> str:
    """See WorkQueue.finish_reembedding (its transaction)."""
    from core.ledger.statements import FINISH

    found = FINISH.rows(conn, params)
    if not found:
        return "lost"
    if vectors and not replace_vectors(conn, index_id, claim.document_id, vectors):
        raise ChunksChanged
    settle(conn, index_id, now)
    rows.record_events(conn, [found[0]._asdict()], actor=claim.worker_id, at=now)
    return "succeeded"


class Campaigns:
    """An operator's side of indexes: create one (and its campaign), resume, cancel,
    activate, drop; and each campaign's progress."""

    def __init__(
        self,
        transactions: Transactions,
        settings: Settings,
        clock: Callable[[], float],
        ids: Callable[[], str],
    ) -> None:
        self._tx = transactions
        self.settings = settings
        self.clock = clock
        self.ids = ids
        # Called with an index's id before it is activated: the ledger hands it
        # search's warm-up (core.ledger.hybrid.Searcher.warm_before_activation).
        self.before_activate: Callable[[str | int], Awaitable[object]] | None = None

    async def create(
        self, key: IndexKey, *, name: str | None = None, actor: str = "system"
    ) -> CampaignProgress:
        """A new index for ``key``, building, with a re-embedding task for every
        servable version (none: it is ready at once; the ledger's first index is
        active at once).

        Raises:
            Conflict: the ledger already has an index for this embedder.
        """
        now = self.clock()

        def tx(conn: Connection) -> CampaignProgress:
            existing = find_index(conn, key)
            if existing is not None:
                raise Conflict(
                    f"index {index_row(conn, existing).name!r} is already this embedder "
                    "(see: ingestdesk index list; resume it to catch it up)"
                )
            index_id = ensure_index(conn, key, now, name=name)
            self._queue_missing(conn, index_id, now, actor)
            settle(conn, index_id, now)
            return _progress(conn, index_id)

        return await self._tx.write(tx)

    async def resume(self, name_or_id: str | int, *, actor: str = "system") -> CampaignProgress:
        """Queue what the index still lacks (versions published since it was retired,
        tasks cancelled), and requeue its failed tasks."""
        now = self.clock()

        def tx(conn: Connection) -> CampaignProgress:
            row = index_row(conn, name_or_id)
            if row.state == IndexState.RETIRED.value:
                conn.execute(
                    update(INDEXES).where(I.id == row.id).values(state=IndexState.BUILDING.value)
                )
            failed = list(
                conn.execute(
                    select(T.id).where(T.index_id == row.id, T.status == TaskStatus.FAILED.value)
                ).scalars()
            )
            from core.ledger.requeue import requeue_failed

            for task_id in failed:
                # A failed task whose version is gone stays failed (Conflict), and
                # missing_versions does not ask for that version again.
                with contextlib.suppress(Conflict):
                    requeue_failed(
                        conn,
                        task_id,
                        now=now,
                        max_attempts=self.settings.max_attempts,
                        actor=actor,
                        reason="campaign resumed",
                    )
            self._queue_missing(conn, row.id, now, actor)
            settle(conn, row.id, now)
            return _progress(conn, row.id)

        return await self._tx.write(tx)

    def _queue_missing(self, conn: Connection, index_id: int, now: float, actor: str) -> int:
        return queue_reembedding(
            conn,
            index_id,
            missing_versions(conn, index_id),
            now=now,
            max_attempts=self.settings.max_attempts,
            new_id=self.ids,
            actor=actor,
        )

    async def progress(self, name_or_id: str | int) -> CampaignProgress:
        def tx(conn: Connection) -> CampaignProgress:
            return _progress(conn, index_row(conn, name_or_id).id)

        return await self._tx.read(tx)

    async def cancel(
        self, name_or_id: str | int, *, actor: str = "system", reason: str | None = None
    ) -> CampaignProgress:
        """Cancel the campaign's queued, running and waiting tasks (a running one's
        worker finds its next fenced write refused and stops). The index keeps what
        was written; ``resume`` goes on from there."""
        now = self.clock()

        def tx(conn: Connection) -> CampaignProgress:
            row = index_row(conn, name_or_id)
            _cancel_tasks(conn, row.id, now, actor, reason or "campaign cancelled")
            return _progress(conn, row.id)

        return await self._tx.write(tx)

    async def activate(self, name_or_id: str | int, *, force: bool = False) -> IndexView:
        """Make a ready index the one search answers from; the active one is retired,
        in the same transaction.

        Raises:
            Conflict: the index is not ready (its campaign has tasks left or failed;
                ``force`` activates a building index anyway, knowing versions lack
                vectors), or it is already active.
        """
        if self.before_activate is not None:
            await self.before_activate(name_or_id)
        now = self.clock()

        def tx(conn: Connection) -> IndexView:
            row = index_row(conn, name_or_id)
            allowed = [IndexState.READY.value] + (
                [IndexState.BUILDING.value, IndexState.RETIRED.value] if force else []
            )
            if row.state not in allowed:
                progress = _progress(conn, row.id)
                left = {
                    s: n for s, n in progress.by_status.items() if s != TaskStatus.SUCCEEDED.value
                }
                detail = ", ".join(f"{n} {s}" for s, n in sorted(left.items())) or "none left"
                raise Conflict(
                    f"index {row.name!r} is {row.state}, not ready (campaign: {detail}); "
                    "wait for it, resume it, or activate with --force"
                )
            conn.execute(
                update(INDEXES)
                .where(I.state == IndexState.ACTIVE.value)
                .values(state=IndexState.RETIRED.value)
            )
            conn.execute(
                update(INDEXES)
                .where(I.id == row.id)
                .values(state=IndexState.ACTIVE.value, activated_at=now)
            )
            return index_view(index_row(conn, row.id))

        return await self._tx.write(tx)

    async def drop(self, name_or_id: str | int, *, actor: str = "system") -> IndexView:
        """Remove an index that is not active, with its vectors; its campaign's tasks
        still to run are cancelled.

        Raises:
            Conflict: the index is active (activate another first).
        """
        now = self.clock()

        def tx(conn: Connection) -> IndexView:
            row = index_row(conn, name_or_id)
            if row.state == IndexState.ACTIVE.value:
                raise Conflict(
                    f"index {row.name!r} is active: search answers from it; "
                    "activate another index before dropping this one"
                )
            gone = index_view(
                row,
                conn.execute(
                    select(func.count()).where(CHUNK_VECTORS.c.index_id == row.id)
                ).scalar_one(),
            )
            _cancel_tasks(conn, row.id, now, actor, "index dropped")
            conn.execute(delete(CHUNK_VECTORS).where(CHUNK_VECTORS.c.index_id == row.id))
            conn.execute(delete(INDEXES).where(I.id == row.id))
            return gone

        return await self._tx.write(tx)


def _cancel_tasks(conn: Connection, index_id: int, now: float, actor: str, reason: str) -> None:
    from core.ledger.statements import TASK_COLUMNS, next_revision

    cancelled = conn.execute(
        update(TASKS)
        .where(and_(T.index_id == index_id, T.status.in_(LIVE)))
        .values(
            status=TaskStatus.CANCELLED.value,
            previous_status=T.status,
            worker_id=None,
            lease_expires_at=None,
            next_attempt_at=None,
            updated_at=now,
            revision=next_revision(),
        )
        .returning(*TASK_COLUMNS, T.previous_status)
    ).all()
    rows.record_events(conn, [r._mapping for r in cancelled], actor=actor, at=now, reason=reason)


def _progress(conn: Connection, index_id: int) -> CampaignProgress:
    row = conn.execute(select(INDEXES).where(I.id == index_id)).one()
    vectors = conn.execute(
        select(func.count()).where(CHUNK_VECTORS.c.index_id == index_id)
    ).scalar_one()
    by_status: dict[str, int] = dict(
        conn.execute(
            select(T.status, func.count()).where(T.index_id == index_id).group_by(T.status)
        ).all()
    )
    return CampaignProgress(index_view(row, vectors), by_status)
