"""The ledger's storage contract: migrations, SQLite settings, query plans, and the
object store's guarantees."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from core import Ledger, LedgerUnavailable, ObjectReadError, SchemaTooNew, Settings, sqlite_url
from core.ledger.migrate import MIGRATIONS_DIR, SCHEMA_HEAD
from core.store import ObjectStore


def _settings(tmp_path: Path, **kw: object) -> Settings:
    return Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "o").with_(
        **kw
    )


async def test_opening_an_older_ledger_upgrades_it(tmp_path: Path) -> None:
    from alembic import command
    from alembic.config import Config

    path = tmp_path / "ledger.db"
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
    engine.dispose()
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT version_num FROM alembic_version").fetchone() == ("0001",)
        assert not raw.execute("SELECT name FROM sqlite_master WHERE name='chunks_fts'").fetchall()

    ledger = await Ledger.open(_settings(tmp_path))
    await ledger.close()
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT version_num FROM alembic_version").fetchone() == (SCHEMA_HEAD,)
        assert raw.execute("SELECT name FROM sqlite_master WHERE name='chunks_fts'").fetchall()


def test_schema_head_constant_matches_the_migrations() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from core.ledger.migrate import SCHEMA_HEAD

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    assert ScriptDirectory.from_config(cfg).get_current_head() == SCHEMA_HEAD


async def test_opening_a_newer_ledger_is_refused_clearly(tmp_path: Path) -> None:
    ledger = await Ledger.open(_settings(tmp_path))
    await ledger.close()
    with sqlite3.connect(tmp_path / "ledger.db") as raw:
        raw.execute("UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(SchemaTooNew, match="newer than this ingestdesk understands"):
        await Ledger.open(_settings(tmp_path))


async def test_a_ledger_that_cannot_be_opened_says_so(tmp_path: Path) -> None:
    (tmp_path / "ledger.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(LedgerUnavailable, match="cannot open ledger"):
        await Ledger.open(_settings(tmp_path))


@pytest.mark.parametrize(("choice", "expected"), [("NORMAL", 1), ("FULL", 2)])
async def test_sqlite_connections_use_wal_and_the_chosen_durability(
    tmp_path: Path, choice: str, expected: int
) -> None:
    ledger = await Ledger.open(_settings(tmp_path, sqlite_synchronous=choice))
    try:
        names = ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
        values = await ledger.transactions.read(
            lambda conn: [conn.exec_driver_sql(f"PRAGMA {name}").scalar() for name in names]
        )
        assert values == ["wal", expected, 1, 30_000]
    finally:
        await ledger.close()


async def test_claim_next_uses_the_partial_index(tmp_path: Path) -> None:
    """With bound parameters in the IN list SQLite ignores the partial index and scans
    (and sorts) every claimable task; the claim must spell the statuses as literals."""
    from sqlalchemy.dialects import sqlite

    from core.ledger.statements import CLAIM_NEXT

    ledger = await Ledger.open(_settings(tmp_path))
    await ledger.close()
    compiled = CLAIM_NEXT.statement.compile(dialect=sqlite.dialect())
    values = compiled.construct_params(
        {"p_worker_id": "w", "p_now": 1.0, "p_lease_until": 2.0, "p_limit": 8}
    )
    params = [values[name] for name in compiled.positiontup]
    with sqlite3.connect(tmp_path / "ledger.db") as raw:
        plan = raw.execute("EXPLAIN QUERY PLAN " + compiled.string, params).fetchall()
    details = " ".join(row[-1] for row in plan)
    assert "ix_tasks_claimable" in details, details
    assert "TEMP B-TREE" not in details, details
    assert "SCAN ingestion_tasks" not in details.replace("SCAN ingestion_tasks USING", ""), details


def test_object_store_writes_atomically_and_verifies_on_read(tmp_path: Path) -> None:
    store = ObjectStore(tmp_path / "objects")
    key, digest = store.put(b"original bytes")
    assert store.get(key, digest) == b"original bytes"
    assert not list((tmp_path / "objects").rglob(".incoming-*"))
    (store.root / key).write_bytes(b"tampered bytes")
    with pytest.raises(ObjectReadError, match="checksum"):
        store.get(key, digest)
    (store.root / key).unlink()
    with pytest.raises(ObjectReadError, match="missing"):
        store.get(key, digest)
    with pytest.raises(ObjectReadError, match="malformed"):
        store.get("../../etc/passwd", digest)


def test_core_stays_headless() -> None:
    """core must never pull in the UI toolkit, even indirectly."""
    code = (
        "import sys, core, core.cli, core.ledger, core.store, core.states\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'tui', 'rich'))\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.postgres
async def test_postgres_ledger_opens_and_migrates(pg_url: str, tmp_path: Path) -> None:
    ledger = await Ledger.open(Settings(db_url=pg_url, store_root=tmp_path / "o"))
    try:
        version = await ledger.transactions.read(
            lambda conn: conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        )
        assert version == SCHEMA_HEAD
        assert ledger.backend == "postgresql"
    finally:
        await ledger.close()


def _schema_differences(url: str) -> list[object]:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlalchemy import create_engine

    from core.ledger.schema import METADATA

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"include_name": search_index})
            return list(compare_metadata(context, METADATA))
    finally:
        engine.dispose()


def search_index(name: str | None, kind: str, parent: object) -> bool:
    """False for the search indexes' own parts, which migrations 0002 (chunks) and 0017
    (documents' names) make outside the declared tables: FTS5's tables on SQLite, the
    tsvector column and the GIN indexes on PostgreSQL; and for 0021's indexes of ids
    for LIKE prefixes, an operator class only PostgreSQL has."""
    if name is None:
        return True
    if kind == "table":
        return not name.startswith(("chunks_fts", "documents_name_index"))
    return name not in {
        "search",
        "ix_chunks_search",
        "ix_documents_name_trigrams",
        "ix_tasks_id_pattern",
        "ix_tasks_document_pattern",
    }


async def test_the_migrations_make_the_schema_the_code_declares(tmp_path: Path) -> None:
    # The tables the statements are built from (core.ledger.schema) and the tables
    # the migrations create must be the same: columns, types, nullability, indexes.
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "s")
    await (await Ledger.open(settings)).close()
    assert _schema_differences(f"sqlite:///{tmp_path / 'ledger.db'}") == []


@pytest.mark.postgres
async def test_the_migrations_make_the_schema_the_code_declares_on_postgres(
    pg_url: str, tmp_path: Path
) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlalchemy.ext.asyncio import create_async_engine
    from sqlalchemy.pool import NullPool

    from core.ledger.schema import with_postgresql_options

    await (await Ledger.open(Settings(db_url=pg_url, store_root=tmp_path / "s"))).close()
    # No pool: the one connection closes when the block ends, not when a pool is
    # garbage-collected (an unclosed asyncpg connection fails the run as a warning).
    engine = create_async_engine(pg_url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            differences = await conn.run_sync(
                lambda sync: list(
                    compare_metadata(
                        MigrationContext.configure(sync, opts={"include_name": search_index}),
                        with_postgresql_options(),
                    )
                )
            )
    finally:
        await engine.dispose()
    assert differences == []
