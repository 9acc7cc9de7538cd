"""Steps inside a transaction that more than one role takes: finding a row by a short
id, writing the audit history, and moving a document along with its task.

Every function here takes an open :class:`~sqlalchemy.engine.Connection` and runs in
the caller's transaction; none commits.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Row, Select, Table, bindparam, func, insert, select
from sqlalchemy.engine import Connection

from core.errors import BadInput, Conflict, NotFound
from core.filters import fold
from core.ledger.prepared import Prepared
from core.ledger.schema import DOCUMENT_EVENTS, DOCUMENTS, TASKS
from core.ledger.statements import INSERT_EVENTS, MOVE_DOCUMENT, TASK_COLUMNS
from core.ledger.views import DocumentView, TaskView
from core.states import DocumentKind, DocumentStatus

SHORT_ID_MIN = 4  # characters a task/document id prefix needs to be accepted
_ID_PREFIX = re.compile(rf"[0-9a-f]{{{SHORT_ID_MIN},32}}")


def is_id_prefix(ident: str) -> bool:
    """Whether ``ident`` has the form of an id or an id prefix (see resolve_id)."""
    return _ID_PREFIX.fullmatch(ident.strip().lower()) is not None


def draft_row(
    doc_id: str, name: str, kind: DocumentKind, key: str, digest: str, size: int, now: float
) -> dict[str, object]:
    """A new document's row, a draft at version 1 of its own family, not yet written.
    Its name is stored folded beside it: filters match names by the folded text, and
    folding in SQL would call Python once a row and a term on SQLite, holding the GIL
    for the whole statement (a 32-term filter over 2 400 tasks: 37 ms against 6 ms)."""
    return {
        "id": doc_id,
        "family_id": doc_id,
        "version_no": 1,
        "filename": name,
        "filename_folded": fold(name),
        "sha256": digest,
        "object_key": key,
        "size": size,
        "kind": kind.value,
        "status": DocumentStatus.DRAFT.value,
        "version": 1,
        "created_at": now,
        "updated_at": now,
    }


def resolve_id(conn: Connection, table: Table, ident: str, what: str) -> str:
    """Accept a full id or a unique prefix (as the dashboard shows them)."""
    ident = ident.strip().lower()
    if not is_id_prefix(ident):
        raise NotFound(
            f"no {what} {ident!r} (ids are hexadecimal, at least {SHORT_ID_MIN} characters)"
        )
    if len(ident) == 32:
        if conn.execute(select(table.c.id).where(table.c.id == ident)).first() is None:
            raise NotFound(f"no {what} {ident}")
        return ident
    # A range on the primary key, not LIKE: uses the index on both backends.
    matches = conn.execute(
        select(table.c.id).where(table.c.id >= ident).where(table.c.id < ident + "g").limit(2)
    ).all()
    if not matches:
        raise NotFound(f"no {what} {ident}")
    if len(matches) > 1:
        raise BadInput(f"{what} id {ident} is ambiguous; give more characters")
    return str(matches[0].id)


def task_row(conn: Connection, task_id: str) -> Row[Any]:
    row = conn.execute(select(TASKS).where(TASKS.c.id == task_id)).first()
    if row is None:
        raise NotFound(f"no task {task_id}")
    return row


def document_row(conn: Connection, document_id: str) -> Row[Any]:
    row = conn.execute(select(DOCUMENTS).where(DOCUMENTS.c.id == document_id)).first()
    if row is None:
        raise NotFound(f"no document {document_id}")
    return row


def tasks_with_names() -> Select[Any]:
    """Tasks with their document's name (None once the document is gone), as every
    TaskView is read."""
    return select(*TASK_COLUMNS, DOCUMENTS.c.filename).select_from(
        TASKS.outerjoin(DOCUMENTS, DOCUMENTS.c.id == TASKS.c.document_id)
    )


def task_view(conn: Connection, task_id: str) -> TaskView | None:
    """One task as a view, by full id; None if there is no such task."""
    row = conn.execute(tasks_with_names().where(TASKS.c.id == task_id)).first()
    return None if row is None else TaskView.from_row(row, document_name=row.filename)


DOCUMENT_NAME = select(DOCUMENTS.c.filename).where(DOCUMENTS.c.id == bindparam("p_document_id"))


def document_name(conn: Connection, document_id: str) -> str | None:
    """A document's name, as a TaskView carries it (None once the document is gone)."""
    found = conn.execute(DOCUMENT_NAME, {"p_document_id": document_id}).scalar()
    return None if found is None else str(found)


