"""The processing key: what identifies one ingestion's result.

A task's result (its chunks and vectors) is fully determined by the original's bytes
and the options that change the result — the parser and its version, the chunker's
version, chunk size and overlap, the embedder and its version. The processing key
is ``sha256(raw bytes + b"\\0" + canonical JSON of those options)``, canonical meaning
sorted keys and no spaces, so the order options were given in never changes it and
neither does the file's name (renaming a document does not force reprocessing).
Every value is a string, so ``1000`` and ``"1000"`` cannot give two keys.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

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
