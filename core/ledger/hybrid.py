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
import contextlib
import hashlib
import importlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from core.errors import BadInput, NotFound, ProviderUnreachable
from core.ingest.embedder import ProviderUnavailable
from core.ingest.providers import (
    LookupUnavailable,
    NotSent,
    OutcomeUnknown,
    ProviderRejected,
)
from core.ledger.candidates import (
    Candidate,
    chunk_rows,
    published_keys,
    vector_hit,
    vectors_by_row,
)
from core.ledger.fusion import fuse, fused_hit, key_of, names_an_identifier
from core.ledger.search import check_query, ranked_hits, snippets_of
from core.ledger.transactions import Transactions
from core.ledger.views import SearchHit, _View
from core.states import ErrorCode

if TYPE_CHECKING:
    from core.ledger.vector_search import IndexLike, IndexSource, MatrixInfo, VectorCache

# Candidates each leg of a hybrid search brings to the fusion: RRF only sees ranks,
# and past ~100 a rank adds under 1/160 to a score.
HYBRID_CANDIDATES = 100
# Vector candidates are checked for publication in the ledger (and, on the int8
# path, read again exactly): first 1.25 times the hits asked for and a few more (most
# chunks of the active index are published; 1.25 is also the int8 scan's re-scoring
# margin, see core.ledger.vector_search), then, while too few were published, four
# times more, until the whole index has been looked at. Each candidate costs three
# primary-key reads (~11 ms for 200 at 100k chunks under a load of 13; 2x the hits
# asked for read 60% more than this).
VECTOR_FIRST_FETCH = 1.25
VECTOR_SPARE = 8
VECTOR_WIDEN = 4
HASHED_EMBEDDERS = frozenset({"hashed"})  # core.ingest.embedders' kind
EMBEDDERS_MODULE = "core.ingest.embedders"  # the registry: EmbedderSpec, embedder_for


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
    # Looked up by name when a query needs it: a keyword search, and every command that
    # never searches, does not pay for the registry (nor a model) at import; and the
    # registry's own (type-checking) import of the ledger would otherwise close a
    # circle core.ledger -> core.ingest.embedders -> core.ledger.
    registry = importlib.import_module(EMBEDDERS_MODULE)
    spec = registry.EmbedderSpec(index.embedder, index.model, index.dimensions, dict(index.options))
    try:
        return registry.embedder_for(spec)
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
        vector_path: str | None = None,
    ) -> None:
        """``or_leg``: hybrid search's keyword leg ORs the query's words (measured by
        bench.search against the AND leg; not for use). ``vector_path``: the vector
        structure (:data:`core.ledger.vector_search.PATHS`; None: the best this
        machine can run)."""
        self._tx = transactions
        self._or_leg = or_leg
        self._indexes = indexes
        self._embedder_for = embedders
        self._embedders: dict[tuple[int, str, str, int], Any] = {}
        self._cache: VectorCache | None = None
        self._vector_path = vector_path

    @property
    def cache(self) -> VectorCache:
        if self._cache is None:
            assert self._indexes is not None
            from core.ledger.vector_search import VectorCache

            self._cache = VectorCache(self._indexes, path=self._vector_path)
        return self._cache

    async def warm(self, index: str | int) -> MatrixInfo:
        """Load an index's vectors into this process now (an index about to be
        activated: the first search after the switch then finds them loaded).

        Raises:
            NotFound: no such index.
        """
        assert self._indexes is not None
        return await self.cache.warm(await self._indexes.get(index))

    async def warm_before_activation(self, index: str | int) -> None:
        """:meth:`warm`, in a process that searches (it holds an index's vectors
        already): the first search after the switch is then as quick as the last one
        before. A process that never searched (``ingestdesk index activate``) loads
        nothing; an unknown index is left for ``activate`` to refuse."""
        if self._cache is None or not self._cache.holding():
            return
        with contextlib.suppress(NotFound):
            await self.warm(index)

    async def close(self) -> None:
        """Close the query embedders this process made (a remote endpoint's HTTP
        client); a later search makes them again."""
        embedders, self._embedders = list(self._embedders.values()), {}
        for embedder in embedders:
            closing = getattr(embedder, "aclose", None) or getattr(embedder, "close", None)
            if closing is not None:
                done = closing()
                if asyncio.iscoroutine(done):
                    await done

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

        async def keyword(
            n: int, any_word: bool = False, snippets: bool = True
        ) -> list[tuple[int, SearchHit]]:
            return await self._tx.read(
                partial(
                    _keyword,
                    backend=backend,
                    query=query,
                    limit=n,
                    include_unpublished=include_unpublished,
                    any_word=any_word,
                    snippets=snippets,
                )
            )

        if chosen == SearchMode.KEYWORD:
            hits = [h for _, h in await keyword(limit)]
            return SearchAnswer(hits, chosen.value, asked=label)
        if index is None:
            raise BadInput("no active index: vector search needs one (`ingestdesk index list`)")
        path = self.cache.path
        if chosen == SearchMode.VECTOR:
            nearest = await self._nearest(index, query, limit, chunk_rows, include_unpublished)
            hits = [
                vector_hit(
                    rows, Candidate(c, (rows[0].document_id, rows[0].ordinal), v, r), index.name
                )
                for r, (c, rows, v) in enumerate(nearest, start=1)
            ]
            return SearchAnswer(hits, chosen.value, index.name, path, asked=label)
        # The legs at once: the keyword leg's statements run in the ledger's thread
        # while the vector leg scans the matrix on this one (at 1M vectors, each is
        # tens of milliseconds). The keyword leg marks no snippet: only the hits that
        # make the cut are marked (at 1M chunks, 100 snippets took 27 ms, 10 took 2).
        want = max(limit, HYBRID_CANDIDATES)
        legs = await asyncio.gather(
            keyword(want, self._or_leg, snippets=False),
            self._vector_ranking(index, query, want, include_unpublished),
            return_exceptions=True,
        )
        words, ranked = legs
        if isinstance(words, BaseException):
            raise words
        if isinstance(ranked, ProviderUnreachable):
            shown = words[:limit] if not self._or_leg else await keyword(limit, snippets=False)
            return SearchAnswer(
                await self._shown(query, shown, [], index.name, include_unpublished),
                SearchMode.KEYWORD.value,
                index=index.name,
                path=path,
                notice=f"keyword ranks only: {ranked.message}",
                asked=label,
            )
        if isinstance(ranked, BaseException):
            raise ranked
        order = fuse([h for _, h in words], ranked, limit, keyword_first=names_an_identifier(query))
        # Only the hits that made the cut are read whole (a vector hit's text and
        # place) or marked (a keyword hit's snippet).
        chosen_keys = dict(order)
        shown = [(c, h) for c, h in words if key_of(h) in chosen_keys]
        in_words = {key_of(h) for _, h in shown}
        wanted = [c for c in ranked if c.key in chosen_keys and c.key not in in_words]
        found = {
            key_of(h): h
            for h in await self._shown(query, shown, wanted, index.name, include_unpublished)
        }
        by_key = {c.key: c for c in ranked}
        hits = [
            fused_hit(found[k], by_key.get(k), score, index.name)
            for k, score in order
            if k in found
        ]
        return SearchAnswer(hits, chosen.value, index.name, path, asked=label)

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
        from core.ledger.vector_search import RESCORE_MARGIN, as_query, rescore

        raw = await self._query_vector(index, query)
        matrix = await self.cache.current(index)
        q = as_query(raw, index.dimensions)
        k = math.ceil(want * max(VECTOR_FIRST_FETCH, RESCORE_MARGIN)) + VECTOR_SPARE
        while True:
            nearest = matrix.candidates(q, k)
            found, exact = await self._tx.read(
                partial(
                    _candidates,
                    read=read,
                    ids=[chunk for chunk, _, _ in nearest],
                    rows=[row for _, row, _ in nearest] if matrix.rescored else [],
                    include_unpublished=include_unpublished,
                )
            )
            ranked = [(chunk, score) for chunk, _, score in nearest]
            if matrix.rescored:
                # The int8 scan's order and scores give way to the exact ones.
                ranked = rescore(q, [(c, r, exact[r]) for c, r, _ in nearest if r in exact])
            kept = [(c, found[c], score) for c, score in ranked if c in found]
            if len(kept) >= want or k >= matrix.count:
                return kept[:want]
            k *= VECTOR_WIDEN

    async def _vector_ranking(
        self, index: IndexLike, query: str, want: int, include_unpublished: bool
    ) -> list[Candidate]:
        """The vector leg of a hybrid search: ids and ranks, no text read."""
        nearest = await self._nearest(index, query, want, published_keys, include_unpublished)
        return [Candidate(c, key, score, r) for r, (c, key, score) in enumerate(nearest, 1)]

    async def _shown(
        self,
        query: str,
        words: Sequence[tuple[int, SearchHit]],
        ranked: Sequence[Candidate],
        index: str,
        include_unpublished: bool,
    ) -> list[SearchHit]:
        """The hits shown, in one read: the keyword leg's ``words`` with their
        snippets marked, then the vector leg's ``ranked`` read whole (a chunk
        unpublished since it was ranked drops out)."""
        backend, any_word = self._tx.backend, self._or_leg

        def tx(conn: Connection) -> tuple[dict[int, str], dict[int, Any]]:
            marked = snippets_of(conn, backend, query, [c for c, _ in words], any_word=any_word)
            rows = chunk_rows(
                conn,
                ids=[c.chunk_id for c in ranked],
                include_unpublished=include_unpublished,
            )
            return marked, rows

        marked, rows = await self._tx.read(tx)
        return [replace(h, snippet=marked.get(c, h.snippet)) for c, h in words] + [
            vector_hit(rows[c.chunk_id], c, index) for c in ranked if c.chunk_id in rows
        ]


def _candidates(
    conn: Connection,
    *,
    read: Callable[..., dict[int, Any]],
    ids: list[int],
    rows: list[int],
    include_unpublished: bool,
) -> tuple[dict[int, Any], dict[int, bytes]]:
    """The vector leg's one read: what ``read`` finds of the candidates (their
    publication), and the exact vectors of ``rows`` (to re-score an int8 scan's)."""
    found = read(conn, ids=ids, include_unpublished=include_unpublished)
    return found, vectors_by_row(conn, sorted(rows)) if rows else {}


def _keyword(
    conn: Connection,
    *,
    backend: str,
    query: str,
    limit: int,
    include_unpublished: bool,
    any_word: bool = False,
    snippets: bool = True,
) -> list[tuple[int, SearchHit]]:
    hits = ranked_hits(
        conn,
        backend,
        query,
        limit=limit,
        include_unpublished=include_unpublished,
        any_word=any_word,
        snippets=snippets,
    )
    return [
        (chunk, replace(h, mode="keyword", keyword_rank=rank, keyword_score=h.score))
        for rank, (chunk, h) in enumerate(hits, start=1)
    ]
