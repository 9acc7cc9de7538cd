"""Name filters over the trigram index of documents' names (migration 0017): the
same tasks as the in-memory matcher whichever way a list is read (driven from the
index, or in its own order), the index filled for documents already there, and a
rare name read from its documents rather than from every task."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection

from core import Ledger, Settings, TaskView, parse_filter, sqlite_url
from core.filters import TERM_VALUE_MAX, fold
from core.ledger import name_index
from tests.core.test_cli import TEXT
from tests.core.test_worker import add

LONG = "Ä" + "long-name_" * 25 + "%end.txt"  # 259 characters: a display name keeps 255
NAMES = (
    "ÄRGER-Bericht.txt",
    "ärger.txt",
    "100%_done.txt",
    "100_percent.txt",
    "a%b_c.txt",
    "a/b.txt",
    'say "hi".txt',
    "İSTANBUL.txt",
    "ΣΊΣΥΦΟΣ.txt",
    "Straße.txt",
    "STRASSE.txt",
    "ab",
    "x",
    LONG,
)
FILTERS = (
    "name:ärger",
    "name:ÄRG",
    "ärger",
    "name:%_",
    "name:0%_",
    "name:%",
    "name:_",
    "name:_pe",
    "name:a%b",
    "name:a/b",
    "name:/b.",
    "name:'\"hi\"'",
    "name:'y \"'",
    "name:istanbul",
    "name:σίσυφοσ",
    "name:straße",
    "name:strasse",
    "name:ss",
    "name:ab",
    "name:x",
    "name:zzz",
    "zzz",
    "name:.txt",
    "!name:ärger",
    "!name:%_d",
    "!ab",
    "name:txt !name:rger",
    "name:txt name:100",
    "name:rge name:ber name:cht",
    "pars",  # an error code's part: the bare word's code side
    f"name:{fold(LONG)[:TERM_VALUE_MAX]}",
    f"name:{fold(LONG)[1:200]}",
    f"name:{'z' * TERM_VALUE_MAX}",
)


async def _seeded(ledger: Ledger) -> list[TaskView]:
    for name in NAMES:
        await add(ledger, TEXT + name.encode(), name)
    return await ledger.reads.list_tasks(limit=None)


def _random_filters(names: list[str], count: int) -> list[str]:
    """Substrings of the names (folded or not), some negated or bare, quoted for the
    filter's shell-style words."""
    rng = random.Random(17)
    found = []
    for _ in range(count):
        name = rng.choice(names)
        start = rng.randrange(len(name))
        value = name[start : start + rng.randint(1, 8)]
        value = value.upper() if rng.random() < 0.3 else value
        field = rng.choice(("name:", "name:", ""))
        negate = "!" if rng.random() < 0.2 else ""
        found.append(negate + field + "'" + value.replace("'", "") + "'")
    return [f for f in found if f.strip("!name:'")]


async def _agree(ledger: Ledger, everything: list[TaskView], filters: list[str]) -> None:
    by_id = {t.task_id: t.document_name for t in everything}
    for expr in filters:
        task_filter = parse_filter(expr)
        in_memory = {by_id[t.task_id] for t in everything if task_filter.matches(t)}
        found = await ledger.reads.list_tasks(filter=task_filter, limit=None)
        assert {by_id[t.task_id] for t in found} == in_memory, expr
        assert await ledger.reads.count_tasks(task_filter) == len(in_memory), expr
        # A page of the list: the newest matches, in the list's order.
        page = await ledger.reads.list_tasks(filter=task_filter, limit=3)
        newest = [t.task_id for t in everything if task_filter.matches(t)][:3]
        assert [t.task_id for t in page] == newest, expr


