"""Exact vector search over one index's vectors: a contiguous float32 matrix per index
per process, kept current by the index's revision, searched with one matrix-vector
product.

Why exact, in numpy, and float32 (measured on the 2-core development machine under a
load of ~3, 1M x 256 random unit vectors; ``python -m bench.search`` prints it again):

* ``matrix @ query`` at 1M x 256 float32: 90-120 ms median (BLAS, bound by reading
  the 1 GB once), plus 10-20 ms for ``argpartition`` of the top hits. On one BLAS
  thread (:func:`one_blas_thread`): OpenBLAS's own threads wait for a busy core, and
  made the product at 10k rows 12 ms instead of 0.4 ms (at 1M: 84 ms against 92);
* float16 storage (512 MB) costs 1.8 s a query (numpy has no float16 BLAS: every
  block is converted first), int8 storage (256 MB) 0.7 s: each is over the 250 ms
  target at 1M by itself, so quantising trades the target for memory. Not done;
* sqlite-vec / pgvector: not measured. The fresh machine has neither (this Python's
  sqlite3 cannot load extensions; pgvector is not packaged for its Debian release), and
  their exact search reads the same bytes a query, so the gain would have to come from
  an approximate index, whose recall would then need measuring. One code path on both
  backends meanwhile; :data:`SEARCH_PATH` names it in every answer.

The matrix follows the ledger without a restart: before each search the index's
revision is read (:meth:`core.ledger.indexes.Indexes.revision`: its deletions count,
bumped in the transaction of every deletion of its vectors, and its last vector id).
Deletions moved: the index is loaded again. Else, when the last id moved, rows after
the last one held are loaded, and the count held is checked against the ledger's: a
row with a smaller id committed after a bigger one (two PostgreSQL workers finishing
at once) would be missed, so fewer rows held than counted also reloads.

Publication is not part of the matrix: which chunks are published is decided at
query time by the caller (:mod:`core.ledger.hybrid`), on the top candidates.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

SEARCH_PATH = "exact (numpy float32)"  # what `ingestdesk` says answers vector queries
LOAD_PAGE_ROWS = 20_000  # vectors per read while loading (~20 MB at 256 dimensions)
GROW_FACTOR = 1.5  # the matrix's capacity grows by this much when full


class IndexLike(Protocol):
    """What search needs of an index (:class:`core.ledger.indexes.IndexView`)."""

    @property
    def id(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def embedder(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def dimensions(self) -> int: ...
    @property
    def options(self) -> Mapping[str, Any]: ...
    @property
    def vectors(self) -> int: ...


class RevisionLike(Protocol):
    """:class:`core.ledger.indexes.IndexRevision`."""

    @property
    def deletions(self) -> int: ...
    @property
    def last_vector_id(self) -> int: ...


class IndexSource(Protocol):
    """The ledger's reads of indexes and their vectors (``ledger.indexes``)."""

    async def active(self) -> Any: ...
    async def get(self, name_or_id: str | int) -> Any: ...
    async def revision(self, index_id: int) -> Any: ...
    async def vectors(
        self, index_id: int, *, after_id: int = 0, limit: int = ...
    ) -> list[tuple[int, int, bytes]]: ...


class IndexMatrix:
    """One index's vectors in this process: row ``i`` of :attr:`matrix` is the vector
    of chunk ``chunk_ids[i]``."""

    def __init__(self, index_id: int, dimensions: int) -> None:
        self.index_id = index_id
        self.dimensions = dimensions
        self._matrix: npt.NDArray[np.float32] = np.empty((0, dimensions), np.float32)
        self._chunks: npt.NDArray[np.int64] = np.empty(0, np.int64)
        self.count = 0
        self.last_row_id = 0
        self.revision: RevisionLike | None = None
        self.loaded_at = 0.0
        self.reloads = 0  # whole-index loads (the first one included)

    @property
    def matrix(self) -> npt.NDArray[np.float32]:
        return self._matrix[: self.count]

    @property
    def chunk_ids(self) -> npt.NDArray[np.int64]:
        return self._chunks[: self.count]

    @property
    def nbytes(self) -> int:
        """Bytes held (capacity, not just the rows in use)."""
        return int(self._matrix.nbytes + self._chunks.nbytes)

    def reserve(self, rows: int) -> None:
        """Room for ``rows`` vectors in all, allocated once: growing by steps while
        loading 1M rows would hold the old and the new matrix at each step."""
        if rows > len(self._chunks):
            grown = np.empty((rows, self.dimensions), np.float32)
            grown[: self.count] = self._matrix[: self.count]
            chunks = np.empty(rows, np.int64)
            chunks[: self.count] = self._chunks[: self.count]
            self._matrix, self._chunks = grown, chunks

    def append(self, rows: Sequence[tuple[int, int, bytes]]) -> None:
        """Add rows (row id, chunk id, float32 LE vector), in row id order."""
        if not rows:
            return
        need = self.count + len(rows)
        if need > len(self._chunks):
            self.reserve(max(need, int(len(self._chunks) * GROW_FACTOR), 1024))
        block = np.frombuffer(b"".join(r[2] for r in rows), dtype="<f4")
        self._matrix[self.count : need] = block.reshape(len(rows), self.dimensions)
        self._chunks[self.count : need] = [r[1] for r in rows]
        self.count = need
        self.last_row_id = rows[-1][0]

    def top(self, query: npt.NDArray[np.float32], k: int) -> list[tuple[int, float]]:
        """The ``k`` chunks nearest ``query`` (cosine: every vector is unit length),
        as (chunk id, score), best first."""
        return top_k(self.matrix, self.chunk_ids, query, k)


