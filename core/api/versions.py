"""Document versions and the review desk over HTTP: a document's versions and
history, the review queue and a candidate's diff, and a person's decisions —
publish, reject, withdraw — and deleting a document.

The decisions go through ``ledger.versions``, as the CLI's do: the ledger's rule is
the answer (a refused move is 409 with the ledger's one-line message). A reason and
``expect_version`` may be sent as a JSON body or as query parameters.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from core.api.auth import Publisher, Viewer
from core.api.context import ledger_of
from core.api.problems import responses
from core.api.routing import GuardedRoute
from core.errors import BadInput
from core.states import ROW_VERSION_MAX

router = APIRouter(tags=["versions and review"], route_class=GuardedRoute)


DOC = "/api/documents/{document_id}"
REASON_HELP = "why, kept in the document's history"
# What each kind of endpoint may answer besides 401/403, as problem+json.
READ_ERRORS = responses({404: "no such document"})
DECISION_ERRORS = responses(
    {
        404: "no such document",
        409: "the move is refused: the version is not in a state it can leave this way, "
        "(expect_version) it changed since you looked, or (publish, NeedsAcceptance) it "
        "is flagged for review and accept_low_confidence was not given",
        422: "a missing reason, or a malformed request",
    }
)


class PublishRequest(BaseModel):
    """An optional body of ``publish``: the row version the reviewer looked at."""

    model_config = ConfigDict(extra="forbid")

    expect_version: int | None = Field(
        None,
        ge=1,
        le=ROW_VERSION_MAX,
        description="the row version (the document's `version`) you reviewed: if it "
        "changed since, publish is refused with 409",
    )
    reason: str | None = Field(None, description=REASON_HELP)
    accept_low_confidence: bool | None = Field(
        None,
        description="publish a version flagged for review (pages read by OCR under the "
        "ledger's confidence threshold, or skipped) as read; without it such a version "
        "is refused with 409 NeedsAcceptance. The history records what was accepted",
    )


class ReasonRequest(BaseModel):
    """The body of ``reject`` and ``withdraw``: the reason is required (a request
    without one is 422, with the ledger's message, as on the CLI)."""

    # Listed as required; a missing reason reaches the ledger, which refuses it with
    # the same one-line message the CLI prints.
    model_config = ConfigDict(extra="forbid", json_schema_extra={"required": ["reason"]})

    reason: str | None = Field(None, description=REASON_HELP)


QueryReason = Annotated[
    str | None, Query(description=f"{REASON_HELP} (instead of the JSON body's)")
]


def either(field: str, in_body: Any, in_query: Any) -> Any:
    """A value given in the body or the query; both, and differing, is 422."""
    if in_body is not None and in_query is not None and in_body != in_query:
        raise BadInput(f"{field} is given twice, differently: in the query and in the body")
    return in_body if in_body is not None else in_query


# ------------------------------------------------------------------- reads


@router.get(f"{DOC}/versions", summary="Every version of a document", responses=READ_ERRORS)
async def versions(request: Request, document_id: str, caller: Viewer) -> list[dict[str, Any]]:
    """Oldest first; any version's id (or a unique prefix) names the document."""
    return [v.to_dict() for v in await ledger_of(request).reads.versions(document_id)]


@router.get(f"{DOC}/history", summary="A document's history", responses=READ_ERRORS)
async def history(request: Request, document_id: str, caller: Viewer) -> list[dict[str, Any]]:
    """Every version's uploads, publishes, rejections, withdrawals, retirements and
    deletion, with actor, time and reason, oldest first. A deleted document's
    history stays readable by its full id."""
    events = await ledger_of(request).reads.document_history(document_id)
    return [e.to_dict() for e in events]


@router.get(
    f"{DOC}/review",
    summary="A version against the published one, as a reviewer sees it",
    responses=READ_ERRORS,
)
async def review(request: Request, document_id: str, caller: Viewer) -> dict[str, Any]:
    """Chunk and page counts before and after, and the lines of text added and
    removed (``published`` is null for a document's first version)."""
    reads = ledger_of(request).reads
    diff = await reads.review(document_id)
    summary, _ = await reads.pages(diff.candidate.document_id)
    # The flag a publish would meet, beside what changed.
    return dataclasses.asdict(diff) | {"page_summary": summary.to_dict()}


@router.get("/api/review-queue", summary="Versions waiting for review, oldest first")
async def review_queue(request: Request, caller: Viewer) -> list[dict[str, Any]]:
    return [d.to_dict() for d in await ledger_of(request).reads.review_queue()]


# --------------------------------------------------------------- decisions


@router.post(f"{DOC}/publish", summary="Publish a reviewed version", responses=DECISION_ERRORS)
async def publish(
    request: Request,
    document_id: str,
    caller: Publisher,
    body: Annotated[PublishRequest | None, Body()] = None,
    expect_version: Annotated[
        int | None,
        Query(ge=1, le=ROW_VERSION_MAX, description="as the body's, for clients without a body"),
    ] = None,
    reason: QueryReason = None,
    accept_low_confidence: Annotated[
        bool | None, Query(description="as the body's, for clients without a body")
    ] = None,
) -> dict[str, Any]:
    """review_pending (or withdrawn) → published; the document's previously published
    version is retired in the same transaction, so search finds one or the other. A
    version flagged for review is published only with ``accept_low_confidence``."""
    ledger = ledger_of(request)
    accept = either(
        "accept_low_confidence", body.accept_low_confidence if body else None, accept_low_confidence
    )
    document = await ledger.versions.publish(
        document_id,
        actor=caller.name,
        expected_version=either(
            "expect_version", body.expect_version if body else None, expect_version
        ),
        reason=either("reason", body.reason if body else None, reason),
        accept_low_confidence=bool(accept),
    )
    summary, _ = await ledger.reads.pages(document.document_id)
    return document.to_dict() | {"page_summary": summary.to_dict()}


ReasonBody = Annotated[ReasonRequest | None, Body()]
NEEDS_BODY = {"requestBody": {"required": True}}


@router.post(
    f"{DOC}/reject",
    summary="Turn a version waiting for review down",
    responses=DECISION_ERRORS,
    openapi_extra=NEEDS_BODY,
)
async def reject(
    request: Request,
    document_id: str,
    caller: Publisher,
    body: ReasonBody = None,
    reason: QueryReason = None,
) -> dict[str, Any]:
    """review_pending → draft: its chunks are dropped and the reason kept; it may be
    submitted again."""
    document = await ledger_of(request).versions.reject(
        document_id,
        actor=caller.name,
        reason=either("reason", body.reason if body else None, reason) or "",
    )
    return document.to_dict()


@router.post(
    f"{DOC}/withdraw",
    summary="Take a published version out of search",
    responses=DECISION_ERRORS,
    openapi_extra=NEEDS_BODY,
)
async def withdraw(
    request: Request,
    document_id: str,
    caller: Publisher,
    body: ReasonBody = None,
    reason: QueryReason = None,
) -> dict[str, Any]:
    """published → withdrawn: kept, chunks and all, and it may be published again."""
    document = await ledger_of(request).versions.withdraw(
        document_id,
        actor=caller.name,
        reason=either("reason", body.reason if body else None, reason) or "",
    )
    return document.to_dict()


@router.delete(
    DOC,
    summary="Delete a document: every version, with its chunks",
    responses=responses(
        {404: "no such document", 409: "a task of the document is running: cancel it first"}
    ),
)
async def delete(
    request: Request, document_id: str, caller: Publisher, reason: QueryReason = None
) -> dict[str, Any]:
    """A publisher's: deleting takes a published document out of search, which an
    operator may not do by withdrawing it.

    Any version's id names the whole document, and every version goes: the answer
    lists them (200), so a client that named one version sees what else was removed.
    Refused (409) while one of its tasks is running; its queued tasks fail with
    ``document_not_found`` when claimed. The history stays."""
    removed = await ledger_of(request).versions.delete(
        document_id, actor=caller.name, reason=reason
    )
    return {"family_id": removed[0].family_id, "deleted": [v.to_dict() for v in removed]}