@pytest.mark.parametrize("in_order", [False, True], ids=["driven", "in-order"])
async def test_name_filters_agree_with_the_in_memory_matcher(
    ledger: Ledger, in_order: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if in_order:
        # No count is ever low enough: every list with a match is read in its own
        # order (one with none may still start from the index's empty answer).
        monkeypatch.setattr(name_index, "FEW_DOCUMENTS", 0)
        monkeypatch.setattr(name_index, "COUNT_MAX", 0)
        monkeypatch.setattr(name_index, "PAGE_MATCHES", 1)
    everything = await _seeded(ledger)
    names = [t.document_name or "" for t in everything]
    assert fold(LONG)[:TERM_VALUE_MAX] in {fold(n) for n in names}  # kept whole
    # Bare words that start task ids (or would, but for one letter past hex).
    ids = [everything[0].task_id[:5], everything[3].task_id, everything[5].task_id[:4] + "g"]
    # A NUL (which FTS5 cannot read in its query) is refused by the parser now, as any
    # control character is: tests/core/test_scale_outside.py.
    await _agree(ledger, everything, [*FILTERS, *ids, *_random_filters(names, 150)])


def _clauses(conn: Connection, expr: str) -> list[Any]:
    from core.ledger.filter_sql import filter_clauses
    from core.ledger.reads import term_clause

    return filter_clauses(parse_filter(expr), term_clause, conn)


def _explain(conn: Connection, clauses: list[Any], explain: str) -> Any:
    """``explain`` (an EXPLAIN prefix) of a first screen with ``clauses``, as the list
    builds it."""
    from core.ledger import rows
    from core.ledger.schema import TASKS

    statement = (
        rows.tasks_with_names()
        .where(*clauses)
        .order_by(TASKS.c.created_at.desc(), TASKS.c.id.desc())
        .limit(50)
    )
    compiled = statement.compile(dialect=conn.dialect)
    values = compiled.construct_params()
    args = tuple(values[k] for k in compiled.positiontup or ())
    return conn.exec_driver_sql(f"{explain} {compiled.string}", args)


def _plan(conn: Connection, expr: str) -> str:
    found = _explain(conn, _clauses(conn, expr), "EXPLAIN QUERY PLAN").all()
    return "\n".join(str(r[-1]) for r in found)


async def test_a_rare_name_is_read_from_its_documents_a_common_one_in_order(
    tmp_path: Path,
) -> None:
    from bench.million import build

    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "o")
    await build(settings, 5_000)
    # name:report is in 417 of these documents, its 50th newest ~600 tasks back: cheaper
    # read in order than its 417 gathered and sorted.
    async with await Ledger.open(settings) as ledger:
        for expr in ("name:zzz", "zzz", "name:report-0001"):
            plan = await ledger.transactions.read(lambda c, e=expr: _plan(c, e))  # type: ignore[misc]
            assert "documents_name_index VIRTUAL TABLE" in plan, (expr, plan)
            assert "SEARCH ingestion_tasks USING INDEX ix_ingestion_tasks_document_id" in plan
            assert "SCAN ingestion_tasks" not in plan, (expr, plan)
        # Too short for the index: a rare one is found by reading documents' names
        # (a pass over the documents), not every task and its document in order.
        for expr in ("name:zz", "name:%", "name:_", "name:\U0001f600", "%"):
            plan = await ledger.transactions.read(lambda c, e=expr: _plan(c, e))  # type: ignore[misc]
            assert "documents_name_index" not in plan, (expr, plan)
            assert "SEARCH ingestion_tasks USING INDEX ix_ingestion_tasks_document_id" in plan
            assert "SCAN ingestion_tasks" not in plan, (expr, plan)
        for expr in ("name:report", "name:re", "parse"):  # parse: in error codes
            plan = await ledger.transactions.read(lambda c, e=expr: _plan(c, e))  # type: ignore[misc]
            assert "documents_name_index" not in plan, (expr, plan)
            assert "TEMP B-TREE" not in plan, (expr, plan)  # in the list's order
        found = await ledger.reads.list_tasks(filter=parse_filter("name:report-0001"))
        assert found and all("report-0001" in (t.document_name or "") for t in found)
        for expr in ("name:zz", "name:%"):
            assert await ledger.reads.list_tasks(filter=parse_filter(expr)) == []


def _index_entries(conn: Connection, value: str) -> int:
    phrase = '"' + value + '"'
    sql = "SELECT count(*) FROM documents_name_index WHERE documents_name_index MATCH :p"
    return int(conn.execute(text(sql), {"p": phrase}).scalar() or 0)


async def test_a_ledger_from_0016_has_its_documents_indexed_when_opened(tmp_path: Path) -> None:
    from tests.old_ledgers import set_back

    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "o")
    async with await Ledger.open(settings) as ledger:
        await _seeded(ledger)
    set_back(tmp_path / "ledger.db", "0016")

    async with await Ledger.open(settings) as ledger:
        assert await ledger.transactions.read(lambda c: _index_entries(c, "ärger")) == 2
        everything = await ledger.reads.list_tasks(limit=None)
        await _agree(ledger, everything, list(FILTERS))
        # Kept in step from now on: a new document, a deleted one.
        await add(ledger, TEXT + b"new", "Ärger-neu.txt")
        assert await ledger.transactions.read(lambda c: _index_entries(c, "ärger")) == 3
        await ledger.transactions.write(
            lambda c: c.execute(text("DELETE FROM documents WHERE filename = 'ärger.txt'"))
        )
        assert await ledger.transactions.read(lambda c: _index_entries(c, "ärger")) == 2
        check = (
            "INSERT INTO documents_name_index(documents_name_index, rank) "
            "VALUES ('integrity-check', 1)"
        )
        await ledger.transactions.write(lambda c: c.execute(text(check)))


