"""The README's Search section does what it says: its examples run on a ledger of the
retrieval set (ingested by a worker with the registry's wordllama embedder) and
answer as described."""

from __future__ import annotations

import asyncio
from pathlib import Path

from core import Ledger, Settings, Worker, sqlite_url
from tests.retrieval.corpus import ingest, wordllama
from tests.test_readme_examples import ok, section, sh_blocks, shell


async def _ledger_of_the_set(cwd: Path) -> None:
    settings = Settings(
        db_url=sqlite_url(cwd / ".ingestdesk" / "ledger.db"),
        store_root=cwd / ".ingestdesk" / "objects",
    )
    async with await Ledger.open(settings) as ledger:
        worker = Worker(ledger, "w-readme", embedder=wordllama(), register=False)
        await ingest(ledger, lambda: worker.run(until_idle=True))


def test_the_search_examples_do_what_the_readme_says(tmp_path: Path) -> None:
    (block,) = sh_blocks(section("Search"))
    (hybrid, vector, keyword) = (example.argv for example in block)
    asyncio.run(_ledger_of_the_set(tmp_path))

    ran = ok(shell(hybrid, tmp_path))
    header, first, *_ = ran.lines
    assert header == "mode=hybrid index=wordllama-256 vectors: int8+rescore"
    assert "keyword=#1 " in first and "hr-121-home-office-stipend.md:" in first

    ran = ok(shell(vector, tmp_path))
    assert ran.lines[0].startswith("mode=vector index=wordllama-256 ")
    assert "hr-121-home-office-stipend.md" in "\n".join(ran.lines[1:4])

    hits = ok(shell(keyword, tmp_path)).value
    assert [h["filename"] for h in hits] == ["rb-billing-e4471.md"]
    assert (hits[0]["mode"], hits[0]["index"], hits[0]["keyword_rank"]) == ("keyword", "", 1)
