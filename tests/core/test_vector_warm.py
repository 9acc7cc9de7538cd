"""A search process holds the new index's vectors before it is activated: the first
search after the switch loads nothing. A process that never searched loads nothing
at activation."""

from __future__ import annotations

from core import Ledger
from core.ingest.embedder import HashingEmbedder
from core.ledger.hybrid import Searcher
from tests.core.test_campaigns import HASHED, SMALL, drain, versions


def hashed_searcher(ledger: Ledger) -> Searcher:
    by_dimensions = {256: HashingEmbedder(256), 64: HashingEmbedder(64)}
    s = Searcher(
        ledger.transactions,
        ledger.indexes,
        embedders=lambda index: by_dimensions[index.dimensions],
    )
    ledger.reads.searcher = s
    return s


async def test_activate_in_a_search_process_loads_the_new_index_first(ledger: Ledger) -> None:
    await versions(ledger, 3, publish=3)
    s = hashed_searcher(ledger)
    assert (await ledger.reads.find("leases expire", mode="vector")).hits
    (old,) = s.cache.holding()
    progress = await ledger.campaigns.create(SMALL)
    await drain(ledger)

    await ledger.campaigns.activate(progress.index.name)
    new = progress.index.id
    assert sorted(s.cache.holding()) == sorted([old, new])  # loaded before the switch
    warmed = s.cache._matrices[new]
    answer = await ledger.reads.find("leases expire", mode="vector")
    assert answer.index == progress.index.name and answer.hits
    assert s.cache.holding() == [new]  # the old index's memory goes at the first answer
    assert s.cache._matrices[new] is warmed and warmed.reloads == 0
    info = s.cache.info(new)
    assert info is not None and info.vectors == warmed.count > 0 and info.path == s.cache.path


async def test_activate_in_a_process_that_never_searched_loads_nothing(ledger: Ledger) -> None:
    await versions(ledger, 2, publish=2)
    s = hashed_searcher(ledger)
    progress = await ledger.campaigns.create(SMALL)
    await drain(ledger)
    await ledger.campaigns.activate(progress.index.name)
    assert s._cache is None  # no matrix was made
    assert (await ledger.indexes.active()).key == SMALL != HASHED  # type: ignore[union-attr]
