"""Vector indexes: which embedder's vectors search may compare, and the vectors.

An index is one embedder — its kind (``hashed``, ``wordllama``, ``openai``, ...; see
:mod:`core.ingest.embedders`), model, version and dimensions, and the options that
change its vectors — and every vector in ``chunk_vectors`` names its index. Two
indexes' vectors are never compared: two models' spaces have nothing in common, even
at the same dimensions (dify#12482's "dimension conflict" is the visible case; the
invisible one is two 256-dimension models ranking each other's vectors).

Exactly one index is active at a time: search answers from it. A ledger gets its
first index from the first worker that embeds (:meth:`Indexes.ensure`), which makes
it active if none is.

A search process keeps an index's vectors in memory. New vectors always get higher
row ids, so it loads what is new since the last id it saw; a deletion bumps the
index's ``deletions`` in the same transaction, and the process reloads.
:meth:`Indexes.revision` is the pair it compares.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.engine import Connection

from core.errors import NotFound
from core.ledger.prepared import Prepared
from core.ledger.schema import CHUNK_VECTORS, CHUNKS, INDEXES
from core.ledger.transactions import Transactions
from core.states import IndexState

I = INDEXES.c  # noqa: E741 (the table's columns, as elsewhere in the ledger)
V = CHUNK_VECTORS.c
VECTORS_PAGE_MAX = 100_000  # vectors one read returns at most


@dataclass(frozen=True)
class IndexKey:
    """What makes vectors comparable: the same key, the same space."""

    embedder: str
    model: str
    version: str
    dimensions: int
    options: Mapping[str, str] = field(default_factory=dict)

    def __hash__(self) -> int:  # options is a dict: hashed by its canonical text
        return hash((self.embedder, self.model, self.version, self.dimensions, self.options_json()))

    def options_json(self) -> str:
        return json.dumps(dict(self.options), sort_keys=True, separators=(",", ":"))

    def default_name(self) -> str:
        """``wordllama-256``, ``openai-text-embedding-3-small-1536``: readable, and
        unique enough that a clash only adds a suffix."""
        # A local kind has one model (core.ingest.embedders): its name says enough.
        model = "" if self.embedder in {"hashed", "wordllama"} else self.model
        parts = [self.embedder, model, str(self.dimensions)]
        return "-".join(p for p in parts if p).replace("/", "-")[:120]


@dataclass(frozen=True)
class IndexView:
    id: int
    name: str
    embedder: str
    model: str
    version: str
    dimensions: int
    options: Mapping[str, str]
    state: IndexState
    deletions: int
    created_at: float
    built_at: float | None
    activated_at: float | None
    vectors: int = 0  # how many vectors it holds (filled by list/get)

    @property
    def key(self) -> IndexKey:
        return IndexKey(self.embedder, self.model, self.version, self.dimensions, self.options)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "embedder": self.embedder,
            "model": self.model,
            "version": self.version,
            "dimensions": self.dimensions,
            "options": dict(self.options),
            "state": self.state.value,
            "vectors": self.vectors,
            "created_at": self.created_at,
            "built_at": self.built_at,
            "activated_at": self.activated_at,
        }


@dataclass(frozen=True)
class IndexRevision:
    """What a search process compares to know whether its copy of an index's vectors
    is current: new vectors have ids above ``last_vector_id``; a changed
    ``deletions`` means some it holds are gone."""

    deletions: int
    last_vector_id: int


def index_view(row: Any, vectors: int = 0) -> IndexView:
    return IndexView(
        id=row.id,
        name=row.name,
        embedder=row.embedder,
        model=row.model,
        version=row.version,
        dimensions=row.dimensions,
        options=json.loads(row.options or "{}"),
        state=IndexState(row.state),
        deletions=row.deletions,
        created_at=row.created_at,
        built_at=row.built_at,
        activated_at=row.activated_at,
        vectors=vectors,
    )


def _counts(conn: Connection) -> dict[int, int]:
    rows = conn.execute(select(V.index_id, func.count()).group_by(V.index_id))
    return {index_id: n for index_id, n in rows}


def index_row(conn: Connection, name_or_id: str | int) -> Any:
    if isinstance(name_or_id, int) or str(name_or_id).isdigit():
        row = conn.execute(select(INDEXES).where(I.id == int(name_or_id))).first()
        if row is not None:
            return row
    row = conn.execute(select(INDEXES).where(I.name == str(name_or_id))).first()
    if row is None:
        raise NotFound(f"no index is named {str(name_or_id)[:80]!r} (see: ingestdesk index list)")
    return row


def active_index(conn: Connection) -> IndexView | None:
    """The index search answers from, read in the caller's transaction."""
    row = conn.execute(select(INDEXES).where(I.state == IndexState.ACTIVE.value)).first()
    return None if row is None else index_view(row)


