"""documents indexed by content: a claim tells at once whether another document has
the same bytes, so only those look for a result to reuse

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_documents_sha256", "documents", ["sha256"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_documents_sha256", table_name="documents")
