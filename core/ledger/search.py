"""Full-text search over the chunks of published document versions, ranked, with a
snippet in which the matched words are marked.

SQLite ranks with FTS5's BM25 (``bm25()``); PostgreSQL, which has no BM25, with
``ts_rank_cd`` normalised by document length (option 1: rank / (1 + log(length))),
the nearest built-in equivalent: both reward the query's words appearing often and
close together in a short chunk. Both backends match every word of the query
(AND), and neither reads user text as query syntax.

Only published rows are searched; at most one version of a document is published
at a time (see :mod:`core.ledger.versions`), so one statement, reading one snapshot,
sees exactly one version of each document.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import ColumnElement, Select, bindparam, func, literal_column, select, text
from sqlalchemy.engine import Connection

from core.ledger.schema import CHUNKS, DOCUMENTS
from core.ledger.views import SearchHit
from core.states import DocumentStatus

MARK_START = "**"  # around each matched word in a snippet
MARK_END = "**"
SNIPPET_WORDS = 16  # words of context in a snippet (FTS5's token count)
SEARCH_LIMIT_MAX = 1000  # hits one search returns at most

_COLUMNS = (
    CHUNKS.c.document_id,
    DOCUMENTS.c.family_id,
    DOCUMENTS.c.version_no,
    DOCUMENTS.c.filename,
    CHUNKS.c.ordinal,
    CHUNKS.c.page,
    CHUNKS.c.text,
)


def query_words(query: str) -> list[str]:
    """The words of a query; everything else (operators, quotes) is dropped."""
    return re.findall(r"\w+", query)


def search_statement(
    backend: str, words: list[str], *, limit: int, include_unpublished: bool
) -> Select[Any]:
    joined = CHUNKS.join(DOCUMENTS, DOCUMENTS.c.id == CHUNKS.c.document_id)
    if backend == "postgresql":
        tsquery = func.plainto_tsquery("simple", bindparam("q", " ".join(words)))
        vector: ColumnElement[Any] = literal_column("chunks.search")
        options = (
            f"StartSel={MARK_START}, StopSel={MARK_END}, MaxWords={SNIPPET_WORDS + 4}, MinWords=6"
        )
        score = func.ts_rank_cd(vector, tsquery, 1).label("score")
        stmt = (
            select(
                *_COLUMNS,
                score,
                func.ts_headline("simple", CHUNKS.c.text, tsquery, options).label("snippet"),
            )
            .select_from(joined)
            .where(vector.op("@@")(tsquery))
            .order_by(score.desc(), CHUNKS.c.document_id, CHUNKS.c.ordinal)
        )
    else:
        # Quoted terms: user text must never be read as FTS5 query syntax.
        fts_query = " ".join('"' + w.replace('"', "") + '"' for w in words)
        stmt = (
            select(
                *_COLUMNS,
                # bm25() is lower for better matches: negated, higher is better on
                # both backends.
                literal_column("-bm25(chunks_fts)").label("score"),
                literal_column(
                    f"snippet(chunks_fts, 0, '{MARK_START}', '{MARK_END}', '…', {SNIPPET_WORDS})"
                ).label("snippet"),
            )
            .select_from(joined.join(text("chunks_fts"), text("chunks_fts.rowid = chunks.id")))
            .where(text("chunks_fts MATCH :q").bindparams(q=fts_query))
            .order_by(text("bm25(chunks_fts)"), CHUNKS.c.document_id, CHUNKS.c.ordinal)
        )
    if not include_unpublished:
        stmt = stmt.where(DOCUMENTS.c.status == DocumentStatus.PUBLISHED.value)
    return stmt.limit(limit)


def run_search(
    conn: Connection, backend: str, query: str, *, limit: int, include_unpublished: bool
) -> list[SearchHit]:
    words = query_words(query)
    if not words:
        return []
    stmt = search_statement(
        backend, words, limit=min(limit, SEARCH_LIMIT_MAX), include_unpublished=include_unpublished
    )
    return [
        SearchHit(
            document_id=r.document_id,
            filename=r.filename,
            ordinal=r.ordinal,
            page=r.page,
            text=r.text,
            family_id=r.family_id,
            version_no=r.version_no,
            score=float(f"{float(r.score):.6g}"),  # six significant digits: bm25 can be tiny
            snippet=r.snippet,
        )
        for r in conn.execute(stmt)
    ]
