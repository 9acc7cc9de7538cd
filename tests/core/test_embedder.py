"""The default embedder: deterministic, normalised, lexical (and honest about it)."""

from __future__ import annotations

import subprocess
import sys

from core.embedder import Embedder, HashingEmbedder, cosine


async def test_vectors_are_normalised_and_lexical() -> None:
    embedder = HashingEmbedder()
    assert isinstance(embedder, Embedder)
    same, reordered, other, empty = await embedder.embed(
        ["lease expired on the worker", "the worker lease expired on", "quarterly revenue", ""]
    )
    assert len(same) == 4 * embedder.dimensions
    assert abs(cosine(same, same) - 1.0) < 1e-6
    assert abs(cosine(same, reordered) - 1.0) < 1e-6  # a bag of words ignores order
    assert abs(cosine(same, other)) < 0.5
    assert cosine(empty, empty) == 0.0


def test_vectors_are_the_same_in_another_process() -> None:
    code = (
        "import asyncio; from core.embedder import HashingEmbedder;"
        "print(asyncio.run(HashingEmbedder().embed(['claim race']))[0].hex())"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    }
    assert len(runs) == 1
