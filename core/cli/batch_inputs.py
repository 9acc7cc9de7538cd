"""What enters an ``upload``/``add`` batch: every input read (each capped at the
upload limit while it is read) and judged before anything is written, one line
naming every bad one; and, with ``--skip-refused``, the inputs whose content is
refused left out of the batch and reported instead.

Only content is skipped (empty, over the limit, of no accepted type: what
:func:`core.intake.check_upload` refuses). A path that is wrong (missing, a folder,
a device, unreadable), a stdin that cannot be read, or a bad key still refuses the
whole batch: those are mistakes in the command, not a bad document among good ones.
"""

from __future__ import annotations

import argparse
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from core.errors import BadInput
from core.safe_text import visible
from core.states import DocumentKind


@dataclass(frozen=True)
class Skipped:
    """An input ``--skip-refused`` left out of the batch.

    Attributes:
        file: The input as given on the command line (``-`` for stdin).
        name: The display name it would have had.
        reason: Why its content was refused, without its name.
    """

    file: str
    name: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"file": self.file, "name": self.name, "reason": self.reason}


@dataclass(frozen=True)
class Inputs:
    """What ``upload``/``add`` read: the batch, and (``--skip-refused`` only) the
    inputs left out of it, in command-line order."""

    batch: list[tuple[bytes, str]]
    skipped: list[Skipped] = field(default_factory=list)


def _stdin() -> BinaryIO | None:
    """stdin's bytes; None when the process has no stdin (started with ``<&-``)."""
    buffer: BinaryIO | None = getattr(sys.stdin, "buffer", None)
    return buffer


def read_stdin_first(args: argparse.Namespace, max_bytes: int) -> bytes | None:
    """The upload from stdin (``FILE`` is ``-``), read now, in the main thread; None
    when stdin is not an input.

    stdin can block for ever (a terminal, a pipe whose writer is silent). Read here, a
    Ctrl-C interrupts the read itself; read in a worker thread, it could not be
    stopped, and the process would wait for that thread before it could exit.
    """
    if args.files != ["-"] or not args.name:
        return None  # no stdin input, or one read_inputs refuses without reading
    from core.intake import read_stream

    return read_stream(_stdin(), max_bytes, args.name)


def read_inputs(
    args: argparse.Namespace,
    max_bytes: int,
    stop: threading.Event | None = None,
    stdin: bytes | None = None,
) -> Inputs:
    """Read every input of ``upload``/``add``, each capped at ``max_bytes``, naming
    every bad one on one line (BadInput) before anything is written; with
    ``--skip-refused``, each input whose content is refused is left out instead (see
    :class:`Inputs`), judged as soon as it is read so its bytes are not kept.

    Args:
        args: The parsed command: ``files`` (``-`` is stdin), ``name`` and
            ``skip_refused``.
        max_bytes: The upload limit.
        stop: Set when the command is interrupted: reading stops at the next file
            (this runs in a thread, which a Ctrl-C cannot cancel).
        stdin: What :func:`read_stdin_first` read; None reads stdin here.
    """
    files: list[str] = args.files
    if args.name and len(files) != 1:
        raise BadInput("--name applies to exactly one file")
    from core.intake import OverLimit, display_name, judge_upload, read_stream, read_upload_within

    skipping = skips_refused(args)
    inputs = Inputs([])
    problems: list[str] = []
    for f in files:
        if stop is not None and stop.is_set():
            break
        try:
            if f == "-":
                if not args.name:
                    raise BadInput("reading from stdin ('-') needs --name NAME")
                data: bytes | OverLimit = (
                    read_stream(_stdin(), max_bytes, args.name) if stdin is None else stdin
                )
                name = args.name
            elif not f:
                # Path("") is ".", which would be refused as "is a directory".
                raise BadInput("'': an empty path names no file")
            else:
                data, name = read_upload_within(Path(f), max_bytes), args.name or Path(f).name
        except BadInput as exc:
            problems.append(exc.message)
            continue
        if isinstance(data, OverLimit):  # a regular file too big to read: its content
            if skipping:
                inputs.skipped.append(Skipped(f, display_name(name), data.reason))
            else:
                problems.append(f"{visible(str(Path(f)))}: {data.reason}")
            continue
        judged = judge_upload(data, name, max_bytes) if skipping else None
        if judged is not None and not isinstance(judged, DocumentKind):  # a str enum
            inputs.skipped.append(Skipped(f, display_name(name), judged))
        else:
            inputs.batch.append((data, name))
    if problems:
        raise BadInput("; ".join(problems))
    return inputs


def judge_inputs(
    inputs: list[tuple[bytes, str]], max_bytes: int, idempotency_key: str | None
) -> None:
    """Refuse the batch now, as the ledger would once it is open: each input's content
    (one line naming every bad one) and the idempotency key's form.

    Raises:
        BadInput: An empty, oversized or unsupported input; a key that is not
            usable, or given with more than one file.
    """
    from core.intake import check_upload
    from core.ledger.idempotency import check_key

    problems: list[str] = []
    for data, name in inputs:
        try:
            check_upload(data, name, max_bytes)
        except BadInput as exc:
            problems.append(exc.message)
    if problems:
        raise BadInput("; ".join(problems))
    if idempotency_key is not None:
        if len(inputs) != 1:
            raise BadInput("--idempotency-key names one request: give exactly one file")
        check_key(idempotency_key)


def skips_refused(args: argparse.Namespace) -> bool:
    """Whether the command was given ``--skip-refused``."""
    return bool(getattr(args, "skip_refused", False))


def check_skip_refused(args: argparse.Namespace) -> None:
    """``--skip-refused`` is for a batch: refused with ``--idempotency-key`` (a key
    names one request of exactly one file, and a repeat must answer what the first
    did, which a skipped file would make it unable to) and with ``--replaces`` (one
    file, the document's next version: skipping it would leave nothing to do).
    Refused before anything is read."""
    if not skips_refused(args):
        return
    if args.idempotency_key is not None:
        raise BadInput(
            "--skip-refused cannot be combined with --idempotency-key (a key names one "
            "request of exactly one file, which is added or refused whole)"
        )
    if getattr(args, "replaces", None) is not None:
        raise BadInput(
            "--skip-refused cannot be combined with --replaces (the one FILE is the "
            "document's next version: there is nothing to add without it)"
        )
