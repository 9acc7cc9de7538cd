"""What every object store shares: the key of an object, the record of one received
as a stream, the take-back bookkeeping of a refused request, and the two small
protocols the ledger, the worker and the API use (:class:`Store`, :class:`Receiving`).

Originals live under a key derived from their sha256 (``sha256/ab/<hex>``), so
user-supplied names never become paths or object names, identical uploads share an
object, and every read can check it got what the ledger recorded.
"""

from __future__ import annotations

import contextvars
import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from core.errors import ObjectReadError

KEY_PATTERN = re.compile(r"^sha256/[0-9a-f]{2}/[0-9a-f]{64}$")
# How much of an upload's start is kept for judging its kind: what sniff_kind looks
# at (core.ingest.sniffing.TEXT_SNIFF_BYTES), and one byte more, so it can tell a
# file of exactly that size from a longer one.
HEAD_BYTES = 64 * 1024 + 1  # bytes

# The keys of the objects written (new to the store) inside the innermost
# track_created() block: a refused request takes back only what it wrote itself. A
# context variable, not a list on the store, which would grow by one entry per
# upload for a server's lifetime (asyncio.to_thread carries the context, so a put in
# a thread is seen).
_created: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "ingestdesk_store_created", default=None
)


@contextmanager
def track_created() -> Iterator[list[str]]:
    """Collect the keys of the objects stored new inside this block (not those found
    already stored): the only ones a caller whose request was then refused may take
    back (see :meth:`Store.remove`)."""
    keys: list[str] = []
    token = _created.set(keys)
    try:
        yield keys
    finally:
        _created.reset(token)


def note_created(key: str) -> None:
    keys = _created.get()
    if keys is not None:
        keys.append(key)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def key_for(digest: str) -> str:
    return f"sha256/{digest[:2]}/{digest}"


def checked_key(key: str) -> str:
    # Keys come from our own ledger, but a tampered row must not walk the disk or
    # the bucket.
    if not KEY_PATTERN.match(key):
        raise ObjectReadError(f"malformed object key {key!r}")
    return key


def verified(data: bytes, expected_sha256: str) -> bytes:
    if sha256_hex(data) != expected_sha256:
        raise ObjectReadError("the stored original does not match its checksum")
    return data


@dataclass(frozen=True)
class StoredObject:
    """An original already in the store (received as a stream): what the ledger
    records of it, and its first bytes, to judge its kind without reading it again."""

    key: str
    sha256: str
    size: int
    head: bytes


# What an upload hands the ledger: the bytes themselves, or an object already stored.
Original = bytes | StoredObject


@dataclass(frozen=True)
class StoreEntry:
    """One thing a store holds, as maintenance sees it: an object (``name`` is its
    key) or an unfinished upload (``name`` is the store's own name for it)."""

    name: str
    size: int  # bytes
    modified: float  # seconds since the epoch: last written, or found again by an upload


class Receiving(Protocol):
    """An object being written as it arrives: :meth:`write` each piece (blocking I/O:
    call it from a thread), then :meth:`store` (the object, under its key) or
    :meth:`discard` (nothing left behind). Only the first HEAD_BYTES are kept for
    judging the kind, and a bounded buffer for the rest."""

    size: int

    def write(self, data: bytes) -> None: ...

    def store(self) -> StoredObject: ...

    def discard(self) -> None: ...


class Store(Protocol):
    """Where originals and provider results live: a local folder or an S3 bucket.

    ``put``, ``get``, ``receive``'s writes and ``remove`` block (call them from a
    thread in a coroutine); :meth:`read` is the worker's way in, which never holds
    the event loop for the length of a download."""

    @property
    def label(self) -> str:
        """Which store this is, for people: a folder, or a bucket and its endpoint
        (never a credential)."""
        ...

    def check(self) -> None:
        """Raise StoreUnavailable with one line naming the store and the cause when
        it cannot be used at all (a bucket missing, access denied)."""
        ...

    def put(self, data: bytes) -> tuple[str, str]:
        """Store bytes durably; returns (object key, sha256 hex)."""
        ...

    def receive(self) -> Receiving:
        """A new object written as it arrives (see :class:`Receiving`)."""
        ...

    def get(self, key: str, expected_sha256: str) -> bytes:
        """Read an object and check it is what the ledger says it is."""
        ...

    async def read(self, key: str, expected_sha256: str, size: int) -> bytes:
        """:meth:`get` for a coroutine: ``size`` (what the ledger recorded) decides
        whether a local read is cheaper on the event loop than in a thread."""
        ...

    def exists(self, key: str) -> bool: ...

    def remove(self, key: str) -> None:
        """Delete an object, if it is there.

        Objects are shared by every document with the same bytes: call this only for
        an object no document references, inside the ledger transaction that checked
        so (its write lock keeps a document that would reference it from committing
        in between).
        """
        ...

    def entries(self) -> Iterator[StoreEntry]:
        """Every stored object (files or objects that are not objects are skipped)."""
        ...

    def unfinished(self) -> Iterator[StoreEntry]:
        """Every upload still being written, or left by one that never finished."""
        ...

    def remove_unfinished(self, name: str) -> None:
        """Remove an unfinished upload listed by :meth:`unfinished`."""
        ...
