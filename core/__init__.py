"""ingestdesk core: the ledger, its two state machines, the object store and the
ingestion pipeline. Headless by contract: nothing here imports a UI toolkit.

Everything outside ``core`` imports from this module only.
"""

from __future__ import annotations

from core.config import Settings, settings_from, sqlite_url
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
    "ErrorCode",
    "ErrorInfo",
    "FailureGroup",
    "IngestDeskError",
    "Ledger",
    "LedgerUnavailable",
    "NotFound",
    "ObjectReadError",
    "Reaped",
    "SchemaTooNew",
    "SearchHit",
    "Settings",
    "Stage",
    "TaskEventView",
    "TaskFilter",
    "TaskStatus",
    "TaskView",
    "WorkerView",
    "display_name",
    "error_detail_of",
    "parse_filter",
    "settings_from",
    "sqlite_url",
]
