"""Full-text search over the chunks of published document versions, ranked, with a
snippet in which the matched words are marked.

SQLite ranks with FTS5's BM25 (``bm25()``); PostgreSQL, which has no BM25, with
``ts_rank_cd`` normalised by document length (option 1: rank / (1 + log(length))),
the nearest built-in equivalent: both reward the query's words appearing often and
close together in a short chunk. Both backends match every word of the query
(AND), neither reads user text as query syntax, and both fold case and diacritics
(``cafe`` finds ``café``): FTS5's unicode61 tokenizer by default, PostgreSQL through
the ``ingestdesk_search`` text search configuration (migration 0009: ``simple`` with
``unaccent``), used alike for the indexed column, the query and the snippet.

Words joined by hyphens (``HR-121``, ``E-4471``) are one term whose words must
appear together and in order, as written: a policy number is one thing, and a chunk
holding ``HR-120`` and, elsewhere, ``121`` does not hold ``HR-121``. (PostgreSQL's
parser reads ``HR-121`` as ``hr`` and the integer ``-121``: a number in a query
matches both spellings.)

Chinese, Japanese and Korean text is indexed a character a token on both backends
(:mod:`core.ledger.segment`, migration 0018), and a query's word in those scripts is
the phrase of its characters: ``東京`` finds ``東京都は日本の首都です`` and not
``東の京``. Snippets are cut from the segmented text and shown as written.

Only published rows are searched; at most one version of a document is published
at a time (see :mod:`core.ledger.versions`), so one statement, reading one snapshot,
sees exactly one version of each document.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import ColumnElement, Select, bindparam, func, literal_column, select, text
from sqlalchemy.engine import Connection

from core.errors import BadInput
from core.ledger.schema import CHUNKS, DOCUMENTS
from core.ledger.segment import phrase_marks, query_tokens, unsegment
from core.ledger.views import SearchHit, chunk_place
from core.states import DocumentStatus

MARK_START = "**"  # around each matched word in a snippet
MARK_END = "**"
SNIPPET_WORDS = 16  # words of context in a snippet (FTS5's token count)
SEARCH_LIMIT_MAX = 1000  # hits one search returns at most
# Characters of a query at most, checked before it is split into words: every word is
# matched against the index, so a query's cost grows with its length (10 000 words:
# 0.4 s of the ledger's time on SQLite, 50 000: 6.7 s), and a person's question is a
# line, not a page.
SEARCH_QUERY_MAX = 1000
# PostgreSQL's text search configuration for chunks, queries and snippets: made by
# migration 0009, which generates chunks.search through it. A ledger from before
# 0009 has neither, and its column was made with 'simple'.
PG_SEARCH_CONFIG = "ingestdesk_search"
PG_SEARCH_CONFIG_BEFORE = "simple"
NO_WORDS = "nothing to search for: the query has no words"
_TERM = re.compile(r"\w+(?:-\w+)*")

_COLUMNS = (
    CHUNKS.c.document_id,
    DOCUMENTS.c.family_id,
    DOCUMENTS.c.version_no,
    DOCUMENTS.c.filename,
    CHUNKS.c.ordinal,
    CHUNKS.c.page,
    CHUNKS.c.text,
    CHUNKS.c.location,
)


def query_words(query: str) -> list[str]:
    """The words of a query; everything else (operators, quotes) is dropped."""
    return re.findall(r"\w+", query)


def query_terms(query: str) -> list[list[str]]:
    """The query's terms: a word, or words joined by hyphens (``HR-121``, ``E-4471``,
    ``MSA-2024-118``), which must appear together and in order, as written: a policy
    number is one thing, and ``HR-120 ... 121`` is not ``HR-121``."""
    return [query_words(term) for term in _TERM.findall(query)]


def index_terms(terms: list[list[str]]) -> list[list[str]]:
    """``terms`` as the tokens the index holds: a word in a script written without
    spaces becomes its characters, adjacent and in order (``文字コード`` -> ``文 字
    コ ー ド``); other words stay as they are."""
    return [[token for word in term for token in query_tokens(word)] for term in terms]


def pg_tsquery_text(terms: list[list[str]], *, any_word: bool) -> str:
    """``to_tsquery`` text for ``terms``. PostgreSQL's parser reads ``HR-121`` as the
    word ``hr`` and the signed integer ``-121``, so a number in a query matches
    either spelling. Every operand is a run of word characters, quoted: user text
    never becomes query syntax."""

    def word(w: str) -> str:
        return f"('{w}' | '-{w}')" if w.isdigit() else f"'{w}'"

    phrases = [" <-> ".join(word(w) for w in term) for term in terms]
    return (" | " if any_word else " & ").join(f"({p})" for p in phrases)


def pg_config() -> ColumnElement[Any]:
    """The text search configuration chunks.search was made with: the query and the
    snippet must fold words as the column did. The database says which (one catalog
    lookup a statement; the names are ours, not user text; to_regconfig() is
    PostgreSQL 16's)."""
    return literal_column(
        "coalesce((SELECT oid::regconfig FROM pg_ts_config WHERE cfgname = "
        f"'{PG_SEARCH_CONFIG}' LIMIT 1), '{PG_SEARCH_CONFIG_BEFORE}'::regconfig)"
    )


def pg_tsquery(terms: list[list[str]], *, any_word: bool) -> ColumnElement[Any]:
    return func.to_tsquery(pg_config(), bindparam("q", pg_tsquery_text(terms, any_word=any_word)))


def pg_headline(tsquery: ColumnElement[Any]) -> ColumnElement[Any]:
    options = f"StartSel={MARK_START}, StopSel={MARK_END}, MaxWords={SNIPPET_WORDS + 4}, MinWords=6"
    # Marked in what was indexed (the words must be cut as the query's were), shown
    # as written (unsegment).
    indexed = func.coalesce(CHUNKS.c.search_text, CHUNKS.c.text)
    return func.ts_headline(pg_config(), indexed, tsquery, options).label("snippet")


def fts_query(terms: list[list[str]], *, any_word: bool) -> str:
    """FTS5 query text: each term quoted, so user text is never FTS5 query syntax; a
    term in quotes is an FTS5 phrase (its words adjacent, in order)."""
    return (" OR " if any_word else " ").join('"' + " ".join(term) + '"' for term in terms)


def search_statement(
    backend: str,
    terms: list[list[str]],
    *,
    limit: int,
    include_unpublished: bool,
    any_word: bool = False,
    snippets: bool = True,
) -> Select[Any]:
    """PostgreSQL's ranked statement over the query's terms (:func:`query_terms`);
    ``any_word`` ORs the terms instead of requiring each (not a mode of its own:
    bench.search measures hybrid search with such a leg against the AND leg it
    uses). PostgreSQL computes ``ts_headline`` after the sort and the limit. SQLite
    ranks in steps instead (:func:`sqlite_ranked`)."""
    if backend != "postgresql":
        raise ValueError("SQLite's keyword search is sqlite_ranked")
    joined = CHUNKS.join(DOCUMENTS, DOCUMENTS.c.id == CHUNKS.c.document_id)
    tsquery = pg_tsquery(terms, any_word=any_word)
    vector: ColumnElement[Any] = literal_column("chunks.search")
    score = func.ts_rank_cd(vector, tsquery, 1).label("score")
    shown = [pg_headline(tsquery)] if snippets else []
    stmt = (
        select(CHUNKS.c.id, *_COLUMNS, score, *shown)
        .select_from(joined)
        .where(vector.op("@@")(tsquery))
        .order_by(score.desc(), CHUNKS.c.id)
    )
    if not include_unpublished:
        stmt = stmt.where(DOCUMENTS.c.status == DocumentStatus.PUBLISHED.value)
    return stmt.limit(limit)


# SQLite's keyword ranking reads this many FTS5 matches per hit asked for (and a few
# more) at first, four times more while too few of them were published or ties at the
# edge leave the order open. FTS5 ranks its matches by bm25 holding only (rowid,
# score): at 1M chunks, 14 ms against 30 for the statement that joined every match
# to its chunk and document before sorting (bench.search's 2-word queries, 600-9 000
# matches each).
KEYWORD_FIRST_FETCH = 1.25
KEYWORD_SPARE = 8
KEYWORD_WIDEN = 4
# Ties (the same score: equal texts, or chunks of one length holding each word once)
# go to the older chunk (lower id) on both backends: an order FTS5 gives by itself.
# Ordered by document id and ordinal, as before, a tie at the edge of the limit had
# to read every tied match's row: at 1M chunks, where the bench's chunks are all 40
# words long, a 100-hit ranking took 155 ms p50 against 25 for 10 hits.
_RANK_SQL = text(
    "SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH :q"
    " ORDER BY bm25(chunks_fts), rowid LIMIT :n"
)


def sqlite_ranked(
    conn: Connection, match: str, *, limit: int, include_unpublished: bool
) -> list[tuple[int, float, Any]]:
    """The best ``limit`` chunks for an FTS5 query (by bm25, ties to the lower chunk
    id): (chunk id, bm25, chunk and version row).

    Ranked first by FTS5 alone, then the rows of the best are read by primary key and
    judged published here; while too few of them were published, more are fetched."""
    n = int(limit * KEYWORD_FIRST_FETCH) + KEYWORD_SPARE
    while True:
        ranked = conn.execute(_RANK_SQL, {"q": match, "n": n}).all()
        rows = _chunk_rows(conn, [r[0] for r in ranked])
        kept = [
            (cid, float(score), rows[cid])
            for cid, score in ranked
            if cid in rows
            and (include_unpublished or rows[cid].status == DocumentStatus.PUBLISHED.value)
        ]
        if len(ranked) < n or len(kept) >= limit:
            return kept[:limit]
        n *= KEYWORD_WIDEN


def _chunk_rows(conn: Connection, ids: list[int]) -> dict[int, Any]:
    if not ids:
        return {}
    # Driven by the id list (primary key look-ups), the status read, not filtered on:
    # see core.ledger.candidates.published.
    stmt = (
        select(CHUNKS.c.id, *_COLUMNS, DOCUMENTS.c.status)
        .select_from(CHUNKS.join(DOCUMENTS, DOCUMENTS.c.id == CHUNKS.c.document_id))
        .where(CHUNKS.c.id.in_(ids))
    )
    return {r.id: r for r in conn.execute(stmt)}


def snippets_of(
    conn: Connection, backend: str, query: str, chunk_ids: list[int], *, any_word: bool = False
) -> dict[int, str]:
    """Chunk id -> its snippet for ``query`` (the matched words marked), for the
    chunks shown: hybrid search marks only the hits that made its cut."""
    if not chunk_ids:
        return {}
    terms = _terms(query, any_word)
    if backend == "postgresql":
        stmt = select(CHUNKS.c.id, pg_headline(pg_tsquery(terms, any_word=any_word))).where(
            CHUNKS.c.id.in_(chunk_ids)
        )
        return {r.id: unsegment(phrase_marks(r.snippet, terms)) for r in conn.execute(stmt)}
    stmt_text = text(
        f"SELECT rowid, snippet(chunks_fts, 0, '{MARK_START}', '{MARK_END}', '…',"
        f" {SNIPPET_WORDS}) FROM chunks_fts WHERE chunks_fts MATCH :q"
        f" AND rowid IN ({', '.join(str(int(i)) for i in chunk_ids)})"
    )
    match = fts_query(terms, any_word=any_word)
    return {int(r[0]): unsegment(str(r[1])) for r in conn.execute(stmt_text, {"q": match})}


def _terms(query: str, any_word: bool) -> list[list[str]]:
    # The naive OR leg bench.search measures splits terms too: any word will do.
    terms = [[w] for w in query_words(query)] if any_word else query_terms(query)
    return index_terms(terms)


def check_query(query: str, limit: int) -> list[str]:
    """The words of a query that can be searched for, with at most
    :data:`SEARCH_LIMIT_MAX` hits; every face (CLI, HTTP, dashboard) asks this.

    Raises:
        BadInput: the query has no word (empty, or only punctuation: it would match
            nothing, and saying "no matches" would hide the mistake), or the limit is
            not from 1 to SEARCH_LIMIT_MAX (more would be cut silently), or the
            query is over SEARCH_QUERY_MAX characters.
    """
    if not 1 <= limit <= SEARCH_LIMIT_MAX:
        raise BadInput(f"a search returns from 1 to {SEARCH_LIMIT_MAX} hits (limit {limit} asked)")
    if len(query) > SEARCH_QUERY_MAX:
        raise BadInput(
            f"a search query is at most {SEARCH_QUERY_MAX} characters (this one has {len(query)})"
        )
    words = query_words(query)
    if not words:
        raise BadInput(NO_WORDS)
    return words


def run_search(
    conn: Connection,
    backend: str,
    query: str,
    *,
    limit: int,
    include_unpublished: bool,
    any_word: bool = False,
    snippets: bool = True,
) -> list[SearchHit]:
    """The best ``limit`` chunks for ``query``, best first. ``snippets=False``
    leaves each hit's snippet empty (:func:`snippets_of` marks the ones shown)."""
    return [
        hit
        for _, hit in ranked_hits(
            conn,
            backend,
            query,
            limit=limit,
            include_unpublished=include_unpublished,
            any_word=any_word,
            snippets=snippets,
        )
    ]


def ranked_hits(
    conn: Connection,
    backend: str,
    query: str,
    *,
    limit: int,
    include_unpublished: bool,
    any_word: bool = False,
    snippets: bool = True,
) -> list[tuple[int, SearchHit]]:
    """:func:`run_search`'s hits with their chunk ids."""
    check_query(query, limit)
    terms = _terms(query, any_word)
    if backend == "postgresql":
        stmt = search_statement(
            backend,
            terms,
            limit=limit,
            include_unpublished=include_unpublished,
            any_word=any_word,
            snippets=snippets,
        )
        found = [
            (r.id, float(r.score), r, unsegment(phrase_marks(r.snippet, terms)) if snippets else "")
            for r in conn.execute(stmt)
        ]
    else:
        match = fts_query(terms, any_word=any_word)
        ranked = sqlite_ranked(conn, match, limit=limit, include_unpublished=include_unpublished)
        marked = (
            snippets_of(conn, backend, query, [c for c, _, _ in ranked], any_word=any_word)
            if snippets
            else {}
        )
        # bm25() is lower for better matches: negated, higher is better on both.
        found = [(cid, -score, row, marked.get(cid, "")) for cid, score, row in ranked]
    out = []
    for cid, score, r, snippet in found:
        location, place = chunk_place(r.page, r.location)
        out.append(
            (
                cid,
                SearchHit(
                    document_id=r.document_id,
                    filename=r.filename,
                    ordinal=r.ordinal,
                    page=r.page,
                    text=r.text,
                    family_id=r.family_id,
                    version_no=r.version_no,
                    score=float(f"{score:.6g}"),  # six significant digits: bm25 can be tiny
                    snippet=snippet,
                    location=location,
                    place=place,
                ),
            )
        )
    return out
