"""A task filter as SQL whose shape does not grow with the filter.

A filter of 32 terms built as 32 SQL expressions cost ~13 ms of CPU per request, all
of it holding the GIL: ~6 ms building SQLAlchemy elements and ~7 ms compiling a
statement that no cache could keep (every count and order of terms is a new shape).
Four clients sending the largest filter the API accepts made every other request
wait behind them (bench.api's hostile-neighbour row: a quiet GET's p99 x7.2).

Here terms are grouped by what they test, and each group is one expression whatever
its number of terms: equality tests on one column fold to one comparison or one
``NOT IN`` (an expanding parameter, rendered at execution, so the cached statement
does not change with the list); comparisons of the attempt number fold to one bound
each way; substring and prefix tests with two or more values take their values as one
JSON array parameter, read back as rows (SQLite's ``json_each``, PostgreSQL's
``json_array_elements_text``) under one ``NOT EXISTS``. A statement then has one of a
bounded number of shapes (each group absent, one value, or many), so it is compiled
once and kept: in a small cache of its own (:data:`FILTERED`), so that no client's
filters can crowd out the statements every other request uses.

The meaning is :meth:`core.filters.Term.matches`, term for term; the filter tests
check the two against each other on real ledgers.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sqlalchemy import (
    CompoundSelect,
    Select,
    String,
    exists,
    false,
    literal,
    literal_column,
    select,
    true,
    union_all,
)
from sqlalchemy.engine import Connection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import ColumnElement, func
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.util import LRUCache

from core.filters import PAGE_FIELDS, SQLITE_FOLD_FUNCTION, TaskFilter, Term, attempt_bounds, fold
from core.ledger import counted_terms, name_index, pages, worker_index
from core.ledger.rows import at_most
from core.ledger.schema import DOCUMENTS, RETRIED_ABOVE, TASKS
from core.states import ErrorCode, TaskStatus

# Filtered statements are compiled into a cache of their own: a client cycling through
# filter shapes then evicts only other filters' statements, never the hot unfiltered
# ones, and holds at most this many (~150 KB each, measured: 2 000 random shapes took
# the engine's shared 500-entry cache to +100 MB; this one stays near +10 MB).
FILTER_SHAPES_CACHED = 64
FILTERED: dict[str, Any] = {"compiled_cache": LRUCache(FILTER_SHAPES_CACHED)}

# The escape character of every LIKE here (SQLAlchemy's autoescape uses the same).
LIKE_ESCAPE = "/"

# Substring and prefix tests: how each field's value is prepared, and the test of
# one value (a SQL text expression holding the pattern's middle) against a task.
Match = Callable[[ColumnElement[str]], ColumnElement[bool]]


class json_values(FunctionElement[str]):
    """The strings of a JSON array parameter as rows with one column, ``value``."""

    type = String()
    inherit_cache = True
    name = "json_values"


@compiles(json_values)
def _json_values_postgresql(element: json_values, compiler: SQLCompiler, **kw: Any) -> str:
    return f"json_array_elements_text(CAST({compiler.process(element.clauses, **kw)} AS JSON))"


@compiles(json_values, "sqlite")
def _json_values_sqlite(element: json_values, compiler: SQLCompiler, **kw: Any) -> str:
    return f"json_each({compiler.process(element.clauses, **kw)})"


class folded(FunctionElement[str]):
    """SQL for :func:`core.filters.fold` of a text expression: the function the SQLite
    ledger registers under that name (SQLite's ``lower()`` folds ASCII only), and
    ``lower()`` elsewhere (PostgreSQL's follows the database's ctype, which under UTF-8
    is the same simple mapping)."""

    type = String()
    inherit_cache = True
    name = "folded"


@compiles(folded)
def _folded_lower(element: folded, compiler: SQLCompiler, **kw: Any) -> str:
    return f"lower({compiler.process(element.clauses, **kw)})"


@compiles(folded, "sqlite")
def _folded_sqlite(element: folded, compiler: SQLCompiler, **kw: Any) -> str:
    return f"{SQLITE_FOLD_FUNCTION}({compiler.process(element.clauses, **kw)})"


def _escaped(value: str) -> str:
    """``value`` with LIKE's wildcards taken literally."""
    e = LIKE_ESCAPE
    return value.replace(e, e + e).replace("%", e + "%").replace("_", e + "_")


def _contains(column: ColumnElement[str]) -> Match:
    return lambda v: column.like(literal("%") + v + literal("%"), escape=LIKE_ESCAPE)


def _starts(column: ColumnElement[str]) -> Match:
    return lambda v: column.like(v + literal("%"), escape=LIKE_ESCAPE)


def _name() -> ColumnElement[str]:
    # Stored folded (documents.filename_folded): no fold call per row and term.
    return func.coalesce(DOCUMENTS.c.filename_folded, "")


def _code() -> ColumnElement[str]:
    return func.coalesce(TASKS.c.error_code, "")


def _bare_on(name: ColumnElement[str]) -> Match:
    """A bare word: in the name (``name``, as a group needs it), a task id's start, or
    the error code."""
    return lambda v: _contains(name)(v) | _starts(TASKS.c.id)(v) | _contains(_code())(v)


def _worker(v: ColumnElement[str]) -> ColumnElement[bool]:
    return _contains(folded(func.coalesce(TASKS.c.worker_id, "")))(v)


# field -> (how a value is prepared, the test of one value)
_PATTERN_FIELDS: dict[str | None, tuple[Callable[[str], str], Match]] = {
    None: (fold, _bare_on(_name())),
    "name": (fold, lambda v: _contains(_name())(v)),
    "worker": (fold, _worker),
    "id": (str.lower, lambda v: _starts(TASKS.c.id)(v)),
    "document": (str.lower, lambda v: _starts(TASKS.c.document_id)(v)),
}

# The same tests of one wanted (not negated), non-empty value, on the bare name column:
# a task without a name then fails either way (NULL is no match, nor is '' for a
# non-empty value), but PostgreSQL estimates a bare column's LIKE from its statistics
# and an expression's (the coalesce) by a fixed guess. Guessing name:report (one task
# in 12) at 0.03 % of tasks, it planned its first screen for ~150 000 tasks read, in
# parallel: two workers started for a page found within 600 tasks (9 ms of the 13,
# more under load). Negated or many values keep the coalesce: there a NULL differs.
_WANTED_ONE: dict[str | None, Match] = {
    None: _bare_on(DOCUMENTS.c.filename_folded),
    "name": _contains(DOCUMENTS.c.filename_folded),
}


def status_is(value: str) -> ColumnElement[bool]:
    """``status = value`` spelled so that SQLite may use a partial index for it.

    SQLite uses a partial index only for a query with a term identical to (one OR-ed
    term of) the index's WHERE, and never for a bound parameter: a status from the
    enum is written literally, matching ix_tasks_status_created, or running, matching
    ix_tasks_running_lease. Anything else stays a parameter (it matches no task)."""
    try:
        status = TaskStatus(value)
    except ValueError:
        return TASKS.c.status == value
    return TASKS.c.status == literal_column(f"'{status.value}'", String)


def lists_running(
    task_filter: TaskFilter | None,
    status: str | None = None,
    clauses: Iterable[ColumnElement[bool]] = (),
) -> bool:
    """Whether a listing asks for running tasks only (a status term or ``status``, or
    ``clauses`` that start from them: :data:`RUNNING_ONLY`).

    They are few (a worker's slots) beside a million others, and SQLite's planner,
    knowing no sizes, walks ix_tasks_created (the list's order) through every task
    in search of them rather than read ix_tasks_running_lease and sort. Such a
    listing orders by an expression instead (the same order), which no index
    provides, so the partial index is read."""
    values = [status] if status is not None else []
    if task_filter:
        values += [t.value for t in task_filter.terms if t.field == "status" and not t.negate]
    return TaskStatus.RUNNING.value in values or any(c is RUNNING_ONLY for c in clauses)


# The clause by which the counters start a list from the running tasks
# (core.ledger.counted_terms): one object, so that lists_running knows it.
RUNNING_ONLY = status_is(TaskStatus.RUNNING.value)


_EQUALITY_FIELDS: dict[str, Callable[[], ColumnElement[str]]] = {
    "status": lambda: TASKS.c.status,
    "code": _code,
    "stage": lambda: TASKS.c.stage,
}

# A filter's statements are prepared once and executed with the user's values; after
# five executions PostgreSQL may plan one for no value (a generic plan), guessing a
# name's share of the documents. For name:report (one document in 12) that plan read
# the trigram index whole and sorted 83 000 tasks (~800 ms at a million; its deciding
# count ~60 ms), where a plan for the value reads ~600 tasks in order (3-4 ms).
# Planning each execution costs well under a millisecond; the setting ends with the
# read's transaction. Sent as it is: a compiled statement would take a place in the
# engine's cache, which filters keep out of.
CUSTOM_PLANS = "SET LOCAL plan_cache_mode = force_custom_plan"
# A screenful (a list's page, a capped count) is found within a few hundred tasks read
# in order, and PostgreSQL's parallel workers cost more to start than that: planned
# for a page of status:failed report, two workers took 16 ms to bring the first row
# of 25 (3 ms without). The same one statement, both settings for the transaction.
SCREENFUL_PLANS = (
    "SELECT set_config('plan_cache_mode', 'force_custom_plan', true),"
    " set_config('max_parallel_workers_per_gather', '0', true)"
)


def filter_clauses(
    task_filter: TaskFilter,
    single: Callable[[Term], ColumnElement[bool]],
    conn: Connection | None = None,
    review_below: float | None = None,
    *,
    screenful: bool = False,
) -> list[ColumnElement[bool]]:
    """The WHERE clauses of ``task_filter`` (AND-ed), a bounded number whatever its
    terms. ``single`` makes the clause of a term no group here knows (one each,
    identical terms once). With ``conn``, a name few documents carry also drives the
    list from those documents (:func:`name_drivers`), and on PostgreSQL the rest of
    the transaction plans each statement for its values (:data:`CUSTOM_PLANS`), and
    for a ``screenful`` without parallel workers (:data:`SCREENFUL_PLANS`)."""
    if task_filter.never_matches:
        return [false()]
    if conn is not None and conn.dialect.name == "postgresql":
        conn.exec_driver_sql(SCREENFUL_PLANS if screenful else CUSTOM_PLANS)
    patterns: dict[tuple[str | None, bool], list[str]] = defaultdict(list)
    wanted_names: dict[str | None, list[str]] = defaultdict(list)
    wanted_workers: list[str] = []
    prefixes: dict[str, list[str]] = defaultdict(list)
    equal: dict[str, set[str]] = defaultdict(set)
    unequal: dict[str, set[str]] = defaultdict(set)
    others: dict[Term, None] = {}
    for term in task_filter.terms:
        if term.field in _PATTERN_FIELDS:
            prepare, _ = _PATTERN_FIELDS[term.field]
            group = patterns[term.field, term.negate]
            value = _escaped(prepare(term.value))
            if value not in group:
                group.append(value)
                if not term.negate and term.field in _NAMED_FIELDS:
                    wanted_names[term.field].append(prepare(term.value))
                if not term.negate and term.field in _PREFIX_COLUMNS:
                    prefixes[term.field].append(prepare(term.value))
                if not term.negate and term.field == "worker":
                    wanted_workers.append(prepare(term.value))
        elif term.field in _EQUALITY_FIELDS:
            (unequal if term.negate else equal)[term.field].add(term.value)
        elif term.field == "attempt":
            pass  # all of them at once: _attempt_clauses
        else:
            others[term] = None
    clauses: list[ColumnElement[bool]] = []
    drivers = name_drivers(conn, wanted_names) if conn is not None else {}
    # Groups in a fixed order: the same terms in another order make the same statement.
    for field, negate in sorted(patterns, key=lambda k: (k[0] or "", k[1])):
        match = _PATTERN_FIELDS[field][1]
        values = patterns[field, negate]
        one = len(values) == 1 and bool(values[0]) and field in _WANTED_ONE
        if one and negate:
            # Not a match on the bare column, NULL (no document) included: the same
            # answer as the coalesce's negation, estimated from the column's
            # statistics. PostgreSQL guessed !name:a (half the names) at 42 tasks of
            # a million, hashed every document and sorted: 1.4 s, 5 ms in order.
            unwanted = _WANTED_ONE[field](literal(values[0], String))
            clauses.append(unwanted.is_not(true()))
            continue
        # Not beside a driver: there the documents are found by it, and a bare column
        # would also let PostgreSQL read the trigram index a second time for the join.
        if one and field not in drivers:
            match = _WANTED_ONE[field]
        clauses.append(_pattern_clause(match, values, negate=negate))
    clauses.extend(drivers.values())
    page_driver = (
        _page_driver(conn, others, review_below)
        if conn is not None and review_below is not None
        else []
    )
    clauses.extend(page_driver)
    worker_driver = _worker_driver(conn, wanted_workers) if conn is not None else []
    clauses.extend(worker_driver)
    # With a list driven from few documents, SQLite would still rather walk a
    # status's partial index in the list's order (no sort) than seek their tasks:
    # status:succeeded ocr:low read 0.5 s at a million, driven 17 ms.
    driven = bool(drivers or page_driver or worker_driver)
    status_seeks = not driven or conn is None or conn.dialect.name != "sqlite"
    if conn is not None and conn.dialect.name == "sqlite":
        clauses.extend(_prefix_ranges(conn, prefixes))
    if any(len(wanted) > 1 for wanted in equal.values()):
        return [false()]  # one column equal to two values at once
    if conn is not None:
        statuses = counted_terms.matching_statuses(conn, equal, unequal, FILTERED)
        # A status of the filter's own, or a driver, already says where to start.
        may_drive = not driven and "status" not in equal and "code" not in equal
        counted = counted_terms.counted_clauses(statuses, _status_driver, may_drive=may_drive)
        if counted is None:
            return [false()]  # the counters say no task meets these terms
        clauses.extend(counted)
    for field, wanted in sorted(equal.items()):
        value = next(iter(wanted))
        if field == "status":
            # The coalesce of a NOT NULL column is the column, and seeks no index.
            clauses.append(
                status_is(value) if status_seeks else func.coalesce(TASKS.c.status, "") == value
            )
        elif field == "code" and value:
            # The bare column equals a code exactly when its coalesce does (NULL is
            # ''), and only the bare column can seek ix_tasks_error_created.
            clauses.append(TASKS.c.error_code == value)
        else:
            clauses.append(_EQUALITY_FIELDS[field]() == value)
    for field, refused in sorted(unequal.items()):
        clauses.append(_EQUALITY_FIELDS[field]().not_in(sorted(refused)))
    clauses.extend(_attempt_clauses(task_filter.terms))
    clauses.extend(single(term) for term in others)
    return clauses


def _worker_driver(conn: Connection, values: list[str]) -> list[ColumnElement[bool]]:
    """For wanted ``worker:`` values (all of which a task's worker must hold), the
    workers they match when few tasks are theirs (core.ledger.worker_index):
    ``worker_id IN (them)``, implied by the values' tests; a constant false when no
    worker matches (the database tests it once, before reading a row)."""
    if not values:
        return []
    workers = worker_index.matching_workers(conn, values, FILTERED)
    if workers is None:
        return []
    if not workers:
        return [false()]
    if not worker_index.few_tasks(conn, workers, FILTERED):
        return []
    return [TASKS.c.worker_id.in_(workers)]


def _page_driver(
    conn: Connection, terms: Iterable[Term], review_below: float
) -> list[ColumnElement[bool]]:
    """For the first wanted page term (``ocr:low``, ``pages:skipped``) whose versions
    are few, ``tasks.document_id IN (those versions)``: implied by the term's EXISTS,
    so it changes no answer, only where the plan starts (core.ledger.pages)."""
    for term in terms:
        if term.field in PAGE_FIELDS and not term.negate:
            condition = pages.term_condition(term, review_below)
            versions = pages.few_versions(conn, condition, FILTERED)
            if versions is not None:
                return [TASKS.c.document_id.in_(versions)]
    return []


# The pattern fields whose values are (or may be) in a document's name.
_NAMED_FIELDS = (None, "name")
# Every task id is 32 lowercase hex digits (uuid4().hex: core.ledger.new_id, the
# queue's), so a word with any other character, or longer, starts none.
_TASK_ID_CHARS = frozenset("0123456789abcdef")
_TASK_ID_LENGTH = 32
# The id after every id starting with a prefix, in SQLite's (binary) order.
_PAST_PREFIX = "\U0010ffff"


def name_drivers(
    conn: Connection, values: Mapping[str | None, list[str]]
) -> dict[str | None, ColumnElement[bool]]:
    """Clauses that let a list start from the few documents a wanted name is in
    (core.ledger.name_index). Each is implied by the clauses of its group (a task its
    group matches passes it), so adding them changes no answer, only where a plan
    starts: ``tasks.document_id IN (the documents)``, a seek of its index per
    document. One per group, for its first value the index finds cheaper than the
    list's order: every value of a group must match, so any one bounds the tasks.
    By field (None: bare words)."""
    dialect = conn.dialect.name
    drivers: dict[str | None, ColumnElement[bool]] = {}
    for field in _NAMED_FIELDS:
        for value in values.get(field, ()):
            id_prefix = field is None and _may_start_an_id(value)
            if field is None and not _bare_drivable(value):
                continue
            if not name_index.few_named(conn, value, FILTERED):
                continue
            named = name_index.named_documents(dialect, value)
            driver: ColumnElement[bool] = TASKS.c.document_id.in_(named)
            if id_prefix and dialect == "sqlite":
                # A bare word also matches a task id's prefix: a range of the primary
                # key, so that each side of the OR seeks an index.
                in_range = (TASKS.c.id >= value) & (TASKS.c.id < value + _PAST_PREFIX)
                driver = driver | in_range
            elif id_prefix:
                # PostgreSQL does not OR a semi-join with an index scan: it read every
                # task for a bare word that may start an id (abcd: 4-5 s at a
                # million). The tasks of both, by id, from the documents and from
                # 0021's pattern index, which holds a LIKE prefix under any collation.
                driver = TASKS.c.id.in_(_named_or_prefixed(named, value))
            drivers[field] = driver
            break
    return drivers


# The prefix fields, and the column each value starts.
_PREFIX_COLUMNS: dict[str, Callable[[], ColumnElement[str]]] = {
    "id": lambda: TASKS.c.id,
    "document": lambda: TASKS.c.document_id,
}


# Tasks in an id or document prefix's range at most for the list to start from the
# range: gathered and sorted (as a rare name's documents). A shorter prefix holds many
# (``id:0``: one task in 16, 62 500 sorted at a million, 160 ms), found sooner in the
# list's order.
FEW_PREFIXED = 2_000


def _prefix_ranges(
    conn: Connection, prefixes: Mapping[str, list[str]]
) -> list[ColumnElement[bool]]:
    """For each wanted ``id:``/``document:`` prefix whose tasks are few, the range of
    its column that holds it, beside its LIKE (which stays the test): SQLite's LIKE
    is case-insensitive, so it never seeks a BINARY index with one, and ``id:3f2a``
    read every task (110 ms of CPU, 350+ ms under load, at a million). A range is the
    prefix's exactly where ids order byte by byte, which SQLite's do (a PostgreSQL
    collation may not: PostgreSQL seeks 0021's pattern index with the LIKE itself)."""
    clauses: list[ColumnElement[bool]] = []
    for field, values in sorted(prefixes.items()):
        column = _PREFIX_COLUMNS[field]()
        for value in values:
            in_range = (column >= value) & (column < value + _PAST_PREFIX)
            if at_most(conn, select(column).where(in_range), FEW_PREFIXED, FILTERED):
                clauses.append(in_range)
    return clauses


def _may_start_an_id(value: str) -> bool:
    return len(value) <= _TASK_ID_LENGTH and _TASK_ID_CHARS.issuperset(value)


def _named_or_prefixed(named: Select[tuple[str]], prefix: str) -> CompoundSelect:
    """The ids of the tasks of the ``named`` documents and of those whose id starts
    with ``prefix`` (hex digits: nothing to escape)."""
    by_name, by_id = TASKS.alias("by_name"), TASKS.alias("by_id")
    return union_all(
        select(by_name.c.id).where(by_name.c.document_id.in_(named)),
        select(by_id.c.id).where(by_id.c.id.like(prefix + "%")),
    )


def _bare_drivable(value: str) -> bool:
    """Whether a bare word's tasks are all among those its name and id find: no error
    code contains it (a code is one of ErrorCode's, each a task row's error_code)."""
    return not any(value in code.value for code in ErrorCode)


def _pattern_clause(match: Match, values: list[str], *, negate: bool) -> ColumnElement[bool]:
    if len(values) == 1:
        one = match(literal(values[0], String))
        return ~one if negate else one
    rows = json_values(literal(json.dumps(values), String)).table_valued("value")
    value: ColumnElement[str] = rows.c.value
    # Every value matches: no value fails to. No value matches: none does.
    test = match(value) if negate else ~match(value)
    return ~exists(select(literal(1)).select_from(rows).where(test))


def _status_driver(status: str) -> ColumnElement[bool]:
    return RUNNING_ONLY if status == TaskStatus.RUNNING.value else status_is(status)


def _attempt_clauses(terms: tuple[Term, ...]) -> list[ColumnElement[bool]]:
    """The attempt terms' bounds (core.filters.attempt_bounds), and where the lowest
    is past :data:`RETRIED_ABOVE` the partial index's own WHERE beside them, so the
    list reads only the tasks that were retried: few, and on a ledger whose tasks
    stop at 3 attempts ``attempt:>3`` read all of a million tasks to find none
    (0.8 s on SQLite)."""
    if not any(t.field == "attempt" for t in terms):
        return []
    bounds = attempt_bounds(terms)
    if bounds is None:
        return [false()]
    low, high, excluded = bounds
    attempt = TASKS.c.attempt
    clauses: list[ColumnElement[bool]] = []
    if low == high:
        clauses.append(attempt == low)
    else:
        if low > 0:
            clauses.append(attempt >= low)
        if high is not None:
            clauses.append(attempt <= high)
    if low > RETRIED_ABOVE:
        clauses.append(attempt > literal_column(str(RETRIED_ABOVE)))
    if excluded:
        clauses.append(attempt.not_in(sorted(excluded)))
    return clauses
