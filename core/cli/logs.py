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

import asyncio
import json
import logging
import math
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from core.cli.output import DEBUG_ENV
from core.safe_text import visible

if TYPE_CHECKING:
    from core.ingest.worker import WorkerEvent

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
# How long a line logged on the worker's event loop may wait in the stream's buffer
# (see LogHandler): what a reader of the log file sees late, or loses to a SIGKILL.
FLUSH_AFTER_S = 0.1  # seconds


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
    """``created`` (seconds since the epoch) as ``2026-11-30T12:00:00.123Z``: rounded
    to the microsecond and cut to the millisecond, as ``datetime.isoformat`` would."""
    global _second
    fraction, whole = math.modf(created)
    seconds, micros = divmod(int(whole) * 1_000_000 + round(fraction * 1_000_000), 1_000_000)
    if _second[0] != seconds:
        # A worker logs many lines a second: the calendar part is worked out once each.
        _second = (seconds, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)))
    return f"{_second[1]}.{micros // 1000:03d}Z"


_second: tuple[int, str] = (-1, "")  # the last second _utc formatted, and its text


def _context_ids(worker_id: str | None, task_id: str | None) -> tuple[str | None, str | None]:
    """``(worker id, task id)``, each the one given, else the context's (a record
    logged while a task runs, by code that does not know the task)."""
    if worker_id is None or task_id is None:
        # Only while a worker runs is there a context to read, and by then its module
        # is loaded: importing it here costs a dictionary look-up, and importing it at
        # the top would load the ledger (SQLAlchemy) before the parser process starts
        # (see core.cli.worker).
        from core.ingest.worker import current_task_id, current_worker_id

        worker_id = worker_id or current_worker_id.get()
        task_id = task_id or current_task_id.get()
    return worker_id, task_id


def _ids(record: logging.LogRecord) -> tuple[str | None, str | None]:
    """The record's (worker id, task id), see :func:`_context_ids`."""
    return _context_ids(getattr(record, "worker_id", None), getattr(record, "task_id", None))


def _traceback(record: logging.LogRecord) -> list[str] | None:
    """The record's traceback, line by line and escaped, under INGESTDESK_DEBUG only."""
    if not record.exc_info or not os.environ.get(DEBUG_ENV):
        return None
    text = "".join(traceback.format_exception(*record.exc_info))
    return [visible(line) for line in text.rstrip("\n").split("\n")]


@dataclass(frozen=True, slots=True)
class LogLine:
    """What one line of the log says: a log record's, or a worker event's."""

    created: float  # seconds since the epoch
    level: str  # INFO, WARNING, …
    worker_id: str | None
    task_id: str | None
    event: str  # the worker event's kind, or LOG_EVENT
    message: str


def _line_of(record: logging.LogRecord) -> LogLine:
    worker_id, task_id = _ids(record)
    event = getattr(record, "event_kind", None) or LOG_EVENT
    return LogLine(record.created, record.levelname, worker_id, task_id, event, record.getMessage())


