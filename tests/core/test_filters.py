"""The filter language, its SQL and in-memory forms agreeing, and bulk actions."""

from __future__ import annotations

import random
import shlex
from pathlib import Path

import pytest

from core import (
    BadInput,
    Conflict,
    DocumentStatus,
    ErrorCode,
    Ledger,
    TaskStatus,
    parse_filter,
)
from core.filters import (
    EVERY_TASK,
    FILTER_TERMS_MAX,
    FILTER_TEXT_MAX,
    TERM_VALUE_MAX,
    FilterTooLarge,
)
from core.ledger.filter_sql import FILTER_SHAPES_CACHED, FILTERED
from tests.conftest import FakeClock
from tests.core.test_cli import (
    MARKDOWN,
    TEXT,
    added,
    core_cli,
    write,
)
from tests.core.test_versions import published_doc
from tests.core.test_worker import add


async def seed(ledger: Ledger, clock: FakeClock) -> dict[str, str]:
    """Tasks in every interesting state; returns name → task id."""
    ids: dict[str, str] = {}
    for name in ("report-q1.txt", "report-q2.txt", "notes.txt", "scan.txt", "old.txt", "wip.txt"):
        doc = await ledger.operator.upload(f"content of {name}\n".encode(), name)
        ids[name] = (await ledger.operator.submit(doc.document_id)).task_id
        clock.advance(1)
    for name, code in (
        ("report-q1.txt", ErrorCode.PARSE_ERROR),
        ("scan.txt", ErrorCode.EMPTY_DOCUMENT),
    ):
        claim = await ledger.queue.claim(ids[name], "w1")
        assert claim is not None
        await ledger.queue.fail(claim, code)
    await ledger.operator.cancel(ids["old.txt"])
    claim = await ledger.queue.claim(ids["wip.txt"], "w2")
    assert claim is not None
    # report-q1 fails twice: attempt 2
    await ledger.operator.retry(ids["report-q1.txt"])
    claim = await ledger.queue.claim(ids["report-q1.txt"], "w1")
    assert claim is not None
    await ledger.queue.fail(claim, ErrorCode.PARSE_ERROR)
    return ids


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("status:failed", {"report-q1.txt", "scan.txt"}),
        ("!status:failed", {"report-q2.txt", "notes.txt", "old.txt", "wip.txt"}),
        ("code:parse_error", {"report-q1.txt"}),
        ("!code:parse_error", {"report-q2.txt", "notes.txt", "scan.txt", "old.txt", "wip.txt"}),
        ("attempt:>1", {"report-q1.txt"}),
        ("attempt:>=1 worker:w2", {"wip.txt"}),
        ("report", {"report-q1.txt", "report-q2.txt"}),
        ("name:REPORT status:queued", {"report-q2.txt"}),
        ("stage:download status:cancelled", {"old.txt"}),
        ("empty", {"scan.txt"}),
        ("", {"report-q1.txt", "report-q2.txt", "notes.txt", "scan.txt", "old.txt", "wip.txt"}),
    ],
)
async def test_filters_select_the_same_tasks_in_sql_and_in_memory(
    ledger: Ledger, clock: FakeClock, expr: str, expected: set[str]
) -> None:
    await seed(ledger, clock)
    flt = parse_filter(expr)
    in_sql = await ledger.reads.list_tasks(filter=flt, limit=None)
    assert {t.document_name for t in in_sql} == expected
    everything = await ledger.reads.list_tasks(limit=None)
    assert {t.document_name for t in everything if flt.matches(t)} == expected
    assert await ledger.reads.count_tasks(flt) == len(expected)


