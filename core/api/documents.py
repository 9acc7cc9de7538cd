"""``/api/documents``: upload (a new document, or the next version of one), read,
submit, chunks. Versions, review decisions and deletion are :mod:`core.api.versions`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Request, Response

from core.api.auth import Operator, Viewer
from core.api.context import ledger_of
from core.api.problems import responses
from core.api.routing import GuardedRoute
from core.api.uploads import read_upload, upload_slots_of
from core.errors import BadInput
from core.ledger import Ledger
from core.ledger.views import DocumentView
from core.store import track_created

router = APIRouter(prefix="/api/documents", tags=["documents"], route_class=GuardedRoute)

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
    summary="Upload a document, or the next version of one, as a draft",
    responses=responses(
        {
            400: "the multipart body cannot be read, or has too many parts or too long a field",
            404: "replaces names no document",
            409: "a version of the document replaced is processing",
            413: "the file is over the upload limit",
            415: "not multipart/form-data",
            422: "not a document ingestdesk reads, or a malformed form",
        }
    ),
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
                            "replaces": {
                                "type": "string",
                                "description": "a document's id: the upload becomes "
                                "its next version (a draft; search keeps finding the "
                                "published version until this one is published)",
                            },
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
    streamed in with the size cap checked as it arrives; 201 with the draft. With
    ``replaces`` (a document's id) it is that document's next version: unpublished
    candidates nobody is processing are superseded. With an ``Idempotency-Key``, a
    repeat answers 200 with the first draft and adds nothing (not with ``replaces``)."""
    ledger = ledger_of(request)
    # The objects this request stores new: taken back if it is refused after that (a
    # reused key, a version refused, a ledger gone), as the CLI does.
    with track_created() as stored_new:
        try:
            document = await _add(request, response, ledger, caller.name, key)
        except BaseException:
            await ledger.take_back(stored_new)
            raise
    response.headers["Location"] = f"/api/documents/{document.document_id}"
    return document.to_dict()


async def _add(
    request: Request, response: Response, ledger: Ledger, actor: str, key: str | None
) -> DocumentView:
    sent = await read_upload(
        request, ledger.operator.store, ledger.settings.max_upload_bytes, upload_slots_of(request)
    )
    name = sent.name or sent.filename or "upload"
    if sent.replaces is not None:
        if key is not None:
            raise BadInput("an Idempotency-Key cannot be used with replaces (not supported yet)")
        return await ledger.versions.replace(sent.replaces, sent.original, name, actor=actor)
    if key is None:
        # add_many, not upload: the token's name is the actor in the history.
        [(document, _)] = await ledger.operator.add_many(
            [(sent.original, name)], submit=False, actor=actor
        )
        return document
    once = await ledger.operator.add_once(sent.original, name, key=key, submit=False, actor=actor)
    replayed(response, once.replayed)
    return once.value[0]


NO_DOCUMENT = {404: "no document has this id"}


@router.get("/{document_id}", summary="One document", responses=responses(NO_DOCUMENT))
async def get_document(request: Request, document_id: str, caller: Viewer) -> dict[str, Any]:
    """The version, its page summary with the review flag (``page_summary.flagged``
    and its one-line ``reason``), and how each page was read (``pages``: page,
    decision, chars, confidence, ocr_seconds, reason; empty for formats without
    pages)."""
    reads = ledger_of(request).reads
    document = await reads.get_document(document_id)
    summary, pages = await reads.pages(document.document_id)
    return document.to_dict() | {
        "page_summary": summary.to_dict(),
        "pages": [p.to_dict() for p in pages],
    }


@router.post(
    "/{document_id}/submit",
    status_code=202,
    summary="Queue a task for a draft",
    responses=responses(
        {
            **NO_DOCUMENT,
            409: "the document is not a draft (it is processing, or was processed)",
            422: "the Idempotency-Key was used for another document",
        }
    ),
)
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


@router.get(
    "/{document_id}/chunks", summary="A document's chunks", responses=responses(NO_DOCUMENT)
)
async def chunks(request: Request, document_id: str, caller: Viewer) -> list[dict[str, Any]]:
    # The chunks `ingestdesk chunks ID` shows: for a document's name, those of the
    # version search finds once version 1 is retired.
    _, chunks = await ledger_of(request).reads.document_chunks(document_id)
    return [c.to_dict() for c in chunks]