class TextFormatter(logging.Formatter):
    """``2026-11-30T12:00:00.123Z INFO    task=3f2a9c1e stage=parse 0/3``, escaped for
    the terminal (a worker id is checked, but a line may quote a name, and a parser
    warning quotes the document)."""

    def format(self, record: logging.LogRecord) -> str:
        line = self.line(_line_of(record))
        stack = _traceback(record)
        return line if stack is None else "\n".join([line, *stack])

    def line(self, entry: LogLine) -> str:
        """One line, without a traceback (a worker event's whole line)."""
        task = entry.task_id[:SHORT_ID] if entry.task_id else "-"
        return visible(
            f"{_utc(entry.created)} {entry.level:<7} task={task:<{SHORT_ID}} {entry.message}"
        )


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, worker_id, task_id, event, message
    (escaped as a text line is, so a program that prints the message cannot be driven
    by it either; ``json.dumps`` escapes every other non-ASCII character)."""

    def format(self, record: logging.LogRecord) -> str:
        value = self._value(_line_of(record))
        stack = _traceback(record)
        if stack is not None:
            value["traceback"] = stack
        return json.dumps(value, sort_keys=True)

    def line(self, entry: LogLine) -> str:
        """One line, without a traceback (a worker event's whole line)."""
        return json.dumps(self._value(entry), sort_keys=True)

    @staticmethod
    def _value(entry: LogLine) -> dict[str, object]:
        return {
            "time": _utc(entry.created),
            "level": entry.level,
            "worker_id": entry.worker_id,
            "task_id": entry.task_id,
            "event": entry.event,
            "message": visible(entry.message),
        }


class LogHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler whose output failing (the reader of a pipe went away, a full
    disk) ends the log quietly, not the worker: its tasks still finish or are handed
    back, instead of a traceback per line on stderr.

    Given the worker's event loop, lines logged on the loop's thread are kept here and
    written together at most FLUSH_AFTER_S after the first of them, instead of one
    write each. A write to the file, pipe or terminal gives up the GIL, and the loop
    then waits to get it back while the worker's ledger thread runs: a write a line
    cost a small document a sixth of its time on the loop (six lines each; py-spy of
    one worker on 2 000 small documents, stdout a file). Python's own buffering does
    not help: services run with PYTHONUNBUFFERED=1 (most container images set it),
    and a terminal's stdout writes every line. A line from another thread (a
    library's warning) is written at once, after the lines kept before it."""

    def __init__(self, stream: TextIO, loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(stream)
        self.failed = False
        self._loop = loop
        self._loop_thread = threading.get_ident() if loop is not None else None
        self._kept: list[str] = []
        self._write_due: asyncio.TimerHandle | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.failed:
            return
        try:
            text = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self.write_line(text)

    def write_line(self, text: str) -> None:
        """Write one formatted line: soon on the loop's thread, at once elsewhere."""
        if self.failed:
            return
        loop = self._loop
        with self.lock:  # type: ignore[union-attr]  # createLock() made it
            self._kept.append(text)
            on_loop = threading.get_ident() == self._loop_thread
            if on_loop and loop is not None and not loop.is_closed():
                if self._write_due is None:
                    self._write_due = loop.call_later(FLUSH_AFTER_S, self.flush)
                return  # written when due
        self.flush()

    def flush(self) -> None:
        """Write every line kept so far (when due, and on the way out)."""
        with self.lock:  # type: ignore[union-attr]
            # A timer is the loop's to cancel; one left running finds nothing to write.
            if self._write_due is not None and threading.get_ident() == self._loop_thread:
                self._write_due.cancel()
                self._write_due = None
            kept, self._kept = self._kept, []
            if self.failed or not kept:
                return
            kept.append("")
            try:
                self.stream.write(self.terminator.join(kept))
                self.stream.flush()
            except (OSError, ValueError):  # ValueError: the stream was closed
                self.failed = True

    def handleError(self, record: logging.LogRecord) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            self.failed = True
            return
        super().handleError(record)


@contextmanager
def worker_log(stream: TextIO | None, fmt: str) -> Iterator[Callable[[WorkerEvent], None]]:
    """One handler for every log record of the process for as long as the worker
    runs, and the callback that writes each worker event as a line.

    The handler sits on the root logger, where every logger's records end up (core's
    modules log under their own names; pypdf's records outside a parse are passed on
    there too). The worker's events go straight to it, not through a logger: an
    embedding program's root handlers do not print them a second time.

    Args:
        stream: Where lines go (stdout, or stderr under ``--json``); None (a closed
            stream) drops them.
        fmt: ``text`` or ``json``.
    """
    root = logging.getLogger()
    handler: logging.Handler = (
        logging.NullHandler() if stream is None else LogHandler(stream, _running_loop())
    )
    formatter = JsonFormatter() if fmt == "json" else TextFormatter()
    handler.setFormatter(formatter)
    root.addHandler(handler)

    def log(event: WorkerEvent) -> None:
        if not isinstance(handler, LogHandler):
            return
        # Formatted here, not made into a LogRecord and passed down the logger: the
        # record's bookkeeping (process, thread, caller) was a third of a line's cost,
        # and only this handler ever saw the record.
        worker_id, task_id = _context_ids(event.worker_id, event.task_id)
        level = logging.getLevelName(level_of(event))
        entry = LogLine(time.time(), level, worker_id, task_id, kind_of(event), event.line)
        handler.write_line(formatter.line(entry))

    try:
        yield log
    finally:
        root.removeHandler(handler)
        handler.flush()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
