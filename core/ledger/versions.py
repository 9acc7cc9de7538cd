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

from core.errors import BadInput, Conflict
from core.ledger import rows
from core.ledger.actions import Operator, history_reason
from core.ledger.schema import CHUNKS, DOCUMENTS, IDEMPOTENCY_KEYS, TASKS
from core.ledger.transactions import Transactions
from core.ledger.views import DocumentView
from core.safe_text import check_identifier
from core.states import DocumentStatus, TaskStatus

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
    if document_ids:
        conn.execute(delete(CHUNKS).where(CHUNKS.c.document_id.in_(list(document_ids))))


class Versions:
    """Versions and the review desk's decisions: replace, publish, reject,
    withdraw, delete. Read-only processes have none."""

    def __init__(
        self,
        transactions: Transactions,
        operator: Operator,
        clock: Callable[[], float],
    ) -> None:
        self._tx = transactions
        self._operator = operator
        self.clock = clock

    async def replace(
        self, document_id: str, data: bytes, name: str, *, actor: str = "system"
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
    ) -> DocumentView:
        """A person approves a version: review_pending (or withdrawn) → published, and
        the document's previously published version → retired, in one transaction.

        Raises:
            Conflict: the version is not waiting for review, or (``expected_version``)
                it changed since the reviewer looked.
        """
        check_identifier(actor, "actor")
        why = _reason(reason)
        now = self.clock()

        def tx(conn: Connection) -> DocumentView:
            doc_id = rows.resolve_id(conn, DOCUMENTS, document_id, "document")
            statement = (
                update(DOCUMENTS)
                .where(D.id == doc_id)
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
            before = rows.document_row(conn, doc_id)
            newer = conn.execute(
                select(D.id, D.version_no)
                .where(D.family_id == before.family_id)
                .where(D.status == DocumentStatus.PUBLISHED.value)
                .where(D.version_no > before.version_no)
            ).first()
            if newer is not None:
                # Publishing an old version over a newer one would retire the newer
                # one for good: going back is a new version (upload --replaces).
                raise Conflict(
                    f"document {doc_id[:8]} is version {before.version_no}; version "
                    f"{newer.version_no} ({newer.id[:8]}) is published and newer: upload "
                    "the old content as a new version to go back"
                )
            row = conn.execute(statement).first()
            if row is None:
                raise Conflict(_why_not_publish(conn, before, expected_version))
            # The version search found until now, and older withdrawn ones: all
            # replaced by this one.
            for old in conn.execute(
                select(DOCUMENTS)
                .where(D.family_id == row.family_id)
                .where(
                    D.status.in_([DocumentStatus.PUBLISHED.value, DocumentStatus.WITHDRAWN.value])
                )
                .where(D.id != doc_id)
            ).all():
                _retire(
                    conn, old, actor=actor, at=now, reason=f"replaced by version {row.version_no}"
                )
            rows.record_document_event(
                conn,
                row,
                action="publish",
                actor=actor,
                at=now,
                from_status=before.status,
                to_status=row.status,
                reason=why,
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
        now = self.clock()

        def tx(conn: Connection) -> DocumentView:
            doc_id = rows.resolve_id(conn, DOCUMENTS, document_id, "document")
            row = conn.execute(
                update(DOCUMENTS)
                .where((D.id == doc_id) & (D.status == source.value))
                .values(status=target.value, version=D.version + 1, updated_at=now)
                .returning(*DOCUMENTS.c)
            ).first()
            if row is None:
                current = rows.document_row(conn, doc_id)
                raise Conflict(f"document {doc_id[:8]} is {current.status}; {rule}")
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


def _why_not_publish(conn: Connection, doc: Any, expected_version: int | None) -> str:
    short = doc.id[:8]
    if doc.status in {s.value for s in PUBLISHABLE}:
        return (
            f"document {short} changed since you looked: now version {doc.version} "
            f"(you expected {expected_version})"
        )
    waiting = conn.execute(
        select(D.id, D.version_no)
        .where(D.family_id == doc.family_id)
        .where(D.status == DocumentStatus.REVIEW_PENDING.value)
        .order_by(D.version_no.desc())
        .limit(1)
    ).first()
    hint = (
        f"; its version {waiting.version_no} ({waiting.id[:8]}) waits for review: publish that"
        if waiting is not None and waiting.id != doc.id
        else ""
    )
    return (
        f"document {short} is {doc.status}; only versions waiting for review (or withdrawn) "
        f"can be published{hint}"
    )