# Terms whose groups fold into one SQL expression each (core.ledger.filter_sql): two
# or more of one field, negated and not, wildcards, bounds both ways on the attempt.
TERM_POOL = (
    "report", "!report", "q1", "!q2", "txt", "!txt", "e", "%", "!_",
    "name:report", "!name:notes", "name:REPORT", "name:%", "!name:_", "!name:zz",
    "worker:w", "!worker:w2", "worker:W1", "!worker:nobody",
    "status:failed", "!status:queued", "!status:running", "status:queued",
    "code:parse_error", "!code:empty_document", "!code:parse_error",
    "stage:download", "!stage:parse",
    "attempt:>1", "!attempt:>1", "attempt:<2", "attempt:=1", "!attempt:=2",
    "attempt:>=2", "attempt:<=1", "!attempt:<1",
    # Terms that contradict others (core.filters.TaskFilter.never_matches), and those
    # the counters decide (core.ledger.counted_terms).
    "!rep", "!name:rep", "name:report-q", "!q", "report-q1", "!wo", "!worker:w",
    "attempt:>3", "!attempt:>=3", "attempt:<0", "attempt:=2", "!attempt:>2",
    "stage:indexing", "!stage:download", "stage:parse", "!status:failed",
)  # fmt: skip


async def test_combined_terms_select_the_same_tasks_in_sql_and_in_memory(
    ledger: Ledger, clock: FakeClock
) -> None:
    """Filters of several terms of a kind, drawn at random (seeded): the SQL that folds
    each kind into one expression selects exactly what Term.matches selects."""
    ids = await seed(ledger, clock)
    everything = await ledger.reads.list_tasks(limit=None)
    pool = [*TERM_POOL, f"id:{ids['notes.txt'][:3]}", f"!document:{everything[0].document_id[:2]}"]
    draw = random.Random(20261201)
    for _ in range(300):
        expr = " ".join(draw.choice(pool) for _ in range(draw.randint(1, 8)))
        flt = parse_filter(expr)
        in_sql = {t.task_id for t in await ledger.reads.list_tasks(filter=flt, limit=None)}
        in_memory = {t.task_id for t in everything if flt.matches(t)}
        assert in_sql == in_memory, expr
        assert await ledger.reads.count_tasks(flt) == len(in_memory), expr


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("status:done", "status must be one of"),
        ("colour:red", "unknown field"),
        ("attempt:>x", "attempt needs a number"),
        ("code:", "needs a value"),
        ("!", "needs a term"),
        ('name:"unclosed', "filter"),
    ],
)
def test_malformed_filters_are_bad_input(expr: str, message: str) -> None:
    with pytest.raises(BadInput, match=message):
        parse_filter(expr)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        (" ".join(["report"] * (FILTER_TERMS_MAX + 1)), f"at most {FILTER_TERMS_MAX} terms"),
        ("x" * (FILTER_TEXT_MAX + 1), f"at most {FILTER_TEXT_MAX} characters"),
        ("name:" + "n" * (TERM_VALUE_MAX + 1), f"value is at most {TERM_VALUE_MAX} characters"),
        ("!" + "w" * (TERM_VALUE_MAX + 1), f"value is at most {TERM_VALUE_MAX} characters"),
    ],
)
def test_a_filter_over_its_limits_says_which(expr: str, message: str) -> None:
    with pytest.raises(FilterTooLarge, match=message):
        parse_filter(expr)


async def test_the_largest_filter_runs_on_the_ledger(ledger: Ledger, clock: FakeClock) -> None:
    """At its limits a filter is one statement the backend accepts (990 terms once
    made SQLite answer "Expression tree is too large"), the same in SQL and in memory,
    and its statement's shape does not grow with its terms: once each group of terms
    has two values, more terms (or other values) add nothing to the filters' compiled
    cache, the same filters again add nothing at all, and the engine's own cache (the
    statements every other request uses) is never touched."""
    await seed(ledger, clock)
    words = ["!scan", "!name:zz", "attempt:<9", "!worker:nobody", "report"]
    largest = parse_filter(" ".join(words[i % len(words)] for i in range(FILTER_TERMS_MAX)))
    assert len(largest.terms) == FILTER_TERMS_MAX
    in_sql = await ledger.reads.list_tasks(filter=largest, limit=None)
    assert {t.document_name for t in in_sql} == {"report-q1.txt", "report-q2.txt"}
    assert await ledger.reads.count_tasks(largest) == 2
    wide = parse_filter("name:" + "n" * TERM_VALUE_MAX)
    assert await ledger.reads.list_tasks(filter=wide) == []
    engine = ledger.transactions.engine  # SQLite's Engine, or PostgreSQL's AsyncEngine
    shared = getattr(engine, "sync_engine", engine)._compiled_cache
    shared_before = len(shared)
    cache = FILTERED["compiled_cache"]
    cache.clear()

    async def ask(n: int, suffix: str = "") -> None:
        flt = parse_filter(" ".join(words[i % len(words)] + suffix for i in range(n)))
        await ledger.reads.list_tasks(filter=flt, limit=5)
        await ledger.reads.count_tasks(flt)

    every_group_twice = 2 * len(words)
    for n in range(1, every_group_twice + 1):
        await ask(n)
    settled = len(cache)
    for n in range(every_group_twice, FILTER_TERMS_MAX + 1):  # longer: the same shape
        await ask(n)
    for n in range(every_group_twice, FILTER_TERMS_MAX + 1):  # other values: the same
        await ask(n, suffix=f"{n}")
    for n in range(1, FILTER_TERMS_MAX + 1):  # everything again: nothing new
        await ask(n)
    assert len(cache) == settled
    assert len(shared) == shared_before


