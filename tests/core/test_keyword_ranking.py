"""Keyword search's ranking on both backends when its first fetch is not enough
(SQLite ranks in FTS5 first and reads the rows of the best: core.ledger.search):
versions not yet published that outrank the published ones do not hide them, and
ties go to the older chunk (lower id) on both backends."""

from __future__ import annotations

from core import Ledger
from core.ledger import ChunkRecord
from core.ledger.search import KEYWORD_FIRST_FETCH, KEYWORD_SPARE


async def finished(ledger: Ledger, text: str, name: str, *, publish: bool) -> str:
    doc = await ledger.operator.upload(f"{text}\n".encode(), name)
    task = await ledger.operator.submit(doc.document_id)
    claim = await ledger.queue.claim(task.task_id, "w1")
    assert claim is not None
    assert await ledger.queue.finish(claim, [ChunkRecord(0, text, None, 0, len(text), None)])
    if publish:
        await ledger.versions.publish(doc.document_id)
    return doc.document_id


FIRST_FETCH_AT_1 = int(KEYWORD_FIRST_FETCH) + KEYWORD_SPARE  # matches read for limit=1


async def test_unpublished_matches_that_rank_first_do_not_hide_a_published_one(
    ledger: Ledger,
) -> None:
    drafts = [
        await finished(ledger, "budget budget budget", f"d{i}.md", publish=False)
        for i in range(FIRST_FETCH_AT_1 + 3)
    ]
    shown = await finished(
        ledger, "the budget for next year, planning and other words", "p.md", publish=True
    )
    (hit,) = await ledger.reads.search("budget", limit=1)
    assert hit.document_id == shown and "**budget**" in hit.snippet
    everything = await ledger.reads.search("budget", limit=50, include_unpublished=True)
    assert [h.document_id for h in everything] == [*drafts, shown]  # ties: older first


async def test_ties_go_to_the_older_chunk_on_both_backends(ledger: Ledger) -> None:
    same = [
        await finished(ledger, "quarterly budget review", f"q{i}.md", publish=True)
        for i in range(FIRST_FETCH_AT_1 + 6)
    ]
    hits = await ledger.reads.search("budget review", limit=3)
    assert [h.document_id for h in hits] == same[:3]  # the first written, first
    assert len({h.score for h in hits}) == 1
    assert all(h.snippet.count("**") == 4 for h in hits)
