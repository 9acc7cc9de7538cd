"""A SQLite ledger as an older ingestdesk left it: made at the head, the later
migrations' changes taken back, newest first, and its revision set back. Tests of a
migration's upgrade start from this (Alembic's own downgrades are not kept for every
revision; these are what each upgrade must find)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

# What each revision added, as the statements that take it back.
UNDO: dict[str, tuple[str, ...]] = {
    "0021": ("DROP INDEX ix_tasks_retried",),
    "0020": (
        "CREATE INDEX ix_documents_status ON documents (status)",
        "DROP INDEX ix_documents_status_created",
        "DROP INDEX ix_documents_created",
    ),
    "0019": ("DROP INDEX ix_document_pages_decision", "DROP INDEX ix_tasks_worker"),
    "0018": (
        "DROP TRIGGER chunks_fts_update",
        "DROP TRIGGER chunks_fts_delete",
        "DROP TABLE chunks_fts",
        "DROP VIEW chunks_fts_content",
        "ALTER TABLE chunks DROP COLUMN search_text",
        # 0002's index of the text as written, with its triggers (0008 dropped the
        # insert trigger), filled again.
        "CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks', content_rowid='id')",
        "CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN"
        " INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);"
        " END",
        "CREATE TRIGGER chunks_fts_update AFTER UPDATE OF text ON chunks BEGIN"
        " INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);"
        " INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text);"
        " END",
        "INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')",
    ),
    "0017": (
        "DROP TRIGGER documents_name_index_insert",
        "DROP TRIGGER documents_name_index_delete",
        "DROP TRIGGER documents_name_index_update",
        "DROP TABLE documents_name_index",
    ),
    "0016": (
        "DROP TRIGGER tr_task_counters_insert",
        "DROP TRIGGER tr_task_counters_delete",
        "DROP TRIGGER tr_task_counters_update",
        "DROP TRIGGER tr_event_counters_insert",
        "DROP TABLE task_counters",
        "DROP TABLE event_counters",
        "DROP INDEX ix_tasks_failed_at",
        "DROP INDEX ix_tasks_status_created",
        "DROP INDEX ix_tasks_error_created",
    ),
    "0015": (
        "DROP INDEX ix_tasks_index_status",
        "ALTER TABLE ingestion_tasks DROP COLUMN index_id",
    ),
    "0014": (
        "DROP TABLE chunk_vectors",
        "DROP TABLE indexes",
        "ALTER TABLE chunks ADD COLUMN embedding BLOB",
    ),
    "0013": ("DROP TABLE document_pages",),
    "0012": ("ALTER TABLE documents DROP COLUMN filename_folded",),
}


def set_back(path: Path, revision: str) -> None:
    """Take back every revision after ``revision`` (one of UNDO's or the one before
    its oldest) in the SQLite ledger at ``path``."""
    with sqlite3.connect(path) as raw:
        for later in sorted(UNDO, reverse=True):
            if later > revision:
                for statement in UNDO[later]:
                    raw.execute(statement)
        raw.execute("UPDATE alembic_version SET version_num = ?", (revision,))
