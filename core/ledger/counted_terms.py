"""A filter's status, error code and stage terms decided on the task counters first.

``task_counters`` (migration 0016, core.ledger.counters) holds how many tasks are in
each (status, error code, stage), kept by triggers in the writing transaction: a few
dozen rows whatever the ledger's size. A filter on those three fields that no task
meets (``stage:indexing`` once every task has finished, ``status:succeeded
stage:download``) has no index to seek for the stage and read every task in the
list's order to find none: 0.5-0.9 s at a million on SQLite. Asked first, the
counters say so at once, and when the few tasks that do match share one status
(``stage:indexing`` while three tasks index: all running), the list starts from that
status's index. Both are implied by the terms (a counter row counts exactly the
tasks it names), so they change no answer, only how it is found.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ColumnElement

from core.ledger.schema import TASK_COUNTERS

# Tasks matching at most, all in one status, for a list to start from that status's
# index (as a rare name's few documents, core.ledger.name_index.FEW_DOCUMENTS).
FEW_TASKS = 2_000

_COUNTED = select(
    TASK_COUNTERS.c.status, TASK_COUNTERS.c.error_code, TASK_COUNTERS.c.stage, TASK_COUNTERS.c.n
).where(TASK_COUNTERS.c.n > 0)
# A counter row's value of each field; '' is "no error code", as a task's coalesce.
_FIELD_AT = {"status": 0, "code": 1, "stage": 2}


def matching_statuses(
    conn: Connection,
    equal: Mapping[str, set[str]],
    unequal: Mapping[str, set[str]],
    options: Mapping[str, Any],
) -> dict[str, int] | None:
    """How many tasks of each status meet the status, code and stage terms
    (``equal``: a field's one wanted value; ``unequal``: its refused values), or None
    when the filter has no such term."""
    if not any(field in _FIELD_AT for field in (*equal, *unequal)):
        return None
    wanted = {_FIELD_AT[f]: set(v) for f, v in equal.items() if f in _FIELD_AT}
    refused = {_FIELD_AT[f]: set(v) for f, v in unequal.items() if f in _FIELD_AT}

    def meets(row: Sequence[Any]) -> bool:
        return all(row[at] in values for at, values in wanted.items()) and not any(
            row[at] in values for at, values in refused.items()
        )

    statuses: dict[str, int] = {}
    for row in conn.execute(_COUNTED, execution_options=options):
        if meets(row):
            statuses[row.status] = statuses.get(row.status, 0) + int(row.n)
    return statuses


def counted_clauses(
    statuses: Mapping[str, int] | None,
    status_clause: Callable[[str], ColumnElement[bool]],
    *,
    may_drive: bool,
) -> list[ColumnElement[bool]] | None:
    """What the counters add to a filter's clauses: None when no task can match (the
    caller answers with nothing), else the status to start from (``status_clause``
    of it) when ``may_drive`` and the matches are few and all of one status."""
    if statuses is None:
        return []
    if not statuses:
        return None
    if may_drive and len(statuses) == 1:
        (status, n), *_ = statuses.items()
        if n <= FEW_TASKS:
            return [status_clause(status)]
    return []
