"""task_counters: tasks by (status, error code, stage), kept by triggers in the
writing transaction, so the dashboard's counts and the failures-by-code view read a
few dozen rows instead of grouping every task (a 1 000 000-task ledger); indexes for
a status or error code filter's newest tasks

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from core.ledger.counters import (
    POSTGRES_TRIGGERS,
    SQLITE_TRIGGERS,
    drop_triggers,
    fill_events_sql,
    fill_sql,
)
from core.ledger.schema import NOT_RUNNING_SQL

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "task_counters",
        sa.Column("status", sa.String(length=16), nullable=False),
        # '' for no error code: a primary key column cannot be NULL on PostgreSQL,
        # and two NULLs are two keys on SQLite.
        sa.Column("error_code", sa.String(length=32), nullable=False),
        sa.Column("stage", sa.String(length=16), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("status", "error_code", "stage", name="pk_task_counters"),
    )
    # The first and last failure of a group are two seeks here, not a grouping of
    # every failed task. Partial (failed only): an index led by status would tempt
    # SQLite's planner away from ix_tasks_claimable (see schema.py).
    op.create_table(
        "event_counters",
        sa.Column("to_status", sa.String(length=16), nullable=False),
        sa.Column("error_code", sa.String(length=32), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("to_status", "error_code", name="pk_event_counters"),
    )
    op.create_index(
        "ix_tasks_failed_at",
        "ingestion_tasks",
        ["error_code", "stage", "updated_at"],
        sqlite_where=sa.text("status = 'failed'"),
        postgresql_where=sa.text("status = 'failed'"),
    )
    # A status or error code filter's newest tasks in the list's order (schema.py).
    # Every status but running, the WHERE spelled as ORs (schema.py says why).
    not_running = sa.text(NOT_RUNNING_SQL)
    op.create_index(
        "ix_tasks_status_created",
        "ingestion_tasks",
        ["status", "created_at", "id"],
        sqlite_where=not_running,
        postgresql_where=not_running,
    )
    op.create_index("ix_tasks_error_created", "ingestion_tasks", ["error_code", "created_at", "id"])
    sqlite = op.get_bind().dialect.name == "sqlite"
    # Filled in the migration's transaction with the triggers created: no write can
    # fall between the count and the first trigger.
    for statement in SQLITE_TRIGGERS if sqlite else POSTGRES_TRIGGERS:
        op.execute(statement)
    op.execute(fill_sql())
    op.execute(fill_events_sql())


def downgrade() -> None:
    for statement in drop_triggers(op.get_bind().dialect.name):
        op.execute(statement)
    for index in ("ix_tasks_error_created", "ix_tasks_status_created", "ix_tasks_failed_at"):
        op.drop_index(index, table_name="ingestion_tasks")
    op.drop_table("event_counters")
    op.drop_table("task_counters")
