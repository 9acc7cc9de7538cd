"""document pages indexed by decision and confidence, and tasks by worker, so that a
page filter (``ocr:low``, ``pages:skipped``) or a worker filter (``worker:w1``)
matching few tasks finds them without reading every task: ``ix_document_pages_review``
leads with the version, which serves a task's own pages but not "which versions have
such a page"; no index had the worker

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_document_pages_decision",
        "document_pages",
        ["decision", "confidence", "document_id"],
    )
    op.create_index("ix_tasks_worker", "ingestion_tasks", ["worker_id"])


def downgrade() -> None:
    op.drop_index("ix_tasks_worker", table_name="ingestion_tasks")
    op.drop_index("ix_document_pages_decision", table_name="document_pages")
