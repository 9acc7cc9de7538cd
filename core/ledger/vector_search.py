"""Vector search over one index's vectors: a contiguous matrix per index per process,
kept current by the index's revision, scanned with one matrix-vector product.

Two structures, one answer (measured on the 2-core development machine, 1M x 256
random unit vectors, ``python -m bench.search`` prints it again):

* ``int8+rescore`` (the default where the ``numkong`` wheel imports): each vector
  held as int8 with its own scale (256 MB at 1M instead of 1 GB), scanned by
  numkong's SIMD int8 dot product (35-45 ms at 1M under a load of ~6, against 85-230
  ms for float32 BLAS: a bandwidth-bound scan reads a quarter of the bytes); the
  best ``RESCORE_MARGIN`` x k (at least) are then scored again exactly, in float32, from the
  vectors the ledger holds (read by primary key in the same read that checks
  publication), so the hits and their cosines are the exact path's (recall@10
  against exact: 1.0 measured; the re-scoring is what makes it so, int8 alone gave
  0.96-0.98);
* ``exact-f32``: the reference and the fallback (no numkong): a float32 matrix and
  BLAS's ``matrix @ query`` on one thread (:func:`one_blas_thread`: OpenBLAS's own
  threads, waiting for a busy core, made the product at 10k rows 12 ms, not 0.4).

Not chosen, measured: numpy float16 / int8 storage (no BLAS: 0.7-1.8 s a query at
1M); an HNSW graph (usearch, i8): 100 s to build 100k vectors on the loaded machine
(~17 min at 1M, for every search process or kept on disk beside the ledger), and
recall@10 0.12-0.29 at ef 64-256 on the bench's random vectors, which have no
structure for a graph to use; faiss's SQ8 flat scan was as fast as numkong's but
is a 30 MB wheel with OpenMP; sqlite-vec scans the same bytes inside SQLite and
this machine's Python cannot load extensions. :attr:`IndexMatrix.path` names the
structure in every answer.

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

numkong: Any
try:  # numkong (Apache-2.0): SIMD int8 dot products; without it, the exact path
    import numkong
except ImportError:  # pragma: no cover - a platform without its wheel
    numkong = None

EXACT_F32 = "exact-f32"  # the structures, as `ingestdesk` names them in every answer
INT8_RESCORE = "int8+rescore"
PATHS = (INT8_RESCORE, EXACT_F32)
# int8 candidates scored again exactly, per hit wanted, at least: measured on 100k
# random unit vectors (k = 10, 20, 200), the exact top k comes out of the int8 top
# 1.25 k in the exact order every time; of the int8 top k alone, recall 0.98.
RESCORE_MARGIN = 1.25
INT8_MAX = 127  # each vector is scaled so that its largest component is this
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


def default_path() -> str:
    """The structure a search process here uses: int8 with exact re-scoring where
    numkong imports, else exact float32."""
    return INT8_RESCORE if numkong is not None else EXACT_F32


class IndexMatrix:
    """One index's vectors in this process: row ``i`` is the vector of chunk
    ``chunk_ids[i]`` (ledger row ``row_ids[i]``), as float32 (``exact-f32``) or as
    int8 times ``scales[i]`` (``int8+rescore``)."""

    def __init__(self, index_id: int, dimensions: int, path: str = EXACT_F32) -> None:
        if path not in PATHS or (path == INT8_RESCORE and numkong is None):
            raise ValueError(f"vector path {path!r} is not available here")
        self.index_id = index_id
        self.dimensions = dimensions
        self.path = path
        dtype = np.int8 if path == INT8_RESCORE else np.float32
        self._matrix: npt.NDArray[Any] = np.empty((0, dimensions), dtype)
        self._scales: npt.NDArray[np.float32] = np.empty(0, np.float32)
        self._chunks: npt.NDArray[np.int64] = np.empty(0, np.int64)
        self._rows: npt.NDArray[np.int64] = np.empty(0, np.int64)
        self.count = 0
        self.last_row_id = 0
        self.revision: RevisionLike | None = None
        self.loaded_at = 0.0
        self.load_s = 0.0  # seconds the last whole load took
        self.reloads = 0  # whole-index loads (the first one included)

    @property
    def rescored(self) -> bool:
        """Whether :meth:`top`'s scores are approximate, to be scored again exactly
        (:func:`rescore`) from the ledger's vectors of :meth:`row_ids_of`."""
        return self.path == INT8_RESCORE

    @property
    def matrix(self) -> npt.NDArray[Any]:
        return self._matrix[: self.count]

    @property
    def chunk_ids(self) -> npt.NDArray[np.int64]:
        return self._chunks[: self.count]

    @property
    def nbytes(self) -> int:
        """Bytes held (capacity, not just the rows in use)."""
        return int(
            self._matrix.nbytes + self._scales.nbytes + self._chunks.nbytes + self._rows.nbytes
        )

    def reserve(self, rows: int) -> None:
        """Room for ``rows`` vectors in all, allocated once: growing by steps while
        loading 1M rows would hold the old and the new matrix at each step."""
        if rows > len(self._chunks):
            n = self.count
            grown = np.empty((rows, self.dimensions), self._matrix.dtype)
            grown[:n] = self._matrix[:n]
            arrays = []
            for old in (self._scales, self._chunks, self._rows):
                new = np.empty(rows, old.dtype)
                new[:n] = old[:n]
                arrays.append(new)
            self._matrix = grown
            self._scales, self._chunks, self._rows = arrays

    def append(self, rows: Sequence[tuple[int, int, bytes]]) -> None:
        """Add rows (row id, chunk id, float32 LE vector), in row id order."""
        if not rows:
            return
        need = self.count + len(rows)
        if need > len(self._chunks):
            self.reserve(max(need, int(len(self._chunks) * GROW_FACTOR), 1024))
        block = np.frombuffer(b"".join(r[2] for r in rows), dtype="<f4")
        block = block.reshape(len(rows), self.dimensions)
        if self.path == INT8_RESCORE:
            codes, scales = quantise(block)
            self._matrix[self.count : need] = codes
            self._scales[self.count : need] = scales
        else:
            self._matrix[self.count : need] = block
        self._chunks[self.count : need] = [r[1] for r in rows]
        self._rows[self.count : need] = [r[0] for r in rows]
        self.count = need
        self.last_row_id = rows[-1][0]

    def top(self, query: npt.NDArray[np.float32], k: int) -> list[tuple[int, float]]:
        """The ``k`` chunks nearest ``query`` (cosine: every vector is unit length),
        as (chunk id, score), best first; approximate scores when :attr:`rescored`."""
        return [(chunk, score) for chunk, _, score in self.candidates(query, k)]

    def candidates(self, query: npt.NDArray[np.float32], k: int) -> list[tuple[int, int, float]]:
        """:meth:`top` with each vector's ledger row: (chunk id, row id, score)."""
        if self.count == 0 or k <= 0:
            return []
        if self.path == INT8_RESCORE:
            scores = int8_scores(self.matrix, self._scales[: self.count], query)
        else:
            scores = self.matrix @ query
        chunks, rows = self.chunk_ids, self._rows
        return [(int(chunks[i]), int(rows[i]), float(scores[i])) for i in best(scores, k)]


