"""Content-addressed object stores: originals (and provider results) under a key
derived from their sha256, in a local folder (:mod:`core.store.local`, the default)
or an S3-compatible bucket (:mod:`core.store.s3`), behind one small protocol
(:class:`Store`). :func:`open_store` picks the one the settings name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.store.base import (
    HEAD_BYTES,
    Original,
    Receiving,
    Store,
    StoredObject,
    StoreEntry,
    sha256_hex,
    track_created,
)
from core.store.local import (
    INCOMING_PREFIX,
    READ_BLOCK_BYTES,
    LocalReceiving,
    LocalStore,
    ObjectStore,
)

if TYPE_CHECKING:
    from core.config import Settings

__all__ = [
    "HEAD_BYTES",
    "INCOMING_PREFIX",
    "READ_BLOCK_BYTES",
    "LocalReceiving",
    "LocalStore",
    "ObjectStore",
    "Original",
    "Receiving",
    "Store",
    "StoreEntry",
    "StoredObject",
    "open_store",
    "sha256_hex",
    "track_created",
]


def open_store(settings: Settings) -> Store:
    """The store the settings name: ``store_url`` (``s3://BUCKET/PREFIX``) when set,
    else the folder ``store_root``. Nothing is contacted yet (see :meth:`Store.check`)."""
    if settings.store_url:
        from core.store.s3 import S3Store

        return S3Store(settings.store_url, endpoint=settings.s3_endpoint)
    return LocalStore(settings.store_root)
