"""The two state machines: the task ("how far did this execution get") and the
document ("may this version be searched"), plus stages and stable error codes.

The pairing table is the product spec; every ledger write of a task keeps the pair
on one of its rows, and the property test in ``tests/core/test_state_property.py``
checks it. A person's decisions on a succeeded version (publish, reject, withdraw)
and its retirement by a newer one move the document alone (see the table's comment).
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
    WITHDRAWN = "withdrawn"  # taken out of search by a person; may be published again
    RETIRED = "retired"  # replaced by a newer version; kept, never searched again


class DocumentKind(StrEnum):
    """What parser a document needs; judged from its content on upload."""

    PDF = "pdf"
    MARKDOWN = "markdown"
    TEXT = "text"
    DOCX = "docx"
    PPTX = "pptx"
    XLSX = "xlsx"
    HTML = "html"
    EPUB = "epub"
    CSV = "csv"
    # Images are read by OCR, each TIFF frame a page (core/ingest/formats/image.py).
    PNG = "png"
    JPEG = "jpeg"
    TIFF = "tiff"


class Stage(StrEnum):
    """Pipeline stages in execution order."""

    DOWNLOAD = "download"
    PARSE = "parse"
    EMBEDDING = "embedding"
    INDEXING = "indexing"
    FINALIZING = "finalizing"


# A document's row version (optimistic locking) is a PostgreSQL integer: a larger
# --expect-version can only be a typo, and binding it would be a driver error (a 500
# over HTTP) instead of an answer. Every face checks against this one limit.
ROW_VERSION_MAX = 2**31 - 1


class ErrorCode(StrEnum):
    """Stable error codes: the only failure vocabulary that leaves the ledger."""

    PARSE_ERROR = "parse_error"
    EMPTY_DOCUMENT = "empty_document"
    OBJECT_READ_ERROR = "object_read_error"
    DOCUMENT_NOT_FOUND = "document_not_found"
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    OUTCOME_UNKNOWN = "outcome_unknown"
    NEEDS_REVIEW = "needs_review"
    PROVIDER_FAILED = "provider_failed"
    LEASE_EXPIRED = "lease_expired"
    INTERNAL_ERROR = "internal_error"
    PARSER_KILLED = "parser_killed"
    DISK_FULL = "disk_full"
    OCR_UNAVAILABLE = "ocr_unavailable"
    INDEX_NOT_FOUND = "index_not_found"


class PageDecision(StrEnum):
    """How one page (a PDF page, an image or one frame of a TIFF) was read: the
    record a person reviews to trust a scanned document's text."""

    TEXT = "text"  # its text layer was enough; no OCR time spent
    OCR = "ocr"  # rendered and read by the OCR engine (with a mean confidence)
    OCR_EMPTY = "ocr_empty"  # rendered and read, and nothing legible was found
    SKIPPED = "skipped"  # not read, with why (over the OCR budget, engine missing)


class IndexState(StrEnum):
    """Where a vector index is in its life. Exactly one index is active: search
    answers from it. A new one is built (a re-embedding campaign) beside it, and
    activating it retires the previous one, which stays until dropped."""

    BUILDING = "building"  # its campaign is embedding the stored chunks
    READY = "ready"  # every published and review-pending version has its vectors
    ACTIVE = "active"  # the one search answers from
    RETIRED = "retired"  # was active; kept (and kept current) until dropped


class RequestState(StrEnum):
    """What the provider ledger knows of one request to a remote provider."""

    UNKNOWN = "unknown"  # the intent is committed; whether the provider did it is not known
    DONE = "done"  # the reply came back, verified, and its result is stored
    RECOVERED = "recovered"  # reconcile found it done at the provider, fetched and verified it
    NEEDS_REVIEW = "needs_review"  # the provider never saw it, and resending needs a person
    FAILED = "failed"  # the provider answered that it failed, or a person marked it failed
    NOT_SENT = "not_sent"  # provably never reached the provider (refused, unreachable)
    RESEND = "resend"  # a person (or a provider declaring repeats safe) allows sending again


# The states whose result may be used: the reply (or the look-up) verified.
REQUEST_RESULT_STATES: frozenset[RequestState] = frozenset(
    {RequestState.DONE, RequestState.RECOVERED}
)
# The states in which sending the request is allowed: it provably did not reach the
# provider, or a person decided. A failed request is not among them: the provider's
# own "failed" is not retried blindly either.
REQUEST_SENDABLE_STATES: frozenset[RequestState] = frozenset(
    {RequestState.NOT_SENT, RequestState.RESEND}
)


