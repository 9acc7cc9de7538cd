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
than three characters has no trigram, and is matched as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import String, column, func, literal, literal_column, select, table, text
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ColumnElement, Select
from sqlalchemy.sql.selectable import NamedFromClause

from core.ledger.schema import DOCUMENTS

TRIGRAM = 3  # characters of the shortest value the index can find
# Documents matching a name at most for a list to start from them. Past this, the
# list's own order finds a page sooner: at a million tasks a name in 2 000 documents
# leaves ~25 000 tasks to read in order for 50 matches (~50 ms), as many as gathering
# and sorting its 2 000 tasks costs (measured in bench.scale's ledger, README).
FEW_DOCUMENTS = 2000

_SQLITE_INDEX = table("documents_name_index", column("rowid"))
POSTGRES_INDEX = "ix_documents_name_trigrams"


def indexable(value: str) -> bool:
    """Whether the index can find ``value`` (a folded, unescaped value)."""
    return len(value) >= TRIGRAM


def _phrase(value: str) -> str:
    # An FTS5 phrase: its text is tokenized, never read as query syntax (a quote in
    # the value is doubled).
    return '"' + value.replace('"', '""') + '"'


def _like_escaped(value: str) -> str:
    return value.replace("/", "//").replace("%", "/%").replace("_", "/_")


def _indexed(value: str) -> Select[tuple[int]]:
    """The rowids of the documents whose folded name contains ``value``, from the
    SQLite ledger's index."""
    phrase = literal(_phrase(value), String)
    return select(_SQLITE_INDEX.c.rowid).where(
        literal_column("documents_name_index").op("MATCH")(phrase)
    )


def _named(named: NamedFromClause, dialect: str, value: str) -> ColumnElement[bool]:
    """Whether a row of ``named`` (documents) carries ``value`` in its folded name,
    in the index's terms."""
    if dialect == "sqlite":
        return literal_column(f"{named.name}.rowid").in_(_indexed(value))
    pattern = literal("%" + _like_escaped(value) + "%", String)
    return named.c.filename_folded.like(pattern, escape="/")


def named_documents(dialect: str, value: str) -> Select[tuple[str]]:
    """The ids of the documents whose folded name contains ``value``."""
    # An alias: the list's own documents (its join) stay out of this subquery.
    named = DOCUMENTS.alias("named")
    return select(named.c.id).where(_named(named, dialect, value))


def few_named(conn: Connection, value: str, options: Mapping[str, Any]) -> bool:
    """Whether at most :data:`FEW_DOCUMENTS` documents carry ``value`` in their name,
    and the index can say so cheaply (on PostgreSQL only with pg_trgm's index: a
    count by LIKE alone reads every document). ``options`` execute the count (the
    filters' own statement cache)."""
    if not indexable(value):
        return False
    dialect = conn.dialect.name
    if dialect == "sqlite":
        # The index alone, one row a document: IN (…) would gather every match first
        # (50 ms for name:report's 83 000 at a million; this stops at the bound).
        matching: Select[Any] = _indexed(value)
    else:
        exists = text("SELECT to_regclass(:name)")
        found = conn.execute(exists, {"name": POSTGRES_INDEX}, execution_options=options)
        if found.scalar() is None:
            return False
        matching = named_documents(dialect, value)
    bounded = matching.limit(FEW_DOCUMENTS + 1).subquery()
    counted = conn.execute(select(func.count()).select_from(bounded), execution_options=options)
    return int(counted.scalar() or 0) <= FEW_DOCUMENTS