def top_k(
    matrix: npt.NDArray[np.float32],
    chunk_ids: npt.NDArray[np.int64],
    query: npt.NDArray[np.float32],
    k: int,
) -> list[tuple[int, float]]:
    """Exact nearest neighbours by dot product, best first (ties: lower row first)."""
    n = len(chunk_ids)
    if n == 0 or k <= 0:
        return []
    scores = matrix @ query
    part = np.argpartition(scores, n - k)[n - k :] if k < n else np.arange(n)
    order = part[np.lexsort((part, -scores[part]))]
    return [(int(chunk_ids[i]), float(scores[i])) for i in order]


def as_query(vector: bytes, dimensions: int) -> npt.NDArray[np.float32]:
    """A query vector from an embedder's bytes, unit length (a zero vector stays zero:
    a text with no known word is near nothing)."""
    query = np.frombuffer(vector, dtype="<f4").astype(np.float32)
    if query.shape != (dimensions,):
        raise ValueError(f"the query vector has {query.size} dimensions, the index {dimensions}")
    norm = float(np.linalg.norm(query))
    return query / norm if norm else query


@dataclass(frozen=True)
class MatrixInfo:
    """What a search process holds of an index (``ingestdesk index list`` may show it)."""

    index_id: int
    vectors: int
    revision: RevisionLike | None
    bytes_held: int
    path: str = SEARCH_PATH


_BLAS_LIMITED = False


def one_blas_thread() -> None:
    """Keep this process's BLAS on one thread (once; process-wide). A search process
    answers many queries at a time: one core each, not both for one."""
    global _BLAS_LIMITED
    if not _BLAS_LIMITED:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
        _BLAS_LIMITED = True


class VectorCache:
    """The matrices of this process, one per index, refreshed by revision. Safe for
    many coroutines: one refresh of an index at a time, the others wait for it."""

    def __init__(self, source: IndexSource, *, page_rows: int = LOAD_PAGE_ROWS) -> None:
        one_blas_thread()
        self._source = source
        self._page_rows = page_rows
        self._matrices: dict[int, IndexMatrix] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    def info(self, index_id: int) -> MatrixInfo | None:
        held = self._matrices.get(index_id)
        if held is None:
            return None
        return MatrixInfo(index_id, held.count, held.revision, held.nbytes)

    def drop(self, index_id: int) -> None:
        """Forget an index (retired, dropped): its memory goes back."""
        self._matrices.pop(index_id, None)
        self._locks.pop(index_id, None)

    async def current(self, index: IndexLike) -> IndexMatrix:
        """The index's matrix as of its revision now."""
        # One index answers at a time: a matrix of an index no longer active (after
        # an activation) goes, and its memory with it once no search holds it.
        for other in [i for i in self._matrices if i != index.id]:
            self.drop(other)
        lock = self._locks.setdefault(index.id, asyncio.Lock())
        async with lock:
            held = self._matrices.get(index.id)
            if held is None or held.dimensions != index.dimensions:
                held = self._matrices[index.id] = IndexMatrix(index.id, index.dimensions)
            revision = await self._source.revision(index.id)
            if revision != held.revision:
                held = self._matrices[index.id] = await self._refresh(held, revision)
        return held

    async def _refresh(self, held: IndexMatrix, revision: RevisionLike) -> IndexMatrix:
        if held.revision is not None and revision.deletions == held.revision.deletions:
            await self._load_after(held)
            # Every row up to the revision's last id is held, unless one committed
            # late below the last id held: the ledger's count says.
            if held.last_row_id >= revision.last_vector_id:
                counted = (await self._source.get(held.index_id)).vectors
                if held.count == counted:
                    held.revision = revision
                    held.loaded_at = time.time()
                    return held
        # First load, deletions, or a row out of reach by id: load the index again
        # beside the one searches are using now, which a search holding it keeps whole
        # until it is done (memory: twice the index while loading).
        fresh = IndexMatrix(held.index_id, held.dimensions)
        fresh.reloads = held.reloads + (held.revision is not None)
        fresh.reserve((await self._source.get(held.index_id)).vectors)
        await self._load_after(fresh)
        fresh.revision = revision
        fresh.loaded_at = time.time()
        return fresh

    async def _load_after(self, held: IndexMatrix) -> None:
        while True:
            rows = await self._source.vectors(
                held.index_id, after_id=held.last_row_id, limit=self._page_rows
            )
            held.append(rows)
            if len(rows) < self._page_rows:
                return
