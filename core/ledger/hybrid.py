"""One search entry point for every face (CLI, HTTP, dashboard): keyword, vector or
hybrid search over the published chunks, answered from the active index.

* ``keyword``: :mod:`core.ledger.search` (BM25 / ts_rank, every query word required);
* ``vector``: the query embedded by the active index's embedder and compared with the
  index's vectors (:mod:`core.ledger.vector_search`, exact), best candidates kept if
  their document version is published (decided now, as keyword search does);
* ``hybrid``: both rankings fused by reciprocal rank fusion (:mod:`core.ledger.fusion`).
  The keyword leg keeps its AND: measured on tests/retrieval/ (recall@3 of the
  paraphrases: 0.74 with it, 0.31 with a leg that ORs the query's words, whose common
  words put unrelated chunks into the fusion on a par with the vector ranking's
  best; ``python -m bench.search`` prints both). A query naming an identifier puts
  the chunks holding every term first (:func:`fuse`).

The default is hybrid once the active index is a real model, keyword while it is the
hashed bag of words (whose "vectors" only re-rank the same words).

When the query cannot be embedded (a remote embedder that does not answer), a vector
search fails with :class:`~core.errors.ProviderUnreachable` (code
``provider_unavailable``); a hybrid search answers with its keyword ranks alone and
says so in :attr:`SearchAnswer.notice`, which every face shows.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from core.errors import BadInput, ProviderUnreachable
from core.ingest.embedder import ProviderUnavailable
from core.ingest.providers import (
    LookupUnavailable,
    NotSent,
    OutcomeUnknown,
    ProviderRejected,
)
from core.ledger.fusion import reciprocal_rank_fusion
from core.ledger.schema import CHUNKS, DOCUMENTS
from core.ledger.search import SNIPPET_WORDS, check_query, query_terms, run_search
from core.ledger.transactions import Transactions
from core.ledger.views import SearchHit, _View, chunk_place
from core.states import DocumentStatus, ErrorCode

if TYPE_CHECKING:
    from core.ledger.vector_search import IndexLike, IndexSource, VectorCache

# Candidates each leg of a hybrid search brings to the fusion: RRF only sees ranks,
# and past ~100 a rank adds under 1/160 to a score.
HYBRID_CANDIDATES = 100
# Vector candidates are checked for publication in the ledger: first twice the hits
# asked for (most chunks of the active index are published), then, while too few
# were, four times more, until the whole index has been looked at. Each candidate
# costs two primary-key reads (16 ms for 400 at 1M chunks on the loaded machine).
VECTOR_FIRST_FETCH = 2
VECTOR_WIDEN = 4
ID_SLICE = 5000  # ids per IN (...) list
HASHED_EMBEDDERS = frozenset({"hashed"})  # core.ingest.embedders' kind


class SearchMode(StrEnum):
    KEYWORD = "keyword"
    VECTOR = "vector"
    HYBRID = "hybrid"


MODES = tuple(m.value for m in SearchMode)


def parse_mode(mode: str | SearchMode | None) -> SearchMode | None:
    """A mode by name (None: the default for the active index).

    Raises:
        BadInput: not one of :data:`MODES`.
    """
    if mode is None or isinstance(mode, SearchMode):
        return mode
    try:
        return SearchMode(mode)
    except ValueError:
        raise BadInput(f"search mode is one of {', '.join(MODES)} ({mode[:40]!r} asked)") from None


def default_mode(index: IndexLike | None) -> SearchMode:
    """Hybrid when the active index is a real model, keyword otherwise."""
    if index is None or index.embedder in HASHED_EMBEDDERS:
        return SearchMode.KEYWORD
    return SearchMode.HYBRID


@dataclass(frozen=True)
class SearchAnswer(_View):
    """A search's hits and how they were found: the mode, the index whose vectors
    answered ("" for keyword search), the vector path, and a notice when the answer
    is not what was asked (a hybrid search that fell back to keyword ranks)."""

    hits: list[SearchHit]
    mode: str
    index: str = ""
    path: str = ""
    notice: str = ""
    asked: str = ""  # the mode asked for ("" when the default was taken)


EmbedderFactory = Callable[["IndexLike"], Any]


def registry_embedder(index: IndexLike) -> Any:
    """The active index's embedder from the registry (:mod:`core.ingest.embedders`),
    as the index names it: the same kind, model, dimensions and options make the
    query's vector comparable with the index's.

    Raises:
        ProviderUnreachable: the registry cannot make it here (a kind not installed).
    """
    # Imported here: a keyword search, and every command that never searches, does
    # not pay for the registry (nor a model) at import.
    from core.ingest.embedders import EmbedderSpec, embedder_for

    spec = EmbedderSpec(index.embedder, index.model, index.dimensions, dict(index.options))
    try:
        return embedder_for(spec)
    except BadInput as exc:
        raise ProviderUnreachable(f"{ErrorCode.PROVIDER_UNAVAILABLE}: {exc.message}") from None


_WHAT_HAPPENED: tuple[tuple[type[BaseException], str], ...] = (
    (NotSent, "not reached"),
    (ProviderUnavailable, "unavailable"),
    (OutcomeUnknown, "no usable reply"),
    (ProviderRejected, "refused the request"),
    (LookupUnavailable, "no answer"),
    (TimeoutError, "timed out"),
    (OSError, "not reached"),
)
_UNREACHABLE = (
    ProviderUnavailable,
    OutcomeUnknown,
    ProviderRejected,
    LookupUnavailable,
    OSError,
    TimeoutError,
)


class Searcher:
    """Searches of one ledger; holds this process's index matrices and the query
    embedders (a local model is loaded once)."""

    def __init__(
        self,
        transactions: Transactions,
        indexes: IndexSource | None,
        *,
        embedders: EmbedderFactory = registry_embedder,
        or_leg: bool = False,
    ) -> None:
        """``or_leg``: hybrid search's keyword leg ORs the query's words (measured by
        bench.search against the AND leg; not for use)."""
        self._tx = transactions
        self._or_leg = or_leg
        self._indexes = indexes
        self._embedder_for = embedders
        self._embedders: dict[tuple[int, str, str, int], Any] = {}
        self._cache: VectorCache | None = None

    @property
    def cache(self) -> VectorCache:
        if self._cache is None:
            assert self._indexes is not None
            from core.ledger.vector_search import VectorCache

            self._cache = VectorCache(self._indexes)
        return self._cache

    async def active(self) -> IndexLike | None:
        return None if self._indexes is None else await self._indexes.active()

    async def find(
        self,
        query: str,
        *,
        mode: str | SearchMode | None = None,
        limit: int = 20,
        include_unpublished: bool = False,
    ) -> SearchAnswer:
        """The best ``limit`` chunks for ``query`` in ``mode`` (None: the default for
        the active index), and how they were found.

        Raises:
            BadInput: an unknown mode, a query without words, a limit out of range,
                or a vector or hybrid search on a ledger with no index yet.
            ProviderUnreachable: a vector search whose query the index's embedder
                could not embed (hybrid answers from keyword ranks instead).
        """
        asked = parse_mode(mode)
        check_query(query, limit)
        label = asked.value if asked else ""
        index = await self.active() if asked != SearchMode.KEYWORD else None
        chosen = asked or default_mode(index)
        backend = self._tx.backend

        async def keyword(n: int, any_word: bool = False) -> list[SearchHit]:
            return await self._tx.read(
                lambda conn: _keyword(conn, backend, query, n, include_unpublished, any_word)
            )

        if chosen == SearchMode.KEYWORD:
            return SearchAnswer(await keyword(limit), chosen.value, asked=label)
        if index is None:
            raise BadInput("no active index: vector search needs one (`ingestdesk index list`)")
        from core.ledger.vector_search import SEARCH_PATH

        if chosen == SearchMode.VECTOR:
            nearest = await self._nearest(index, query, limit, _chunk_rows, include_unpublished)
            hits = [
                _vector_hit(
                    rows, Candidate(c, (rows[0].document_id, rows[0].ordinal), v, r), index.name
                )
                for r, (c, rows, v) in enumerate(nearest, start=1)
            ]
            return SearchAnswer(hits, chosen.value, index.name, SEARCH_PATH, asked=label)
        # The legs at once: the keyword leg's statement runs in the ledger's thread
        # while the vector leg multiplies the matrix on this one (at 1M vectors, each
        # is tens to hundreds of milliseconds).
        want = max(limit, HYBRID_CANDIDATES)
        words, ranked = await asyncio.gather(
            keyword(want, self._or_leg),
            self._vector_ranking(index, query, want, include_unpublished),
            return_exceptions=True,
        )
        if isinstance(words, BaseException):
            raise words
        if isinstance(ranked, ProviderUnreachable):
            return SearchAnswer(
                words[:limit] if not self._or_leg else await keyword(limit),
                SearchMode.KEYWORD.value,
                index=index.name,
                path=SEARCH_PATH,
                notice=f"keyword ranks only: {ranked.message}",
                asked=label,
            )
        if isinstance(ranked, BaseException):
            raise ranked
        order = fuse(words, ranked, limit, keyword_first=names_an_identifier(query))
        # Only the vector hits that made the cut are read whole (text, place).
        found = {_key(h): h for h in words}
        chosen_keys = dict(order)
        wanted = [c for c in ranked if c.key in chosen_keys and c.key not in found]
        found |= {_key(h): h for h in await self._hydrate(wanted, index.name, include_unpublished)}
        by_key = {c.key: c for c in ranked}
        hits = [
            _fused(found[k], by_key.get(k), score, index.name) for k, score in order if k in found
        ]
        return SearchAnswer(hits, chosen.value, index.name, SEARCH_PATH, asked=label)

    async def _query_vector(self, index: IndexLike, query: str) -> bytes:
        key = (index.id, index.embedder, index.model, index.dimensions)
        embedder = self._embedders.get(key)
        if embedder is None:
            embedder = self._embedders[key] = self._embedder_for(index)
        what = f"{index.embedder} {index.model}".strip()
        try:
            if hasattr(embedder, "embed"):
                (vector,) = await embedder.embed([query])
            else:
                # A request key of its own (64 hex digits): a query is not a chunk.
                request_key = hashlib.sha256(b"search query\n" + query.encode()).hexdigest()
                reply = await embedder.submit(request_key, [query])
                (vector,) = reply.vectors
        except _UNREACHABLE as exc:
            # What happened in our words: the exceptions' own messages name the
            # endpoint's address, which a client of the API is not told.
            detail = next((d for cls, d in _WHAT_HAPPENED if isinstance(exc, cls)), "failed")
            raise ProviderUnreachable(
                f"{ErrorCode.PROVIDER_UNAVAILABLE}: the index's embedder ({what}) did not "
                f"embed the query ({detail})"
            ) from None
        return bytes(vector)

    async def _nearest(
        self,
        index: IndexLike,
        query: str,
        want: int,
        read: Callable[..., dict[int, Any]],
        include_unpublished: bool,
    ) -> list[tuple[int, Any, float]]:
        """The ``want`` nearest chunks of published versions (any, with
        ``include_unpublished``), best first: (chunk id, what ``read`` found of it in
        the ledger, cosine). Candidates are checked by ``read`` in one statement, more
        of them while too few were published."""
        from core.ledger.vector_search import as_query

        raw = await self._query_vector(index, query)
        matrix = await self.cache.current(index)
        q = as_query(raw, index.dimensions)
        k = want * VECTOR_FIRST_FETCH
        while True:
            nearest = matrix.top(q, k)
            found = await self._tx.read(
                partial(
                    read,
                    ids=[chunk for chunk, _ in nearest],
                    include_unpublished=include_unpublished,
                )
            )
            kept = [(c, found[c], score) for c, score in nearest if c in found]
            if len(kept) >= want or k >= matrix.count:
                return kept[:want]
            k *= VECTOR_WIDEN

    async def _vector_ranking(
        self, index: IndexLike, query: str, want: int, include_unpublished: bool
    ) -> list[Candidate]:
        """The vector leg of a hybrid search: ids and ranks, no text read."""
        nearest = await self._nearest(index, query, want, _published_keys, include_unpublished)
        return [Candidate(c, key, score, r) for r, (c, key, score) in enumerate(nearest, 1)]

    async def _hydrate(
        self, ranked: Sequence[Candidate], index: str, include_unpublished: bool
    ) -> list[SearchHit]:
        """Vector hits, read whole (a chunk unpublished since it was ranked drops out)."""
        rows = await self._tx.read(
            partial(
                _chunk_rows,
                ids=[c.chunk_id for c in ranked],
                include_unpublished=include_unpublished,
            )
        )
        return [_vector_hit(rows[c.chunk_id], c, index) for c in ranked if c.chunk_id in rows]


@dataclass(frozen=True)
class Candidate:
    """A chunk the vector leg ranked: its id, (document id, ordinal), cosine, rank."""

    chunk_id: int
    key: tuple[str, int]
    score: float
    rank: int


def _key(hit: SearchHit) -> tuple[str, int]:
    return (hit.document_id, hit.ordinal)


def _published_keys(
    conn: Connection, ids: Sequence[int], include_unpublished: bool
) -> dict[int, tuple[str, int]]:
    """Chunk id -> (document id, ordinal) of those of ``ids`` whose version is
    published (any, with ``include_unpublished``): no text read, these are candidates."""
    chunks: list[Any] = []
    for start in range(0, len(ids), ID_SLICE):
        chunks += conn.execute(
            select(CHUNKS.c.id, CHUNKS.c.document_id, CHUNKS.c.ordinal).where(
                CHUNKS.c.id.in_(ids[start : start + ID_SLICE])
            )
        ).all()
    if not include_unpublished:
        published = _published(conn, sorted({c.document_id for c in chunks}))
        chunks = [c for c in chunks if c.document_id in published]
    return {c.id: (c.document_id, c.ordinal) for c in chunks}


def _published(conn: Connection, document_ids: Sequence[str]) -> set[str]:
    """Those of ``document_ids`` that are published versions. Read by primary key
    and judged here: with the status in the WHERE clause, SQLite's planner starts
    from the status index and reads every published version (92 ms for 400
    candidates at 100 000 documents, against ~2 ms)."""
    out: set[str] = set()
    for start in range(0, len(document_ids), ID_SLICE):
        rows = conn.execute(
            select(DOCUMENTS.c.id, DOCUMENTS.c.status).where(
                DOCUMENTS.c.id.in_(document_ids[start : start + ID_SLICE])
            )
        )
        out.update(r.id for r in rows if r.status == DocumentStatus.PUBLISHED.value)
    return out


def _keyword(
    conn: Connection,
    backend: str,
    query: str,
    limit: int,
    include_unpublished: bool,
    any_word: bool = False,
) -> list[SearchHit]:
    hits = run_search(
        conn,
        backend,
        query,
        limit=limit,
        include_unpublished=include_unpublished,
        any_word=any_word,
    )
    return [
        replace(h, mode="keyword", keyword_rank=rank, keyword_score=h.score)
        for rank, h in enumerate(hits, start=1)
    ]


def _chunk_rows(
    conn: Connection, ids: Sequence[int], include_unpublished: bool
) -> dict[int, tuple[Any, Any]]:
    """The chunks among ``ids`` whose version is published (any, with
    ``include_unpublished``): chunk id -> (chunk row, version row).

    Two look-ups by primary key, not one join: with the status condition in a join,
    SQLite's planner starts from the documents' status index and reads every
    published document's chunks (3.8 ms for 40 candidates at 10k chunks, growing
    with the ledger)."""
    chunks: list[Any] = []
    # In slices: a statement's parameters are bounded (SQLite: 32 766).
    for start in range(0, len(ids), ID_SLICE):
        chunks += conn.execute(
            select(
                CHUNKS.c.id,
                CHUNKS.c.document_id,
                CHUNKS.c.ordinal,
                CHUNKS.c.page,
                CHUNKS.c.text,
                CHUNKS.c.location,
            ).where(CHUNKS.c.id.in_(ids[start : start + ID_SLICE]))
        ).all()
    wanted = sorted({c.document_id for c in chunks})
    versions: dict[str, Any] = {}
    for start in range(0, len(wanted), ID_SLICE):
        stmt = select(
            DOCUMENTS.c.id,
            DOCUMENTS.c.status,
            DOCUMENTS.c.family_id,
            DOCUMENTS.c.version_no,
            DOCUMENTS.c.filename,
        ).where(DOCUMENTS.c.id.in_(wanted[start : start + ID_SLICE]))
        # The status judged here, not in SQL: see _published.
        versions.update(
            {
                r.id: r
                for r in conn.execute(stmt)
                if include_unpublished or r.status == DocumentStatus.PUBLISHED.value
            }
        )
    return {c.id: (c, versions[c.document_id]) for c in chunks if c.document_id in versions}


def excerpt(text: str, words: int = SNIPPET_WORDS) -> str:
    """A vector hit's snippet: the chunk's first words (no word matched to mark)."""
    parts = text.split()
    return " ".join(parts[:words]) + ("…" if len(parts) > words else "")


def _vector_hit(rows: tuple[Any, Any], candidate: Candidate, index: str) -> SearchHit:
    row, version = rows
    score, rank = candidate.score, candidate.rank
    location, place = chunk_place(row.page, row.location)
    rounded = float(f"{score:.6g}")
    return SearchHit(
        document_id=row.document_id,
        filename=version.filename,
        ordinal=row.ordinal,
        page=row.page,
        text=row.text,
        family_id=version.family_id,
        version_no=version.version_no,
        score=rounded,
        snippet=excerpt(row.text),
        location=location,
        place=place,
        mode="vector",
        index=index,
        vector_rank=rank,
        vector_score=rounded,
    )


def names_an_identifier(query: str) -> bool:
    """Whether the query holds a term with a digit in it (``HR-121``, ``E-4471``,
    ``4400``): a name for one thing, which vectors cannot tell from its near-twins."""
    return any(any(w.isdigit() for w in term) for term in query_terms(query))


def fuse(
    keyword: Sequence[SearchHit],
    vector: Sequence[Candidate],
    limit: int,
    *,
    keyword_first: bool = False,
) -> list[tuple[tuple[str, int], float]]:
    """The two rankings fused (RRF): the first ``limit`` chunks, (document id,
    ordinal), with their fused scores, best first.

    ``keyword_first`` (a query naming an identifier): the chunks that hold every
    term come first, in the keyword leg's order, then the rest by fused score. With
    RRF alone, near-twins that cite each other (HR-112 "see HR-121") are all keyword
    hits a rank apart, and the vector leg, which reads ``121`` and ``112`` alike,
    decides between them: measured on tests/retrieval/, the exact questions' first
    hit was right 11 times in 12 (keyword search alone: 12); with this, 12.
    """
    words = [_key(h) for h in keyword]
    fused = reciprocal_rank_fusion([words, [c.key for c in vector]])
    if keyword_first:
        rank = {k: r for r, k in enumerate(words)}
        # Stable: chunks the keyword leg did not find keep their fused order.
        fused.sort(key=lambda kv: (0, rank[kv[0]]) if kv[0] in rank else (1, 0))
    return fused[:limit]


def _fused(hit: SearchHit, vector: Candidate | None, score: float, index: str) -> SearchHit:
    """A hybrid hit: the keyword leg's hit (its marked snippet) or the vector leg's,
    with both legs' ranks and scores and the fused score."""
    fused = float(f"{score:.6g}")
    keyword = hit.mode == "keyword"
    return replace(
        hit,
        mode="hybrid",
        index=index,
        score=fused,
        fused_score=fused,
        keyword_rank=hit.keyword_rank if keyword else None,
        keyword_score=hit.keyword_score if keyword else None,
        vector_rank=vector.rank if vector else None,
        vector_score=float(f"{vector.score:.6g}") if vector else None,
    )
