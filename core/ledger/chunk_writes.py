"""Writing a version's chunks: rows, SQLite's search index and the vectors, in the
caller's transaction."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.engine import Connection

from core.ledger.indexes import insert_vectors
from core.ledger.segment import search_text
from core.ledger.statements import INDEX_CHUNKS, INSERT_CHUNKS, drop_chunks
from core.ledger.views import ChunkRecord


def replace_chunks(
    conn: Connection, document_id: str, chunks: Sequence[ChunkRecord], index_id: int | None
) -> None:
    """The document's chunks, replaced, with their vectors in index ``index_id``, and
    (on SQLite) added to the search index in the same transaction (PostgreSQL's index
    is a generated column)."""
    vectors = [(c.ordinal, c.embedding) for c in chunks if c.embedding is not None]
    if vectors and index_id is None:
        # A vector that names no index could be compared with another model's.
        raise ValueError("chunks with vectors need the index they belong to")
    drop_chunks(conn, document_id)
    if chunks:
        # A tuple per chunk, not a dict: this runs for every chunk of every finish.
        INSERT_CHUNKS.many_rows(
            conn,
            _CHUNK_COLUMNS,
            [
                (
                    document_id,
                    c.ordinal,
                    c.text,
                    c.page,
                    c.char_start,
                    c.char_end,
                    c.location,
                    search_text(c.text),
                )
                for c in chunks
            ],
        )
        if conn.dialect.name == "sqlite":
            INDEX_CHUNKS.rowcount(conn, {"p_document_id": document_id})
        if vectors:
            assert index_id is not None
            insert_vectors(conn, index_id, document_id, vectors)


_CHUNK_COLUMNS = (
    "document_id",
    "ordinal",
    "text",
    "page",
    "char_start",
    "char_end",
    "location",
    "search_text",
)
