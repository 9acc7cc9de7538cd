"""Document versions: a new version is uploaded beside the published one, and becomes
what search finds only when a person publishes it — in one transaction that also
retires the old version.

Every ``documents`` row is one version; ``family_id`` (the first version's id) names
the document and ``version_no`` counts its versions. A version's chunks are keyed by
its own row, so two versions' chunks never mix, and a worker finishing an old
version's task writes only that version's chunks. Search reads published rows only,
and at most one version of a document is published: publishing a candidate and
retiring the old version is one UPDATE pair in one transaction, so a concurrent
search sees either the old version or the new one, never both and never neither.

Each action here writes the document's history (:data:`DOCUMENT_EVENTS`) with actor,
time and reason, and refuses an illegal move with a :class:`Conflict` that names the
rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Row, delete, insert, select, update
from sqlalchemy.engine import Connection

from core.config import DEFAULT_OCR_REVIEW_BELOW
from core.errors import BadInput, Conflict, NeedsAcceptance
from core.ledger import pages, rows, version_reads
from core.ledger.actions import Operator, history_reason
from core.ledger.indexes import note_vectors_deleted
from core.ledger.schema import CHUNKS, DOCUMENTS, IDEMPOTENCY_KEYS, TASKS
from core.ledger.transactions import Transactions
from core.ledger.version_reads import describe, going_back, newer_published, refusal
from core.ledger.views import DocumentView
from core.safe_text import check_identifier
from core.states import DocumentStatus, TaskStatus
from core.store import Original

D = DOCUMENTS.c
# Versions a new upload supersedes (retires) when it replaces the document: the
# unpublished candidates nobody is processing.
SUPERSEDED = (DocumentStatus.DRAFT, DocumentStatus.FAILED, DocumentStatus.REVIEW_PENDING)
PUBLISHABLE = (DocumentStatus.REVIEW_PENDING, DocumentStatus.WITHDRAWN)


def _reason(reason: str | None, *, needed: str | None = None) -> str | None:
    text = history_reason(reason)
    if text is None and needed is not None:
        raise BadInput(f"{needed} needs a reason (--reason)")
    return text


def _delete_chunks(conn: Connection, document_ids: Sequence[str]) -> None:
    """Drop these versions' chunks and, with them, their page record."""
    if document_ids:
        going = select(CHUNKS.c.id).where(CHUNKS.c.document_id.in_(list(document_ids)))
        note_vectors_deleted(conn, going)
        conn.execute(delete(CHUNKS).where(CHUNKS.c.document_id.in_(list(document_ids))))
        pages.drop_pages(conn, document_ids)


