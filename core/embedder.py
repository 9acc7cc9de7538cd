"""Embedders turn chunk text into vectors. The default is honest about what it is:
a hashed bag of words (feature hashing), which needs no model download and gives
vectors that are stable across runs and machines, good enough to exercise the
pipeline and rank exact-word overlap, not semantic similarity.

A real model plugs in by implementing :class:`Embedder`.
"""

from __future__ import annotations

import asyncio
import math
import re
import zlib
from array import array
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

DEFAULT_DIMENSIONS = 256
SLOT_CACHE_MAX = 200_000  # words whose bucket is remembered (~30 MB at most)
_WORD = re.compile(r"\w+", re.UNICODE)


class ProviderUnavailable(Exception):
    """The embedding provider did not answer; worth retrying later."""


@runtime_checkable
class Embedder(Protocol):
    """Computes one vector per text, in order."""

    name: str
    dimensions: int

    async def embed(self, texts: Sequence[str]) -> list[bytes]:
        """Vectors as little-endian float32 bytes, one per text.

        Raises:
            ProviderUnavailable: the provider cannot answer now (transient).
        """
        ...


class HashingEmbedder:
    """Signed feature hashing of lower-cased words into ``dimensions`` buckets,
    L2-normalised. Deterministic: crc32, not Python's salted ``hash``."""

    name = "hashed-bag-of-words"

    def __init__(self, dimensions: int = DEFAULT_DIMENSIONS) -> None:
        if dimensions < 1:
            raise ValueError("dimensions must be positive")
        self.dimensions = dimensions
        self._slots: dict[str, tuple[int, float]] = {}

    def vector(self, text: str) -> list[float]:
        vec = [0.0] * self.dimensions
        for word in _WORD.findall(text.lower()):
            slot = self._slots.get(word)
            if slot is None:
                # crc32 is deterministic across processes (unlike hash()) and, being
                # C, several times cheaper than a hashlib object per word.
                digest = zlib.crc32(word.encode())
                slot = ((digest >> 1) % self.dimensions, 1.0 if digest & 1 else -1.0)
                if len(self._slots) < SLOT_CACHE_MAX:
                    self._slots[word] = slot
            vec[slot[0]] += slot[1]
        norm = math.sqrt(sum(v * v for v in vec))
        return [v / norm for v in vec] if norm else vec

    async def embed(self, texts: Sequence[str]) -> list[bytes]:
        # Pure Python CPU work: a thread keeps the dashboard's loop answering keys.
        return await asyncio.to_thread(self.embed_now, texts)

    def embed_now(self, texts: Sequence[str]) -> list[bytes]:
        return [array("f", self.vector(t)).tobytes() for t in texts]


def cosine(a: bytes, b: bytes) -> float:
    """Cosine similarity of two float32 vectors (both already normalised)."""
    va, vb = array("f"), array("f")
    va.frombytes(a)
    vb.frombytes(b)
    return float(sum(x * y for x, y in zip(va, vb, strict=True)))
