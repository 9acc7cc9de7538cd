"""The wire format of OpenAI-compatible ``/v1/embeddings`` endpoints, as
:mod:`core.ingest.openai_provider` reads it: the embeddings of a 200 (by ``index``,
L2-normalised into float32 little-endian bytes), the error bodies of the servers that
speak it (OpenAI, vLLM, TEI, Ollama, LocalAI each word them their own way), a 429's
``Retry-After`` and how an input over the model's token limit is said."""

from __future__ import annotations

import base64
import binascii
import email.utils
import json
import math
import re
import sys
import time
from array import array

import httpx

RETRY_AFTER_MAX_S = 3_600.0  # seconds: a longer Retry-After is held to an hour
# A vector whose length is this close to 1 is stored as sent: float32 itself is only
# good to ~6e-8 per value.
NORMALISED_TOLERANCE = 1e-6
# How servers word an input over the model's limit (OpenAI, vLLM, TEI, LocalAI).
TOO_LONG = re.compile(
    r"context.length|maximum (?:input|sequence) length|less than \d+ tokens|too many tokens"
    r"|exceeds? (?:the )?(?:model'?s? )?(?:max|limit)",
    re.IGNORECASE,
)
TOO_LONG_CODES = {"context_length_exceeded", "string_above_max_length", "input_too_long"}
INPUT_INDEX = re.compile(r"input\[(\d+)\]|input (?:index |#)?(\d+)\b", re.IGNORECASE)
TOKENS = re.compile(r"(\d[\d,]*) tokens", re.IGNORECASE)


class Unusable(Exception):
    """A reply this client cannot use; the message says why (short)."""


def retry_after_s(headers: httpx.Headers, now: float | None = None) -> float | None:
    """Seconds a 429 asks to wait: ``retry-after-ms``, or ``Retry-After`` as seconds
    or an HTTP date; None if it says nothing usable. Held to 0..RETRY_AFTER_MAX_S."""
    wait: float | None = None
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            wait = float(ms) / 1000.0
        except ValueError:
            wait = None
    value = headers.get("retry-after")
    if wait is None and value is not None:
        try:
            wait = float(value)
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError, IndexError):
                when = None
            if when is not None and when.tzinfo is not None:
                wait = when.timestamp() - (time.time() if now is None else now)
    if wait is None or not math.isfinite(wait):
        return None
    return min(max(wait, 0.0), RETRY_AFTER_MAX_S)


def vector_bytes(values: object, what: str) -> bytes:
    """One embedding (a list of numbers, or base64 of float32 little-endian) as
    L2-normalised little-endian float32 bytes.

    Raises:
        Unusable: Not a list of finite numbers.
    """
    if isinstance(values, str):  # encoding_format base64: float32 little-endian bytes
        try:
            raw = base64.b64decode(values, validate=True)
        except (binascii.Error, ValueError):
            raise Unusable(f"{what} is not base64") from None
        if not raw or len(raw) % 4:
            raise Unusable(f"{what} is not whole float32 values")
        packed = array("f")
        packed.frombytes(raw)
        if sys.byteorder != "little":
            packed.byteswap()
        floats = array("d", packed)
    elif isinstance(values, list) and values:
        try:
            # array() converts and checks in C: a text or a null is refused here (~6x
            # faster than checking each value in Python).
            floats = array("d", values)
        except TypeError:
            raise Unusable(f"{what} is not a list of numbers") from None
    else:
        raise Unusable(f"{what} is not a list of numbers")
    norm = math.hypot(*floats)  # inf or nan if any value is: one check for all
    if not math.isfinite(norm):
        raise Unusable(f"{what} holds a number that is not finite")
    if not norm or abs(norm - 1.0) <= NORMALISED_TOLERANCE:
        # Already unit length (OpenAI's are): converted in C, not scaled in Python
        # (98k multiplications a 64 x 1536 batch, most of its parse time).
        vector = array("f", floats)
    else:
        scale = 1.0 / norm
        vector = array("f", [v * scale for v in floats])
    if sys.byteorder != "little":
        vector.byteswap()
    return vector.tobytes()


def parse_embeddings(data: bytes, expected: int) -> tuple[list[bytes], dict[str, int]]:
    """The vectors (in input order, by ``index``) and usage of a 200 body.

    Raises:
        Unusable: Not a complete embeddings reply.
    """
    try:
        body = json.loads(data)
    except ValueError:
        raise Unusable("a reply that is not JSON") from None
    items = body.get("data") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise Unusable("a reply without data")
    by_index: dict[int, bytes] = {}
    for position, item in enumerate(items):
        if not isinstance(item, dict):
            raise Unusable("a reply whose data is not objects")
        index = item.get("index", position)
        if isinstance(index, bool) or not isinstance(index, int) or index in by_index:
            raise Unusable("a reply with a bad or repeated index")
        by_index[index] = vector_bytes(item.get("embedding"), f"embedding {index}")
    if sorted(by_index) != list(range(len(by_index))) or len(by_index) != expected:
        raise Unusable(f"expected {expected} embeddings, got {len(by_index)}")
    raw = body.get("usage")
    usage = (
        {k: v for k, v in raw.items() if isinstance(v, int) and not isinstance(v, bool)}
        if isinstance(raw, dict)
        else {}
    )
    return [by_index[i] for i in range(len(by_index))], usage


def error_of(data: bytes) -> tuple[str, str]:
    """The message and code of an error body, in any of the servers' shapes
    (``{"error": {"message", "code"}}``, ``{"error": "…"}``, ``{"message": …}``)."""
    try:
        body = json.loads(data)
    except ValueError:
        return "", ""
    if not isinstance(body, dict):
        return "", ""
    error = body.get("error")
    if isinstance(error, dict):
        message, code = error.get("message"), error.get("code") or error.get("type")
    else:
        message, code = error if isinstance(error, str) else body.get("message"), body.get("code")
    return (message if isinstance(message, str) else ""), (code if isinstance(code, str) else "")