class Versions:
    """Versions and the review desk's decisions: replace, publish, reject,
    withdraw, delete. Read-only processes have none."""

    def __init__(
        self,
        transactions: Transactions,
        operator: Operator,
        clock: Callable[[], float],
        *,
        review_below: float = DEFAULT_OCR_REVIEW_BELOW,
    ) -> None:
        self._tx = transactions
        self._operator = operator
        self.clock = clock
        # Settings.ocr_review_below: the OCR confidence under which a page flags its
        # version (see core.ledger.pages).
        self.review_below = review_below

    async def replace(
        self, document_id: str, data: Original, name: str, *, actor: str = "system"
    ) -> DocumentView:
        """Upload ``data`` as the next version of the document ``document_id`` (any of
        its versions' ids) as a draft candidate. Search keeps finding the published
        version until this one is published. Unpublished candidates nobody is
        processing are superseded (retired, in the history). A version with a task
        queued or running (``processing``) refuses it: that candidate would be
        superseded under its worker.

        Raises:
            Conflict: a version of the document is processing (cancel its task first).
        """
        check_identifier(actor, "actor")
        # Asked before the original is stored too, so an unknown document or a refusal
        # leaves no object behind; the write transaction asks again (the answer may
        # change in between).
        await self._tx.read(lambda conn: _refuse_while_processing(_family(conn, document_id)))
        [draft] = await self._operator.stored_drafts([(data, name)])
        now = self.clock()

        def tx(conn: Connection) -> DocumentView:
            family = _family(conn, document_id)
            _refuse_while_processing(family)
            newest = max(v.version_no for v in family)
            new_id = str(draft["id"])
            row = dict(draft) | {"family_id": family[0].family_id, "version_no": newest + 1}
            conn.execute(insert(DOCUMENTS).values(**row))
            created = rows.document_row(conn, new_id)
            superseded = [v for v in family if v.status in {s.value for s in SUPERSEDED}]
            for old in superseded:
                _retire(
                    conn, old, actor=actor, at=now, reason=f"superseded by version {newest + 1}"
                )
            rows.record_document_event(
                conn,
                created,
                action="upload",
                actor=actor,
                at=now,
                from_status=None,
                to_status=DocumentStatus.DRAFT.value,
                reason=f"new version of {family[0].family_id[:8]}",
            )
            return DocumentView.from_row(created)

        return await self._tx.write(tx)

    async def publish(
        self,
        document_id: str,
        *,
        actor: str = "system",
        expected_version: int | None = None,
        reason: str | None = None,
        accept_low_confidence: bool = False,
    ) -> DocumentView:
        """A person approves a version: review_pending (or withdrawn) → published, and
        the document's previously published version → retired, in one transaction.

        A version flagged for review (:mod:`core.ledger.pages`: a page read by OCR
        under the confidence threshold, or skipped) is published only with
        ``accept_low_confidence``, and the history says what was accepted.

        Which version: the one ``document_id`` names if it may be published; for the
        document's name (its first version's id) whose first version may not, the
        document's one version waiting for review or withdrawn (see
        :func:`~core.ledger.version_reads.acting_version`). The answer is the version
        published. ``expected_version`` is the row version of the version the id
        names, and with it that version is the only one acted on.

        Raises:
            Conflict: no version of the document (or not exactly one) may be
                published, or (``expected_version``) it changed since the reviewer
                looked.
            NeedsAcceptance: the version is flagged and ``accept_low_confidence``
                was not given (a Conflict: nothing changed).
        """
        check_identifier(actor, "actor")
        why = _reason(reason)
        now = self.clock()
        rule = "only versions waiting for review (or withdrawn) can be published"

        def tx(conn: Connection) -> DocumentView:
            acting = version_reads.acting_version(
                conn, document_id, PUBLISHABLE, exact=expected_version is not None
            )
            before = acting.target
            if before is None:
                raise Conflict(refusal(acting, rule, "publish"))
            newer = newer_published(acting.family, before)
            if newer is not None:
                # Publishing an old version over a newer one would retire the newer
                # one for good: going back is a new version (upload --replaces).
                raise Conflict(
                    f"{describe(before, acting.family)} is {before.status}, but {going_back(newer)}"
                )
            flag = pages.summary(conn, before.id, self.review_below)
            if flag.flagged and not accept_low_confidence:
                raise NeedsAcceptance(
                    f"{describe(before, acting.family)} is flagged for review: {flag.reason}; "
                    "check those pages, then publish accepting them (--accept-low-confidence)"
                )
            accepted = f"accepted as read: {flag.reason}" if flag.flagged else None
            statement = (
                update(DOCUMENTS)
                .where(D.id == before.id)
                .where(D.status.in_([s.value for s in PUBLISHABLE]))
                .values(
                    status=DocumentStatus.PUBLISHED.value,
                    version=D.version + 1,
                    updated_at=now,
                )
                .returning(*DOCUMENTS.c)
            )
            if expected_version is not None:
                statement = statement.where(D.version == expected_version)
            row = conn.execute(statement).first()
            if row is None:
                # Writers are serialised, so only the expected version can differ.
                raise Conflict(
                    f"document {before.id[:8]} changed since you looked: now version "
                    f"{before.version} (you expected {expected_version})"
                )
            # The version search found until now, and older withdrawn ones: all
            # replaced by this one.
            for old in acting.family:
                if old.id != row.id and old.status in {
                    DocumentStatus.PUBLISHED.value,
                    DocumentStatus.WITHDRAWN.value,
                }:
                    _retire(
                        conn,
                        old,
                        actor=actor,
                        at=now,
                        reason=f"replaced by version {row.version_no}",
                    )
            rows.record_document_event(
                conn,
                row,
                action="publish",
                actor=actor,
                at=now,
                from_status=before.status,
                to_status=row.status,
                reason=history_reason("; ".join(r for r in (why, accepted) if r) or None),
            )
            return DocumentView.from_row(row)

        return await self._tx.write(tx)

    async def reject(self, document_id: str, *, actor: str, reason: str) -> DocumentView:
        """A person turns a version down: review_pending → draft, its chunks dropped,
        the reason kept. It may be submitted again."""
        check_identifier(actor, "actor")
        why = _reason(reason, needed="rejecting a version")
        return await self._move(
            document_id,
            DocumentStatus.REVIEW_PENDING,
            DocumentStatus.DRAFT,
            action="reject",
            actor=actor,
            reason=why,
            rule="only versions waiting for review can be rejected",
            drop_chunks=True,
        )

    async def withdraw(self, document_id: str, *, actor: str, reason: str) -> DocumentView:
        """A person takes a published version out of search: published → withdrawn
        (kept, chunks and all; it may be published again)."""
        check_identifier(actor, "actor")
        why = _reason(reason, needed="withdrawing a document")
        return await self._move(
            document_id,
            DocumentStatus.PUBLISHED,
            DocumentStatus.WITHDRAWN,
            action="withdraw",
            actor=actor,
            reason=why,
            rule="only published documents can be withdrawn",
        )

    async def delete(
        self, document_id: str, *, actor: str = "system", reason: str | None = None
    ) -> list[DocumentView]:
        """Remove a document — every version, with its chunks — unless one of its
        tasks is running. Its queued tasks then fail with ``document_not_found`` when
        a worker claims them; the history stays, and idempotency keys that named it
        are forgotten (a repeat then adds the document anew instead of answering
        with a row that is gone). Returns the versions removed.

        Unlike :meth:`replace`, a queued task does not block a delete: the issue's
        contract is that such tasks fail ``document_not_found``."""
        check_identifier(actor, "actor")
        why = _reason(reason)
        now = self.clock()

        def tx(conn: Connection) -> list[DocumentView]:
            family = _family(conn, document_id)
            ids = [v.id for v in family]
            running = conn.execute(
                select(TASKS.c.id)
                .where(TASKS.c.document_id.in_(ids))
                .where(TASKS.c.status == TaskStatus.RUNNING.value)
                .limit(1)
            ).scalar()
            if running is not None:
                raise Conflict(
                    f"task {running[:8]} of document {family[0].family_id[:8]} is running; "
                    "cancel it (or let it finish) before deleting"
                )
            _delete_chunks(conn, ids)
            conn.execute(delete(DOCUMENTS).where(D.id.in_(ids)))
            conn.execute(delete(IDEMPOTENCY_KEYS).where(IDEMPOTENCY_KEYS.c.document_id.in_(ids)))
            for v in family:
                rows.record_document_event(
                    conn,
                    v,
                    action="delete",
                    actor=actor,
                    at=now,
                    from_status=v.status,
                    to_status=None,
                    reason=why,
                )
            return [DocumentView.from_row(v) for v in family]

        return await self._tx.write(tx)

    async def _move(
        self,
        document_id: str,
        source: DocumentStatus,
        target: DocumentStatus,
        *,
        action: str,
        actor: str,
        reason: str | None,
        rule: str,
        drop_chunks: bool = False,
    ) -> DocumentView:
        """Move the version ``document_id`` means for this action (see
        :func:`~core.ledger.version_reads.acting_version`) from ``source`` to
        ``target``, or refuse with ``rule``."""
        now = self.clock()

        def tx(conn: Connection) -> DocumentView:
            acting = version_reads.acting_version(conn, document_id, (source,))
            if acting.target is None:
                raise Conflict(refusal(acting, rule, action))
            doc_id = acting.target.id
            row = conn.execute(
                update(DOCUMENTS)
                .where((D.id == doc_id) & (D.status == source.value))
                .values(status=target.value, version=D.version + 1, updated_at=now)
                .returning(*DOCUMENTS.c)
            ).first()
            if row is None:
                # Writers are serialised (BEGIN IMMEDIATE, PostgreSQL's advisory
                # lock), so this is only a safeguard.
                raise Conflict(f"{describe(acting.target, acting.family)} changed; try again")
            if drop_chunks:
                _delete_chunks(conn, [doc_id])
            rows.record_document_event(
                conn,
                row,
                action=action,
                actor=actor,
                at=now,
                from_status=source.value,
                to_status=target.value,
                reason=reason,
            )
            return DocumentView.from_row(row)

        return await self._tx.write(tx)