def _migrate_to(conn: Connection, revision: str, *, down: bool) -> None:
    from alembic import command

    from core.ledger.migrate import _alembic_config

    cfg = _alembic_config(conn)
    (command.downgrade if down else command.upgrade)(cfg, revision)


async def _objects(ledger: Ledger) -> set[str]:
    def tx(conn: Connection) -> set[str]:
        if conn.dialect.name == "sqlite":
            sql = "SELECT name FROM sqlite_master WHERE name LIKE 'documents_name_index%'"
        else:
            sql = "SELECT indexname FROM pg_indexes WHERE indexname = 'ix_documents_name_trigrams'"
        return {r[0] for r in conn.execute(text(sql))}

    return await ledger.transactions.read(tx)


async def test_the_name_index_downgrades_and_upgrades_again(ledger: Ledger) -> None:
    everything = await _seeded(ledger)
    assert await _objects(ledger)
    await ledger.transactions.write(lambda c: _migrate_to(c, "0016", down=True))
    assert await _objects(ledger) == set()
    await ledger.transactions.write(lambda c: _migrate_to(c, "head", down=False))
    assert await _objects(ledger)
    await _agree(ledger, everything, ["name:ärger", "name:zzz", "ärger", "!name:rger"])


@pytest.mark.postgres
async def test_a_postgres_owner_without_pg_trgm_still_migrates(pg_url: str, tmp_path: Path) -> None:
    """A role that may create tables but not extensions (beyond the one a DBA made for
    it): the ledger opens without the index, and its filters read names as before."""
    import asyncpg  # type: ignore[import-untyped]

    database = pg_url.rpartition("/")[2]
    role = f"ingestdesk_no_ext_{uuid.uuid4().hex[:8]}"
    admin_dsn = pg_url.replace("postgresql+asyncpg", "postgresql")
    admin: Any = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN")
        await admin.execute(f"GRANT CONNECT ON DATABASE {database} TO {role}")
        await admin.execute(f"GRANT CREATE, USAGE ON SCHEMA public TO {role}")
        await admin.execute(f"REVOKE CREATE ON DATABASE {database} FROM PUBLIC")
        # Migration 0009's extension made for it beforehand, as a DBA would: without it
        # no ledger can be made there at all.
        await admin.execute("CREATE EXTENSION unaccent")
        url = pg_url.replace("postgres@", f"{role}@", 1)
        settings = Settings(db_url=url, store_root=tmp_path / "o")
        async with await Ledger.open(settings) as ledger:
            assert await _objects(ledger) == set()
            everything = await _seeded(ledger)
            await _agree(ledger, everything, ["name:ärger", "name:zzz", "ärger", "!name:rger"])
    finally:
        await admin.execute(f"REASSIGN OWNED BY {role} TO postgres")
        await admin.execute(f"DROP OWNED BY {role}")
        await admin.close()
        # The role goes once the test's database is dropped (it holds its grants).
        cleanup: Any = await asyncpg.connect(admin_dsn.rpartition("/")[0] + "/postgres")
        try:
            await cleanup.execute(f"REVOKE ALL ON DATABASE {database} FROM {role}")
            await cleanup.execute(f"DROP ROLE {role}")
        finally:
            await cleanup.close()


