"""``/api/documents``: upload, read, submit, publish, chunks."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response

from core.api.auth import Caller, requires
from core.api.context import ledger_of
from core.api.uploads import read_upload
from core.states import Role

router = APIRouter(prefix="/api/documents", tags=["documents"])

Viewer = Annotated[Caller, Depends(requires(Role.VIEWER))]
Operator = Annotated[Caller, Depends(requires(Role.OPERATOR))]
Publisher = Annotated[Caller, Depends(requires(Role.PUBLISHER))]


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
async def upload(request: Request, response: Response, caller: Operator) -> dict[str, Any]:
    """The file (form field ``file``, optional ``name``) is judged by its content and
    streamed in with the size cap checked as it arrives; 201 with the draft."""
    ledger = ledger_of(request)
    sent = await read_upload(request, ledger.settings.max_upload_bytes)
    name = sent.name or sent.filename or "upload"
    document = await ledger.operator.upload(sent.data, name)
    response.headers["Location"] = f"/api/documents/{document.document_id}"
    return document.to_dict()


@router.get("/{document_id}", summary="One document")
async def get_document(request: Request, document_id: str, caller: Viewer) -> dict[str, Any]:
    return (await ledger_of(request).reads.get_document(document_id)).to_dict()


@router.post("/{document_id}/submit", status_code=202, summary="Queue a task for a draft")
async def submit(
    request: Request, response: Response, document_id: str, caller: Operator
) -> dict[str, Any]:
    """202 Accepted: the task is queued and a worker will run it; poll ``Location``."""
    task = await ledger_of(request).operator.submit(document_id, actor=caller.name)
    response.headers["Location"] = f"/api/ingestion-tasks/{task.task_id}"
    return task.to_dict()


@router.post("/{document_id}/publish", summary="Publish a reviewed document")
async def publish(request: Request, document_id: str, caller: Publisher) -> dict[str, Any]:
    document = await ledger_of(request).operator.publish(document_id, actor=caller.name)
    return document.to_dict()


@router.get("/{document_id}/chunks", summary="A document's chunks")
async def chunks(request: Request, document_id: str, caller: Viewer) -> list[dict[str, Any]]:
    return [c.to_dict() for c in await ledger_of(request).reads.chunks(document_id)]
