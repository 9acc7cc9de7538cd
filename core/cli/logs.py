"""A worker process's log: every log record the process makes goes through one
handler and one formatter, printed as one line with its time (UTC), level and task id,
so the stage lines of tasks running side by side can be told apart; ``--log-format
json`` prints one JSON object per line instead.

Every record, not only the worker's own events: a parser warning
(:func:`core.ingest.parsing.log_parser_warnings`), a parser process that died
(:mod:`core.ingest.parse_pool`), an internal error in the pipeline, a library's
warning. Left to Python's last-resort handler, those once reached the terminal bare:
no time, no task, not JSON under ``--log-format json``, and with the escape sequences
a hostile PDF's key names carried. The task a record is about comes from the context
the worker sets for each task (:data:`core.ingest.worker.current_task_id`), so a line
logged deep in the parser pool names its task too.

Every message is escaped (:func:`core.safe_text.visible`) in both formats, and a
record's traceback (``exc_info``) is printed only with ``INGESTDESK_DEBUG`` set: the
operator's terminal gets one line per record, never a stack.

Failures, lost tasks and reaped leases are WARNING, everything else INFO. The event's
own line is kept whole as the message (``claimed task=… worker=…`` and ``claim missed
task=…`` are what scripts and the README's race demonstration look for).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TextIO

from core.cli.output import DEBUG_ENV
from core.safe_text import visible

if TYPE_CHECKING:
    from core.ingest.worker import WorkerEvent

LOGGER_NAME = "ingestdesk.worker"
SHORT_ID = 8  # characters of a task id in a text line, as the dashboard shows it
# Event kinds that say a task was taken away or failed, and the first word of the
# pipeline's lines that say how an attempt ended badly ("failed task=…",
# "retry_wait task=… error_code=…", "lost task=…").
WARNING_KINDS = frozenset({"reaped", "lost", "failed", "retry_wait", "ledger_unavailable"})
# The first words of the pipeline's lines that say how an attempt ended: such a line
# is that event (``"event": "failed"``), not "progress", in the JSON log.
OUTCOME_WORDS = frozenset({"succeeded", "failed", "retry_wait", "lost", "deferred"})
# The "event" of a record that is not a worker event (a parser warning, a library's).
LOG_EVENT = "log"


def level_of(event: WorkerEvent) -> int:
    """The logging level of an event: WARNING for failures, lost and reaped tasks."""
    first_word = event.line.split(" ", 1)[0]
    if event.kind in WARNING_KINDS or first_word in WARNING_KINDS:
        return logging.WARNING
    return logging.INFO


def kind_of(event: WorkerEvent) -> str:
    """The event a line is: a progress line that says how an attempt ended is that
    outcome (``failed``, ``retry_wait``, ``succeeded``…), whatever the kind it came as."""
    first_word = event.line.split(" ", 1)[0]
    if event.kind == "progress" and first_word in OUTCOME_WORDS:
        return first_word
    return event.kind


def _utc(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def _ids(record: logging.LogRecord) -> tuple[str | None, str | None]:
    """The record's (worker id, task id): its own, else the context's (a record
    logged while a task runs, by code that does not know the task)."""
    worker_id = getattr(record, "worker_id", None)
    task_id = getattr(record, "task_id", None)
    if worker_id is None or task_id is None:
        # Only while a worker runs is there a context to read, and by then its module
        # is loaded: importing it here costs a dictionary look-up, and importing it at
        # the top would load the ledger (SQLAlchemy) before the parser process starts
        # (see core.cli.worker).
        from core.ingest.worker import current_task_id, current_worker_id

        worker_id = worker_id or current_worker_id.get()
        task_id = task_id or current_task_id.get()
    return worker_id, task_id


def _traceback(record: logging.LogRecord) -> list[str] | None:
    """The record's traceback, line by line and escaped, under INGESTDESK_DEBUG only."""
    if not record.exc_info or not os.environ.get(DEBUG_ENV):
        return None
    text = "".join(traceback.format_exception(*record.exc_info))
    return [visible(line) for line in text.rstrip("\n").split("\n")]


class TextFormatter(logging.Formatter):
    """``2026-11-30T12:00:00.123Z INFO    task=3f2a9c1e stage=parse 0/3``, escaped for
    the terminal (a worker id is checked, but a line may quote a name, and a parser
    warning quotes the document)."""

    def format(self, record: logging.LogRecord) -> str:
        _, task_id = _ids(record)
        task = task_id[:SHORT_ID] if task_id else "-"
        line = visible(
            f"{_utc(record.created)} {record.levelname:<7} task={task:<{SHORT_ID}} "
            f"{record.getMessage()}"
        )
        stack = _traceback(record)
        return line if stack is None else "\n".join([line, *stack])


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, worker_id, task_id, event, message
    (escaped as a text line is, so a program that prints the message cannot be driven
    by it either; ``json.dumps`` escapes every other non-ASCII character)."""

    def format(self, record: logging.LogRecord) -> str:
        worker_id, task_id = _ids(record)
        value: dict[str, object] = {
            "time": _utc(record.created),
            "level": record.levelname,
            "worker_id": worker_id,
            "task_id": task_id,
            "event": getattr(record, "event_kind", None) or LOG_EVENT,
            "message": visible(record.getMessage()),
        }
        stack = _traceback(record)
        if stack is not None:
            value["traceback"] = stack
        return json.dumps(value, sort_keys=True)


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
    """One handler for every log record of the process for as long as the worker
    runs, and the callback that turns each worker event into a record.

    The handler sits on the root logger, where every logger's records end up (core's
    modules log under their own names; pypdf's records outside a parse are passed on
    there too), and on the ``ingestdesk.worker`` logger, whose events do not go on to
    the root: an embedding program's root handlers do not print them a second time.

    Args:
        stream: Where lines go (stdout, or stderr under ``--json``); None (a closed
            stream) drops them.
        fmt: ``text`` or ``json``.
    """
    events = logging.getLogger(LOGGER_NAME)
    root = logging.getLogger()
    handler: logging.Handler = logging.NullHandler() if stream is None else LogHandler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    events.addHandler(handler)
    events.setLevel(logging.INFO)
    # The root logger may have handlers (an embedding program's): the events are ours.
    events.propagate = False
    root.addHandler(handler)

    def log(event: WorkerEvent) -> None:
        events.log(
            level_of(event),
            event.line,
            extra={
                "worker_id": event.worker_id,
                "task_id": event.task_id,
                "event_kind": kind_of(event),
            },
        )

    try:
        yield log
    finally:
        root.removeHandler(handler)
        events.removeHandler(handler)