async def test_a_client_cycling_filter_shapes_holds_a_bounded_cache(ledger: Ledger) -> None:
    """Every combination of term kinds is a statement shape of its own; a client
    sending hundreds of them fills the filters' small cache, never more, and never the
    engine's cache that unfiltered reads use."""
    engine = ledger.transactions.engine
    shared = getattr(engine, "sync_engine", engine)._compiled_cache
    shared_before = len(shared)
    cache = FILTERED["compiled_cache"]
    draw = random.Random(3)
    for _ in range(400):
        words = [draw.choice(TERM_POOL) for _ in range(draw.randint(1, FILTER_TERMS_MAX))]
        await ledger.reads.count_tasks(parse_filter(" ".join(words)))
    # LRUCache trims to its capacity once it passes capacity x 1.5.
    assert len(cache) <= FILTER_SHAPES_CACHED * 1.5
    assert len(shared) == shared_before


def test_like_wildcards_in_filters_are_literal() -> None:
    flt = parse_filter("name:100%")
    assert flt.terms[0].value == "100%"


async def test_bulk_retry_dry_run_then_execute(ledger: Ledger, clock: FakeClock) -> None:
    ids = await seed(ledger, clock)
    flt = parse_filter("report")
    dry = await ledger.operator.bulk_retry(flt, dry_run=True)
    assert (dry.matched, dry.eligible, dry.done) == (2, 1, 0)
    assert dry.ineligible == {"queued: only failed tasks can be retried": 1}
    assert (await ledger.reads.get_task(ids["report-q1.txt"])).status is TaskStatus.FAILED
    done = await ledger.operator.bulk_retry(flt, actor="op", reason="parser upgraded")
    assert (done.done, done.refused) == (1, 0)
    requeued = await ledger.reads.get_task(ids["report-q1.txt"])
    assert requeued.status is TaskStatus.QUEUED
    history = await ledger.reads.task_history(requeued.task_id)
    assert (history[-1].actor, history[-1].reason) == ("op", "parser upgraded")


async def failed_then_superseded(ledger: Ledger) -> tuple[str, str]:
    """A document whose v2 failed and was superseded by a newer upload; (family,
    the failed task)."""
    v1 = await published_doc(ledger)
    v2 = await ledger.versions.replace(v1.document_id, b"lighthouse beta\n", "guide.md")
    task = await ledger.operator.submit(v2.document_id)
    claim = await ledger.queue.claim(task.task_id, "w1")
    assert claim is not None
    await ledger.queue.fail(claim, ErrorCode.PARSE_ERROR, "corrupt")
    await ledger.versions.replace(v1.document_id, b"lighthouse gamma\n", "guide.md")
    assert (await ledger.reads.get_document(v2.document_id)).status is DocumentStatus.RETIRED
    return v1.document_id, task.task_id


