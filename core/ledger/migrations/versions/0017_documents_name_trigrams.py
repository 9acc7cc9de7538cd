"""documents' folded names indexed by trigram, so that a name filter (``name:zzz``)
finds its few documents without reading every task: an FTS5 trigram table kept by
triggers on SQLite, a pg_trgm GIN index on PostgreSQL (none if the extension cannot
be created there: filters then read names as before)

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op
from sqlalchemy.exc import DBAPIError

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

SQLITE_UP = [
    # External content (the names live once, in documents, keyed by its rowid) and
    # case-sensitive trigrams of the already folded name: a phrase query of the folded
    # value then matches exactly where ``filename_folded LIKE '%value%'`` does, with no
    # second case mapping of FTS5's own to disagree with core.filters.fold.
    "CREATE VIRTUAL TABLE documents_name_index USING fts5(filename_folded, "
    "content='documents', content_rowid='rowid', tokenize='trigram case_sensitive 1')",
    """CREATE TRIGGER documents_name_index_insert AFTER INSERT ON documents BEGIN
         INSERT INTO documents_name_index(rowid, filename_folded)
         VALUES (new.rowid, new.filename_folded);
       END""",
    """CREATE TRIGGER documents_name_index_delete AFTER DELETE ON documents BEGIN
         INSERT INTO documents_name_index(documents_name_index, rowid, filename_folded)
         VALUES ('delete', old.rowid, old.filename_folded);
       END""",
    """CREATE TRIGGER documents_name_index_update AFTER UPDATE OF filename_folded
       ON documents BEGIN
         INSERT INTO documents_name_index(documents_name_index, rowid, filename_folded)
         VALUES ('delete', old.rowid, old.filename_folded);
         INSERT INTO documents_name_index(rowid, filename_folded)
         VALUES (new.rowid, new.filename_folded);
       END""",
    # Every document already in the ledger, read from the content table.
    "INSERT INTO documents_name_index(documents_name_index) VALUES ('rebuild')",
]
SQLITE_DOWN = [
    "DROP TRIGGER documents_name_index_update",
    "DROP TRIGGER documents_name_index_delete",
    "DROP TRIGGER documents_name_index_insert",
    "DROP TABLE documents_name_index",
]
POSTGRES_INDEX = (
    "CREATE INDEX ix_documents_name_trigrams ON documents USING gin (filename_folded gin_trgm_ops)"
)


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        # The last statement ('rebuild') indexes every document already there.
        for statement in SQLITE_UP:
            op.execute(statement)
        return
    # pg_trgm is a trusted extension (PostgreSQL 13+): a database's owner may create it
    # without being a superuser. Where it is not installed or not allowed, the ledger
    # works without the index (a savepoint keeps the migration's transaction usable).
    try:
        with bind.begin_nested():
            bind.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except DBAPIError:
        return
    op.execute(POSTGRES_INDEX)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in SQLITE_DOWN:
            op.execute(statement)
        return
    # The extension stays: something else in the database may use it.
    op.execute("DROP INDEX IF EXISTS ix_documents_name_trigrams")
