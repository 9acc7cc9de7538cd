"""chunk location: where a chunk is in its document beyond its page (a slide and its
notes, a sheet's rows, a heading path), as JSON

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN on both backends: a nullable column needs no table rebuild
    # (SQLite's batch mode would copy the chunks table under its search index).
    op.add_column("chunks", sa.Column("location", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.drop_column("location")
