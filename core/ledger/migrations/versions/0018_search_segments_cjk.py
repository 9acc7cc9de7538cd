"""keyword search finds words inside Chinese, Japanese and Korean text: such text is
indexed a character a token (core.ledger.segment), on both backends

Both tokenizers took a run of these scripts as one token, so ``文字コード`` did not
find ``この文書は文字コードについて説明します``. Each chunk holding such text now
keeps, in ``chunks.search_text``, its text with each of those characters between
spaces (NULL for every other chunk: nothing else is indexed differently), and the
index reads ``coalesce(search_text, text)``:

- SQLite: FTS5's external content must give back, for snippets, 'rebuild' and
  'integrity-check', the very values that were indexed, and its 'delete' be handed
  them; content='chunks' would hand it the unsegmented text. Its content is now a
  view, ``chunks_fts_content``, and the delete and update triggers pass the same
  expression. The content option is fixed when an FTS5 table is made, so the table
  is made again and filled from the view ('rebuild'). No tokenizer of our own: the
  Python sqlite3 module cannot register one.
- PostgreSQL: the generated ``search`` column is generated from the same
  expression (``coalesce`` is immutable), dropped and added again as 0009 did; the
  column is dropped before ``search_text`` is filled so that filling it neither
  recomputes tsvectors nor updates the GIN index row by row.

``search_text`` is filled in batches of :data:`BATCH` chunks by id, segmented by the
same Python function the ledger writes with; PostgreSQL sends only the chunks its
regular expression (the same character class) says hold such a character.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.engine import Connection

from core.ledger.segment import CJK_PATTERN, has_cjk, segment

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

BATCH = 1000  # chunks read a statement while filling search_text

INDEXED = "coalesce(search_text, text)"
SQLITE_DROP_INDEX = [
    "DROP TRIGGER chunks_fts_update",
    "DROP TRIGGER chunks_fts_delete",
    "DROP TABLE chunks_fts",
]
SQLITE_INDEX = [
    f"CREATE VIEW chunks_fts_content(id, text) AS SELECT id, {INDEXED} FROM chunks",
    "CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks_fts_content', "
    "content_rowid='id')",
    """CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN
         INSERT INTO chunks_fts(chunks_fts, rowid, text)
         VALUES ('delete', old.id, coalesce(old.search_text, old.text));
       END""",
    """CREATE TRIGGER chunks_fts_update AFTER UPDATE OF text, search_text ON chunks BEGIN
         INSERT INTO chunks_fts(chunks_fts, rowid, text)
         VALUES ('delete', old.id, coalesce(old.search_text, old.text));
         INSERT INTO chunks_fts(rowid, text)
         VALUES (new.id, coalesce(new.search_text, new.text));
       END""",
    # Every chunk already in the ledger, read through the view.
    "INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')",
]
# 0002's index and triggers (0008 dropped its insert trigger).
SQLITE_INDEX_BEFORE = [
    "CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks', content_rowid='id')",
    """CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN
         INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);
       END""",
    """CREATE TRIGGER chunks_fts_update AFTER UPDATE OF text ON chunks BEGIN
         INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);
         INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text);
       END""",
    "INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')",
]
POSTGRES_DROP_INDEX = ["DROP INDEX ix_chunks_search", "ALTER TABLE chunks DROP COLUMN search"]


def postgres_index(indexed: str) -> list[str]:
    return [
        "ALTER TABLE chunks ADD COLUMN search tsvector "
        f"GENERATED ALWAYS AS (to_tsvector('ingestdesk_search'::regconfig, {indexed})) STORED",
        "CREATE INDEX ix_chunks_search ON chunks USING gin (search)",
    ]


def fill_search_text(conn: Connection) -> int:
    """Segment every chunk holding CJK text, :data:`BATCH` chunks a statement, by id;
    how many were."""
    where = "" if conn.dialect.name == "sqlite" else " AND text ~ :cjk"
    read = sa.text(f"SELECT id, text FROM chunks WHERE id > :last{where} ORDER BY id LIMIT :n")
    write = sa.text("UPDATE chunks SET search_text = :s WHERE id = :i")
    last, filled = 0, 0
    while True:
        rows = conn.execute(read, {"last": last, "n": BATCH, "cjk": CJK_PATTERN}).all()
        if not rows:
            return filled
        segmented = [{"i": r.id, "s": segment(r.text)} for r in rows if has_cjk(r.text)]
        if segmented:
            conn.execute(write, segmented)
        filled += len(segmented)
        last = rows[-1].id


def upgrade() -> None:
    conn = op.get_bind()
    sqlite = conn.dialect.name == "sqlite"
    for statement in SQLITE_DROP_INDEX if sqlite else POSTGRES_DROP_INDEX:
        op.execute(statement)
    op.add_column("chunks", sa.Column("search_text", sa.Text(), nullable=True))
    fill_search_text(conn)
    for statement in SQLITE_INDEX if sqlite else postgres_index(INDEXED):
        op.execute(statement)


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        for statement in [*SQLITE_DROP_INDEX, "DROP VIEW chunks_fts_content"]:
            op.execute(statement)
        # SQLite 3.35+ drops a column in place; nothing refers to it any more.
        op.execute("ALTER TABLE chunks DROP COLUMN search_text")
        for statement in SQLITE_INDEX_BEFORE:
            op.execute(statement)
        return
    for statement in POSTGRES_DROP_INDEX:
        op.execute(statement)
    op.drop_column("chunks", "search_text")
    for statement in postgres_index("text"):
        op.execute(statement)
