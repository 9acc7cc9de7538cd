"""A demo remote embedding provider: a separate HTTP process with its own SQLite
database, idempotent by request key, that can be told to lose replies, truncate
them, stall, refuse work or fail its look-ups, so the never-twice path of the
embedding stage can be exercised against something real (``ingestdesk provider
serve``)."""

from __future__ import annotations

from core.demo_provider.faults import FaultError, Faults, FaultSwitch
from core.demo_provider.server import MODEL, NAME, ProviderServer, ProviderStore, StoreError

__all__ = [
    "MODEL",
    "NAME",
    "FaultError",
    "FaultSwitch",
    "Faults",
    "ProviderServer",
    "ProviderStore",
    "StoreError",
]