def quantise(
    block: npt.NDArray[np.float32],
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Rows as int8 codes and a scale each (row ~= codes * scale): each row's largest
    component maps to INT8_MAX, so a row keeps its own precision. One temporary the
    size of the block (loading 1M vectors quantises 1 GB of float32)."""
    peak = np.maximum(block.max(axis=1), -block.min(axis=1))
    scales = np.where(peak > 0, peak / INT8_MAX, 1.0).astype(np.float32)
    scaled = np.multiply(block, (1.0 / scales)[:, None], dtype=np.float32)
    np.rint(scaled, out=scaled)  # within +-INT8_MAX by construction
    return scaled.astype(np.int8), scales


def top_k(
    matrix: npt.NDArray[np.float32],
    chunk_ids: npt.NDArray[np.int64],
    query: npt.NDArray[np.float32],
    k: int,
) -> list[tuple[int, float]]:
    """Exact nearest neighbours by dot product, best first (ties: lower row first)."""
    if len(chunk_ids) == 0 or k <= 0:
        return []
    scores = matrix @ query
    return [(int(chunk_ids[i]), float(scores[i])) for i in best(scores, k)]


def int8_scores(
    codes: npt.NDArray[np.int8], scales: npt.NDArray[np.float32], query: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    """Every row's approximate dot product with ``query``: the int8 codes' (exact in
    int32) times both scales. numkong releases the GIL while it scans."""
    assert numkong is not None
    q_codes, q_scale = quantise(query[None, :])
    scores = np.empty((1, len(codes)), np.float32)
    numkong.cdist(q_codes, codes, metric="dot", out=scores)
    flat: npt.NDArray[np.float32] = scores[0]
    np.multiply(flat, scales, out=flat)
    flat *= q_scale[0]
    return flat


def best(scores: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.intp]:
    """Positions of the ``k`` highest scores, best first (ties: lower position first):
    a partition, then a sort of those k only."""
    n = len(scores)
    part = np.argpartition(scores, n - k)[n - k :] if k < n else np.arange(n)
    return part[np.lexsort((part, -scores[part]))]


def rescore(
    query: npt.NDArray[np.float32], vectors: Sequence[tuple[int, int, bytes]]
) -> list[tuple[int, float]]:
    """(chunk id, row id, float32 vector) scored exactly against ``query``: (chunk
    id, cosine), best first, ties by row id, as :func:`top_k` orders them."""
    if not vectors:
        return []
    rows = np.fromiter((v[1] for v in vectors), np.int64, len(vectors))
    block = np.frombuffer(b"".join(v[2] for v in vectors), dtype="<f4")
    scores = block.reshape(len(vectors), -1).astype(np.float32) @ query
    order = np.lexsort((rows, -scores))
    return [(vectors[i][0], float(scores[i])) for i in order]


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
    path: str = EXACT_F32
    load_s: float = 0.0  # seconds its last whole load took


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

    def __init__(
        self,
        source: IndexSource,
        *,
        page_rows: int = LOAD_PAGE_ROWS,
        path: str | None = None,
    ) -> None:
        """``path``: the structure (:data:`PATHS`; None: :func:`default_path`).

        Raises:
            ValueError: a path not available here.
        """
        one_blas_thread()
        self.path = path or default_path()
        IndexMatrix(0, 1, self.path)  # refuses a path this machine cannot run
        self._source = source
        self._page_rows = page_rows
        self._matrices: dict[int, IndexMatrix] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._warming: set[int] = set()

    def info(self, index_id: int) -> MatrixInfo | None:
        held = self._matrices.get(index_id)
        if held is None:
            return None
        return MatrixInfo(index_id, held.count, held.revision, held.nbytes, held.path, held.load_s)

    def holding(self) -> list[int]:
        """The ids of the indexes whose vectors this process holds."""
        return list(self._matrices)

    def drop(self, index_id: int) -> None:
        """Forget an index (retired, dropped): its memory goes back."""
        self._matrices.pop(index_id, None)
        self._locks.pop(index_id, None)

    async def current(self, index: IndexLike) -> IndexMatrix:
        """The index's matrix as of its revision now."""
        # One index answers at a time: a matrix of an index no longer active (after
        # an activation) goes, and its memory with it once no search holds it. An
        # index being warmed (:meth:`warm`) stays until the next answer from it.
        for other in [i for i in self._matrices if i != index.id and i not in self._warming]:
            self.drop(other)
        return await self._load(index)

    async def warm(self, index: IndexLike) -> MatrixInfo:
        """Load ``index``'s matrix now, beside the one answering, so that the first
        search after it is activated does not pay for the load (at 1M vectors,
        seconds). ``activate`` of a campaign's index calls it, through
        :meth:`core.ledger.hybrid.Searcher.warm`, before the switch."""
        self._warming.add(index.id)
        try:
            held = await self._load(index)
        finally:
            self._warming.discard(index.id)
        return MatrixInfo(index.id, held.count, held.revision, held.nbytes, held.path, held.load_s)

    async def _load(self, index: IndexLike) -> IndexMatrix:
        lock = self._locks.setdefault(index.id, asyncio.Lock())
        async with lock:
            held = self._matrices.get(index.id)
            if held is None or held.dimensions != index.dimensions:
                held = self._matrices[index.id] = IndexMatrix(index.id, index.dimensions, self.path)
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
        started = time.perf_counter()
        fresh = IndexMatrix(held.index_id, held.dimensions, held.path)
        fresh.reloads = held.reloads + (held.revision is not None)
        fresh.reserve((await self._source.get(held.index_id)).vectors)
        await self._load_after(fresh)
        fresh.revision = revision
        fresh.loaded_at = time.time()
        fresh.load_s = time.perf_counter() - started
        return fresh

    async def _load_after(self, held: IndexMatrix) -> None:
        while True:
            rows = await self._source.vectors(
                held.index_id, after_id=held.last_row_id, limit=self._page_rows
            )
            held.append(rows)
            if len(rows) < self._page_rows:
                return
