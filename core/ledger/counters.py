"""Tasks counted by (status, error code, stage), kept in the writing transaction.

The dashboard's status counts and the failures-by-code view used to group every
task: at 1 000 000 tasks that is a scan of the task table on every reconciliation
(~0.3 s on SQLite). ``task_counters`` holds one row per (status, error code, stage)
with its number of tasks, changed by triggers in the same transaction as the task
(insert, a change of status, error code or stage, delete), so a count is never ahead
of or behind the tasks it counts, and reading them costs a few dozen rows whatever
the ledger's size. Triggers rather than application code: every writer (the ledger's
statements, a migration, a bulk load, a prune) keeps the counts right without
knowing of them.

SQLite has only row triggers. PostgreSQL counts an INSERT or DELETE statement's
rows once per statement (transition tables: a bulk load or a pruning batch is one
grouped upsert, not a function call per row), and an UPDATE per row, filtered by the
trigger's WHEN before any function runs (a heartbeat changes none of the three).
Writes are serialised on both backends (BEGIN IMMEDIATE; an advisory lock on
PostgreSQL), so the counter rows see no contention of their own.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ScalarSelect, func, select, text
from sqlalchemy.engine import Connection

from core.ledger.schema import EVENT_COUNTERS, FAILED_SQL, TASK_COUNTERS, TASKS
from core.ledger.views import FailureGroup
from core.states import ErrorCode, Stage, TaskStatus

# The key of a task's counter row; '' stands for no error code (see the table).
_KEY_NEW = "NEW.status, coalesce(NEW.error_code, ''), NEW.stage"
_OLD_MATCHES = (
    "status = OLD.status AND error_code = coalesce(OLD.error_code, '') AND stage = OLD.stage"
)
_CHANGED = (
    "OLD.status IS NOT NEW.status OR OLD.error_code IS NOT NEW.error_code "
    "OR OLD.stage IS NOT NEW.stage"
)
_UPSERT_ONE = (
    f"INSERT INTO task_counters (status, error_code, stage, n) VALUES ({_KEY_NEW}, 1) "
    "ON CONFLICT (status, error_code, stage) DO UPDATE SET n = task_counters.n + 1"
)
_DECREMENT_ONE = f"UPDATE task_counters SET n = n - 1 WHERE {_OLD_MATCHES}"

SQLITE_TRIGGERS: tuple[str, ...] = (
    f"""CREATE TRIGGER tr_task_counters_insert AFTER INSERT ON ingestion_tasks
    BEGIN {_UPSERT_ONE}; END""",
    f"""CREATE TRIGGER tr_task_counters_delete AFTER DELETE ON ingestion_tasks
    BEGIN {_DECREMENT_ONE}; END""",
    f"""CREATE TRIGGER tr_task_counters_update
    AFTER UPDATE OF status, error_code, stage ON ingestion_tasks WHEN {_CHANGED}
    BEGIN {_DECREMENT_ONE}; {_UPSERT_ONE}; END""",
)

_GROUPED = (
    "SELECT status, coalesce(error_code, '') AS code, stage, count(*) AS n "
    "FROM {rows} GROUP BY 1, 2, 3"
)

POSTGRES_TRIGGERS: tuple[str, ...] = (
    f"""CREATE FUNCTION task_counters_insert() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO task_counters (status, error_code, stage, n)
      {_GROUPED.format(rows="new_tasks")}
      ON CONFLICT (status, error_code, stage) DO UPDATE SET n = task_counters.n + excluded.n;
      RETURN NULL;
    END $$""",
    f"""CREATE FUNCTION task_counters_delete() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      UPDATE task_counters c SET n = c.n - d.n
      FROM ({_GROUPED.format(rows="old_tasks")}) d
      WHERE c.status = d.status AND c.error_code = d.code AND c.stage = d.stage;
      RETURN NULL;
    END $$""",
    f"""CREATE FUNCTION task_counters_update() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      {_DECREMENT_ONE};
      {_UPSERT_ONE};
      RETURN NULL;
    END $$""",
    """CREATE TRIGGER tr_task_counters_insert AFTER INSERT ON ingestion_tasks
    REFERENCING NEW TABLE AS new_tasks FOR EACH STATEMENT
    EXECUTE FUNCTION task_counters_insert()""",
    """CREATE TRIGGER tr_task_counters_delete AFTER DELETE ON ingestion_tasks
    REFERENCING OLD TABLE AS old_tasks FOR EACH STATEMENT
    EXECUTE FUNCTION task_counters_delete()""",
    f"""CREATE TRIGGER tr_task_counters_update
    AFTER UPDATE OF status, error_code, stage ON ingestion_tasks FOR EACH ROW
    WHEN ({_CHANGED.replace(" IS NOT ", " IS DISTINCT FROM ")})
    EXECUTE FUNCTION task_counters_update()""",
)

# The history's rows by (status reached, error code), counted on insert only: a
# monitor's "so far" (see EVENT_COUNTERS).
_EVENT_UPSERT = (
    "INSERT INTO event_counters (to_status, error_code, n) "
    "VALUES (NEW.to_status, coalesce(NEW.error_code, ''), 1) "
    "ON CONFLICT (to_status, error_code) DO UPDATE SET n = event_counters.n + 1"
)
_EVENTS_GROUPED = "SELECT to_status, coalesce(error_code, ''), count(*) FROM {rows} GROUP BY 1, 2"
SQLITE_TRIGGERS += (
    f"""CREATE TRIGGER tr_event_counters_insert AFTER INSERT ON task_events
    BEGIN {_EVENT_UPSERT}; END""",
)
POSTGRES_TRIGGERS += (
    f"""CREATE FUNCTION event_counters_insert() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO event_counters (to_status, error_code, n)
      {_EVENTS_GROUPED.format(rows="new_events")}
      ON CONFLICT (to_status, error_code) DO UPDATE SET n = event_counters.n + excluded.n;
      RETURN NULL;
    END $$""",
    """CREATE TRIGGER tr_event_counters_insert AFTER INSERT ON task_events
    REFERENCING NEW TABLE AS new_events FOR EACH STATEMENT
    EXECUTE FUNCTION event_counters_insert()""",
)

_TRIGGER_NAMES = ("tr_task_counters_insert", "tr_task_counters_delete", "tr_task_counters_update")


def drop_triggers(dialect: str) -> list[str]:
    """The statements that take the triggers (and PostgreSQL's functions) away."""
    if dialect == "sqlite":
        return [
            f"DROP TRIGGER IF EXISTS {name}"
            for name in (*_TRIGGER_NAMES, "tr_event_counters_insert")
        ]
    return [
        *(f"DROP TRIGGER IF EXISTS {name} ON ingestion_tasks" for name in _TRIGGER_NAMES),
        "DROP TRIGGER IF EXISTS tr_event_counters_insert ON task_events",
        *(f"DROP FUNCTION IF EXISTS task_counters_{op}()" for op in ("insert", "delete", "update")),
        "DROP FUNCTION IF EXISTS event_counters_insert()",
    ]


def fill_sql() -> str:
    """Count every task afresh (the migration's fill, and a repair)."""
    return "INSERT INTO task_counters (status, error_code, stage, n) " + _GROUPED.format(
        rows="ingestion_tasks"
    )


def fill_events_sql() -> str:
    """Count the history there is (the migration's fill)."""
    return "INSERT INTO event_counters (to_status, error_code, n) " + _EVENTS_GROUPED.format(
        rows="task_events"
    )


def history_totals(conn: Connection) -> tuple[int, dict[ErrorCode, int]]:
    """Claims so far (history rows reaching running) and failures so far by error
    code (rows reaching failed or retry_wait with a code), from event_counters."""
    c = EVENT_COUNTERS.c
    claims = 0
    failures: dict[ErrorCode, int] = {}
    for status, code, n in conn.execute(select(c.to_status, c.error_code, c.n)):
        if status == TaskStatus.RUNNING.value:
            claims += int(n)
        elif code and status in (TaskStatus.FAILED.value, TaskStatus.RETRY_WAIT.value):
            failures[ErrorCode(code)] = failures.get(ErrorCode(code), 0) + int(n)
    return claims, failures


def refill(conn: Connection) -> None:
    """Recount every task into the counters, in the caller's (write) transaction."""
    conn.execute(TASK_COUNTERS.delete())
    conn.execute(text(fill_sql()))


def status_counts(conn: Connection) -> dict[TaskStatus, int]:
    """Tasks in each status, every status present (zeros included)."""
    out = dict.fromkeys(TaskStatus, 0)
    query = select(TASK_COUNTERS.c.status, func.sum(TASK_COUNTERS.c.n)).group_by(
        TASK_COUNTERS.c.status
    )
    for status, n in conn.execute(query):
        out[TaskStatus(status)] += int(n or 0)
    return out


def _seek(aggregate: str, code: Any, stage: Any) -> ScalarSelect[Any]:
    """The first or last ``updated_at`` of a failure group: one seek into
    ix_tasks_failed_at (a scalar min or max over an index prefix reads one entry).
    The status term is spelled literally, as the partial index's WHERE."""
    at = func.min(TASKS.c.updated_at) if aggregate == "min" else func.max(TASKS.c.updated_at)
    return (
        select(at)
        .where(text(FAILED_SQL))
        .where(code)
        .where(TASKS.c.stage == stage)
        .scalar_subquery()
    )


_C = TASK_COUNTERS.c
# One statement: the failed groups, each with its two seeks (correlated subqueries).
_FAILURE_GROUPS = (
    select(
        _C.error_code,
        _C.stage,
        _C.n,
        _seek("min", TASKS.c.error_code == _C.error_code, _C.stage),
        _seek("max", TASKS.c.error_code == _C.error_code, _C.stage),
    )
    .where(_C.status == TaskStatus.FAILED.value)
    .where(_C.n > 0)
    .order_by(_C.n.desc(), _C.error_code, _C.stage)
)


def failure_groups(conn: Connection) -> list[FailureGroup]:
    """Failed tasks by error code then stage, largest group first, each with its
    first and last failure (the tasks' ``updated_at``)."""
    out = []
    for code, stage, n, first, last in conn.execute(_FAILURE_GROUPS):
        if code == "":  # failed without a code: none is written so, but one may be
            first, last = conn.execute(
                select(
                    _seek("min", TASKS.c.error_code.is_(None), stage),
                    _seek("max", TASKS.c.error_code.is_(None), stage),
                )
            ).one()
        out.append(
            FailureGroup(
                ErrorCode(code or ErrorCode.INTERNAL_ERROR), Stage(stage), int(n), first, last
            )
        )
    return out
