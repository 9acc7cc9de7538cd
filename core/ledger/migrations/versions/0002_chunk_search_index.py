"""chunk search index: FTS5 on SQLite, a tsvector with a GIN index on PostgreSQL

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

SQLITE_UP = [
    # External-content FTS5: the text lives once, in chunks; triggers keep the
    # index in step inside the same transaction as the chunk write.
    "CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks', content_rowid='id')",
    """CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks BEGIN
         INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text);
       END""",
    """CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN
         INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);
       END""",
    """CREATE TRIGGER chunks_fts_update AFTER UPDATE OF text ON chunks BEGIN
         INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);
         INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text);
       END""",
]
SQLITE_DOWN = [
    "DROP TRIGGER chunks_fts_update",
    "DROP TRIGGER chunks_fts_delete",
    "DROP TRIGGER chunks_fts_insert",
    "DROP TABLE chunks_fts",
]
POSTGRES_UP = [
    "ALTER TABLE chunks ADD COLUMN search tsvector "
    "GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED",
    "CREATE INDEX ix_chunks_search ON chunks USING gin (search)",
]
POSTGRES_DOWN = ["DROP INDEX ix_chunks_search", "ALTER TABLE chunks DROP COLUMN search"]


def upgrade() -> None:
    statements = SQLITE_UP if op.get_bind().dialect.name == "sqlite" else POSTGRES_UP
    for statement in statements:
        op.execute(statement)


def downgrade() -> None:
    statements = SQLITE_DOWN if op.get_bind().dialect.name == "sqlite" else POSTGRES_DOWN
    for statement in statements:
        op.execute(statement)
