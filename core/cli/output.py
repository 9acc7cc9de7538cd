"""What a command prints: exactly one JSON value on stdout under ``--json``, lines for
a person otherwise, errors included; and the one-line text forms of a task and a
document that several commands share.

Text for a person is escaped on its way out (:func:`core.safe_text.visible`): names,
ids, actors, reasons and error messages that quote input can hold control or
invisible characters (a row written by an older ingestdesk, or straight into the
database), and a terminal would obey them. JSON needs nothing more than
``json.dumps``' default ``ensure_ascii=True``, which escapes every control and
non-ASCII character; keep it that way.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from core.errors import BadInput, IngestDeskError
from core.safe_text import visible

if TYPE_CHECKING:
    from core.ledger import DocumentView, TaskView

PROG = "ingestdesk"  # the name errors and usage lines are printed under
# Set (to anything) for tracebacks, for a bug report: a worker log record's
# (core.cli.logs) and an unexpected exception's (core.cli.app); never shown by default.
# Here, not in core.cli.logs, so the command line is built without importing logging.
DEBUG_ENV = "INGESTDESK_DEBUG"
LOG_FORMATS = ("text", "json")  # a worker's --log-format
EXIT_OK = 0
EXIT_UNEXPECTED = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl+C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports `… | head` for any program


class Interrupted(IngestDeskError):
    """interrupted"""

    exit_code = EXIT_INTERRUPTED


class ReaderGone(Exception):
    """Whoever read stdout went away (``… | head`` closed its end of the pipe)."""


class OutputFailed(Exception):
    """stdout cannot take the answer (a full disk, an I/O error)."""


def write_line(line: str, stream: TextIO | None = None) -> None:
    """Print one line to ``stream`` (default stdout), turning a failed write into
    :class:`ReaderGone` or :class:`OutputFailed`, which the command line answers
    without a traceback. A closed stream (``>&-``: Python's ``sys.stdout`` is None)
    takes nothing, quietly."""
    stream = sys.stdout if stream is None else stream
    if stream is None:
        return
    try:
        print(line, file=stream)
    except BrokenPipeError as exc:
        raise ReaderGone from exc
    except OSError as exc:
        raise OutputFailed(exc.strerror or type(exc).__name__) from exc


def flush(stream: TextIO | None = None) -> None:
    """Flush ``stream`` (default stdout), with :func:`write_line`'s errors."""
    stream = sys.stdout if stream is None else stream
    if stream is None:
        return
    try:
        stream.flush()
    except BrokenPipeError as exc:
        raise ReaderGone from exc
    except OSError as exc:
        raise OutputFailed(exc.strerror or type(exc).__name__) from exc


class Output:
    """Collects a command's answer: one JSON value, or lines for a person."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    def emit(self, value: Any, text: str | Sequence[str]) -> None:
        """Print the answer: ``value`` as JSON under ``--json``, else ``text``'s lines
        (each escaped, so nothing in them can drive the terminal)."""
        if self.as_json:
            write_line(json.dumps(value, default=_json_default, sort_keys=True))
        else:
            lines = [text] if isinstance(text, str) else list(text)
            for line in lines:
                write_line(visible(line))

    def log(self, line: str) -> None:
        """A progress line for a person; silent under --json (stdout stays one value)."""
        if not self.as_json:
            write_line(visible(line))
            flush()

    def error(self, exc: IngestDeskError) -> int:
        """Report a refused command: one JSON value on stdout under ``--json``, else one
        ``ingestdesk: …`` line on stderr. Returns the exit code the error maps to."""
        if self.as_json:
            write_line(json.dumps({"error": {"kind": type(exc).__name__, "message": exc.message}}))
        else:
            write_line(f"{PROG}: {visible(exc.message)}", sys.stderr)
        return exc.exit_code


def usage_error(exc: BadInput, *, as_json: bool) -> int:
    """Report a command line that was not understood; the exit code (2).

    Under ``--json`` it is one JSON value of kind ``BadInput``, like any bad input;
    otherwise one ``ingestdesk: …`` line on stderr that says where the usage is.
    """
    if as_json:
        write_line(json.dumps({"error": {"kind": "BadInput", "message": exc.message}}))
    else:
        write_line(f"{PROG}: {visible(exc.message)}", sys.stderr)
    return exc.exit_code


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot serialise {type(value).__name__}")


def when(ts: float | None) -> str:
    """A ledger timestamp as UTC ``YYYY-MM-DD HH:MM:SS``; ``-`` for none."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def task_line(t: TaskView) -> str:
    """One task on one line: id, status, stage, progress, attempt, error code, name."""
    code = t.error_code.value if t.error_code else "-"
    name = visible(t.document_name or t.document_id[:8])
    return (
        f"{t.short_id}  {t.status.value:<10} {t.stage.value:<10} {t.completed:>4}/{t.total:<4} "
        f"attempt={t.attempt}  {code:<20} {name}"
    )


def document_line(d: DocumentView) -> str:
    """One document version on one line: id, version (``v2``), status, kind, size,
    file name."""
    return (
        f"{d.document_id[:8]}  v{d.version_no:<3} {d.status.value:<14} {d.kind.value:<8} "
        f"{d.size:>10}  {visible(d.filename)}"
    )
