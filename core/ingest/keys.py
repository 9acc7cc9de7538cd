"""The processing key: what identifies one ingestion's result.

A task's result (its chunks and vectors) is fully determined by the original's bytes
and the options that change the result — the parser and its version, the chunker's
version, chunk size and overlap, the embedder and its version, and for PDFs and images
what OCR'd text depends on (the engine's version, the language and a digest of its
data, the resolution, the page rules' version: see
:func:`core.ingest.formats.format_info`). The processing key
is ``sha256(raw bytes + b"\\0" + canonical JSON of those options)``, canonical meaning
sorted keys and no spaces, so the order options were given in never changes it and
neither does the file's name (renaming a document does not force reprocessing).
Every value is a string, so ``1000`` and ``"1000"`` cannot give two keys.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Protocol


class ChunkLike(Protocol):
    """What a result checksum reads of a chunk (a ChunkRecord)."""

    @property
    def ordinal(self) -> int: ...
    @property
    def page(self) -> int | None: ...
    @property
    def char_start(self) -> int: ...
    @property
    def char_end(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def embedding(self) -> bytes | None: ...
    @property
    def location(self) -> str | None: ...


# Bump when chunk_text's output for the same text and settings changes: results
# made by an older chunker must not be taken for this one's.
CHUNKER_VERSION = "1"


def canonical_options(options: Mapping[str, object]) -> bytes:
    """The options as canonical JSON: sorted keys, no spaces, every value a string."""
    as_text = {str(k): str(v) for k, v in options.items()}
    return json.dumps(as_text, sort_keys=True, separators=(",", ":")).encode()


def processing_key(data: bytes, options: Mapping[str, object]) -> str:
    """The processing key of ``data`` processed with ``options`` (64 hex characters)."""
    digest = hashlib.sha256(data)
    digest.update(b"\0")
    digest.update(canonical_options(options))
    return digest.hexdigest()


def result_checksum(chunks: Sequence[ChunkLike]) -> str:
    """sha256 over a result's chunks (positions, text and vector), in order: what a
    reused result must still match, so a tampered or half-written one is never reused."""
    digest = hashlib.sha256()
    for c in chunks:
        digest.update(f"{c.ordinal}|{c.page}|{c.char_start}|{c.char_end}|".encode())
        if c.location is not None:
            # Only where there is one: results made before locations still verify.
            digest.update(b"L" + len(c.location).to_bytes(8, "little") + c.location.encode())
        text = c.text.encode()
        digest.update(len(text).to_bytes(8, "little") + text)
        vector = c.embedding or b""
        digest.update(len(vector).to_bytes(8, "little") + vector)
    return digest.hexdigest()