def note_vectors_deleted(conn: Connection, chunk_ids_sql: Any) -> None:
    """Before deleting chunks (their vectors go with them by cascade): bump the
    ``deletions`` of every index holding one of their vectors, so search processes
    reload. ``chunk_ids_sql`` selects the chunk ids about to go. A document that had
    no chunks (every first finish) touches no index row, so concurrent finishes do not
    queue on the indexes' rows."""
    touched = select(V.index_id).where(V.chunk_id.in_(chunk_ids_sql)).distinct()
    conn.execute(update(INDEXES).where(I.id.in_(touched)).values(deletions=I.deletions + 1))


# Every finish runs these (insert_vectors, find_index): built and compiled once, not
# per call. Building them was most of the finish transaction's CPU on a small
# document (profiled: ~0.6 ms of ~2.8 ms; see core.ledger.prepared).
_CHUNK_IDS = Prepared(
    select(CHUNKS.c.ordinal, CHUNKS.c.id).where(CHUNKS.c.document_id == bindparam("p_document_id"))
)
_INSERT_VECTORS = Prepared(
    insert(CHUNK_VECTORS).values(
        index_id=bindparam("p_index_id"),
        chunk_id=bindparam("p_chunk_id"),
        vector=bindparam("p_vector"),
    )
)
_FIND_INDEX = Prepared(
    select(I.id).where(
        I.embedder == bindparam("p_embedder"),
        I.model == bindparam("p_model"),
        I.version == bindparam("p_version"),
        I.dimensions == bindparam("p_dimensions"),
        I.options == bindparam("p_options"),
    )
)


def insert_vectors(
    conn: Connection, index_id: int, document_id: str, vectors: Sequence[tuple[int, bytes]]
) -> None:
    """The vectors (by chunk ordinal) of one document's chunks, into ``index_id``."""
    if not vectors:
        return
    ids = {r.ordinal: r.id for r in _CHUNK_IDS.rows(conn, {"p_document_id": document_id})}
    _INSERT_VECTORS.many(
        conn,
        [
            {"p_index_id": index_id, "p_chunk_id": ids[ordinal], "p_vector": vector}
            for ordinal, vector in vectors
        ],
    )


def vectors_by_ordinal(conn: Connection, index_id: int, document_id: str) -> dict[int, bytes]:
    rows = conn.execute(
        select(CHUNKS.c.ordinal, V.vector)
        .select_from(CHUNKS.join(CHUNK_VECTORS, V.chunk_id == CHUNKS.c.id))
        .where(CHUNKS.c.document_id == document_id, V.index_id == index_id)
    )
    return {ordinal: vector for ordinal, vector in rows}


def find_index(conn: Connection, key: IndexKey) -> int | None:
    """The id of the index of ``key``, if the ledger has one."""
    found = _FIND_INDEX.rows(
        conn,
        {
            "p_embedder": key.embedder,
            "p_model": key.model,
            "p_version": key.version,
            "p_dimensions": key.dimensions,
            "p_options": key.options_json(),
        },
    )
    return int(found[0].id) if found else None


