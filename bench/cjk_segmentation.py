"""How to cut CJK text for the keyword index: a token per character (what
core.ledger.segment does) against Lucene CJKAnalyzer's overlapping pairs.

Reads real translated text from gettext catalogs (``/usr/share/locale/LANG``, any
Debian machine: thousands of Japanese or Chinese messages), cuts it into chunks of
about 300 characters, builds an FTS5 table (unicode61, as the ledger's) each way and
runs the same queries: 1 to 4 consecutive characters taken from the chunks. Prints
index bytes, distinct terms, CPU seconds to build and to answer (the best 20 by bm25,
the least of ``--repeat`` runs), and whether both find the same chunks.

    python -m bench.cjk_segmentation [--lang ja] [--queries 400]
"""

from __future__ import annotations

import argparse
import gettext
import os
import random
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from core.ledger.segment import _CJK, segment

CHUNK_CHARS = 300


def catalog_text(lang: str) -> str:
    parts = []
    for mo in sorted(Path(f"/usr/share/locale/{lang}/LC_MESSAGES").glob("*.mo")):
        with mo.open("rb") as fh:
            try:
                catalog = gettext.GNUTranslations(fh)
            except (OSError, UnicodeDecodeError):
                continue
        parts.extend(str(v) for v in catalog._catalog.values())  # type: ignore[attr-defined]
    return "\n".join(parts)


def bigrams(text: str) -> str:
    """CJKAnalyzer's cut: each run of CJK characters as its overlapping pairs (a run
    of one as itself), everything else as it was."""

    def pairs(run: str) -> str:
        return run if len(run) == 1 else " ".join(run[i : i + 2] for i in range(len(run) - 1))

    out, run = [], []
    for ch in text + "\0":
        if _CJK.match(ch):
            run.append(ch)
            continue
        if run:
            out.append(" " + pairs("".join(run)) + " ")
            run = []
        out.append(ch)
    return "".join(out[:-1])


def unigram_query(q: str) -> str:
    return '"' + " ".join(segment(q).split()) + '"'


def bigram_query(q: str) -> str:
    # A single character is the prefix of the pairs it starts (one ending a run is missed).
    return f'"{q}" OR {q}*' if len(q) == 1 else '"' + bigrams(q).strip() + '"'


def build(path: str, chunks: list[str], cut: Callable[[str], str]) -> tuple[float, int, int]:
    conn = sqlite3.connect(path)
    conn.execute("CREATE VIRTUAL TABLE f USING fts5(t)")
    start = time.process_time()
    conn.executemany("INSERT INTO f(rowid, t) VALUES (?, ?)", enumerate(map(cut, chunks), 1))
    conn.commit()
    conn.execute("INSERT INTO f(f) VALUES ('optimize')")
    conn.commit()
    cpu = time.process_time() - start
    size = conn.execute("SELECT sum(length(block)) FROM f_data").fetchone()[0]
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(f, 'row')")
    terms = conn.execute("SELECT count(*) FROM v").fetchone()[0]
    conn.close()
    return cpu, size, terms


def answer(path: str, queries: list[str], to_match: Callable[[str], str], repeat: int) -> tuple:
    conn = sqlite3.connect(path)
    sql = "SELECT rowid FROM f WHERE f MATCH ? ORDER BY bm25(f) LIMIT 20"
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        for q in queries:
            conn.execute(sql, (to_match(q),)).fetchall()
        best = min(best, time.process_time() - start)
    every = "SELECT rowid FROM f WHERE f MATCH ? ORDER BY rowid"
    hits = [tuple(r[0] for r in conn.execute(every, (to_match(q),))) for q in queries]
    conn.close()
    return best, hits


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lang", default="ja")
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    text = catalog_text(args.lang)
    chunks = [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)]
    rng = random.Random(7)
    runs = [m.group() for c in chunks for m in __import__("re").finditer(_CJK.pattern + "+", c)]
    queries = []
    while len(queries) < args.queries:
        run, n = rng.choice(runs), rng.randint(1, 4)
        if len(run) >= n:
            at = rng.randint(0, len(run) - n)
            queries.append(run[at : at + n])
    print(
        f"load {os.getloadavg()[0]:.2f}; {len(chunks)} chunks, {len(text)} characters, "
        f"{sum(map(len, runs))} CJK; {len(queries)} queries"
    )
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, cut, to_match in (
            ("unigram", segment, unigram_query),
            ("bigram", bigrams, bigram_query),
        ):
            path = f"{tmp}/{name}.db"
            cpu, size, terms = build(path, chunks, cut)
            q_cpu, hits = answer(path, queries, to_match, args.repeat)
            results[name] = hits
            print(
                f"{name:8} build {cpu:.2f} s cpu, index {size / 1e6:.2f} MB, {terms} terms; "
                f"{len(queries)} queries {q_cpu * 1000:.0f} ms cpu "
                f"({q_cpu / len(queries) * 1e6:.0f} us each)"
            )
    same = [
        a == b
        for q, a, b in zip(queries, results["unigram"], results["bigram"], strict=True)
        if len(q) > 1
    ]
    print(f"queries of 2+ characters finding the same chunks: {sum(same)}/{len(same)}")
    single = [
        (len(a), len(b))
        for q, a, b in zip(queries, results["unigram"], results["bigram"], strict=True)
        if len(q) == 1
    ]
    print(
        f"single characters: {sum(a for a, _ in single)} chunks found as a token, "
        f"{sum(b for _, b in single)} as a pair's prefix"
    )


if __name__ == "__main__":
    main()
