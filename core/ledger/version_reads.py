"""Reads of document versions: a document's versions and history, the review
queue (versions waiting for a person, oldest first), and which version an id means
for an action. Each function runs inside the caller's transaction."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, func, select
from sqlalchemy.engine import Connection

from core.errors import BadInput, Conflict, NotFound
from core.ledger import rows
from core.ledger.schema import CHUNKS, DOCUMENT_EVENTS, DOCUMENTS
from core.ledger.views import ChunkView, DocumentEventView, DocumentView
from core.states import DocumentStatus

D = DOCUMENTS.c
E = DOCUMENT_EVENTS.c
REVIEW_QUEUE_MAX = 500  # versions the review queue lists at most
# Versions that keep their chunks: what `chunks` shows of the version an id names.
HOLDS_CHUNKS = (DocumentStatus.REVIEW_PENDING, DocumentStatus.PUBLISHED, DocumentStatus.WITHDRAWN)
# What `chunks DOCUMENT` shows when the version the id names has none: what search
# finds, else what was taken out of it (at most one version is either, see
# core.ledger.versions).
SHOWN_FOR_DOCUMENT = (DocumentStatus.PUBLISHED, DocumentStatus.WITHDRAWN)


@dataclass(frozen=True)
class Acting:
    """Which version an action on an id acts on (see :func:`acting_version`).

    Attributes:
        named: The version the id is the id (or a prefix) of.
        family: Every version of its document, oldest first.
        candidates: The document's versions the action could act on.
        target: The version it acts on; None when the rule picks none.
    """

    named: Row[Any]
    family: list[Row[Any]]
    candidates: list[Row[Any]]
    target: Row[Any] | None

    @property
    def names_document(self) -> bool:
        """The id is the document's own name (its first version's id)."""
        return bool(self.named.id == self.named.family_id)


def acting_version(
    conn: Connection,
    document_id: str,
    eligible: Collection[DocumentStatus],
    *,
    instead: Collection[DocumentStatus] | None = None,
    exact: bool = False,
) -> Acting:
    """The version an action on ``document_id`` (a full id or a unique prefix) acts on.

    A document is named by its first version's id, so that id names two things: the
    document, and version 1. The rule:

    1. the version the id names, if its status is ``eligible``: an id always acts on
       its own version when it can;
    2. else, when the id is the document's name (its first version's id) and not
       ``exact``, the one version of the document whose status is ``instead``
       (default: ``eligible``), if exactly one is;
    3. else none (``target`` is None): the caller refuses, naming ``candidates``.

    A later version's id names only that version: ``reject V2`` never turns down
    another version. ``exact`` (an expected row version was given: that number
    belongs to the version the id names) turns step 2 off.

    Raises:
        NotFound: No version has that id.
        BadInput: The prefix is ambiguous.
    """
    named = rows.document_row(conn, rows.resolve_id(conn, DOCUMENTS, document_id, "document"))
    family = list(
        conn.execute(
            select(DOCUMENTS).where(D.family_id == named.family_id).order_by(D.version_no)
        ).all()
    )
    wanted = {s.value for s in (eligible if instead is None else instead)}
    candidates = [v for v in family if v.status in wanted and v.id != named.id]
    target: Row[Any] | None = None
    if named.status in {s.value for s in eligible}:
        target = named
    elif named.id == named.family_id and not exact and len(candidates) == 1:
        target = candidates[0]
    return Acting(named=named, family=family, candidates=candidates, target=target)


def describe(version: Any, family: Collection[Any]) -> str:
    """A version as a refusal names it: ``document ab12cd34`` for a document of one
    version, else ``version 2 (ef56ab78) of document ab12cd34``."""
    if len(family) <= 1:
        return f"document {version.id[:8]}"
    return f"version {version.version_no} ({version.id[:8]}) of document {version.family_id[:8]}"


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


def draft_to_submit(conn: Connection, document_id: str, *, exact: bool) -> str:
    """The draft that submitting ``document_id`` submits: the version it names if that
    is a draft; for the document's name (its first version's id), its one draft (a
    new version uploaded with ``--replaces``) unless ``exact``.

    Raises:
        Conflict: no such draft (the refusal names the version and what there is).
    """
    acting = acting_version(conn, document_id, (DocumentStatus.DRAFT,), exact=exact)
    if acting.target is None:
        raise Conflict(refusal(acting, "only draft documents can be submitted", "submit"))
    return str(acting.target.id)


def newer_published(family: Collection[Any], version: Any) -> Any | None:
    """The document's published version if it is newer than ``version``."""
    return next(
        (
            v
            for v in family
            if v.status == DocumentStatus.PUBLISHED.value and v.version_no > version.version_no
        ),
        None,
    )


def going_back(newer: Any) -> str:
    """Why an older version is not published over a newer one, and what to do."""
    return (
        f"version {newer.version_no} ({newer.id[:8]}) is published and newer: upload "
        "the old content as a new version to go back"
    )