def ensure_index(conn: Connection, key: IndexKey, now: float, *, name: str | None = None) -> int:
    """The id of the index of ``key``, made in the caller's transaction if there is
    none: active if the ledger has no active index (its first), else building.

    Resolved where the vectors are written, not once per worker: a worker costs no
    extra transaction, and two workers racing to make the first index make one (on
    PostgreSQL the loser's insert waits for the winner's commit, does nothing, and
    finds the winner's row)."""
    for _ in range(3):  # a name taken by another key meanwhile: the next suffix
        found = find_index(conn, key)
        if found is not None:
            return found
        wanted = name or key.default_name()
        taken = set(conn.execute(select(I.name).where(I.name.startswith(wanted))).scalars())
        chosen, n = wanted, 1
        while chosen in taken:
            n += 1
            chosen = f"{wanted}-{n}"
        first = active_index(conn) is None
        values = {
            "name": chosen,
            "embedder": key.embedder,
            "model": key.model,
            "version": key.version,
            "dimensions": key.dimensions,
            "options": key.options_json(),
            "state": (IndexState.ACTIVE if first else IndexState.BUILDING).value,
            "deletions": 0,
            "created_at": now,
            "built_at": now if first else None,
            "activated_at": now if first else None,
        }
        # Each dialect's own INSERT ... ON CONFLICT, imported where used: a SQLite
        # worker never loads the PostgreSQL dialect (tests/test_structure.py).
        if conn.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            conn.execute(pg_insert(INDEXES).values(**values).on_conflict_do_nothing())
        else:
            from sqlalchemy.dialects.sqlite import insert as sqlite_insert

            conn.execute(sqlite_insert(INDEXES).values(**values).on_conflict_do_nothing())
    found = find_index(conn, key)
    if found is None:
        raise RuntimeError(f"could not make an index for {key.default_name()}")
    return found


class Indexes:
    """The ledger's indexes: list, find, make sure one exists, read their vectors."""

    def __init__(self, transactions: Transactions, clock: Callable[[], float]) -> None:
        self._tx = transactions
        self.clock = clock

    async def list(self) -> list[IndexView]:
        """Every index, oldest first, with how many vectors each holds."""

        def tx(conn: Connection) -> list[IndexView]:
            counts = _counts(conn)
            rows = conn.execute(select(INDEXES).order_by(I.id))
            return [index_view(r, counts.get(r.id, 0)) for r in rows]

        return await self._tx.read(tx)

    async def get(self, name_or_id: str | int) -> IndexView:
        """Raises:
        NotFound: no index has that name or id."""

        def tx(conn: Connection) -> IndexView:
            row = index_row(conn, name_or_id)
            n = conn.execute(select(func.count()).where(V.index_id == row.id)).scalar_one()
            return index_view(row, n)

        return await self._tx.read(tx)

    async def active(self) -> IndexView | None:
        """The index search answers from; None on a ledger no worker has embedded in."""
        return await self._tx.read(active_index)

    async def ensure(self, key: IndexKey, *, name: str | None = None) -> IndexView:
        """The index of ``key``, made if there is none (active if no index is: the
        ledger's first)."""

        def tx(conn: Connection) -> IndexView:
            index_id = ensure_index(conn, key, self.clock(), name=name)
            return index_view(index_row(conn, index_id))

        return await self._tx.write(tx)

    async def revision(self, index_id: int) -> IndexRevision:
        """Raises:
        NotFound: the index is gone (dropped)."""

        def tx(conn: Connection) -> IndexRevision:
            deletions = conn.execute(select(I.deletions).where(I.id == index_id)).scalar()
            if deletions is None:
                raise NotFound(f"index {index_id} no longer exists")
            last = conn.execute(select(func.max(V.id)).where(V.index_id == index_id)).scalar()
            return IndexRevision(int(deletions), int(last or 0))

        return await self._tx.read(tx)

    async def vectors(
        self, index_id: int, *, after_id: int = 0, limit: int = VECTORS_PAGE_MAX
    ) -> builtins.list[tuple[int, int, bytes]]:
        """(row id, chunk id, vector) of ``index_id`` with row ids above ``after_id``,
        in row id order, at most ``limit``: a search process loads them page by page."""
        limit = max(1, min(limit, VECTORS_PAGE_MAX))

        def tx(conn: Connection) -> list[tuple[int, int, bytes]]:
            rows = conn.execute(
                select(V.id, V.chunk_id, V.vector)
                .where(V.index_id == index_id, V.id > after_id)
                .order_by(V.id)
                .limit(limit)
            )
            return [(r.id, r.chunk_id, bytes(r.vector)) for r in rows]

        return await self._tx.read(tx)
