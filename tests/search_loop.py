"""A search process for the atomic-switch tests: ``python -m tests.search_loop DB STORE
STOP QUERY...`` opens the ledger once and searches over and over (vector and hybrid in
turn, each query in turn) until the file STOP exists, printing one JSON line per answer:
the mode asked, the query, the index the answer says it came from, each hit's
(document, ordinal, index), or the error that replaced the answer. A separate process on
purpose: it sees another process's ``activate`` only through the shared ledger, as a
search server would.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
from pathlib import Path

from core import Ledger, Settings


async def loop(db_url: str, store: Path, stop: Path, queries: list[str]) -> None:
    ledger = await Ledger.open(Settings(db_url=db_url, store_root=store))
    try:
        for mode, query in itertools.cycle([(m, q) for m in ("vector", "hybrid") for q in queries]):
            if await asyncio.to_thread(stop.exists):
                return
            line: dict[str, object] = {"mode": mode, "query": query}
            try:
                answer = await ledger.reads.find(query, mode=mode, limit=5)
            except Exception as exc:  # the test fails on any: an answer must never fail
                line["error"] = f"{type(exc).__name__}: {exc}"
            else:
                line["index"] = answer.index
                line["hits"] = [[h.document_id, h.ordinal, h.index] for h in answer.hits]
            print(json.dumps(line), flush=True)
    finally:
        await ledger.close()


def main(argv: list[str]) -> None:
    db_url, store, stop, *queries = argv
    asyncio.run(loop(db_url, Path(store), Path(stop), queries))


if __name__ == "__main__":
    main(sys.argv[1:])
