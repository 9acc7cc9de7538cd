"""Alembic runs inside ingestdesk: the ledger hands it an open connection."""

from __future__ import annotations

from alembic import context

from core.ledger.schema import METADATA, with_postgresql_options

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=with_postgresql_options()
    if connection.dialect.name == "postgresql"
    else METADATA,
    # SQLite cannot ALTER most things; batch mode copies the table instead.
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
