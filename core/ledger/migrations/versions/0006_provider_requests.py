"""provider ledger: one row per request to a remote embedding provider

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "provider_requests",
        sa.Column("request_key", sa.String(length=64), nullable=False),
        sa.Column("provider", sa.String(length=128), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("endpoint", sa.String(length=500), nullable=True),
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("texts", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.String(length=128), nullable=True),
        sa.Column("result_key", sa.String(length=128), nullable=True),
        sa.Column("result_sha256", sa.String(length=64), nullable=True),
        sa.Column("dimensions", sa.Integer(), nullable=True),
        sa.Column("usage", sa.Text(), nullable=True),
        sa.Column("detail", sa.String(length=500), nullable=True),
        sa.Column("sends", sa.Integer(), nullable=False),
        sa.Column("lookups", sa.Integer(), nullable=False),
        sa.Column("next_lookup_at", sa.Float(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("request_key", name=op.f("pk_provider_requests")),
    )
    with op.batch_alter_table("provider_requests", schema=None) as batch_op:
        batch_op.create_index("ix_provider_requests_due", ["state", "next_lookup_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_provider_requests_task_id"), ["task_id"], unique=False)


def downgrade() -> None:
    op.drop_table("provider_requests")