# A claim reads its documents and whether their bytes are shared. On SQLite these
# run compiled once, one index seek per document: there is no round trip to save, and
# building the IN (...) statements per claim cost more than every read they made
# (profiled: ~0.5 ms of a ~1.6 ms claim transaction). PostgreSQL keeps one set-based
# statement each, where a statement per document would be a network round trip each.
_DOCUMENT_BY_ID = Prepared(select(DOCUMENTS).where(DOCUMENTS.c.id == bindparam("p_id")))
_CONTENT_HOLDERS = Prepared(
    select(func.count()).select_from(DOCUMENTS).where(DOCUMENTS.c.sha256 == bindparam("p_sha256"))
)


def documents_by_id(conn: Connection, document_ids: Iterable[str]) -> dict[str, DocumentView]:
    ids = list(document_ids)
    if not ids:
        return {}
    if conn.dialect.name == "sqlite":
        views = (
            DocumentView.from_row(r._asdict())
            for i in dict.fromkeys(ids)
            for r in _DOCUMENT_BY_ID.rows(conn, {"p_id": i})
        )
        return {v.document_id: v for v in views}
    found = conn.execute(select(DOCUMENTS).where(DOCUMENTS.c.id.in_(ids))).all()
    return {r.id: DocumentView.from_row(r) for r in found}


def shared_contents(conn: Connection, sha256s: Iterable[str]) -> set[str]:
    """Those of ``sha256s`` that more than one document version holds (an index seek
    each, through ix_documents_sha256)."""
    wanted = set(sha256s)
    if not wanted:
        return set()
    if conn.dialect.name == "sqlite":
        return {
            sha256
            for sha256 in wanted
            if _CONTENT_HOLDERS.rows(conn, {"p_sha256": sha256})[0][0] > 1
        }
    query = (
        select(DOCUMENTS.c.sha256)
        .where(DOCUMENTS.c.sha256.in_(wanted))
        .group_by(DOCUMENTS.c.sha256)
        .having(func.count() > 1)
    )
    return set(conn.execute(query).scalars())


def record_events(
    conn: Connection,
    rows: Iterable[Mapping[Any, Any]],
    *,
    actor: str,
    at: float,
    reason: str | None = None,
) -> None:
    """Append one history line per transitioned task row (id, status,
    previous_status, stage, attempt, error_code), in the same transaction."""
    events = [
        {
            "task_id": r["id"],
            "at": at,
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


def move_document(
    conn: Connection,
    document_id: str,
    source: DocumentStatus,
    target: DocumentStatus,
    *,
    at: float,
) -> None:
    """Move the document with its task (see PAIRED_DOCUMENT_STATUS), or refuse.

    Refusing raises Conflict, which rolls the task's change back too: the pair is
    never split.
    """
    moved = MOVE_DOCUMENT.rowcount(
        conn,
        {
            "p_document_id": document_id,
            "p_source": source.value,
            "p_target": target.value,
            "p_now": at,
        },
    )
    if moved == 1:
        return
    gone = conn.execute(select(DOCUMENTS.c.id).where(DOCUMENTS.c.id == document_id)).first()
    if gone is None:
        # A task outlives its deleted document (document_not_found): there is no
        # document status left to pair with.
        return
    raise Conflict(f"document {document_id[:8]} is not {source}; the task change was not applied")


def record_document_event(
    conn: Connection,
    doc: Any,
    *,
    action: str,
    actor: str,
    at: float,
    from_status: str | None,
    to_status: str | None,
    reason: str | None = None,
) -> None:
    """Append one line to a document's history, in the caller's transaction."""
    conn.execute(
        insert(DOCUMENT_EVENTS).values(
            family_id=doc.family_id,
            document_id=doc.id,
            version_no=doc.version_no,
            at=at,
            actor=actor,
            action=action,
            from_status=from_status,
            to_status=to_status,
            reason=reason,
        )
    )


def at_most(conn: Connection, rows: Select[Any], bound: int, options: Mapping[str, Any]) -> bool:
    """Whether ``rows`` are at most ``bound`` (counted no further): whether a filter's
    few documents, versions or tasks are few enough to start a list from them."""
    bounded = rows.limit(bound + 1).subquery()
    counted = conn.execute(select(func.count()).select_from(bounded), execution_options=options)
    return int(counted.scalar() or 0) <= bound
