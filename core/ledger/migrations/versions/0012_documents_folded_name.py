"""documents.filename_folded: a document's name as filters match it, stored with the
row instead of folded in every filter's SQL

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from core.filters import SQLITE_FOLD_FUNCTION

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, so a plain ADD COLUMN on both backends (no table rebuild); every row
    # is filled at once, and every new row is written with it.
    op.add_column("documents", sa.Column("filename_folded", sa.String(255), nullable=True))
    # The same fold the ledger's filters use: the function the SQLite ledger registers
    # on every connection, PostgreSQL's lower() under its UTF-8 ctype (core.filters).
    fold = SQLITE_FOLD_FUNCTION if op.get_bind().dialect.name == "sqlite" else "lower"
    op.execute(f"UPDATE documents SET filename_folded = {fold}(filename)")


def downgrade() -> None:
    with op.batch_alter_table("documents", schema=None) as batch_op:
        batch_op.drop_column("filename_folded")
