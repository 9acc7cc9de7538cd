"""Prepared statements' executemany of positional rows (Prepared.many_rows), on a real
SQLite file: rows given in any order of names, with values the statement carries
itself, land as the same rows given as dicts; a missing parameter is refused by name.
(PostgreSQL takes the dicts path: every finish in the backend-parametrised tests.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import (
    Column,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    bindparam,
    create_engine,
    insert,
)
from sqlalchemy.exc import ArgumentError, InvalidRequestError, StatementError

from core.ledger.prepared import Prepared

METADATA = MetaData()
ROWS = Table(
    "rows",
    METADATA,
    Column("id", Integer, primary_key=True),
    Column("name", String, nullable=False),
    Column("size", Integer, nullable=False),
    Column("kind", String, nullable=False),
)
# "kind" is a value the statement carries itself; the other two come from each row.
INSERT = Prepared(
    insert(ROWS).values(name=bindparam("p_name"), size=bindparam("p_size"), kind="note")
)
INSERT_ALL = Prepared(
    insert(ROWS).values(
        name=bindparam("p_name"), size=bindparam("p_size"), kind=bindparam("p_kind")
    )
)


def _engine(tmp_path: Path) -> Engine:
    engine = create_engine(f"sqlite:///{tmp_path / 'rows.db'}")
    METADATA.create_all(engine)
    return engine


def test_rows_in_the_statements_order_and_in_another(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    with engine.begin() as conn:
        INSERT_ALL.many_rows(conn, ("p_name", "p_size", "p_kind"), [("a", 1, "x"), ("b", 2, "y")])
        INSERT_ALL.many_rows(conn, ("p_kind", "p_size", "p_name"), [("z", 3, "c")])
        INSERT.many_rows(conn, ("p_size", "p_name"), [(4, "d"), (5, "e")])
        stored = [(r.name, r.size, r.kind) for r in conn.execute(ROWS.select().order_by(ROWS.c.id))]
    assert stored == [
        ("a", 1, "x"),
        ("b", 2, "y"),
        ("c", 3, "z"),
        ("d", 4, "note"),
        ("e", 5, "note"),
    ]


def test_rows_land_as_the_same_rows_given_as_dicts(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    with engine.begin() as conn:
        INSERT.many(conn, [{"p_name": "a", "p_size": 1}])
        INSERT.many_rows(conn, ("p_name", "p_size"), [("a", 1)])
        first, second = [(r.name, r.size, r.kind) for r in conn.execute(ROWS.select())]
    assert first == second


def test_a_missing_parameter_is_refused_by_name(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    with (
        engine.begin() as conn,
        pytest.raises((ArgumentError, InvalidRequestError, StatementError), match="p_size"),
    ):
        INSERT.many_rows(conn, ("p_name",), [("a",)])
