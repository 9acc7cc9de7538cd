"""Hot-path statements executed straight on SQLite's DBAPI cursor.

A ledger statement is written once with SQLAlchemy Core and compiled once for
SQLite; executing it then skips SQLAlchemy's per-execution bookkeeping (result
processing, events, parameter coercion), which profiling showed to be most of a
claim → complete cycle once thread hops were gone. PostgreSQL (and any other
dialect) goes through ``Connection.execute`` unchanged, so behaviour is the same
on both backends and the tests cover both.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.sql.compiler import Compiled


class Prepared:
    """One statement, compiled lazily per SQLite dialect and reused."""

    def __init__(self, statement: Any) -> None:
        self.statement = statement
        self._compiled: Compiled | None = None
        self._row_type: Any = None
        # Filled at compile time: the values the statement carries itself (literals
        # SQLAlchemy made bind parameters of), the parameters a caller must give, and
        # the positional order (SQLite's paramstyle is qmark: positiontup).
        self._fixed: dict[str, Any] = {}
        self._required: frozenset[str] = frozenset()
        self._order: Sequence[str] = ()
        # many_rows: per order of names a caller gives, where each parameter is found.
        self._picks: dict[tuple[str, ...], list[tuple[bool, Any]]] = {}

    def _compile(self, conn: Connection) -> Compiled:
        if self._compiled is None:
            compiled = self.statement.compile(dialect=conn.dialect)
            binds = compiled.binds.values()
            self._required = frozenset(b.key for b in binds if b.required)
            self._fixed = {
                k: v
                for k, v in (compiled.construct_params(_check=False) or {}).items()
                if k not in self._required
            }
            self._order = getattr(compiled, "positiontup", None) or ()
            self._compiled = compiled
        return self._compiled

    def _args(self, compiled: Compiled, params: Mapping[str, Any]) -> list[Any]:
        # construct_params() per execution cost ~10 us a statement, several a
        # transaction; what it does for these statements (fixed values, then the
        # caller's, every required one present) is done here from what _compile kept.
        if not self._required.issubset(params):
            compiled.construct_params(dict(params))  # raises, naming the missing one
        values = self._fixed | dict(params)
        return [values[name] for name in self._order]

    def rows(self, conn: Connection, params: Mapping[str, Any]) -> list[Any]:
        """Execute and return RETURNING rows (attribute access by column name)."""
        if conn.dialect.name != "sqlite":
            return list(conn.execute(self.statement, params).all())
        compiled = self._compile(conn)
        cursor = conn.connection.cursor()
        try:
            cursor.execute(compiled.string, self._args(compiled, params))
            fetched = cursor.fetchall()
            if self._row_type is None:
                self._row_type = namedtuple("Row", [d[0] for d in cursor.description])  # type: ignore[misc]
            return [self._row_type(*row) for row in fetched]
        finally:
            cursor.close()

    def rowcount(self, conn: Connection, params: Mapping[str, Any]) -> int:
        """Execute a statement without RETURNING; how many rows it changed."""
        if conn.dialect.name != "sqlite":
            return int(conn.execute(self.statement, params).rowcount)
        compiled = self._compile(conn)
        cursor = conn.connection.cursor()
        try:
            cursor.execute(compiled.string, self._args(compiled, params))
            return int(cursor.rowcount)
        finally:
            cursor.close()

    def many_rows(
        self, conn: Connection, names: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        """executemany of ``rows``, each a tuple of the parameters ``names`` in that
        order: a row per chunk skips making a dict and reordering it (see _args)."""
        if conn.dialect.name != "sqlite":
            conn.execute(self.statement, [dict(zip(names, row, strict=True)) for row in rows])
            return
        compiled = self._compile(conn)
        key = tuple(names)
        picks = self._picks.get(key)
        if picks is None:
            missing = self._required.difference(key)
            if missing:
                compiled.construct_params(dict.fromkeys(key))  # raises, naming one
            # Where each positional parameter comes from: a row's column, or a value
            # the statement carries itself.
            picks = [
                (True, key.index(name)) if name in key else (False, self._fixed[name])
                for name in self._order
            ]
            self._picks[key] = picks
        args: Sequence[Sequence[Any]]
        if picks == [(True, i) for i in range(len(key))]:
            args = rows  # the caller's order is the statement's: rows as they are
        else:
            args = [[r[v] if from_row else v for from_row, v in picks] for r in rows]
        cursor = conn.connection.cursor()
        try:
            cursor.executemany(compiled.string, args)
        finally:
            cursor.close()

    def many(self, conn: Connection, params: Sequence[Mapping[str, Any]]) -> None:
        """executemany, for inserts."""
        if conn.dialect.name != "sqlite":
            conn.execute(self.statement, list(params))
            return
        compiled = self._compile(conn)
        cursor = conn.connection.cursor()
        try:
            cursor.executemany(compiled.string, [self._args(compiled, p) for p in params])
        finally:
            cursor.close()
