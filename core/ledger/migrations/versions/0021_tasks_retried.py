"""tasks claimed more than once indexed in the list's order, so that an attempt filter
past the first attempt (``attempt:>1``, ``attempt:>3``) reads the few retried tasks
instead of every task: on a ledger whose tasks stop at three attempts, ``attempt:>3``
read all of a million tasks to find none (0.8 s on SQLite). Partial: a task's first
claim changes no entry.

On PostgreSQL also: task and document ids indexed for ``LIKE 'prefix%'`` (the
``varchar_pattern_ops`` operator class: under any collation but C, the primary key
cannot serve a prefix, and ``id:ab`` or a bare word that may start an id read every
task, 0.13-5 s at a million), and statistics of status, error code and stage taken
together (``CREATE STATISTICS``): the planner multiplied ``status:failed`` by
``code:parse_error`` as if unrelated, expected 142 tasks for 5 000, and sorted them all
where reading ix_tasks_error_created in order finds a page at once (58 ms to 7 ms)

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

# Spelled as the schema spells it (core.ledger.schema.RETRIED_SQL), written out: a
# migration says what it did then, whatever the schema says later.
RETRIED = sa.text("attempt > 1")
POSTGRES_UP = (
    "CREATE INDEX ix_tasks_id_pattern ON ingestion_tasks (id varchar_pattern_ops)",
    "CREATE INDEX ix_tasks_document_pattern ON ingestion_tasks (document_id varchar_pattern_ops)",
    "CREATE STATISTICS st_tasks_status_code_stage (dependencies, mcv)"
    " ON status, error_code, stage FROM ingestion_tasks",
    # The statistics are empty until the table is analysed: now, not at autovacuum's
    # next visit (about a second at a million tasks).
    "ANALYZE ingestion_tasks",
)
POSTGRES_DOWN = (
    "DROP STATISTICS IF EXISTS st_tasks_status_code_stage",
    "DROP INDEX IF EXISTS ix_tasks_document_pattern",
    "DROP INDEX IF EXISTS ix_tasks_id_pattern",
)


def upgrade() -> None:
    op.create_index(
        "ix_tasks_retried",
        "ingestion_tasks",
        ["created_at", "id", "attempt"],
        sqlite_where=RETRIED,
        postgresql_where=RETRIED,
    )
    if op.get_bind().dialect.name == "postgresql":
        for statement in POSTGRES_UP:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in POSTGRES_DOWN:
            op.execute(statement)
    op.drop_index("ix_tasks_retried", table_name="ingestion_tasks")
