"""SQLite: the search index is written by the statement that writes a document's
chunks, not by a trigger per chunk

FTS5 flushes its pending terms at every statement savepoint and each trigger run
opens one, so the insert trigger wrote one index segment per chunk. The ledger now
indexes a document's chunks with one INSERT ... SELECT in the same transaction
(core.ledger.statements.INDEX_CHUNKS); the delete and update triggers stay. Rows
already indexed stay as they are. PostgreSQL (a generated tsvector) is unchanged.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER chunks_fts_insert")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute(
            """CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks BEGIN
                 INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text);
               END"""
        )
