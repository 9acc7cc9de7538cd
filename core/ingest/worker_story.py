"""A worker's story, for logs and the dashboard: the events it tells, what it did,
and the context that names the worker and task in every log record."""

from __future__ import annotations

import os
import socket
from contextvars import ContextVar
from dataclasses import dataclass, field

# The worker, and the task, that the code running now works for: set for the worker's
# loop and for each task's coroutine (contextvars follow asyncio tasks), so a record
# logged deep in the pipeline or the parser pool, by code that knows no task, still
# names its task in the worker's log (core.cli.logs reads them).
current_worker_id: ContextVar[str | None] = ContextVar("ingestdesk_worker_id", default=None)
current_task_id: ContextVar[str | None] = ContextVar("ingestdesk_task_id", default=None)


@dataclass(frozen=True)
class WorkerEvent:
    """One line of a worker's story, for logs and the dashboard.

    ``kind`` says what happened: ``claimed``, ``progress``, ``missed``, ``idle``,
    ``handed_back``, ``reaped``, ``reconciled``, ``stopped``; and, once per outage,
    ``ledger_unavailable`` (the line says why and when the next look is) and
    ``ledger_back`` (see :mod:`core.ingest.outage`).
    """

    worker_id: str
    task_id: str | None
    kind: str
    line: str


@dataclass
class WorkerStats:
    claimed: list[str] = field(default_factory=list)
    outcomes: dict[str, str] = field(default_factory=dict)
    missed: list[str] = field(default_factory=list)
    # Tasks given back to the queue unfinished on stop or pause (running, or claimed
    # ahead), each once, in the order they went back.
    handed_back: list[str] = field(default_factory=list)


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"
