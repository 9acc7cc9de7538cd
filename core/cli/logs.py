"""A worker process's log: each :class:`~core.ingest.worker.WorkerEvent` becomes a
record of the standard :mod:`logging` module, printed as one line with its time (UTC),
level and task id, so the stage lines of tasks running side by side can be told
apart; ``--log-format json`` prints one JSON object per line instead.

Failures, lost tasks and reaped leases are WARNING, everything else INFO. The event's
own line is kept whole as the message (``claimed task=… worker=…`` and ``claim missed
task=…`` are what scripts and the README's race demonstration look for).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TextIO

from core.safe_text import visible

if TYPE_CHECKING:
    from core.ingest.worker import WorkerEvent

LOGGER_NAME = "ingestdesk.worker"
LOG_FORMATS = ("text", "json")
SHORT_ID = 8  # characters of a task id in a text line, as the dashboard shows it
# Event kinds that say a task was taken away or failed, and the first word of the
# pipeline's lines that say how an attempt ended badly ("failed task=…",
# "retry_wait task=… error_code=…", "lost task=…").
WARNING_KINDS = frozenset({"reaped", "lost", "failed", "retry_wait"})


def level_of(event: WorkerEvent) -> int:
    """The logging level of an event: WARNING for failures, lost and reaped tasks."""
    first_word = event.line.split(" ", 1)[0]
    if event.kind in WARNING_KINDS or first_word in WARNING_KINDS:
        return logging.WARNING
    return logging.INFO


def _utc(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


class TextFormatter(logging.Formatter):
    """``2026-11-30T12:00:00.123Z INFO    task=3f2a9c1e stage=parse 0/3``, escaped for
    the terminal (a worker id is checked, but a line may quote a name)."""

    def format(self, record: logging.LogRecord) -> str:
        task_id = getattr(record, "task_id", None)
        task = task_id[:SHORT_ID] if task_id else "-"
        return visible(
            f"{_utc(record.created)} {record.levelname:<7} task={task:<{SHORT_ID}} "
            f"{record.getMessage()}"
        )


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, worker_id, task_id, event, message
    (``json.dumps`` escapes every control and non-ASCII character)."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(
            {
                "time": _utc(record.created),
                "level": record.levelname,
                "worker_id": getattr(record, "worker_id", None),
                "task_id": getattr(record, "task_id", None),
                "event": getattr(record, "event_kind", None),
                "message": record.getMessage(),
            },
            sort_keys=True,
        )


class LogHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler whose output failing (the reader of a pipe went away, a full
    disk) ends the log quietly, not the worker: its tasks still finish or are handed
    back, instead of a traceback per line on stderr."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self.failed = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.failed:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            self.failed = True
            return
        super().handleError(record)


@contextmanager
def worker_log(stream: TextIO | None, fmt: str) -> Iterator[Callable[[WorkerEvent], None]]:
    """A handler on the ``ingestdesk.worker`` logger for as long as the worker runs,
    and the callback that turns each event into a record.

    Args:
        stream: Where lines go (stdout, or stderr under ``--json``); None (a closed
            stream) drops them.
        fmt: ``text`` or ``json``.
    """
    logger = logging.getLogger(LOGGER_NAME)
    handler: logging.Handler = logging.NullHandler() if stream is None else LogHandler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    # The root logger may have handlers (an embedding program's): this log is ours.
    logger.propagate = False

    def log(event: WorkerEvent) -> None:
        logger.log(
            level_of(event),
            event.line,
            extra={
                "worker_id": event.worker_id,
                "task_id": event.task_id,
                "event_kind": event.kind,
            },
        )

    try:
        yield log
    finally:
        logger.removeHandler(handler)
