"""ingestdesk core: the ledger, its two state machines, the object store and the
ingestion pipeline. Headless by contract: nothing here imports a UI toolkit.

Everything outside ``core`` imports from this module only. Names load lazily, so a
parser child process importing ``core.ingest.parsing`` does not pay for SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.config import Settings, settings_from, sqlite_url
    from core.errors import (
        BadInput,
        ClaimBug,
        Conflict,
        IngestDeskError,
        LedgerUnavailable,
        LedgerUnreachable,
        NotFound,
        ObjectReadError,
        SchemaTooNew,
        StoreUnavailable,
        error_detail_of,
    )
    from core.filters import EVERY_TASK, TaskFilter, parse_filter
    from core.ingest.embedder import Embedder, HashingEmbedder, ProviderUnavailable
    from core.ingest.parse_pool import ParserPool
    from core.ingest.pipeline import PipelineOptions
    from core.ingest.worker import Worker, WorkerEvent
    from core.intake import display_name
    from core.ledger import (
        BulkResult,
        ChunkRecord,
        ChunkView,
        Claim,
        DocumentView,
        FailureGroup,
        Ledger,
        Operator,
        Reads,
        Reaped,
        SearchHit,
        TaskEventView,
        TaskView,
        WorkerRegistry,
        WorkerView,
        WorkQueue,
    )
    from core.ledger.transactions import shown_url
    from core.safe_text import check_identifier, neutralise, visible
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

_LAZY: dict[str, str] = {
    "Embedder": "core.ingest.embedder",
    "HashingEmbedder": "core.ingest.embedder",
    "ParserPool": "core.ingest.parse_pool",
    "PipelineOptions": "core.ingest.pipeline",
    "ProviderUnavailable": "core.ingest.embedder",
    "Worker": "core.ingest.worker",
    "WorkerEvent": "core.ingest.worker",
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
    "LedgerUnreachable": "core.errors",
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
    "display_name": "core.intake",
    "error_detail_of": "core.errors",
    "Operator": "core.ledger",
    "Reads": "core.ledger",
    "WorkQueue": "core.ledger",
    "WorkerRegistry": "core.ledger",
    "parse_filter": "core.filters",
    "shown_url": "core.ledger.transactions",
    "check_identifier": "core.safe_text",
    "neutralise": "core.safe_text",
    "visible": "core.safe_text",
    "EVERY_TASK": "core.filters",
    "StoreUnavailable": "core.errors",
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
    "EVERY_TASK",
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
    "LedgerUnreachable",
    "NotFound",
    "ObjectReadError",
    "Operator",
    "ParserPool",
    "PipelineOptions",
    "ProviderUnavailable",
    "Reads",
    "Reaped",
    "SchemaTooNew",
    "SearchHit",
    "Settings",
    "Stage",
    "StoreUnavailable",
    "TaskEventView",
    "TaskFilter",
    "TaskStatus",
    "TaskView",
    "WorkQueue",
    "Worker",
    "WorkerEvent",
    "WorkerRegistry",
    "WorkerView",
    "check_identifier",
    "display_name",
    "error_detail_of",
    "neutralise",
    "parse_filter",
    "settings_from",
    "shown_url",
    "sqlite_url",
    "visible",
]
