"""``/api/ingestion-tasks``: read, list (keyset pages), cancel, retry."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from core.api.auth import Operator, Viewer
from core.api.context import ledger_of
from core.errors import BadInput
from core.filters import parse_filter
from core.ledger import TaskPosition
from core.states import ErrorCode, TaskStatus

router = APIRouter(prefix="/api/ingestion-tasks", tags=["ingestion tasks"])


PAGE_DEFAULT = 100  # tasks per page unless asked
PAGE_MAX = 1000  # tasks per page at most


def encode_cursor(position: TaskPosition) -> str:
    raw = json.dumps([position.created_at, position.task_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> TaskPosition:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, task_id = json.loads(raw)
        return TaskPosition(float(created_at), str(task_id))
    except (binascii.Error, ValueError, TypeError) as exc:
        raise BadInput("cursor: not a cursor this API handed out") from exc


@router.get("", summary="Tasks, newest first, a page at a time")
async def list_tasks(
    request: Request,
    caller: Viewer,
    status: TaskStatus | None = None,
    error_code: ErrorCode | None = None,
    filter: Annotated[str | None, Query(description="the filter language of the CLI")] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = PAGE_DEFAULT,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
) -> dict[str, Any]:
    """``next_cursor`` continues after this page (null on the last page)."""
    tasks = await ledger_of(request).reads.list_tasks(
        status=status,
        error_code=error_code,
        filter=parse_filter(filter) if filter is not None else None,
        limit=limit + 1,  # one more tells whether another page follows
        before=decode_cursor(cursor) if cursor else None,
    )
    page = tasks[:limit]
    more = len(tasks) > limit
    return {
        "tasks": [t.to_dict() for t in page],
        "next_cursor": encode_cursor(TaskPosition.of(page[-1])) if more else None,
    }


@router.get("/{task_id}", summary="One task")
async def get_task(
    request: Request,
    task_id: str,
    caller: Viewer,
    history: Annotated[bool, Query(description="include the audit history")] = False,
) -> dict[str, Any]:
    ledger = ledger_of(request)
    task = await ledger.reads.get_task(task_id)
    value = task.to_dict()
    if history:
        value["history"] = [e.to_dict() for e in await ledger.reads.task_history(task.task_id)]
    return value


@router.delete("/{task_id}", summary="Cancel a queued, running or retry_wait task")
async def cancel(
    request: Request, task_id: str, caller: Operator, reason: str | None = None
) -> dict[str, Any]:
    task = await ledger_of(request).operator.cancel(task_id, actor=caller.name, reason=reason)
    return task.to_dict()


@router.post("/{task_id}/retry", summary="Requeue a failed task")
async def retry(
    request: Request, task_id: str, caller: Operator, reason: str | None = None
) -> dict[str, Any]:
    task = await ledger_of(request).operator.retry(task_id, actor=caller.name, reason=reason)
    return task.to_dict()
