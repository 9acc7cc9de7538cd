"""The two state machines: the task ("how far did this execution get") and the
document ("may this version be searched"), plus stages and stable error codes.

The pairing table is the product spec; every ledger write keeps the pair on one of
its rows, and the property test in ``tests/core/test_state_property.py`` checks it.
"""

from __future__ import annotations

from enum import StrEnum


class TaskStatus(StrEnum):
    """How far one execution of an ingestion task got."""

    QUEUED = "queued"
    RUNNING = "running"
    RETRY_WAIT = "retry_wait"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class DocumentStatus(StrEnum):
    """Whether a document version may be searched."""

    DRAFT = "draft"
    PROCESSING = "processing"
    REVIEW_PENDING = "review_pending"
    PUBLISHED = "published"
    FAILED = "failed"


class DocumentKind(StrEnum):
    """What parser a document needs; judged from its content on upload."""

    PDF = "pdf"
    MARKDOWN = "markdown"
    TEXT = "text"


class Stage(StrEnum):
    """Pipeline stages in execution order."""

    DOWNLOAD = "download"
    PARSE = "parse"
    EMBEDDING = "embedding"
    INDEXING = "indexing"
    FINALIZING = "finalizing"


class ErrorCode(StrEnum):
    """Stable error codes: the only failure vocabulary that leaves the ledger."""

    PARSE_ERROR = "parse_error"
    EMPTY_DOCUMENT = "empty_document"
    OBJECT_READ_ERROR = "object_read_error"
    DOCUMENT_NOT_FOUND = "document_not_found"
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    LEASE_EXPIRED = "lease_expired"
    INTERNAL_ERROR = "internal_error"


class Role(StrEnum):
    """What an API token may do; each role may do everything the ones before it may."""

    VIEWER = "viewer"  # reads
    OPERATOR = "operator"  # also uploads, submits, cancels, retries
    PUBLISHER = "publisher"  # also publishes

    def may(self, needed: Role) -> bool:
        """Whether this role includes ``needed``."""
        order = list(Role)
        return order.index(self) >= order.index(needed)


# Each task status and the document status that must accompany it: a document is
# always in the status this table pairs with its current task (an older, cancelled
# task of a re-submitted document no longer speaks for it).
PAIRED_DOCUMENT_STATUS: dict[TaskStatus, DocumentStatus] = {
    TaskStatus.QUEUED: DocumentStatus.PROCESSING,
    TaskStatus.RUNNING: DocumentStatus.PROCESSING,
    TaskStatus.RETRY_WAIT: DocumentStatus.PROCESSING,
    TaskStatus.SUCCEEDED: DocumentStatus.REVIEW_PENDING,
    TaskStatus.FAILED: DocumentStatus.FAILED,
    TaskStatus.CANCELLED: DocumentStatus.DRAFT,
}

TASK_MEANING: dict[TaskStatus, str] = {
    TaskStatus.QUEUED: "submitted, waiting for a worker",
    TaskStatus.RUNNING: "a worker is executing a stage",
    TaskStatus.RETRY_WAIT: "waiting for an automatic retry (claimable like queued once due)",
    TaskStatus.SUCCEEDED: "chunks persisted, waiting for a human to publish",
    TaskStatus.FAILED: "stable error code recorded, waiting for a human decision",
    TaskStatus.CANCELLED: "the user abandoned this run; the document may be submitted again",
}

CLAIMABLE: frozenset[TaskStatus] = frozenset({TaskStatus.QUEUED, TaskStatus.RETRY_WAIT})
ACTIVE: frozenset[TaskStatus] = frozenset(
    {TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.RETRY_WAIT}
)
CANCELLABLE: frozenset[TaskStatus] = ACTIVE
TERMINAL: frozenset[TaskStatus] = frozenset(
    {TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED}
)

# Allowed task transitions; anything else is a conflict.
TASK_TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    TaskStatus.QUEUED: frozenset({TaskStatus.RUNNING, TaskStatus.CANCELLED}),
    TaskStatus.RETRY_WAIT: frozenset({TaskStatus.RUNNING, TaskStatus.CANCELLED}),
    TaskStatus.RUNNING: frozenset(
        {
            TaskStatus.SUCCEEDED,
            TaskStatus.FAILED,
            TaskStatus.RETRY_WAIT,
            TaskStatus.CANCELLED,
        }
    ),
    TaskStatus.FAILED: frozenset({TaskStatus.QUEUED}),
    TaskStatus.SUCCEEDED: frozenset(),
    TaskStatus.CANCELLED: frozenset(),
}


class ErrorInfo:
    """What an error code means and what an operator should do about it."""

    __slots__ = ("advice", "code", "meaning", "transient")

    def __init__(self, code: ErrorCode, meaning: str, advice: str, transient: bool) -> None:
        self.code = code
        self.meaning = meaning
        self.advice = advice
        self.transient = transient


# One table feeds the README, the CLI and the dashboard's failures screen.
ERRORS: dict[ErrorCode, ErrorInfo] = {
    info.code: info
    for info in (
        ErrorInfo(
            ErrorCode.PARSE_ERROR,
            "the parser could not read the file (corrupt, encrypted, too slow or too big)",
            "retrying will not help; fix or re-export the file and upload it again",
            transient=False,
        ),
        ErrorInfo(
            ErrorCode.EMPTY_DOCUMENT,
            "the file parsed but holds no indexable text (e.g. scanned images)",
            "retrying will not help; run OCR or upload a text version",
            transient=False,
        ),
        ErrorInfo(
            ErrorCode.OBJECT_READ_ERROR,
            "the stored original is missing or does not match its checksum",
            "retried automatically; if it persists, check the object store and upload again",
            transient=True,
        ),
        ErrorInfo(
            ErrorCode.DOCUMENT_NOT_FOUND,
            "the task's document no longer exists in the ledger",
            "nothing to retry; upload the document again",
            transient=False,
        ),
        ErrorInfo(
            ErrorCode.PROVIDER_UNAVAILABLE,
            "the embedding provider did not answer",
            "retried automatically; retry by hand once the provider is back",
            transient=True,
        ),
        ErrorInfo(
            ErrorCode.LEASE_EXPIRED,
            "the worker holding the task vanished and its attempts are used up",
            "check why workers die (memory, crashes); retry when they are healthy",
            transient=False,
        ),
        ErrorInfo(
            ErrorCode.INTERNAL_ERROR,
            "an unclassified fault inside ingestdesk",
            "retry once; if it repeats, report it with the task id",
            transient=False,
        ),
    )
}
