"""Bring a ledger's schema up to date when it opens (Alembic, run in-process).

Opening an older ledger upgrades it; opening one written by a newer ingestdesk is
refused with :class:`~core.errors.SchemaTooNew`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from core.errors import LedgerUnreachable, SchemaTooNew
from core.ledger.faults import outside_fault

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
logger = logging.getLogger(__name__)
# The newest migration. Checked against Alembic by a test; lets an up-to-date ledger
# open without importing Alembic at all (a third of a CLI command's start-up).
SCHEMA_HEAD = "0021"


def migrate(connection: Connection) -> None:
    """Upgrade the schema to the newest revision, inside the caller's transaction."""
    if _has_version_table(connection) and _current_revision(connection) == SCHEMA_HEAD:
        return
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    cfg = _alembic_config(connection)
    script = ScriptDirectory.from_config(cfg)
    current = MigrationContext.configure(connection).get_current_revision()
    if current == script.get_current_head():
        return
    known = {rev.revision for rev in script.walk_revisions()}
    if current is not None and current not in known:
        raise SchemaTooNew(
            f"this ledger has schema revision {current!r}, newer than this ingestdesk "
            f"understands (latest {script.get_current_head()!r}); upgrade ingestdesk"
        )
    if current is not None:
        # An existing ledger: building a new index over a million tasks takes a while,
        # and the command would sit silent meanwhile. (A new ledger says nothing.)
        logger.warning(
            "upgrading the ledger's schema from revision %s to %s; a large ledger takes a while",
            current,
            script.get_current_head(),
        )
    command.upgrade(cfg, "head")


def needs_upgrade(connection: Connection) -> bool:
    """Whether the schema is not at :data:`SCHEMA_HEAD` (older, newer or none yet).

    Asked in a read transaction before :func:`migrate` is run in a write one: a
    command opening an up-to-date ledger (every command, nearly always) then waits
    for no writer's lock and imports no Alembic.
    """
    return current_revision(connection) != SCHEMA_HEAD


def current_revision(connection: Connection) -> str | None:
    """The schema revision a ledger is at (None for an empty database)."""
    return _current_revision(connection) if _has_version_table(connection) else None


def _alembic_config(connection: Connection) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    return cfg


def _has_version_table(connection: Connection) -> bool:
    if connection.dialect.name == "sqlite":
        sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
        return connection.exec_driver_sql(sql).first() is not None
    row = connection.exec_driver_sql("SELECT to_regclass('alembic_version')").first()
    return row is not None and row[0] is not None


def _current_revision(connection: Connection) -> str | None:
    try:
        row = connection.exec_driver_sql("SELECT version_num FROM alembic_version").first()
    except DBAPIError as exc:
        # An unreadable version table means no revision; a database that went away
        # means nothing of the sort (a probe would have said "schema None"): the
        # transaction's runner says it is unreachable.
        if isinstance(outside_fault(exc, connection.engine.url), LedgerUnreachable):
            raise
        return None
    return None if row is None else str(row[0])
