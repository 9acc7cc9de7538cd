"""The default embedder: deterministic, normalised, lexical (and honest about it)."""

from __future__ import annotations

import math
import random
import re
import subprocess
import sys
import zlib
from array import array

from core.ingest.embedder import SLOT_CACHE_MAX, Embedder, HashingEmbedder, cosine


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
        "import asyncio; from core.ingest.embedder import HashingEmbedder;"
        "print(asyncio.run(HashingEmbedder().embed(['claim race']))[0].hex())"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    }
    assert len(runs) == 1


def _reference_vector(text: str, dimensions: int = 256) -> list[float]:
    """The embedder's definition, written plainly: lower-case, \\w+ words, crc32 slots."""
    vec = [0.0] * dimensions
    for word in re.findall(r"\w+", text.lower()):
        digest = zlib.crc32(word.encode())
        vec[(digest >> 1) % dimensions] += 1.0 if digest & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec))
    return [v / norm for v in vec] if norm else vec


def test_fast_paths_give_the_defined_vectors() -> None:
    # ASCII text takes a translate + split shortcut, other text the regex; words the
    # slot cache cannot hold take an overlay. Every path must give the same bytes.
    rng = random.Random(7)
    alphabet = "abcXYZ_09 \t\n.,;:-'\"()/\\\x00\x1f\x7féÉßΣ\u03c3\u00a0\u2003\u0130\ufb01\u0663"
    texts = ["", " ", "_", "A_B c-d e2e", "İstanbul ǅ ﬁne", "x" * 5000]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 200))) for _ in range(500)]
    for embedder in (HashingEmbedder(), _FullCache()):
        got = embedder.embed_now(texts)
        assert got == [array("f", _reference_vector(t)).tobytes() for t in texts]


class _FullCache(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__()
        # Already full, of keys no text can produce (NUL is no word character).
        self._slots = {f"\x00{i}": (0, 1.0) for i in range(SLOT_CACHE_MAX)}
