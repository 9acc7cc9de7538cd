"""How one ledger transaction runs, on each backend, behind one small protocol.

A role writes a transaction as a plain function of a SQLAlchemy ``Connection`` and
hands it to :meth:`Transactions.read` or :meth:`Transactions.write`; the SQL is the
same on both backends, only the way it reaches the database differs:

* **SQLite** — one synchronous (pysqlite) engine, and each transaction runs as one
  call on a small thread pool. aiosqlite hops threads once per statement; one hop
  per transaction made claims 4x faster (measured by ``bench.claims``). Writers take
  the write lock up front (``BEGIN IMMEDIATE``) so concurrent writers queue on
  ``busy_timeout`` instead of failing when a deferred reader upgrades.
* **PostgreSQL** — SQLAlchemy's async engine on asyncpg; the function runs through
  ``run_sync``. Writers serialise on an advisory lock so the revision counter commits
  in the order it is handed out (a reader asking "what changed since R" must never
  skip a revision committed late).

Reads are short on purpose: an open SQLite read transaction pins the WAL and blocks
checkpoints, so none is ever held across a sleep.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, InvalidRequestError

from core.config import Settings
from core.errors import BadInput, LedgerUnavailable, SchemaTooNew
from core.filters import SQLITE_FOLD_FUNCTION, fold
from core.ledger.faults import outside_fault
from core.ledger.faults import shown_url as shown_url  # its home before faults.py
from core.ledger.migrate import migrate, needs_upgrade

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

T = TypeVar("T")

logger = logging.getLogger(__name__)

SQLITE_THREADS = 4  # threads running SQLite reads (writes have a thread of their own)
SQLITE_POOL_SIZE = 8  # connections kept open per SQLite ledger
WRITE_OPTION = "ingestdesk_write"
# Serialises ledger writers on PostgreSQL (see the module docstring).
PG_WRITE_LOCK_KEY = 0x1D6E57  # arbitrary, fixed forever
# Seconds PostgreSQL's close() waits for the transactions under way to hand their
# connections back before it disposes of the pool regardless (one stuck on a dead
# socket must not hang quitting for ever).
PG_CLOSE_WAIT_S = 10.0


class Transactions(Protocol):
    """Runs transaction functions against one ledger database."""

    @property
    def backend(self) -> str:
        """``sqlite`` or ``postgresql``."""
        ...

    async def read(self, tx: Callable[[Connection], T]) -> T:
        """Run ``tx`` in a read transaction and return what it returns."""
        ...

    async def write(self, tx: Callable[[Connection], T]) -> T:
        """Run ``tx`` in a write transaction (serialised with other writers)."""
        ...

    async def prepare(self) -> None:
        """Check the database can be reached and bring its schema up to date."""
        ...

    async def close(self) -> None: ...


def open_transactions(settings: Settings, *, create: bool = True) -> Transactions:
    """The runner for the ledger URL in ``settings`` (no connection opened yet).

    With ``create=False`` a SQLite ledger that does not exist is refused instead of
    created: a command that only reads (or a mistyped ``--db``) must leave no empty
    ledger, and no folders, behind.
    """
    url = _ledger_url(settings.db_url)
    if url.get_backend_name() == "sqlite":
        return SqliteTransactions(url, settings, create=create)
    return PostgresTransactions(url)


def sqlite_ledger_path(db_url: str) -> Path | None:
    """The file of a SQLite ledger URL; None for another backend.

    Raises:
        BadInput: A malformed ledger URL.
    """
    url = _ledger_url(db_url)
    return Path(str(url.database)) if url.get_backend_name() == "sqlite" else None


def no_ledger(path: Path) -> LedgerUnavailable:
    """The refusal of a command that needs a SQLite ledger where there is none."""
    return LedgerUnavailable(
        f"no ledger at {path} — run `ingestdesk add` or `ingestdesk demo` to create one"
    )


def _file_in_the_way(folder: Path) -> Path | None:
    """The nearest of ``folder`` and its parents that exists as something other than
    a directory (the ledger's folder cannot be made under it), or None."""
    for candidate in (folder, *folder.parents):
        if candidate.is_dir():
            return None
        if candidate.exists():
            return candidate
    return None


def _ledger_url(db_url: str) -> URL:
    try:
        url = make_url(db_url)
    except ArgumentError as exc:
        # The text may hold a password: say what is wrong, not what was typed.
        raise BadInput(
            "malformed ledger URL: expected a file path, sqlite:///PATH or "
            "postgresql://USER@HOST/DB"
        ) from exc
    backend = url.get_backend_name()
    if backend == "sqlite":
        if url.database in (None, "", ":memory:"):
            raise BadInput(
                "a SQLite ledger URL needs a file path, e.g. sqlite:///ledger.db "
                "(an in-memory database cannot be shared between processes)"
            )
        if url.query or str(url.database).startswith("file:"):
            # A URI-form URL (file:…?mode=ro&uri=true) names its file differently from
            # what the ledger creates and checks: refuse it rather than guess.
            raise BadInput("a SQLite ledger URL is a plain file path: sqlite:///PATH")
        # Any SQLite spelling (sqlite://, sqlite+aiosqlite://) runs on the stdlib driver.
        return url.set(drivername="sqlite+pysqlite")
    if backend == "postgresql":
        if url.drivername in ("postgresql", "postgres"):
            url = url.set(drivername="postgresql+asyncpg")
        return url
    raise BadInput(f"unsupported ledger backend {backend!r}: use sqlite or postgresql")


async def _migrate(transactions: Transactions, url: URL) -> None:
    """Bring the schema up to date in one write transaction, or say why the ledger
    cannot be opened (a newer schema is refused as such).

    The revision is read first, in a read transaction: a ledger already at the head
    (nearly every open) takes no write lock, so a read command does not queue behind
    a worker's writes (up to the busy timeout) only to learn there is nothing to do.
    """
    try:
        if await transactions.read(needs_upgrade):
            await transactions.write(migrate)
    except SchemaTooNew:
        raise
    except LedgerUnavailable as exc:
        # Said again as a refusal to open, with the same class (unreachable: retry).
        cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else None
        fault = outside_fault(cause, url, "cannot open ledger") if cause else None
        raise (fault or exc) from exc
    except (DBAPIError, OSError) as exc:
        # Whatever else stops the schema from being read (not a database at all, a
        # foreign schema) means this ledger cannot be opened.
        what = exc.orig if isinstance(exc, DBAPIError) else exc
        fault = outside_fault(exc, url, "cannot open ledger")
        raise fault or LedgerUnavailable(
            f"cannot open ledger {shown_url(url)}: {type(what).__name__}"
        ) from exc


class SqliteTransactions:
    """SQLite: a synchronous engine, one thread hop per transaction."""

    backend = "sqlite"

    def __init__(self, url: URL, settings: Settings, *, create: bool = True) -> None:
        synchronous = settings.sqlite_synchronous.upper()
        if synchronous not in ("NORMAL", "FULL"):
            raise BadInput("sqlite synchronous must be NORMAL or FULL")
        self.url = url
        path = Path(str(url.database))
        if not create and not path.is_file():
            raise no_ledger(path)
        blocker = _file_in_the_way(path.parent)
        if blocker is not None:
            # mkdir would say "File exists", which names neither the file nor the fix.
            raise LedgerUnavailable(
                f"cannot open ledger {path}: cannot create its folder: {blocker} is a "
                "file, not a directory"
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LedgerUnavailable(
                f"cannot open ledger {path}: cannot create its folder "
                f"({exc.strerror or type(exc).__name__})"
            ) from exc
        try:
            self.engine: Engine = create_engine(
                url, pool_size=SQLITE_POOL_SIZE, max_overflow=SQLITE_POOL_SIZE
            )
        except (ArgumentError, ImportError, InvalidRequestError) as exc:
            raise BadInput(f"cannot use ledger URL {url!s}: {exc}") from exc
        _install_sqlite_hooks(self.engine, synchronous, settings.sqlite_busy_timeout_ms)
        self._writer = self.engine.execution_options(**{WRITE_OPTION: True})
        self._threads = ThreadPoolExecutor(SQLITE_THREADS, thread_name_prefix="ledger")
        # Every write of this process runs on this one thread, one after another (see
        # write()); reads keep the pool.
        self._writes = ThreadPoolExecutor(1, thread_name_prefix="ledger-writer")

    def _run(self, tx: Callable[[Connection], T], write: bool) -> T:
        try:
            with (self._writer if write else self.engine).begin() as conn:
                return tx(conn)
        except (DBAPIError, sqlite3.Error) as exc:
            fault = outside_fault(exc, self.url)
            if fault is None:
                raise  # not an outside fault: a bug stays a bug
            raise fault from exc

    async def read(self, tx: Callable[[Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, self._run, tx, False)

    async def write(self, tx: Callable[[Connection], T]) -> T:
        # This process's writers queue for one thread rather than meet on SQLite's
        # busy handler, which polls a held write lock with sleeps of 1, 2, 5, 10...
        # ms: one worker's four tasks in flight met it at 440 of 1 085 writes (2.1 s
        # waiting in a 5 s run of 1 000 small documents). The thread takes the next
        # write as soon as one commits, with no hand-over through a busy event loop
        # (measured as fast as a turn lock on the loop, and simpler). A caller
        # cancelled before its write starts leaves it unrun.
        # Other processes' writers still queue on busy_timeout.
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._writes, self._run, tx, True)

    async def prepare(self) -> None:
        await _migrate(self, self.url)

    async def close(self) -> None:
        self._threads.shutdown(wait=True)
        self._writes.shutdown(wait=True)
        self.engine.dispose()


def _install_sqlite_hooks(engine: Engine, synchronous: str, busy_timeout_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take BEGIN out of the driver's hands so writers can BEGIN IMMEDIATE.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute(f"PRAGMA synchronous = {synchronous}")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()
        # Filters fold case in SQL exactly as in memory (see core.filters.fold);
        # deterministic, so SQLite may use it like a built-in.
        dbapi_connection.create_function(SQLITE_FOLD_FUNCTION, 1, _fold_sql, deterministic=True)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # A writer that starts DEFERRED and upgrades later gets SQLITE_BUSY without
        # waiting; taking the write lock up front makes it queue on busy_timeout.
        # Straight on the DBAPI cursor, as core.ledger.prepared runs the hot
        # statements: exec_driver_sql's execution context was ~10% of the ledger's
        # CPU on small documents (one BEGIN a transaction).
        begin = "BEGIN IMMEDIATE" if conn.get_execution_options().get(WRITE_OPTION) else "BEGIN"
        cursor = conn.connection.cursor()
        try:
            cursor.execute(begin)
        finally:
            cursor.close()


def _fold_sql(value: object) -> object:
    """:func:`core.filters.fold` as SQLite calls it: NULL and non-text pass through."""
    return fold(value) if isinstance(value, str) else value


class PostgresTransactions:
    """PostgreSQL: asyncpg through SQLAlchemy's async engine."""

    backend = "postgresql"

    def __init__(self, url: URL) -> None:
        # Imported here: SQLAlchemy's asyncio extension brings its ORM session along
        # (~60 ms), which a SQLite ledger never uses.
        from sqlalchemy.ext.asyncio import create_async_engine

        self.url = url
        try:
            self.engine: AsyncEngine = create_async_engine(url, pool_pre_ping=True)
        except ImportError as exc:
            raise BadInput(
                f"the PostgreSQL driver is not installed: pip install 'ingestdesk[postgres]' "
                f"({type(exc).__name__}: {exc.name or exc})"
            ) from exc
        except (ArgumentError, InvalidRequestError) as exc:
            raise BadInput(
                f"cannot use ledger URL {url.render_as_string(hide_password=True)}: {exc}"
            ) from exc
        # Transactions under way, and the future close() waits on for the last of
        # them (see close()).
        self._under_way = 0
        self._closed = False
        self._drained: asyncio.Future[None] | None = None

    async def read(self, tx: Callable[[Connection], T]) -> T:
        return await self._run(tx, write=False)

    async def write(self, tx: Callable[[Connection], T]) -> T:
        return await self._run(tx, write=True)

    async def _run(self, tx: Callable[[Connection], T], *, write: bool) -> T:
        if self._closed:
            # The pool was disposed of: a connection opened now would belong to a pool
            # nobody disposes of (SQLite's closed thread pool refuses the same way).
            raise RuntimeError(f"ledger {shown_url(self.url)} is closed")
        self._under_way += 1
        try:
            async with self.engine.begin() as conn:
                if write:
                    await conn.execute(
                        text("SELECT pg_advisory_xact_lock(:k)"), {"k": PG_WRITE_LOCK_KEY}
                    )
                return await conn.run_sync(tx)
        except Exception as exc:
            fault = outside_fault(exc, self.url)
            if fault is None or fault is exc:
                raise  # not an outside fault (a bug stays a bug), or already one
            raise fault from exc
        finally:
            # Counted down only once the connection is back in the pool (a cancelled
            # transaction hands it back before its CancelledError comes out here).
            self._under_way -= 1
            if not self._under_way and self._drained is not None and not self._drained.done():
                self._drained.set_result(None)

    async def prepare(self) -> None:
        await _migrate(self, self.url)

    async def close(self) -> None:
        """Refuse new transactions, wait for those under way, then close the pool.

        ``dispose()`` closes only the connections checked in: one a transaction still
        holds goes back, afterwards, to the pool just discarded, where nothing ever
        closes it; asyncpg then finds it open when it is garbage-collected (an
        "unclosed connection" ResourceWarning, its socket with it). A dashboard
        leaves such transactions behind when it quits: a poll that started while it
        shut down, or a worker Textual cancelled without waiting for it (a cancelled
        read hands its connection back a moment later). SQLite's close waits for its
        threads the same way.
        """
        self._closed = True
        try:
            if self._under_way:
                if self._drained is None:
                    self._drained = asyncio.get_running_loop().create_future()
                try:
                    await asyncio.wait_for(asyncio.shield(self._drained), PG_CLOSE_WAIT_S)
                except TimeoutError:
                    logger.warning(
                        "closing ledger %s with %d transaction(s) still under way after "
                        "%.0fs; their connections are dropped",
                        shown_url(self.url),
                        self._under_way,
                        PG_CLOSE_WAIT_S,
                    )
        finally:
            await self.engine.dispose()