class Role(StrEnum):
    """What an API token may do; each role may do everything the ones before it may."""

    VIEWER = "viewer"  # reads
    OPERATOR = "operator"  # also uploads, submits, cancels, retries
    PUBLISHER = "publisher"  # also publishes

    def may(self, needed: Role) -> bool:
        """Whether this role includes ``needed``."""
        order = list(Role)
        return order.index(self) >= order.index(needed)


# Each task status and the document status that must accompany it while the task is
# the document's current one: every ledger write of a task keeps the pair (an older,
# cancelled task of a re-submitted document no longer speaks for it). Once a task has
# succeeded, a person's decisions move the document on by themselves — publish,
# reject (back to draft), withdraw, retire (a newer version published) — and the
# task keeps its succeeded: it says how far that execution got, not whether the
# version is searchable.
PAIRED_DOCUMENT_STATUS: dict[TaskStatus, DocumentStatus] = {
    TaskStatus.QUEUED: DocumentStatus.PROCESSING,
    TaskStatus.RUNNING: DocumentStatus.PROCESSING,
    TaskStatus.RETRY_WAIT: DocumentStatus.PROCESSING,
    TaskStatus.SUCCEEDED: DocumentStatus.REVIEW_PENDING,
    TaskStatus.FAILED: DocumentStatus.FAILED,
    TaskStatus.CANCELLED: DocumentStatus.DRAFT,
}

DOCUMENT_MEANING: dict[DocumentStatus, str] = {
    DocumentStatus.DRAFT: "uploaded (or its run was cancelled, or rejected); may be submitted",
    DocumentStatus.PROCESSING: "a task is queued, running or waiting to retry",
    DocumentStatus.REVIEW_PENDING: "chunks are ready; a person decides to publish or reject",
    DocumentStatus.PUBLISHED: "approved: its chunks are what search finds for this document",
    DocumentStatus.FAILED: "its task failed; retry the task or upload again",
    DocumentStatus.WITHDRAWN: "taken out of search by a person; may be published again",
    DocumentStatus.RETIRED: "a newer version replaced it; kept in the history, never searched",
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
            "the file holds no indexable text, neither in a text layer nor by OCR",
            "retrying will not help; upload a text version or a clearer scan",
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
            "the embedding provider could not be reached; nothing was sent",
            "retried automatically; retry by hand once the provider is back",
            transient=True,
        ),
        ErrorInfo(
            ErrorCode.OUTCOME_UNKNOWN,
            "a provider request went out but no usable reply came back; it may have been done",
            "retried automatically after reconcile looks the request up; never sent blindly. "
            "If its automatic attempts ran out meanwhile, reconcile requeues the task once the "
            "request it waits on is recovered (history: actor `reconcile`)",
            transient=True,
        ),
        ErrorInfo(
            ErrorCode.NEEDS_REVIEW,
            "a provider request's outcome was unknown and the provider has no record of it",
            "decide with `ingestdesk review`: resend it, or mark it failed with a reason; the "
            "decision settles every task waiting on that request",
            transient=False,
        ),
        ErrorInfo(
            ErrorCode.PROVIDER_FAILED,
            "the embedding provider answered that a request failed, or a person marked it so",
            "a retry does not send it again; once the provider is fixed, "
            "`ingestdesk review resend TASK` does",
            transient=False,
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
        # A parser killed by a signal ingestdesk did not send (an operator's kill -9,
        # the kernel's OOM killer) is not the file's doing. A file that crashes the
        # parser itself (a segfault, an abort) stays parse_error.
        ErrorInfo(
            ErrorCode.PARSER_KILLED,
            "the parser process was killed from outside (an operator's kill, the OOM "
            "killer) while it read the file; the file is not known to be at fault",
            "retried automatically; if it keeps failing, find what kills the worker's "
            "processes (memory pressure, a watchdog, a person)",
            transient=True,
        ),
        # A full disk is the machine's state, not the document's nor a bug: the same
        # document succeeds once there is room.
        ErrorInfo(
            ErrorCode.DISK_FULL,
            "the disk of the ledger or the object store was full while the task wrote",
            "retried automatically with backoff; free space on that disk (the worker's log "
            "names which)",
            transient=True,
        ),
        # Not empty_document: the pages may hold text that this machine cannot read
        # yet. Installing the engine's data and retrying reads them.
        ErrorInfo(
            ErrorCode.OCR_UNAVAILABLE,
            "the document's pages need OCR and no text was found without it: the OCR "
            "engine or its language data is not installed where the worker runs",
            "install it (apt-get install tesseract-ocr-eng; pip install tesserocr), "
            "check `ingestdesk formats`, then retry the task",
            transient=False,
        ),
        ErrorInfo(
            ErrorCode.INDEX_NOT_FOUND,
            "a re-embedding task's index was dropped before the task ran",
            "nothing to do: the version's other indexes are untouched (`ingestdesk index list`)",
            transient=False,
        ),
    )
}
