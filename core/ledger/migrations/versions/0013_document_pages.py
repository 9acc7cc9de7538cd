"""document pages: how each page of a version was read (text layer, OCR with its
confidence, OCR that found nothing, skipped with why), for review before publishing

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A new table, so no rebuild of an existing one; versions processed before this
    # revision simply have no page record (as formats without pages).
    op.create_table(
        "document_pages",
        sa.Column("document_id", sa.String(length=32), nullable=False),
        sa.Column("page", sa.Integer(), nullable=False),
        sa.Column("decision", sa.String(length=16), nullable=False),
        sa.Column("chars", sa.Integer(), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=True),
        sa.Column("ocr_seconds", sa.Float(), nullable=False),
        sa.Column("reason", sa.String(length=500), nullable=True),
        sa.ForeignKeyConstraint(
            ["document_id"],
            ["documents.id"],
            name=op.f("fk_document_pages_document_id_documents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("document_id", "page", name=op.f("pk_document_pages")),
    )
    op.create_index(
        "ix_document_pages_review",
        "document_pages",
        ["document_id", "decision", "confidence"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_document_pages_review", table_name="document_pages")
    op.drop_table("document_pages")