def refusal(acting: Acting, rule: str, action: str) -> str:
    """Why an action acts on no version (``acting.target`` is None): the version the
    id names, its status and the ``rule``, then what the document has instead."""
    named, family = acting.named, acting.family
    message = f"{describe(named, family)} is {named.status}; {rule}"
    others = acting.candidates
    if len(others) == 1:
        other = others[0]
        # The document's name reaches its one such version unless a row version was
        # expected: that number is the named version's, not this one's.
        how = (
            f"{action} it by its own id, whose row version you expect"
            if acting.names_document
            else f"{action} that"
        )
        return f"{message}; its version {other.version_no} ({other.id[:8]}) {_is(other)}: {how}"
    if others:
        listed = " and ".join(f"version {v.version_no} ({v.id[:8]}) {_is(v)}" for v in others)
        return f"{message}; its {listed}: {action} one of them by its own id"
    newer = newer_published(family, named)
    if action == "publish" and newer is not None:
        return f"{message}; {going_back(newer)}"
    newest = family[-1]
    if newest.id != named.id:
        # What the document is now, for an id that names an older version.
        return (
            f"{message}; its newest version, {newest.version_no} ({newest.id[:8]}), {_is(newest)}"
        )
    return message


def _is(version: Any) -> str:
    if version.status == DocumentStatus.REVIEW_PENDING.value:
        return "waits for review"
    return f"is {version.status}"


def history(conn: Connection, document_id: str) -> list[DocumentEventView]:
    """The document's history (every version's), oldest first. A deleted document's
    history is still there, named as a live one is: by any of its versions' ids or a
    unique prefix of one."""
    family = family_in_history(conn, document_id)
    query = select(DOCUMENT_EVENTS).where(E.family_id == family).order_by(E.at, E.id)
    # A document from before the history was kept (schema 0007) has none: empty.
    return [DocumentEventView.from_row(r) for r in conn.execute(query)]


def family_in_history(conn: Connection, document_id: str) -> str:
    """The document (family) id of a version id or prefix, among the documents in
    the ledger first and then among those deleted, whose history names them.

    A live document wins over a deleted one sharing the prefix: a prefix that found
    a live document yesterday finds it today, whatever was deleted since.

    Raises:
        NotFound: No version, live or deleted, has that id.
        BadInput: The prefix is ambiguous.
    """
    try:
        return family_of(conn, document_id)
    except NotFound:
        if not rows.is_id_prefix(document_id):
            raise  # not an id at all: the refusal says what an id looks like
    ident = document_id.strip().lower()
    # A range, as resolve_id's (document_id has no index of its own: this is the
    # rare path, a document that is gone).
    found = conn.execute(
        select(E.document_id, E.family_id)
        .where(E.document_id >= ident)
        .where(E.document_id < ident + "g")
        .distinct()
        .limit(2)
    ).all()
    if not found:
        raise NotFound(f"no document {ident}")
    if len(found) > 1:
        raise BadInput(f"document id {ident} is ambiguous; give more characters")
    return str(found[0].family_id)


def review_queue(conn: Connection) -> list[DocumentView]:
    """Versions waiting for review, the longest-waiting first."""
    query = (
        select(DOCUMENTS)
        .where(D.status == DocumentStatus.REVIEW_PENDING.value)
        .order_by(D.updated_at, D.id)
        .limit(REVIEW_QUEUE_MAX)
    )
    return [DocumentView.from_row(r) for r in conn.execute(query)]


def retired_by_publishing(conn: Connection, family_id: str) -> DocumentView | None:
    """The version a candidate of the document is compared with: the one publishing
    the candidate retires and replaces in search. That is the published version, else
    a withdrawn one (out of search now, but what publishing takes the place of; its
    status says which); None when the document has neither. Publishing retires both,
    so at most one version is either."""
    found = conn.execute(
        select(DOCUMENTS)
        .where(D.family_id == family_id)
        .where(D.status.in_([s.value for s in SHOWN_FOR_DOCUMENT]))
        .order_by(D.version_no.desc())
    ).all()
    published = [r for r in found if r.status == DocumentStatus.PUBLISHED.value]
    chosen = published or found
    return DocumentView.from_row(chosen[0]) if chosen else None


def document_chunks(conn: Connection, document_id: str) -> tuple[DocumentView, list[ChunkView]]:
    """What ``chunks ID`` shows, in one snapshot: the version whose chunks they are,
    and its chunks. That is the version the id names if it keeps chunks; for a
    document's name (its first version's id) whose first version keeps none (it was
    retired, say), the version search finds, else the withdrawn one; else the named
    version, with no chunks."""
    acting = acting_version(conn, document_id, HOLDS_CHUNKS, instead=SHOWN_FOR_DOCUMENT)
    shown = acting.named if acting.target is None else acting.target
    return DocumentView.from_row(shown), chunk_views(conn, shown.id)


def chunk_views(conn: Connection, document_id: str) -> list[ChunkView]:
    """A version's chunks in order (by full id)."""
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
    return [ChunkView.of(document_id, r) for r in conn.execute(query)]


def page_count(conn: Connection, document_id: str) -> int:
    """Pages a version's chunks come from (0 for text without pages)."""
    found = conn.execute(
        select(func.count(func.distinct(CHUNKS.c.page))).where(CHUNKS.c.document_id == document_id)
    ).scalar()
    return int(found or 0)
