"""Shared fixtures: real SQLite files under tmp_path and, when a server is given
(INGESTDESK_TEST_PG_URL, set by .ci/run), a fresh real PostgreSQL database per test."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from core import Ledger, Settings, sqlite_url

PG_URL_ENV = "INGESTDESK_TEST_PG_URL"


@pytest.fixture(autouse=True, scope="session")
def interruptible_children() -> Iterator[None]:
    """Processes the tests start can be interrupted, however the suite was started.

    A shell starts a background job (``pytest ... &``) with SIGINT ignored, and an
    ignored signal stays ignored across exec: every CLI the Ctrl-C tests start would
    then shrug off their SIGINT (as it should, in a background job) and those tests
    fail for the way the suite was launched. A handled signal is reset to its default
    on exec, so handling it here gives each child Python's own Ctrl-C behaviour.
    """
    if signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class FakeClock:
    """A clock tests move by hand (leases, backoff) instead of sleeping."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _pg_admin_url() -> str | None:
    url = os.environ.get(PG_URL_ENV)
    if url:
        return url
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {PG_URL_ENV} is not set: PostgreSQL tests must run in CI")
    return None


async def _pg_database(admin_url: str, name: str, *, drop: bool = False) -> None:
    import asyncpg

    dsn = admin_url.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(dsn)
    try:
        if drop:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        else:
            await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """URL of a brand-new PostgreSQL database, dropped afterwards."""
    admin = _pg_admin_url()
    if admin is None:
        pytest.skip(f"no PostgreSQL server ({PG_URL_ENV} unset)")
    name = f"ingestdesk_test_{uuid.uuid4().hex[:12]}"
    asyncio.run(_pg_database(admin, name))
    base, _, _ = admin.rpartition("/")
    yield f"{base}/{name}"
    asyncio.run(_pg_database(admin, name, drop=True))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return sqlite_url(tmp_path / "ledger.db")


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    return Settings(db_url=db_url, store_root=tmp_path / "objects")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def ledger(settings: Settings, clock: FakeClock) -> AsyncIterator[Ledger]:
    led = await Ledger.open(settings, clock=clock)
    try:
        yield led
    finally:
        await led.close()
