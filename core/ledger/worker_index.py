"""Worker filters driven from the few workers a ledger has seen (migration 0019's
``ix_tasks_worker``).

``worker:`` is a substring of the task's worker id, which no index can seek: a
worker that ran few tasks, or none (``worker:nobody``), read every task in the
list's order (3.3 s at a million on SQLite). A ledger sees few distinct workers,
though, however many tasks they ran: their ids are enumerated by one seek each
through the index (the next id after the last), matched in Python, and then

* none matches: no task can, and the list is empty at once;
* their tasks are few: the list starts from them (a seek of the index per worker
  and a sort), beside the substring test, which stays the test;
* else the list is read in its order as before (the matches are common).

Matched in Python only for ASCII values and ids, where Python's folding, SQLite's
registered one and PostgreSQL's ``lower()`` agree: an id that is not ASCII is kept
as a candidate, and a value that is not ASCII reads the list as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.engine import Connection

from core.ledger.rows import at_most
from core.ledger.schema import TASKS

# Distinct worker ids enumerated at most: past this the ledger has seen too many
# (one per process start, say) for the seeks to be cheaper than reading in order.
DISTINCT_MAX = 1_000
# Tasks of the matching workers, at most, for a list to start from them: gathered
# and sorted (as a rare name's documents, core.ledger.name_index.FEW_DOCUMENTS).
FEW_TASKS = 2_000

_FIRST = select(func.min(TASKS.c.worker_id))
_NEXT = select(func.min(TASKS.c.worker_id)).where(TASKS.c.worker_id > bindparam("after"))


def distinct_workers(conn: Connection, options: Mapping[str, Any]) -> list[str] | None:
    """Every worker id a task carries, in order, or None past :data:`DISTINCT_MAX`."""
    found: list[str] = []
    worker = conn.execute(_FIRST, execution_options=options).scalar()
    while worker is not None:
        if len(found) == DISTINCT_MAX:
            return None
        found.append(worker)
        worker = conn.execute(_NEXT, {"after": worker}, execution_options=options).scalar()
    return found


def matching_workers(
    conn: Connection, values: Sequence[str], options: Mapping[str, Any]
) -> list[str] | None:
    """The worker ids holding every one of ``values`` (folded, unescaped), or None
    when that cannot be told here (see the module)."""
    if not all(v.isascii() for v in values):
        return None
    workers = distinct_workers(conn, options)
    if workers is None:
        return None
    # An id that is not ASCII stays in, matched or not: the list's test decides.
    return [w for w in workers if not w.isascii() or all(v in w.lower() for v in values)]


def few_tasks(conn: Connection, workers: Sequence[str], options: Mapping[str, Any]) -> bool:
    """Whether ``workers`` ran at most :data:`FEW_TASKS` tasks (counted no further)."""
    theirs = select(TASKS.c.id).where(TASKS.c.worker_id.in_(workers))
    return at_most(conn, theirs, FEW_TASKS, options)
