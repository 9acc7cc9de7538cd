"""re-embedding tasks: a task may embed a version's stored chunks into an index (a
campaign's task) instead of ingesting the version

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A nullable ADD COLUMN: no table rebuild on either backend; every existing task
    # is an ingestion task (NULL).
    op.add_column("ingestion_tasks", sa.Column("index_id", sa.Integer(), nullable=True))
    op.create_index("ix_tasks_index_status", "ingestion_tasks", ["index_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_tasks_index_status", table_name="ingestion_tasks")
    with op.batch_alter_table("ingestion_tasks", schema=None) as batch_op:
        batch_op.drop_column("index_id")
