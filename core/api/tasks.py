"""``/api/ingestion-tasks``: read, list (keyset pages), cancel, retry."""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import math
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BeforeValidator
from starlette.responses import JSONResponse, Response

from core.api.auth import Operator, Viewer
from core.api.context import filtered_reads_of, ledger_of
from core.api.problems import responses
from core.api.routing import GuardedRoute
from core.errors import BadInput
from core.filters import parse_filter
from core.ledger import TaskPosition
from core.states import ErrorCode, TaskStatus

router = APIRouter(
    prefix="/api/ingestion-tasks", tags=["ingestion tasks"], route_class=GuardedRoute
)


PAGE_DEFAULT = 100  # tasks per page unless asked
PAGE_MAX = 1000  # tasks per page at most


def encode_cursor(position: TaskPosition) -> str:
    raw = json.dumps([position.created_at, position.task_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> TaskPosition:
    not_ours = BadInput("cursor: not a cursor this API handed out")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, task_id = json.loads(raw)
    except (binascii.Error, ValueError, TypeError, RecursionError) as exc:
        raise not_ours from exc
    # Exactly what encode_cursor writes: a finite number and an id. A NaN (or "nan",
    # which float() would take) compares false with every time, so a tampered cursor
    # would be answered with an empty page instead of a refusal.
    if (
        isinstance(created_at, bool)
        or not isinstance(created_at, int | float)
        or not math.isfinite(created_at)
        or not isinstance(task_id, str)
        or not task_id
    ):
        raise not_ours
    return TaskPosition(float(created_at), task_id)


def _blank_is_absent(value: object) -> object:
    return None if value == "" else value


# An empty query value (``?status=``, what an HTML form sends for "any") narrows
# nothing, as an absent one. A read is where "no condition" rightly means every task;
# the CLI refuses an empty filter only for bulk actions, where it would mean acting
# on every task, and this API has no bulk actions.
Blank = BeforeValidator(_blank_is_absent)

NOT_FOUND = {404: "no task has this id"}


@router.get("", summary="Tasks, newest first, a page at a time", response_model=dict[str, Any])
async def list_tasks(
    request: Request,
    caller: Viewer,
    status: Annotated[TaskStatus | None, Blank] = None,
    error_code: Annotated[ErrorCode | None, Blank] = None,
    filter: Annotated[
        str | None, Blank, Query(description="the filter language of the CLI")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = PAGE_DEFAULT,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
) -> Response:
    """``next_cursor`` continues after this page (null on the last page)."""
    task_filter = parse_filter(filter) if filter is not None else None
    reads = ledger_of(request).reads
    turn = (
        filtered_reads_of(request).turn() if task_filter is not None else contextlib.nullcontext()
    )
    async with turn:
        tasks = await reads.list_tasks(
            status=status,
            error_code=error_code,
            filter=task_filter,
            limit=limit + 1,  # one more tells whether another page follows
            before=decode_cursor(cursor) if cursor else None,
        )
        page = tasks[:limit]
        more = len(tasks) > limit
        # Rendered here, straight from plain dicts: FastAPI's own encoding walks every
        # value of a 100-task page again (~5 ms of CPU on the event loop, where
        # json.dumps takes ~0.5), and a client sending the largest filter back to back
        # would make every other caller wait that long (bench.api's hostile row).
        return JSONResponse(
            {
                "tasks": [t.to_dict() for t in page],
                "next_cursor": encode_cursor(TaskPosition.of(page[-1])) if more else None,
            }
        )


@router.get("/{task_id}", summary="One task", responses=responses(NOT_FOUND))
async def get_task(
    request: Request,
    task_id: str,
    caller: Viewer,
    history: Annotated[bool, Query(description="include the audit history")] = False,
) -> dict[str, Any]:
    """The fields of ``ingestdesk task ID --json``: ``stalled`` (running, and its
    progress has not moved for a while) and ``provider_requests`` too; the history
    only when asked."""
    ledger = ledger_of(request)
    task = await ledger.reads.get_task(task_id)
    return (await ledger.task_detail(task, history=history)).to_dict()


@router.delete(
    "/{task_id}",
    summary="Cancel a queued, running or retry_wait task",
    responses=responses({**NOT_FOUND, 409: "the task is not queued, running or retry_wait"}),
)
async def cancel(
    request: Request, task_id: str, caller: Operator, reason: str | None = None
) -> dict[str, Any]:
    task = await ledger_of(request).operator.cancel(task_id, actor=caller.name, reason=reason)
    return task.to_dict()


@router.post(
    "/{task_id}/retry",
    summary="Requeue a failed task",
    responses=responses(
        {**NOT_FOUND, 409: "the task (or its document) has not failed: nothing to retry"}
    ),
)
async def retry(
    request: Request, task_id: str, caller: Operator, reason: str | None = None
) -> dict[str, Any]:
    task = await ledger_of(request).operator.retry(task_id, actor=caller.name, reason=reason)
    return task.to_dict()
