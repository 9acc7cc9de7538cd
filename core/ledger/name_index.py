"""Name filters driven from the trigram index of documents' folded names (0017).

A list is read newest first and stops at its page: a name many documents carry is
found within the first few hundred tasks, but a rare or absent one (``name:zzz``)
reads every task and its document (~7 s at a million tasks on SQLite). The index
finds the documents a name is in; only when they are few does the list start from
them (their tasks by ``tasks.document_id``, then sorted), since the tasks of a
common name (``name:report``, one task in 12) are cheaper found in order than
gathered and sorted. Neither planner can tell the two apart (SQLite knows no sizes
and FTS5 reports none; a statement prepared once is planned for no value), so a
bounded count of the matching documents decides before the list is built: a seek
and a handful of index pages, whatever the ledger's size.

What the index is asked is exactly ``filename_folded LIKE '%value%'``: a phrase of
case-sensitive trigrams of the folded value in the folded name. A value of fewer
than three characters has no trigram: when the newest tasks do not hold a page of
its matches (``name:%``, an emoji: 5-22 s read in order at a million tasks), its
documents are found by reading every document's name instead, one pass over the
documents (~0.2 s at a million on SQLite) rather than over every task and its
document.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import String, column, func, literal, literal_column, select, table, text
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ColumnElement, Select
from sqlalchemy.sql.selectable import NamedFromClause

from core.ledger.rows import at_most
from core.ledger.schema import DOCUMENTS, TASKS

TRIGRAM = 3  # characters of the shortest value the index can find
# What a list costs read each way, measured at a million tasks on SQLite (bench.scale's
# ledger): from the index, ~15 µs a matching document (its tasks sought, the lot
# sorted: 80 ms for name:report-00's 5 461); in order, ~7 µs a task read (name:zzz
# read all 1 000 000 in ~7 s). A list starts from the documents when gathering them is
# the cheaper estimate.
DRIVE_US_PER_DOCUMENT = 15
SCAN_US_PER_TASK = 7
PAGE_MATCHES = 50  # matches the estimate plans for: a screenful
# Documents matching a name at most for a list to start from them where the index
# cannot say how far an ordered read would go (PostgreSQL).
FEW_DOCUMENTS = 2000
# Tasks, newest first, in which a name more documents carry must fill a page for the
# list to be read in order on PostgreSQL (its page found in ~600 at one task in 12).
PROBE_TASKS = 5000
# Documents counted at most to decide: a count past this costs more than it saves.
COUNT_MAX = 100_000

_SQLITE_INDEX = table("documents_name_index", column("rowid"))
POSTGRES_INDEX = "ix_documents_name_trigrams"


def indexable(value: str) -> bool:
    """Whether the index can find ``value`` (a folded, unescaped value). Not with a
    NUL in it: FTS5 reads its query text as a C string ("unterminated string")."""
    return len(value) >= TRIGRAM and "\x00" not in value


def _phrase(value: str) -> str:
    # An FTS5 phrase: its text is tokenized, never read as query syntax (a quote in
    # the value is doubled).
    return '"' + value.replace('"', '""') + '"'


def _like_escaped(value: str) -> str:
    return value.replace("/", "//").replace("%", "/%").replace("_", "/_")


def _indexed(value: str) -> Select[Any]:
    """The rowids of the documents whose folded name contains ``value``, from the
    SQLite ledger's index."""
    phrase = literal(_phrase(value), String)
    return select(_SQLITE_INDEX.c.rowid).where(
        literal_column("documents_name_index").op("MATCH")(phrase)
    )


def _named(named: NamedFromClause, dialect: str, value: str) -> ColumnElement[bool]:
    """Whether a row of ``named`` (documents) carries ``value`` in its folded name,
    in the index's terms."""
    if dialect == "sqlite" and indexable(value):
        return literal_column(f"{named.name}.rowid").in_(_indexed(value))
    pattern = literal("%" + _like_escaped(value) + "%", String)
    return named.c.filename_folded.like(pattern, escape="/")


def named_documents(dialect: str, value: str) -> Select[tuple[str]]:
    """The ids of the documents whose folded name contains ``value``."""
    # An alias: the list's own documents (its join) stay out of this subquery.
    named = DOCUMENTS.alias("named")
    return select(named.c.id).where(_named(named, dialect, value))


def few_named(conn: Connection, value: str, options: Mapping[str, Any]) -> bool:
    """Whether a list matching ``value`` in names is read sooner from the documents
    the index finds than in its own order (executed with ``options``: the filters'
    own statement cache).

    On SQLite, documents' rowids follow their creation, as the list's order follows
    tasks': the :data:`PAGE_MATCHES`-th newest match says how many tasks an ordered
    read would pass before it fills a page, and a bounded count how many documents
    gathering would read. On PostgreSQL (GIN keeps no order) a count against
    :data:`FEW_DOCUMENTS`, and past it whether the newest tasks hold a page of the
    name's; there is no index to ask without pg_trgm (a count by LIKE would read
    every document). A value too short for the index is decided by the newest
    tasks alone, on both backends."""
    if "\x00" in value:
        return False
    if not indexable(value):
        # No trigram to ask: the documents are read by name (see the module's
        # docstring), worth it only when an ordered read would not end soon.
        return not _newest_hold_a_page(conn, value, options)
    if conn.dialect.name == "sqlite":
        return _sqlite_drives(conn, value, options)
    exists = text("SELECT to_regclass(:name)")
    if conn.execute(exists, {"name": POSTGRES_INDEX}, execution_options=options).scalar() is None:
        return False
    if at_most(conn, named_documents(conn.dialect.name, value), FEW_DOCUMENTS, options):
        return True
    return not _newest_hold_a_page(conn, value, options)


def _newest_hold_a_page(conn: Connection, value: str, options: Mapping[str, Any]) -> bool:
    """Whether the newest :data:`PROBE_TASKS` tasks hold a page of ``value``'s: a name
    many documents carry is cheaper read in order only when its tasks are not all old
    (name:report-00, the 5 461 oldest of a million: 2.8 s read in order on
    PostgreSQL). Stops at the page's last match: a common name's costs what its page
    would."""
    newest = (
        select(TASKS.c.document_id)
        .order_by(TASKS.c.created_at.desc(), TASKS.c.id.desc())
        .limit(PROBE_TASKS)
        .subquery()
    )
    named = DOCUMENTS.alias("named")
    matches = (
        select(named.c.id)
        .select_from(newest.join(named, named.c.id == newest.c.document_id))
        .where(_named(named, conn.dialect.name, value))
    )
    return not at_most(conn, matches, PAGE_MATCHES - 1, options)


def _sqlite_drives(conn: Connection, value: str, options: Mapping[str, Any]) -> bool:
    newest = _indexed(value).order_by(_SQLITE_INDEX.c.rowid.desc())
    last_of_page = newest.offset(PAGE_MATCHES - 1).limit(1)
    rowid: int | None = conn.execute(last_of_page, execution_options=options).scalar()
    if rowid is None:
        return True  # not a page of documents: their tasks are few
    newest_rowid: Select[Any] = select(func.max(literal_column("rowid"))).select_from(DOCUMENTS)
    passed = int(conn.execute(newest_rowid, execution_options=options).scalar() or 0) - rowid
    # Gathering n documents beats reading ``passed`` tasks in order while n stays under:
    bound = min(passed * SCAN_US_PER_TASK // DRIVE_US_PER_DOCUMENT, COUNT_MAX)
    return bound > PAGE_MATCHES and at_most(conn, _indexed(value), bound, options)
