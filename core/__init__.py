"""ingestdesk core: the ledger, its two state machines, the object store and the
ingestion pipeline. Headless by contract: nothing here imports a UI toolkit.

Everything outside ``core`` imports from this module only. Names load lazily, so a
parser child process importing ``core.parsing`` does not pay for SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.config import Settings, settings_from, sqlite_url
    from core.embedder import Embedder, HashingEmbedder, ProviderUnavailable
    from core.errors import (
        BadInput,
        ClaimBug,
        Conflict,
        IngestDeskError,
        LedgerUnavailable,
        NotFound,
        ObjectReadError,
        SchemaTooNew,
    )
    from core.filters import TaskFilter, parse_filter
    from core.ledger import (
        BulkResult,
        ChunkRecord,
        ChunkView,
        Claim,
        DocumentView,
        FailureGroup,
        Ledger,
        Reaped,
        SearchHit,
        TaskEventView,
        TaskView,
        WorkerView,
        display_name,
        error_detail_of,
    )
    from core.parse_pool import ParserPool
    from core.pipeline import PipelineOptions
    from core.states import (
        ERRORS,
        PAIRED_DOCUMENT_STATUS,
        TASK_MEANING,
        DocumentKind,
        DocumentStatus,
        ErrorCode,
        ErrorInfo,
        Stage,
        TaskStatus,
    )
    from core.worker import Worker, WorkerEvent

_LAZY: dict[str, str] = {
    "Embedder": "core.embedder",
    "HashingEmbedder": "core.embedder",
    "ParserPool": "core.parse_pool",
    "PipelineOptions": "core.pipeline",
    "ProviderUnavailable": "core.embedder",
    "Worker": "core.worker",
    "WorkerEvent": "core.worker",
    "BadInput": "core.errors",
    "BulkResult": "core.ledger",
    "ChunkRecord": "core.ledger",
    "ChunkView": "core.ledger",
    "Claim": "core.ledger",
    "ClaimBug": "core.errors",
    "Conflict": "core.errors",
    "DocumentKind": "core.states",
    "DocumentStatus": "core.states",
    "DocumentView": "core.ledger",
    "ERRORS": "core.states",
    "ErrorCode": "core.states",
    "ErrorInfo": "core.states",
    "FailureGroup": "core.ledger",
    "IngestDeskError": "core.errors",
    "Ledger": "core.ledger",
    "LedgerUnavailable": "core.errors",
    "NotFound": "core.errors",
    "ObjectReadError": "core.errors",
    "PAIRED_DOCUMENT_STATUS": "core.states",
    "Reaped": "core.ledger",
    "SchemaTooNew": "core.errors",
    "SearchHit": "core.ledger",
    "Settings": "core.config",
    "Stage": "core.states",
    "TASK_MEANING": "core.states",
    "TaskEventView": "core.ledger",
    "TaskFilter": "core.filters",
    "TaskStatus": "core.states",
    "TaskView": "core.ledger",
    "WorkerView": "core.ledger",
    "display_name": "core.ledger",
    "error_detail_of": "core.ledger",
    "parse_filter": "core.filters",
    "settings_from": "core.config",
    "sqlite_url": "core.config",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ERRORS",
    "PAIRED_DOCUMENT_STATUS",
    "TASK_MEANING",
    "BadInput",
    "BulkResult",
    "ChunkRecord",
    "ChunkView",
    "Claim",
    "ClaimBug",
    "Conflict",
    "DocumentKind",
    "DocumentStatus",
    "DocumentView",
    "Embedder",
    "ErrorCode",
    "ErrorInfo",
    "FailureGroup",
    "HashingEmbedder",
    "IngestDeskError",
    "Ledger",
    "LedgerUnavailable",
    "NotFound",
    "ObjectReadError",
    "ParserPool",
    "PipelineOptions",
    "ProviderUnavailable",
    "Reaped",
    "SchemaTooNew",
    "SearchHit",
    "Settings",
    "Stage",
    "TaskEventView",
    "TaskFilter",
    "TaskStatus",
    "TaskView",
    "Worker",
    "WorkerEvent",
    "WorkerView",
    "display_name",
    "error_detail_of",
    "parse_filter",
    "settings_from",
    "sqlite_url",
]