def _refuse_while_processing(family: list[Row[Any]]) -> None:
    """Raises Conflict if a version of ``family`` is processing: a new candidate
    would supersede it under its worker."""
    busy = [v for v in family if v.status == DocumentStatus.PROCESSING.value]
    if busy:
        raise Conflict(
            f"version {busy[0].version_no} of document {busy[0].family_id[:8]} "
            f"({busy[0].id[:8]}) is processing; cancel its task or let it finish first"
        )


def _family(conn: Connection, document_id: str) -> list[Row[Any]]:
    """Every version of the document ``document_id`` names, oldest first (the rows
    locked on PostgreSQL, so two replaces cannot both take the next number)."""
    doc_id = rows.resolve_id(conn, DOCUMENTS, document_id, "document")
    family_id = conn.execute(select(D.family_id).where(D.id == doc_id)).scalar_one()
    query = select(DOCUMENTS).where(D.family_id == family_id).order_by(D.version_no)
    if conn.dialect.name == "postgresql":
        query = query.with_for_update()
    return list(conn.execute(query).all())


def _retire(conn: Connection, old: Any, *, actor: str, at: float, reason: str) -> None:
    """Retire a version: kept in the history, its chunks dropped, never searched."""
    conn.execute(
        update(DOCUMENTS)
        .where(D.id == old.id)
        .values(status=DocumentStatus.RETIRED.value, version=D.version + 1, updated_at=at)
    )
    _delete_chunks(conn, [old.id])
    rows.record_document_event(
        conn,
        old,
        action="retire",
        actor=actor,
        at=at,
        from_status=old.status,
        to_status=DocumentStatus.RETIRED.value,
        reason=reason,
    )
