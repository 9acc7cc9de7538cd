"""vector indexes: every vector belongs to an index (an embedder, its model, version
and dimensions); the chunks' single embedding column moves into chunk_vectors

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01
"""

from __future__ import annotations

import json
import time
from collections import Counter

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# What made a vector is recorded on the task that made it (its options); a result
# made before options were recorded came from the only embedder there was.
HASHED_NAME = "hashed-bag-of-words"


def upgrade() -> None:
    op.create_table(
        "indexes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("embedder", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("version", sa.String(length=128), nullable=False),
        sa.Column("dimensions", sa.Integer(), nullable=False),
        sa.Column("options", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("deletions", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("built_at", sa.Float(), nullable=True),
        sa.Column("activated_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_indexes")),
        sa.UniqueConstraint("name", name=op.f("uq_indexes_name")),
    )
    op.create_table(
        "chunk_vectors",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("index_id", sa.Integer(), nullable=False),
        sa.Column("chunk_id", sa.Integer(), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["chunk_id"],
            ["chunks.id"],
            name=op.f("fk_chunk_vectors_chunk_id_chunks"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["index_id"],
            ["indexes.id"],
            name=op.f("fk_chunk_vectors_index_id_indexes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_chunk_vectors")),
        sa.UniqueConstraint("index_id", "chunk_id", name=op.f("uq_chunk_vectors_index_id")),
    )
    op.create_index("ix_chunk_vectors_index_order", "chunk_vectors", ["index_id", "id"])
    op.create_index("ix_chunk_vectors_chunk", "chunk_vectors", ["chunk_id"])
    _move_vectors(op.get_bind())
    # SQLite has had DROP COLUMN since 3.35; the column is in no index or constraint,
    # so no table rebuild (which would copy the chunks under their search index).
    op.drop_column("chunks", "embedding")


def _move_vectors(conn: sa.Connection) -> None:
    """One index per embedder that made the stored vectors; the one that made most of
    them is active (search answered from all of them alike until now)."""
    made_by: dict[str, tuple[str, str, int]] = {}
    rows = conn.execute(
        sa.text(
            "SELECT document_id, options FROM ingestion_tasks WHERE status = 'succeeded' "
            "ORDER BY updated_at, id"
        )
    )
    for document_id, options in rows:
        try:
            recorded = json.loads(options or "{}")
            made_by[document_id] = (
                str(recorded["embedder"]),
                str(recorded["embedder_version"]),
                int(recorded["embedder_dimensions"]),
            )
        except (ValueError, KeyError, TypeError):
            continue  # the latest succeeded task wins; one without a record says nothing
    sizes = conn.execute(
        sa.text(
            "SELECT document_id, length(embedding) AS size, count(*) AS n FROM chunks "
            "WHERE embedding IS NOT NULL GROUP BY document_id, length(embedding)"
        )
    ).all()
    if not sizes:
        return
    groups: dict[tuple[str, str, int], list[str]] = {}
    weight: Counter[tuple[str, str, int]] = Counter()
    for document_id, size, n in sizes:
        key = made_by.get(document_id, (HASHED_NAME, "1", int(size) // 4))
        if key[2] * 4 != int(size):  # the record disagrees with the bytes: trust the bytes
            key = (key[0], key[1], int(size) // 4)
        groups.setdefault(key, []).append(document_id)
        weight[key] += int(n)
    active = weight.most_common(1)[0][0]
    now = time.time()
    conn.execute(
        sa.text(
            "CREATE TEMPORARY TABLE migrate_vector_owner "
            "(document_id VARCHAR(32) PRIMARY KEY, index_id INTEGER NOT NULL)"
        )
    )
    taken: set[str] = set()
    for key, documents in sorted(groups.items(), key=lambda kv: (kv[0] != active, kv[0])):
        made_with, version, dims = key
        kind = "hashed" if made_with == HASHED_NAME else made_with
        name = f"{kind}-{dims}"
        while name in taken:
            name += "+"
        taken.add(name)
        index_id = conn.execute(
            sa.text(
                "INSERT INTO indexes (name, embedder, model, version, dimensions, options, "
                "state, deletions, created_at, built_at, activated_at) VALUES (:name, :kind, "
                ":model, :version, :dims, '{}', :state, 0, :now, :now, :activated) RETURNING id"
            ),
            {
                "name": name,
                "kind": kind,
                "model": "" if kind == "hashed" else version,
                "version": version,
                "dims": dims,
                "state": "active" if key == active else "retired",
                "now": now,
                "activated": now if key == active else None,
            },
        ).scalar_one()
        conn.execute(
            sa.text("INSERT INTO migrate_vector_owner (document_id, index_id) VALUES (:d, :i)"),
            [{"d": d, "i": index_id} for d in documents],
        )
    conn.execute(
        sa.text(
            "INSERT INTO chunk_vectors (index_id, chunk_id, vector) "
            "SELECT o.index_id, c.id, c.embedding FROM chunks c "
            "JOIN migrate_vector_owner o ON o.document_id = c.document_id "
            "WHERE c.embedding IS NOT NULL AND length(c.embedding) = 4 * "
            "(SELECT dimensions FROM indexes WHERE id = o.index_id) ORDER BY c.id"
        )
    )
    conn.execute(sa.text("DROP TABLE migrate_vector_owner"))


def downgrade() -> None:
    op.add_column("chunks", sa.Column("embedding", sa.LargeBinary(), nullable=True))
    conn = op.get_bind()
    conn.execute(
        sa.text(
            "UPDATE chunks SET embedding = (SELECT v.vector FROM chunk_vectors v "
            "JOIN indexes i ON i.id = v.index_id WHERE v.chunk_id = chunks.id "
            "AND i.state = 'active')"
        )
    )
    op.drop_index("ix_chunk_vectors_chunk", table_name="chunk_vectors")
    op.drop_index("ix_chunk_vectors_index_order", table_name="chunk_vectors")
    op.drop_table("chunk_vectors")
    op.drop_table("indexes")
