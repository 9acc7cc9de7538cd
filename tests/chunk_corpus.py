"""A fixed set of documents and the digest of their chunks, so a change to the pipeline's
hot path can be checked to leave every chunk byte for byte as it was.

The golden digests in ``tests/core/data/chunks_golden.json`` were written by the code as
it stood before the ingest-throughput work (commit 44c067f^), with
``python tests/chunk_corpus.py --write tests/core/data/chunks_golden.json`` run against
that tree. A digest covers each chunk's ordinal, page, offsets and text.

Run as a script (not ``-m``) so it can be pointed at another tree's ``core`` with
``PYTHONPATH``.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.ingest.chunker import Chunk
    from core.ledger import ChunkRecord

PARSERS = ("pypdf", "pdfium")
# (chunk_size, chunk_overlap): the defaults, and a small size that cuts often.
CHUNKINGS = ((1000, 150), (200, 50))
SEED = 13


def chunk_digest(chunks: Iterable[Chunk | ChunkRecord]) -> str:
    """sha256 over every chunk's ordinal, page, offsets and text, in order."""
    rows = [[c.ordinal, c.page, c.char_start, c.char_end, c.text] for c in chunks]
    return hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode()).hexdigest()


def documents() -> list[tuple[str, str, bytes]]:
    """``(name, kind, bytes)`` for every document of the corpus, the same on every run."""
    from tests.hostile import make_pdf  # reportlab, with its dates and ids pinned

    rng = random.Random(SEED)
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    vocabulary = ["".join(rng.choices(letters, k=rng.randint(1, 12))) for _ in range(2_000)]

    def line(words: int) -> str:
        return " ".join(rng.choice(vocabulary) for _ in range(words))

    def page(lines: int, words: int) -> str:
        return "\n".join(line(words) for _ in range(lines))

    docs: list[tuple[str, str, bytes]] = [
        ("light.pdf", "pdf", make_pdf([page(20, 13) for _ in range(12)])),
        ("heavy.pdf", "pdf", make_pdf([page(70, 16) for _ in range(4)])),
        (
            "mixed.pdf",
            "pdf",
            make_pdf(
                [
                    page(5, 13),
                    "",  # an empty page between two full ones
                    "x" * 1_500 + " tail after a word longer than a chunk",
                    "   spaced    out\t\ttabs   and   runs   of   spaces   " * 30,
                    "Café déjà vu — naïve façade, 12.5% off: «quotes» & \u2018marks\u2019!\n" * 25,
                    page(1, 3),
                ]
            ),
        ),
    ]
    markdown = "\r\n".join(
        [
            "# Title with ünïcödé",
            "",
            *(line(rng.randint(3, 30)) for _ in range(60)),
            "```python",
            "def f(x):\n    return x  # code keeps its spaces",
            "```",
            "- item 一 二 三 四 五 六 七 八 九 十 " * 20,
            "emoji 🚀🔥 between words " * 40,
            "\t\t   ",
        ]
    )
    docs.append(("notes.md", "markdown", markdown.encode("utf-8")))
    text = "\n\n".join(
        [
            "y" * 5_000,  # no whitespace at all for 5 000 characters
            *(page(8, rng.randint(5, 20)) for _ in range(10)),
            " " * 3_000,
            "end",
        ]
    )
    docs.append(("plain.txt", "text", text.encode("utf-8")))
    return docs


def digests() -> dict[str, Any]:
    """Every document's chunk digest under every parser (PDFs) and chunking."""
    from core.ingest.parsing import parse_document

    result: dict[str, Any] = {}
    for name, kind, data in documents():
        parsers = PARSERS if kind == "pdf" else ("pypdf",)
        for parser in parsers:
            for size, overlap in CHUNKINGS:
                parsed = parse_document(
                    data, kind, parser=parser, chunk_size=size, chunk_overlap=overlap
                )
                key = f"{name} {parser} {size}/{overlap}"
                result[key] = {"chunks": len(parsed.chunks), "sha256": chunk_digest(parsed.chunks)}
    return result


def parser_versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("pypdf", "pypdfium2", "reportlab")}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "--write":
        print("usage: python tests/chunk_corpus.py --write PATH", file=sys.stderr)
        return 2
    golden = {"versions": parser_versions(), "digests": digests()}
    Path(argv[1]).write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
