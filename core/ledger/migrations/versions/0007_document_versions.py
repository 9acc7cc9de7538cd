"""document versions and the document history

Every documents row becomes one version of a document: ``family_id`` names the
document (its first version's id), ``version_no`` counts its versions. Existing rows
are each the first version of their own document.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("documents", schema=None) as batch_op:
        batch_op.add_column(sa.Column("family_id", sa.String(length=32), nullable=True))
        batch_op.add_column(
            sa.Column("version_no", sa.Integer(), nullable=False, server_default="1")
        )
    op.execute("UPDATE documents SET family_id = id")
    with op.batch_alter_table("documents", schema=None) as batch_op:
        batch_op.alter_column("family_id", existing_type=sa.String(length=32), nullable=False)
        batch_op.create_index(batch_op.f("ix_documents_family_id"), ["family_id"], unique=False)
        # Two versions of one document never share a number, whatever a writer does.
        batch_op.create_unique_constraint(
            batch_op.f("uq_documents_family_id"), ["family_id", "version_no"]
        )
    op.create_table(
        "document_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("family_id", sa.String(length=32), nullable=False),
        sa.Column("document_id", sa.String(length=32), nullable=False),
        sa.Column("version_no", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("from_status", sa.String(length=16), nullable=True),
        sa.Column("to_status", sa.String(length=16), nullable=True),
        sa.Column("reason", sa.String(length=500), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_document_events")),
    )
    with op.batch_alter_table("document_events", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_document_events_family_id"), ["family_id"], unique=False
        )


def downgrade() -> None:
    op.drop_table("document_events")
    with op.batch_alter_table("documents", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_documents_family_id"))
        batch_op.drop_column("version_no")
        batch_op.drop_column("family_id")
