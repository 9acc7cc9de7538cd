"""processing key: what identifies a task's result, indexed for reuse

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("ingestion_tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("processing_key", sa.String(length=64), nullable=True))
        batch_op.create_index("ix_tasks_processing_key", ["processing_key", "status"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("ingestion_tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_processing_key")
        batch_op.drop_column("processing_key")
