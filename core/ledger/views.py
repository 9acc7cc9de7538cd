"""What the ledger hands out: frozen values, never ORM rows.

Each view knows how to build itself from a row (``from_row``) and how to become a
JSON-ready dict (``to_dict``), so the CLI, the dashboard and the HTTP face all show
the same fields under the same names.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from core.states import DocumentKind, DocumentStatus, ErrorCode, RequestState, Stage, TaskStatus


class _View:
    """Views are frozen dataclasses; this gives each one its JSON-ready dict."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload, no-any-return]


def _mapping(row: Any) -> Mapping[str, Any]:
    """A row's columns by name, whether it is a SQLAlchemy Row or a plain mapping."""
    return row._mapping if hasattr(row, "_mapping") else row  # type: ignore[no-any-return]


@dataclass(frozen=True)
class DocumentView(_View):
    document_id: str
    filename: str
    sha256: str
    object_key: str
    size: int
    kind: DocumentKind
    status: DocumentStatus
    version: int  # the row version (optimistic locking): bumped by every change
    created_at: float
    updated_at: float
    # The document this is a version of (its first version's id), and which one.
    family_id: str = ""
    version_no: int = 1

    @classmethod
    def from_row(cls, row: Any) -> DocumentView:
        m = _mapping(row)
        return cls(
            document_id=m["id"],
            filename=m["filename"],
            sha256=m["sha256"],
            object_key=m["object_key"],
            size=m["size"],
            kind=DocumentKind(m["kind"]),
            status=DocumentStatus(m["status"]),
            version=m["version"],
            created_at=m["created_at"],
            updated_at=m["updated_at"],
            family_id=m.get("family_id") or m["id"],
            version_no=m.get("version_no") or 1,
        )


@dataclass(frozen=True)
class TaskView(_View):
    task_id: str
    document_id: str
    status: TaskStatus
    stage: Stage
    completed: int
    total: int
    attempt: int
    error_code: ErrorCode | None
    error_detail: str | None
    document_name: str | None = None
    max_attempts: int = 0
    worker_id: str | None = None
    lease_expires_at: float | None = None
    next_attempt_at: float | None = None
    progress_at: float | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    revision: int = 0
    options: Mapping[str, Any] = field(default_factory=dict)
    # The index a re-embedding task embeds into; None for an ingestion task.
    index_id: int | None = None

    @property
    def short_id(self) -> str:
        return self.task_id[:8]

    def is_stalled(self, now: float, after_s: float) -> bool:
        """A running task whose progress has not moved for ``after_s`` seconds.

        Stalled is shown, never acted on: the lease (not progress) decides whether a
        worker is gone. The one definition every screen and command uses.
        """
        return (
            self.status is TaskStatus.RUNNING
            and self.progress_at is not None
            and now - self.progress_at > after_s
        )

    def to_dict(self) -> dict[str, Any]:
        # Field by field, not dataclasses.asdict: that deep-copies every value and was
        # two thirds of an API page's time (0.3 ms a task, 30 ms for 100). Every field
        # is immutable but options, which is copied.
        out = {name: getattr(self, name) for name in _TASK_FIELDS}
        out["options"] = dict(self.options)
        return out

    @classmethod
    def from_row(cls, row: Any, *, document_name: str | None = None) -> TaskView:
        m = _mapping(row)
        return cls(
            task_id=m["id"],
            document_id=m["document_id"],
            status=TaskStatus(m["status"]),
            stage=Stage(m["stage"]),
            completed=m["completed"],
            total=m["total"],
            attempt=m["attempt"],
            error_code=ErrorCode(m["error_code"]) if m["error_code"] else None,
            error_detail=m["error_detail"],
            document_name=document_name,
            max_attempts=m["max_attempts"],
            worker_id=m["worker_id"],
            lease_expires_at=m["lease_expires_at"],
            next_attempt_at=m["next_attempt_at"],
            progress_at=m["progress_at"],
            created_at=m["created_at"],
            updated_at=m["updated_at"],
            revision=m["revision"],
            options=json.loads(m["options"] or "{}"),
            index_id=m.get("index_id"),
        )


_TASK_FIELDS = tuple(f.name for f in fields(TaskView))


