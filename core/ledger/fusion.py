"""Reciprocal rank fusion (Cormack, Clarke and Büttcher, SIGIR 2009): hybrid search's
one way of putting a keyword ranking and a vector ranking together.

Each ranking contributes ``1 / (k + rank)`` (rank from 1) to every item it holds; an
item in both gets both. Only ranks count, never the scores: BM25's and cosine's scales
have nothing in common, and a fusion of scores would need one tuned per corpus.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

# The paper's constant. Measured on tests/retrieval/ (k = 10, 30, 60, 100): recall@3
# is the same for every k there, because the keyword leg rarely holds more than a
# handful of chunks (see core.ledger.hybrid); 60 is kept as the literature's value.
RRF_K = 60

K = TypeVar("K", bound=Hashable)


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[K]], *, k: int = RRF_K
) -> list[tuple[K, float]]:
    """Items of every ranking with their fused score, best first.

    Ties (the same fused score) keep the order of the first ranking that holds the
    item, then the next: the caller puts the ranking it trusts most first.
    """
    fused: dict[K, float] = {}
    first_seen: dict[K, tuple[int, int]] = {}
    for which, ranking in enumerate(rankings):
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + 1.0 / (k + rank)
            first_seen.setdefault(item, (which, rank))
    return sorted(fused.items(), key=lambda kv: (-kv[1], first_seen[kv[0]]))