def _pg_plan(conn: Connection, expr: str) -> tuple[str, list[str]]:
    """The JSON plan (EXPLAIN, no ANALYZE) of a first screen of ``expr`` as the list
    builds it, and the statements its name lookup ran before it, as sent."""
    from sqlalchemy import event

    sent: list[str] = []

    def on_execute(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    event.listen(conn, "before_cursor_execute", on_execute)
    try:
        clauses = _clauses(conn, expr)
    finally:
        event.remove(conn, "before_cursor_execute", on_execute)
    found = _explain(conn, clauses, "EXPLAIN (FORMAT JSON)").scalar()
    sent.append("plan_cache_mode=" + str(conn.exec_driver_sql("SHOW plan_cache_mode").scalar()))
    return json.dumps(found), sent


def _estimated_rows(plan_json: str, node: str) -> list[float]:
    """The planner's row estimates of every node of type ``node`` in a JSON plan."""
    out: list[float] = []

    def walk(p: dict[str, Any]) -> None:
        if p.get("Node Type") == node:
            out.append(float(p["Plan Rows"]))
        for child in p.get("Plans", ()):
            walk(child)

    walk(json.loads(plan_json)[0]["Plan"])
    return out


@pytest.mark.postgres
async def test_postgres_plans_a_common_name_from_its_statistics(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """name:report is in one document in 12. Written as the coalesce of the name, the
    planner guessed its tasks at a fixed fraction (~0.03 %) and, at a million, planned
    the first screen for ~150 000 tasks read in parallel (two workers started, 9 ms, for
    a page found within 600 tasks). On the bare column it estimates from the column's
    statistics. And a filter's transaction plans each statement for its values: one
    prepared statement planned once for every value (a generic plan) read the trigram
    index whole for a common name."""
    from bench.million import build

    settings = Settings(db_url=pg_url, store_root=tmp_path / "o")
    await build(settings, 6_000)  # analysed at the end
    # name:report's 500 documents are not few here, as its 83 000 are not at a million:
    # its list is read in order.
    monkeypatch.setattr(name_index, "FEW_DOCUMENTS", 100)
    async with await Ledger.open(settings) as ledger:
        for expr in ("name:report", "report"):
            plan, sent = await ledger.transactions.read(lambda c, e=expr: _pg_plan(c, e))  # type: ignore[misc]
            joins = _estimated_rows(plan, "Nested Loop")
            assert joins, (expr, plan)
            # ~500 of 6 000 tasks: from the statistics, not a guess 30 times lower.
            assert 200 <= max(joins) <= 1_500, (expr, joins, plan)
            assert "Gather" not in plan, (expr, plan)
            assert "Sort" not in plan, (expr, plan)  # in the list's order
            assert any("count(" in s for s in sent), (expr, sent)
            assert sent[-1] == "plan_cache_mode=force_custom_plan", sent
        # A rare name still starts from its documents (the index), seeking their tasks
        # by document id (through either index of it: 0021's pattern index has it too).
        plan, sent = await ledger.transactions.read(lambda c: _pg_plan(c, "name:zzz"))
        seeks = "(document_id)::text = (named.id)::text" in plan
        assert seeks or '"Plan Rows": 0' in plan, plan
        # The setting ends with the filter's transaction.
        after = await ledger.transactions.read(
            lambda c: c.exec_driver_sql("SHOW plan_cache_mode").scalar()
        )
        assert after == "auto"
        found = await ledger.reads.list_tasks(filter=parse_filter("name:report"), limit=50)
        assert len(found) == 50 and all("report" in (t.document_name or "") for t in found)


@pytest.mark.postgres
async def test_postgres_reads_a_name_carried_only_by_old_documents_from_them(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name many documents carry is read in order only when the newest tasks hold a
    page of it: report-000 is in ~340 of the 4 096 oldest of 6 000 tasks, none of the
    newest 1 000, and read in order its list passed every newer task (at a million,
    name:report-00 took 2.8 s). name:report, in every twelfth, stays in order."""
    from bench.million import build

    settings = Settings(db_url=pg_url, store_root=tmp_path / "o")
    await build(settings, 6_000)
    monkeypatch.setattr(name_index, "FEW_DOCUMENTS", 100)  # both names are past it
    monkeypatch.setattr(name_index, "PROBE_TASKS", 1_000)
    async with await Ledger.open(settings) as ledger:
        # The list starts from the documents (the driver's alias, "named") or not; at
        # this size the planner may scan either table for it.
        plan, _ = await ledger.transactions.read(lambda c: _pg_plan(c, "name:report-000"))
        assert '"Alias": "named"' in plan, plan
        plan, _ = await ledger.transactions.read(lambda c: _pg_plan(c, "name:report"))
        assert '"Alias": "named"' not in plan, plan
        assert "Sort" not in plan, plan  # in the list's order
        found = await ledger.reads.list_tasks(filter=parse_filter("name:report-000"), limit=50)
        every = await ledger.reads.list_tasks(limit=None)
    expected = [t.task_id for t in every if "report-000" in (t.document_name or "")][:50]
    assert [t.task_id for t in found] == expected