@dataclass(frozen=True)
class TaskEventView(_View):
    """One line of a task's audit history."""

    event_id: int
    task_id: str
    at: float
    actor: str
    from_status: TaskStatus | None
    to_status: TaskStatus
    stage: Stage
    attempt: int
    error_code: ErrorCode | None
    reason: str | None

    @classmethod
    def from_row(cls, row: Any) -> TaskEventView:
        m = _mapping(row)
        return cls(
            event_id=m["id"],
            task_id=m["task_id"],
            at=m["at"],
            actor=m["actor"],
            from_status=TaskStatus(m["from_status"]) if m["from_status"] else None,
            to_status=TaskStatus(m["to_status"]),
            stage=Stage(m["stage"]),
            attempt=m["attempt"],
            error_code=ErrorCode(m["error_code"]) if m["error_code"] else None,
            reason=m["reason"],
        )


@dataclass(frozen=True)
class Claim:
    """Proof that a worker holds a task. ``attempt`` is the fencing token: every
    write the worker makes is conditional on it, so a worker presumed dead cannot
    overwrite a newer attempt."""

    task_id: str
    document_id: str
    worker_id: str
    attempt: int
    max_attempts: int
    lease_expires_at: float
    options: Mapping[str, Any] = field(default_factory=dict)
    # Renewals (heartbeats, progress) extend the lease by the length it was taken for.
    lease_s: float = 30.0
    # The task's document, read with the claim when asked for (None if gone).
    document: DocumentView | None = None
    # Whether another document version holds the same bytes, read with the document:
    # only then can a result to reuse, or a twin making it, exist. True when unknown.
    content_shared: bool = True
    # The index a re-embedding task embeds into; None for an ingestion task.
    index_id: int | None = None

    @classmethod
    def from_row(
        cls,
        row: Any,
        worker_id: str,
        lease_s: float,
        documents: Mapping[str, DocumentView] | None = None,
        shared_contents: Collection[str] | None = None,
    ) -> Claim:
        document = (documents or {}).get(row.document_id)
        return cls(
            task_id=row.id,
            document_id=row.document_id,
            worker_id=worker_id,
            attempt=row.attempt,
            max_attempts=row.max_attempts,
            lease_expires_at=row.lease_expires_at,
            options=json.loads(row.options or "{}"),
            lease_s=lease_s,
            document=document,
            content_shared=(
                shared_contents is None or document is None or document.sha256 in shared_contents
            ),
            index_id=getattr(row, "index_id", None),
        )


@dataclass(frozen=True)
class ChunkRecord:
    """A chunk as a worker writes it (with its embedding and stored location)."""

    ordinal: int
    text: str
    page: int | None
    char_start: int
    char_end: int
    embedding: bytes | None = None
    location: str | None = None  # chunks.location: JSON, see core.ingest.chunker.Location


def chunk_place(page: int | None, stored: str | None) -> tuple[dict[str, Any], str]:
    """A stored chunk's location as JSON-ready fields and as one line for people."""
    from core.ingest.chunker import Location  # standard library only

    location = Location.from_stored(page, stored)
    return location.as_dict(), location.label()


@dataclass(frozen=True)
class ChunkView(_View):
    """One chunk; ``location`` says where it is in the document's own terms (page,
    slide and notes, sheet and rows, headings) and ``place`` says it in one line."""

    document_id: str
    ordinal: int
    text: str
    page: int | None
    char_start: int
    char_end: int
    location: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    place: str = ""

    @classmethod
    def of(cls, document_id: str, row: Any) -> ChunkView:
        """From a row with ordinal, text, page, char_start, char_end and location."""
        location, place = chunk_place(row.page, row.location)
        return cls(
            document_id,
            row.ordinal,
            row.text,
            row.page,
            row.char_start,
            row.char_end,
            location,
            place,
        )


@dataclass(frozen=True)
class SearchHit(_View):
    """One matching chunk of a published version: which document and version, where,
    how well it ranks (higher is better) and a snippet with the matched words marked
    ``**like this**`` (a vector hit's snippet is the chunk's first words)."""

    document_id: str
    filename: str
    ordinal: int
    page: int | None
    text: str
    family_id: str = ""
    version_no: int = 1
    score: float = 0.0
    snippet: str = ""
    location: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    place: str = ""
    # How it was found (core.ledger.hybrid): the mode, the index whose vectors
    # answered ("" for keyword search), and each leg's rank (from 1) and score; a
    # leg that did not find it leaves them None. ``score`` is the mode's own: the
    # keyword score, the cosine, or the fused (RRF) score.
    mode: str = "keyword"
    index: str = ""
    keyword_rank: int | None = None
    keyword_score: float | None = None
    vector_rank: int | None = None
    vector_score: float | None = None
    fused_score: float | None = None


