"""Reads of document versions: a document's versions and history, and the review
queue (versions waiting for a person, oldest first). Each function runs inside the
caller's read transaction."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from core.errors import NotFound
from core.ledger import rows
from core.ledger.schema import CHUNKS, DOCUMENT_EVENTS, DOCUMENTS
from core.ledger.views import ChunkView, DocumentEventView, DocumentView
from core.states import DocumentStatus

D = DOCUMENTS.c
REVIEW_QUEUE_MAX = 500  # versions the review queue lists at most


def family_of(conn: Connection, document_id: str) -> str:
    """The document (family) id of any of its versions' ids or prefixes."""
    resolved = rows.resolve_id(conn, DOCUMENTS, document_id, "document")
    found = conn.execute(select(D.family_id).where(D.id == resolved)).scalar()
    if found is None:
        raise NotFound(f"no document {document_id}")
    return str(found)


def versions(conn: Connection, document_id: str) -> list[DocumentView]:
    """Every version of the document, oldest first."""
    family = family_of(conn, document_id)
    query = select(DOCUMENTS).where(D.family_id == family).order_by(D.version_no)
    return [DocumentView.from_row(r) for r in conn.execute(query)]


def history(conn: Connection, document_id: str) -> list[DocumentEventView]:
    """The document's history (every version's), oldest first. A deleted document's
    history is still there: ``document_id`` may then be its full id only."""
    try:
        family, exists = family_of(conn, document_id), True
    except NotFound:
        family, exists = document_id.strip().lower(), False
    query = (
        select(DOCUMENT_EVENTS)
        .where(DOCUMENT_EVENTS.c.family_id == family)
        .order_by(DOCUMENT_EVENTS.c.at, DOCUMENT_EVENTS.c.id)
    )
    found = [DocumentEventView.from_row(r) for r in conn.execute(query)]
    if not found and not exists:
        raise NotFound(f"no document {document_id}")
    # A document from before the history was kept (schema 0007) has none: empty.
    return found


def review_queue(conn: Connection) -> list[DocumentView]:
    """Versions waiting for review, the longest-waiting first."""
    query = (
        select(DOCUMENTS)
        .where(D.status == DocumentStatus.REVIEW_PENDING.value)
        .order_by(D.updated_at, D.id)
        .limit(REVIEW_QUEUE_MAX)
    )
    return [DocumentView.from_row(r) for r in conn.execute(query)]


def published_version(conn: Connection, family_id: str) -> DocumentView | None:
    """The version of the document search finds now, if any."""
    row = conn.execute(
        select(DOCUMENTS)
        .where(D.family_id == family_id)
        .where(D.status == DocumentStatus.PUBLISHED.value)
    ).first()
    return None if row is None else DocumentView.from_row(row)


def chunk_views(conn: Connection, document_id: str) -> list[ChunkView]:
    """A version's chunks in order (by full id)."""
    query = (
        select(
            CHUNKS.c.ordinal, CHUNKS.c.text, CHUNKS.c.page, CHUNKS.c.char_start, CHUNKS.c.char_end
        )
        .where(CHUNKS.c.document_id == document_id)
        .order_by(CHUNKS.c.ordinal)
    )
    return [
        ChunkView(document_id, r.ordinal, r.text, r.page, r.char_start, r.char_end)
        for r in conn.execute(query)
    ]


def page_count(conn: Connection, document_id: str) -> int:
    """Pages a version's chunks come from (0 for text without pages)."""
    found = conn.execute(
        select(func.count(func.distinct(CHUNKS.c.page))).where(CHUNKS.c.document_id == document_id)
    ).scalar()
    return int(found or 0)
