"""``/api/documents``: upload, read, submit, publish, chunks."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Request, Response

from core.api.auth import Operator, Publisher, Viewer
from core.api.context import ledger_of
from core.api.uploads import read_upload

router = APIRouter(prefix="/api/documents", tags=["documents"])

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="repeat the request with the same key: the first answer, nothing new",
    ),
]


@router.post(
    "",
    status_code=201,
    summary="Upload a document as a draft",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": ["file"],
                        "properties": {
                            "file": {"type": "string", "format": "binary"},
                            "name": {"type": "string"},
                        },
                    }
                }
            },
        }
    },
)
async def upload(
    request: Request, response: Response, caller: Operator, key: IdempotencyKey = None
) -> dict[str, Any]:
    """The file (form field ``file``, optional ``name``) is judged by its content and
    streamed in with the size cap checked as it arrives; 201 with the draft. With an
    ``Idempotency-Key``, a repeat answers 200 with the first draft and adds nothing."""
    ledger = ledger_of(request)
    sent = await read_upload(request, ledger.settings.max_upload_bytes)
    name = sent.name or sent.filename or "upload"
    if key is None:
        document = await ledger.operator.upload(sent.data, name)
    else:
        once = await ledger.operator.add_once(
            sent.data, name, key=key, submit=False, actor=caller.name
        )
        document = once.value[0]
        replayed(response, once.replayed)
    response.headers["Location"] = f"/api/documents/{document.document_id}"
    return document.to_dict()


@router.get("/{document_id}", summary="One document")
async def get_document(request: Request, document_id: str, caller: Viewer) -> dict[str, Any]:
    return (await ledger_of(request).reads.get_document(document_id)).to_dict()


@router.post("/{document_id}/submit", status_code=202, summary="Queue a task for a draft")
async def submit(
    request: Request,
    response: Response,
    document_id: str,
    caller: Operator,
    key: IdempotencyKey = None,
) -> dict[str, Any]:
    """202 Accepted: the task is queued and a worker will run it; poll ``Location``.
    With an ``Idempotency-Key``, a repeat answers 200 with the original task; the same
    key for another document is 422."""
    operator = ledger_of(request).operator
    if key is None:
        task = await operator.submit(document_id, actor=caller.name)
    else:
        once = await operator.submit_once(document_id, key=key, actor=caller.name)
        task = once.value
        replayed(response, once.replayed)
    response.headers["Location"] = f"/api/ingestion-tasks/{task.task_id}"
    return task.to_dict()


def replayed(response: Response, replay: bool) -> None:
    """A repeat is answered 200 (not 201/202) and says so in a header."""
    if replay:
        response.status_code = 200
        response.headers["Idempotent-Replayed"] = "true"


@router.post("/{document_id}/publish", summary="Publish a reviewed document")
async def publish(request: Request, document_id: str, caller: Publisher) -> dict[str, Any]:
    document = await ledger_of(request).versions.publish(document_id, actor=caller.name)
    return document.to_dict()


@router.get("/{document_id}/chunks", summary="A document's chunks")
async def chunks(request: Request, document_id: str, caller: Viewer) -> list[dict[str, Any]]:
    return [c.to_dict() for c in await ledger_of(request).reads.chunks(document_id)]
