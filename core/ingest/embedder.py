"""Embedders turn chunk text into vectors. The default is honest about what it is:
a hashed bag of words (feature hashing), which needs no model download and gives
vectors that are stable across runs and machines, good enough to exercise the
pipeline and rank exact-word overlap, not semantic similarity.

A real model plugs in by implementing :class:`Embedder`.
"""

from __future__ import annotations

import math
import operator
import re
import time
import zlib
from array import array
from collections import ChainMap
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

DEFAULT_DIMENSIONS = 256
SLOT_CACHE_MAX = 200_000  # words whose bucket is remembered (~30 MB at most)
# Batches up to this many characters are embedded on the calling event loop (~0.4 ms):
# a small document's chunks cost less than the hop to a thread and back, which waits
# for the GIL when other threads are busy. Bigger batches go to a thread.
EMBED_ON_LOOP_MAX_CHARS = 8_000  # characters
# A thread embedding a big batch gives up the GIL at least this often. Left to the
# interpreter's 5 ms switch interval, the worker's other threads and its event loop
# wait up to 5 ms at each hop while handing the next document to the parser process,
# which sits idle meanwhile (measured on 100 20-page PDFs: 4.6 ms median gap between
# parses, 0.46 s in all; 1.0 ms and 0.10 s when yielding every 0.5 ms).
GIL_YIELD_EVERY_S = 0.0005  # seconds
_WORD = re.compile(r"\w+", re.UNICODE)
# In ASCII text the \w+ runs are exactly the runs of [A-Za-z0-9_]: mapping every other
# character to a space (and upper case to lower) and splitting finds the same words
# as lower() + findall, in half the time.
_ASCII_WORDS = str.maketrans(
    {i: chr(i).lower() if chr(i).isalnum() or chr(i) == "_" else " " for i in range(128)}
)


class ProviderUnavailable(Exception):
    """The embedding provider did not answer; worth retrying later."""


@runtime_checkable
class Embedder(Protocol):
    """Computes one vector per text, in order."""

    name: str
    version: str  # changes whenever the same text would get a different vector
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
    version = "1"

    def __init__(self, dimensions: int = DEFAULT_DIMENSIONS) -> None:
        if dimensions < 1:
            raise ValueError("dimensions must be positive")
        self.dimensions = dimensions
        self._slots: dict[str, tuple[int, float]] = {}

    def vector(self, text: str) -> list[float]:
        if text.isascii():
            words = text.translate(_ASCII_WORDS).split()
        else:
            words = _WORD.findall(text.lower())
        slots: Mapping[str, tuple[int, float]] = self._slots
        missing = set(words).difference(slots)
        if missing:
            slots = self._with_slots(missing)
        vec = [0.0] * self.dimensions
        for index, sign in map(slots.__getitem__, words):
            vec[index] += sign
        # Sums of +-1.0 and of their squares are exact, so the order of additions
        # cannot change a vector.
        norm = math.sqrt(sum(map(operator.mul, vec, vec)))
        return [v / norm for v in vec] if norm else vec

    def _with_slots(self, words: set[str]) -> Mapping[str, tuple[int, float]]:
        """The slot table with ``words`` added: remembered while there is room, else
        in an overlay for this one text."""
        fresh = {}
        for word in words:
            # crc32 is deterministic across processes (unlike hash()) and, being
            # C, several times cheaper than a hashlib object per word.
            digest = zlib.crc32(word.encode())
            fresh[word] = ((digest >> 1) % self.dimensions, 1.0 if digest & 1 else -1.0)
        if len(self._slots) + len(fresh) <= SLOT_CACHE_MAX:
            self._slots.update(fresh)
            return self._slots
        return ChainMap(fresh, self._slots)

    async def embed(self, texts: Sequence[str]) -> list[bytes]:
        if sum(map(len, texts)) <= EMBED_ON_LOOP_MAX_CHARS:
            return self.embed_now(texts)
        # Pure Python CPU work: a thread keeps the dashboard's loop answering keys.
        # asyncio is imported here (loaded already, as this runs on its loop), not at
        # the top: the command line imports this module for DEFAULT_DIMENSIONS.
        import asyncio

        return await asyncio.to_thread(self.embed_now, texts)

    def embed_now(self, texts: Sequence[str]) -> list[bytes]:
        vectors = []
        yield_at = time.perf_counter() + GIL_YIELD_EVERY_S
        for text in texts:
            vectors.append(array("f", self.vector(text)).tobytes())
            if time.perf_counter() >= yield_at:
                time.sleep(0)  # releases the GIL: waiting threads get their turn
                yield_at = time.perf_counter() + GIL_YIELD_EVERY_S
        return vectors


def cosine(a: bytes, b: bytes) -> float:
    """Cosine similarity of two float32 vectors (both already normalised)."""
    va, vb = array("f"), array("f")
    va.frombytes(a)
    vb.frombytes(b)
    return float(sum(x * y for x, y in zip(va, vb, strict=True)))