@dataclass(frozen=True)
class BulkResult(_View):
    """What a bulk action found (and, unless a dry run, did)."""

    matched: int
    eligible: int
    ineligible: dict[str, int]
    dry_run: bool
    done: int = 0
    refused: int = 0


@dataclass(frozen=True)
class FailureGroup:
    error_code: ErrorCode
    stage: Stage
    count: int
    first_seen: float
    last_seen: float


@dataclass(frozen=True)
class WorkerView(_View):
    worker_id: str
    host: str
    pid: int
    started_at: float
    heartbeat_at: float
    stopped_at: float | None
    alive: bool


@dataclass(frozen=True)
class Reaped:
    task_id: str
    status: TaskStatus
    attempt: int


@dataclass(frozen=True)
class TaskPosition:
    """Where a newest-first task listing stopped: the last task shown."""

    created_at: float
    task_id: str

    @classmethod
    def of(cls, task: TaskView) -> TaskPosition:
        return cls(task.created_at, task.task_id)


@dataclass(frozen=True)
class LedgerStats:
    """What a monitor scrapes (``GET /metrics``)."""

    tasks: dict[TaskStatus, int]
    claims: int  # claims so far (attempts started), from the history
    failures: dict[ErrorCode, int]  # attempts that ended failed or retry_wait, by code
    oldest_claimable_age_s: float  # how long the longest-waiting claimable task has waited
    workers_alive: int


@dataclass(frozen=True)
class ReusableResult:
    """A succeeded task whose chunks another task with the same processing key may
    reuse, once they verify against ``result_sha256``."""

    task_id: str
    document_id: str
    chunks: int
    result_sha256: str | None


@dataclass(frozen=True)
class ProviderRequestView(_View):
    """One request to a remote provider as the provider ledger knows it (see
    core.ledger.provider_requests); with the task's document when read for review."""

    request_key: str
    provider: str
    model: str
    endpoint: str | None
    task_id: str
    attempt: int
    state: RequestState
    texts: int
    request_id: str | None
    result_key: str | None
    result_sha256: str | None
    dimensions: int | None
    usage: dict[str, int]
    detail: str | None
    sends: int
    lookups: int
    next_lookup_at: float | None
    created_at: float
    updated_at: float
    task_status: TaskStatus | None = None
    document_id: str | None = None
    document_name: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> ProviderRequestView:
        m = _mapping(row)
        status = m.get("task_status")
        return cls(
            request_key=m["request_key"],
            provider=m["provider"],
            model=m["model"],
            endpoint=m["endpoint"],
            task_id=m["task_id"],
            attempt=m["attempt"],
            state=RequestState(m["state"]),
            texts=m["texts"],
            request_id=m["request_id"],
            result_key=m["result_key"],
            result_sha256=m["result_sha256"],
            dimensions=m["dimensions"],
            usage=json.loads(m["usage"] or "{}"),
            detail=m["detail"],
            sends=m["sends"],
            lookups=m["lookups"],
            next_lookup_at=m["next_lookup_at"],
            created_at=m["created_at"],
            updated_at=m["updated_at"],
            task_status=TaskStatus(status) if status else None,
            document_id=m.get("document_id"),
            document_name=m.get("document_name"),
        )


@dataclass(frozen=True)
class DocumentEventView(_View):
    """One line of a document's history: who did what to which version, when, why."""

    family_id: str
    document_id: str
    version_no: int
    at: float
    actor: str
    action: str
    from_status: str | None
    to_status: str | None
    reason: str | None

    @classmethod
    def from_row(cls, row: Any) -> DocumentEventView:
        m = _mapping(row)
        return cls(
            family_id=m["family_id"],
            document_id=m["document_id"],
            version_no=m["version_no"],
            at=m["at"],
            actor=m["actor"],
            action=m["action"],
            from_status=m["from_status"],
            to_status=m["to_status"],
            reason=m["reason"],
        )


@dataclass(frozen=True)
class TaskDetail:
    """One task in full, as every face shows it (``task ID --json``, ``GET
    /api/ingestion-tasks/ID``): the task, whether it is stalled, its provider
    requests and, when read, its history."""

    task: TaskView
    stalled: bool
    requests: list[ProviderRequestView]
    history: list[TaskEventView] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = self.task.to_dict() | {
            "stalled": self.stalled,
            "provider_requests": [r.to_dict() for r in self.requests],
        }
        if self.history is not None:
            out["history"] = [e.to_dict() for e in self.history]
        return out
