"""What a command prints: exactly one JSON value on stdout under ``--json``, lines for
a person otherwise, errors included; and the one-line text forms of a task and a
document that several commands share."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import BadInput, IngestDeskError

if TYPE_CHECKING:
    import argparse

    from core.ledger import DocumentView, TaskView

PROG = "ingestdesk"  # the name errors and usage lines are printed under
EXIT_OK = 0
EXIT_UNEXPECTED = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl+C


class Output:
    """Collects a command's answer: one JSON value, or lines for a person."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    def emit(self, value: Any, text: str | Sequence[str]) -> None:
        """Print the answer: ``value`` as JSON under ``--json``, else ``text``'s lines."""
        if self.as_json:
            print(json.dumps(value, default=_json_default, sort_keys=True))
        else:
            lines = [text] if isinstance(text, str) else list(text)
            for line in lines:
                print(line)

    def log(self, line: str) -> None:
        """A progress line for a person; silent under --json (stdout stays one value)."""
        if not self.as_json:
            print(line, flush=True)

    def error(self, exc: IngestDeskError) -> int:
        """Report a refused command: one JSON value on stdout under ``--json``, else one
        ``ingestdesk: …`` line on stderr. Returns the exit code the error maps to."""
        if self.as_json:
            print(json.dumps({"error": {"kind": type(exc).__name__, "message": exc.message}}))
        else:
            print(f"{PROG}: {exc.message}", file=sys.stderr)
        return exc.exit_code


def usage_error(parser: argparse.ArgumentParser, exc: BadInput, *, as_json: bool) -> int:
    """Report a command line that was not understood; the exit code (2).

    Under ``--json`` it is one JSON value of kind ``BadInput``, like any bad input;
    otherwise the root usage and the message go to stderr.
    """
    if as_json:
        print(json.dumps({"error": {"kind": "BadInput", "message": exc.message}}))
    else:
        parser.print_usage(sys.stderr)
        print(exc.message, file=sys.stderr)
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
    name = t.document_name or t.document_id[:8]
    return (
        f"{t.short_id}  {t.status.value:<10} {t.stage.value:<10} {t.completed:>4}/{t.total:<4} "
        f"attempt={t.attempt}  {code:<20} {name}"
    )


def document_line(d: DocumentView) -> str:
    """One document on one line: id, status, kind, size, file name."""
    return f"{d.document_id[:8]}  {d.status.value:<14} {d.kind.value:<8} {d.size:>10}  {d.filename}"
