"""Which database errors are outside faults, classified once, by cause.

Every ledger transaction runs through :mod:`core.ledger.transactions`, which hands any
exception to :func:`outside_fault`: an outage becomes one :class:`LedgerUnavailable`
line (never SQL, parameters, a password or a link to SQLAlchemy's error pages), and
anything else (a wrong statement, a constraint a role did not expect) is left as it
is, a bug to report.

The signals, most reliable first:

* SQLAlchemy's own: a ``DBAPIError`` whose ``connection_invalidated`` is set (the
  dialect's ``is_disconnect`` said the connection is gone; the pool discards it).
* PostgreSQL's SQLSTATE, which asyncpg puts on every server error and SQLAlchemy's
  adapter copies to ``orig.sqlstate``: class ``08`` (connection exception), ``57P``
  (the server is shutting down, crashed or starting up: ``57P01``/``57P02``/``57P03``,
  asyncpg's ``CannotConnectNowError``), ``53`` (insufficient resources: ``53100`` disk
  full, ``53300`` too many connections).
* SQLite's primary result code (``sqlite_errorcode``): ``SQLITE_BUSY``/``LOCKED`` (the
  write lock was held past ``busy_timeout``), ``SQLITE_FULL``, and an I/O error
  writing or sizing a file (``SQLITE_IOERR_SHMSIZE`` and kin) when the ledger's
  filesystem has no room left; the codes of a file
  that cannot be used (read-only, cannot open, I/O error, corrupt, and SQLite's
  other operational errors, such as a table renamed under it) are outside faults
  too, but not transient ones.
* The socket's own errors (``OSError``: refused, reset, unreachable, timed out) and
  the pool's time-out, which asyncpg and SQLAlchemy raise unwrapped.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from core.errors import LedgerFull, LedgerUnavailable, LedgerUnreachable
from core.safe_text import neutralise

REASON_MAX = 200  # characters of the driver's reason kept in the one line

# SQLSTATE prefixes of a server that is away for now (see the module docstring).
PG_AWAY_SQLSTATES = ("08", "57P", "53")
PG_DISK_FULL = "53100"

# SQLite primary result codes (the low byte of an extended code).
SQLITE_AWAY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
SQLITE_FULL_CODES = frozenset({sqlite3.SQLITE_FULL})
# An I/O error making room for a write. SQLite says only "disk I/O error", not the
# errno: opening a WAL ledger on a full disk cannot size the -shm file
# (SQLITE_IOERR_SHMSIZE), so even a read failed as an unusable ledger (exit 1) where
# it is a full disk (exit 75, ridden out). These count as full only when the disk is.
SQLITE_SPACE_IOERRS = frozenset(
    {
        sqlite3.SQLITE_IOERR_SHMSIZE,
        sqlite3.SQLITE_IOERR_SHMMAP,
        sqlite3.SQLITE_IOERR_WRITE,
        sqlite3.SQLITE_IOERR_TRUNCATE,
        sqlite3.SQLITE_IOERR_FSYNC,
    }
)
FULL_BELOW_BYTES = 1 << 20  # free space under which such an I/O error is a full disk
# A file that cannot be used as it is: an outside fault, but one a person fixes.
SQLITE_UNUSABLE_CODES = frozenset(
    {
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_PERM,
        sqlite3.SQLITE_CORRUPT,
        sqlite3.SQLITE_NOTADB,
        sqlite3.SQLITE_NOMEM,
        sqlite3.SQLITE_PROTOCOL,
    }
)


def shown_url(url: URL | str) -> str:
    """A ledger URL as messages and the dashboard show it: never with its password."""
    if isinstance(url, str):
        try:
            url = make_url(url)
        except ArgumentError:
            return "(malformed URL)"
    if url.get_backend_name() == "sqlite":
        return str(url.database)
    return url.render_as_string(hide_password=True)


def outside_fault(exc: BaseException, url: URL, doing: str = "ledger") -> LedgerUnavailable | None:
    """``exc`` as the outside fault it is, or None if it is not one (a bug).

    Args:
        exc: What a transaction (or opening the ledger) raised.
        url: The ledger's URL, shown without its password.
        doing: The line's start: ``ledger`` or ``cannot open ledger``.

    Returns:
        :class:`LedgerFull` (disk full), :class:`LedgerUnreachable` (away for now:
        retry), :class:`LedgerUnavailable` (cannot be used as it is), or None.
    """
    if isinstance(exc, LedgerUnavailable):
        return exc
    where = f"{doing} {shown_url(url)}"
    fault = _fault(exc, url, where)
    if fault is not None:
        fault.where = where
    return fault


def _fault(exc: BaseException, url: URL, where: str) -> LedgerUnavailable | None:
    if isinstance(exc, sqlite3.Error):
        # The hot statements run on SQLite's own cursor (core.ledger.prepared), so
        # the driver's error arrives unwrapped.
        return _sqlite_fault(exc, where, url)
    if isinstance(exc, DBAPIError):
        return _dbapi_fault(exc, where, url)
    if isinstance(exc, PoolTimeout):
        return LedgerUnreachable(f"{where}: no connection free in time (the server is slow)")
    if isinstance(exc, OSError) and url.get_backend_name() != "sqlite":
        # The socket's own errors: refused, reset, no route, DNS, timed out.
        return LedgerUnreachable(f"{where}: unreachable: {_os_reason(exc)}")
    return None


def _dbapi_fault(exc: DBAPIError, where: str, url: URL) -> LedgerUnavailable | None:
    orig: BaseException = exc.orig if exc.orig is not None else exc
    if isinstance(orig, sqlite3.Error):
        return _sqlite_fault(orig, where, url)
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if sqlstate == PG_DISK_FULL:
        return LedgerFull(f"{where}: the database server's disk is full ({_reason(orig)})")
    if isinstance(sqlstate, str) and sqlstate.startswith(PG_AWAY_SQLSTATES):
        return LedgerUnreachable(f"{where}: unreachable: {_reason(orig)} [SQLSTATE {sqlstate}]")
    if exc.connection_invalidated:
        return LedgerUnreachable(f"{where}: unreachable: the connection was lost")
    for reason in (orig, orig.__cause__):
        if isinstance(reason, OSError):
            return LedgerUnreachable(f"{where}: unreachable: {_os_reason(reason)}")
    if sqlstate is None and isinstance(exc, OperationalError):
        # The driver's "operational" errors without a server code: the connection side.
        return LedgerUnreachable(f"{where}: unreachable: {_reason(orig)}")
    return None


def _sqlite_fault(orig: sqlite3.Error, where: str, url: URL) -> LedgerUnavailable | None:
    code = getattr(orig, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    reason = _reason(orig)
    if code in SQLITE_SPACE_IOERRS:
        free = _free_bytes(url)
        if free is not None and free < FULL_BELOW_BYTES:
            return LedgerFull(f"{where}: its disk is full ({reason}; {free} bytes free)")
    if primary in SQLITE_AWAY_CODES:
        return LedgerUnreachable(
            f"{where}: {reason} (another process held the write lock past the busy timeout)"
        )
    if primary in SQLITE_FULL_CODES:
        return LedgerFull(f"{where}: {reason}")
    if primary in SQLITE_UNUSABLE_CODES or isinstance(orig, sqlite3.OperationalError):
        # SQLite reports a schema changed under it ("no such table") as a plain
        # operational error too: the ledger as found cannot be used, as before.
        return LedgerUnavailable(f"{where}: {type(orig).__name__}: {reason}")
    return None  # a constraint, a binding, an interface misuse: a bug


def _free_bytes(url: URL) -> int | None:
    """Bytes an unprivileged writer may still use on the SQLite ledger's filesystem,
    or None when that cannot be told (an in-memory ledger, a folder gone)."""
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    try:
        stats = os.statvfs(Path(database).parent)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def _reason(error: BaseException) -> str:
    """The driver's own words, one line: asyncpg's message (SQLAlchemy's adapter
    prefixes it with the class), never the statement (which only SQLAlchemy's outer
    message carries)."""
    text = str(error.args[0]) if error.args else type(error).__name__
    if text.startswith("<class '") and ">: " in text:
        text = text.split(">: ", 1)[1]
    return neutralise(text.splitlines()[0] if text else type(error).__name__)[:REASON_MAX]


def _os_reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return _reason(error) if error.args else type(error).__name__
