"""Search in the ledger, on both backends: words folded alike (diacritics and case),
a query without words and an over-large limit refused with one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import BadInput, Ledger, Settings
from core.ledger import ChunkRecord, DocumentView
from core.ledger.search import SEARCH_LIMIT_MAX

NO_WORDS = "nothing to search for: the query has no words"  # the one line, on every face


ACCENTED = "Au café on sert une crème brûlée; l'ÉCOLE est fermée le lundi."


async def published_text(ledger: Ledger, text: str, name: str = "cafe.md") -> DocumentView:
    doc = await ledger.operator.upload(f"{text}\n".encode(), name)
    task = await ledger.operator.submit(doc.document_id)
    claim = await ledger.queue.claim(task.task_id, "w1")
    assert claim is not None
    assert await ledger.queue.finish(claim, [ChunkRecord(0, text, None, 0, len(text), None)])
    return await ledger.versions.publish(doc.document_id)


@pytest.mark.parametrize(
    ("query", "marked"),
    [
        ("cafe", "café"),
        ("creme brulee", "crème"),
        ("ecole", "ÉCOLE"),
        ("école", "ÉCOLE"),
        ("CAFÉ", "café"),
        ("fermee", "fermée"),
    ],
)
async def test_search_folds_diacritics_on_both_backends(
    ledger: Ledger, query: str, marked: str
) -> None:
    doc = await published_text(ledger, ACCENTED)
    (hit,) = await ledger.reads.search(query)
    assert hit.document_id == doc.document_id
    assert f"**{marked}**" in hit.snippet  # the word as written, marked
    assert await ledger.reads.search("cafeteria") == []


async def test_a_query_without_words_and_a_limit_past_the_maximum_are_bad_input(
    ledger: Ledger,
) -> None:
    await published_text(ledger, ACCENTED)
    for query in ("", "   ", "!!!", "(((", '"'):
        with pytest.raises(BadInput, match=NO_WORDS):
            await ledger.reads.search(query)
    with pytest.raises(BadInput, match=f"from 1 to {SEARCH_LIMIT_MAX} hits"):
        await ledger.reads.search("lundi", limit=SEARCH_LIMIT_MAX + 1)
    assert len(await ledger.reads.search("lundi", limit=SEARCH_LIMIT_MAX)) == 1


@pytest.mark.postgres
async def test_a_postgres_ledger_upgraded_past_0009_folds_what_it_held(
    pg_url: str, tmp_path: Path
) -> None:
    # Chunks written at schema 0008 (a 'simple' tsvector) are indexed again by the
    # upgrade: the column is generated, so adding it back computes every row.
    from alembic import command
    from alembic.config import Config
    from sqlalchemy.engine import Connection

    from core.ledger.migrate import MIGRATIONS_DIR

    def to(revision: str, conn: Connection) -> None:
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)

    settings = Settings(db_url=pg_url, store_root=tmp_path / "objects")
    ledger = await Ledger.open(settings)
    try:
        await published_text(ledger, ACCENTED)
        await ledger.transactions.write(lambda conn: to("0008", conn))
    finally:
        await ledger.close()
    ledger = await Ledger.open(settings)  # upgrades again
    try:
        (hit,) = await ledger.reads.search("ecole")
        assert "**ÉCOLE**" in hit.snippet
    finally:
        await ledger.close()