async def test_bulk_retry_counts_a_failed_task_of_a_retired_version_as_not_eligible(
    ledger: Ledger,
) -> None:
    _, task_id = await failed_then_superseded(ledger)
    with pytest.raises(Conflict, match="is retired, not failed"):
        await ledger.operator.retry(task_id)
    failed = parse_filter("status:failed")
    dry = await ledger.operator.bulk_retry(failed, dry_run=True)
    assert (dry.matched, dry.eligible) == (1, 0)
    assert dry.ineligible == {"failed: its document is retired, not failed": 1}
    done = await ledger.operator.bulk_retry(failed)
    assert (done.eligible, done.done, done.refused) == (0, 0, 0)
    assert (await ledger.reads.get_task(task_id)).status is TaskStatus.FAILED


async def test_bulk_retry_still_requeues_a_failed_task_of_a_failed_document(
    ledger: Ledger,
) -> None:
    doc = await ledger.operator.upload(b"lighthouse\n", "a.md")
    task = await ledger.operator.submit(doc.document_id)
    claim = await ledger.queue.claim(task.task_id, "w1")
    assert claim is not None
    await ledger.queue.fail(claim, ErrorCode.PARSE_ERROR, "corrupt")
    other = await ledger.operator.upload(b"lighthouse two\n", "b.md")
    gone = await ledger.operator.submit(other.document_id)
    claim = await ledger.queue.claim(gone.task_id, "w1")
    assert claim is not None
    await ledger.queue.fail(claim, ErrorCode.PARSE_ERROR, "corrupt")
    await ledger.versions.delete(other.document_id, actor="pat")
    failed = parse_filter("status:failed")
    dry = await ledger.operator.bulk_retry(failed, dry_run=True)
    assert (dry.matched, dry.eligible) == (2, 1)
    assert dry.ineligible == {"failed: its document no longer exists; upload it again": 1}
    done = await ledger.operator.bulk_retry(failed)
    assert (done.done, done.refused) == (1, 0)


async def test_bulk_cancel_explains_what_it_skips(ledger: Ledger, clock: FakeClock) -> None:
    await seed(ledger, clock)
    result = await ledger.operator.bulk_cancel(EVERY_TASK, actor="op")
    assert result.matched == 6
    assert result.done == 3  # report-q2, notes (queued) and wip (running)
    assert result.ineligible == {
        "failed: only queued, running or retry_wait tasks can be cancelled": 2,
        "cancelled: only queued, running or retry_wait tasks can be cancelled": 1,
    }
    counts = await ledger.reads.counts()
    assert counts[TaskStatus.CANCELLED] == 4
    assert counts[TaskStatus.QUEUED] == counts[TaskStatus.RUNNING] == 0


NAMES = ("ÄRGER.txt", "ΣΟΦΙΑ.txt", "ärger-notes.md", "ΟΔΟΣ.txt", "İSTANBUL.txt", "plain.txt")


# Each filter and the names it must find, in SQL (both backends) and in memory alike.
FILTERS = {
    "name:ÄRGER": {"ÄRGER.txt", "ärger-notes.md"},
    "name:ärger": {"ÄRGER.txt", "ärger-notes.md"},
    "name:RGER": {"ÄRGER.txt", "ärger-notes.md"},
    "ΣΟΦ": {"ΣΟΦΙΑ.txt"},
    "σοφια": {"ΣΟΦΙΑ.txt"},
    # A final capital sigma folds as any sigma (str.lower would make it ς; SQL cannot).
    "name:οδοσ": {"ΟΔΟΣ.txt"},
    "name:istanbul": {"İSTANBUL.txt"},
    "!name:Ärger": {"ΣΟΦΙΑ.txt", "ΟΔΟΣ.txt", "İSTANBUL.txt", "plain.txt"},
}


# `tasks --filter 'name:ÄRGER'` found nothing and 'name:RGER' found ÄRGER.txt: SQLite's
# lower() folds ASCII only, and the dashboard's in-memory matcher (Python's lower())
# disagreed with the SQL the ledger ran.
async def test_filters_fold_every_script_alike_in_sql_and_in_memory(ledger: Ledger) -> None:
    for name in NAMES:
        await add(ledger, TEXT + name.encode(), name)
    everything = await ledger.reads.list_tasks(limit=None)
    names = {t.task_id: t.document_name for t in everything}

    for text, expected in FILTERS.items():
        task_filter = parse_filter(text)
        in_sql = {names[t.task_id] for t in await ledger.reads.list_tasks(filter=task_filter)}
        in_memory = {names[t.task_id] for t in everything if task_filter.matches(t)}
        assert (in_sql, in_memory) == (expected, expected), text
        assert await ledger.reads.count_tasks(task_filter) == len(expected), text
        dry = await ledger.operator.bulk_cancel(task_filter, dry_run=True)
        assert dry.eligible == len(expected), text


async def test_a_ledger_from_before_stored_folded_names_is_filled_when_opened(
    tmp_path: Path,
) -> None:
    """Migration 0012 folds the names of the documents already there, as new ones are."""
    from core import Settings, sqlite_url
    from tests.old_ledgers import set_back

    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "o")
    ledger = await Ledger.open(settings)
    for name in NAMES:
        await add(ledger, TEXT + name.encode(), name)
    await ledger.close()
    # The ledger as 0011 left it: no folded names.
    set_back(tmp_path / "ledger.db", "0011")

    ledger = await Ledger.open(settings)
    try:
        everything = await ledger.reads.list_tasks(limit=None)
        names = {t.task_id: t.document_name for t in everything}
        for text, expected in FILTERS.items():
            found = await ledger.reads.list_tasks(filter=parse_filter(text))
            assert {names[t.task_id] for t in found} == expected, text
    finally:
        await ledger.close()


def test_a_name_filter_calls_no_python_per_row_on_sqlite(tmp_path: Path) -> None:
    """A filter of many name terms folded each name in Python once a term and a row,
    holding the GIL through the whole statement: the server's other requests waited
    (bench.api's hostile neighbours). Names are stored folded; the statement folds
    nothing."""
    from sqlalchemy import select

    from core.filters import SQLITE_FOLD_FUNCTION
    from core.ledger.reads import term_clause
    from core.ledger.schema import DOCUMENTS, TASKS

    terms = parse_filter(" ".join(f"!name:n{i}" for i in range(FILTER_TERMS_MAX))).terms
    query = select(TASKS.c.id).select_from(
        TASKS.outerjoin(DOCUMENTS, DOCUMENTS.c.id == TASKS.c.document_id)
    )
    sql = str(query.where(*(term_clause(t) for t in terms)).compile(dialect=_sqlite()))
    assert SQLITE_FOLD_FUNCTION not in sql


def _sqlite() -> object:
    from sqlalchemy.dialects import sqlite

    return sqlite.dialect()


def test_filters_fold_non_ascii_capitals_on_the_command_line(tmp_path: Path) -> None:
    added(tmp_path, write(tmp_path / "ÄRGER.txt", TEXT), write(tmp_path / "ΣΟΦΙΑ.txt", MARKDOWN))

    found = core_cli(tmp_path, "tasks", "--filter", "name:ÄRGER", "--json")
    assert [t["document_name"] for t in found.value] == ["ÄRGER.txt"]
    assert core_cli(tmp_path, "tasks", "--filter", "ΣΟΦ", "--json").value[0]["document_name"] == (
        "ΣΟΦΙΑ.txt"
    )
    dry = core_cli(tmp_path, "cancel", "--filter", "name:ärger", "--dry-run", "--json")
    assert dry.value["eligible"] == 1, dry


def test_filter_words_split_as_a_shell_does() -> None:
    """The fast split of text without quotes agrees with shlex on every whitespace
    character it may meet (vertical tab, form feed, no-break space are word
    characters to shlex, not separators)."""
    from core.filters import _words

    draw = random.Random(7)
    alphabet = "ab !:\t\r\n\x0b\x0c\u00a0\u2003#é%_"
    for _ in range(5000):
        text = "".join(draw.choice(alphabet) for _ in range(draw.randint(0, 20)))
        assert _words(text) == shlex.split(text), repr(text)
    assert _words('name:"two words" x') == ["name:two words", "x"]
