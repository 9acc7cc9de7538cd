"""What enters ingestdesk: display names, reading uploads with a cap, judging content.

Nothing here touches the ledger: an upload is judged (and refused with one clear
:class:`~core.errors.BadInput` line) before anything is stored or recorded.

Reading is bounded while it happens, never checked afterwards: at most ``max_bytes +
1`` bytes are read from any source, so ``/dev/zero``, ``/dev/urandom`` on stdin or a
file that grows while it is read cost at most the cap in memory. Only regular files
are opened: a FIFO would block the open itself, and a device never ends.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from core.errors import BadInput
from core.ingest.sniffing import kind_misnamed_pdf, refused_content, sniff_kind
from core.safe_text import neutralise, visible
from core.states import DocumentKind
from core.store import Original, StoredObject

NAME_MAX = 255  # characters of a display name

_UNSAFE_NAME = re.compile(r"\.\.|[/\\]")
# Opening never waits (a FIFO swapped in after the stat would block a plain open) and
# never makes a terminal our controlling one.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
# How a refusal names the content of a misnamed ``.pdf``, and the name that would
# let it in.
_CONTENT_NAMES: dict[DocumentKind, tuple[str, str]] = {
    DocumentKind.DOCX: ("a Word document (DOCX)", ".docx"),
    DocumentKind.PPTX: ("a PowerPoint deck (PPTX)", ".pptx"),
    DocumentKind.XLSX: ("an Excel workbook (XLSX)", ".xlsx"),
    DocumentKind.EPUB: ("an EPUB book", ".epub"),
    DocumentKind.HTML: ("an HTML page", ".html"),
    DocumentKind.CSV: ("CSV text (a table)", ".csv"),
    DocumentKind.TEXT: ("plain text", ".txt"),
    DocumentKind.MARKDOWN: ("Markdown text", ".md"),
}
_KINDS = (
    (stat.S_ISFIFO, "a pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


@dataclass(frozen=True)
class OverLimit:
    """A regular file over the upload limit, left unread (or read no further): its
    content is refused, as :func:`check_upload` refuses an oversized upload, while the
    path itself was fine. ``reason`` says so without naming the file."""

    reason: str


def display_name(name: str) -> str:
    """Neutralise a user-supplied filename into display text.

    Path separators, ``..``, control characters and invisible format characters
    (bidi overrides that reorder what is shown, zero-width joiners) become ``_``, so
    the name can be shown anywhere, reads as what it is, and can never be mistaken
    for a path.
    """
    cleaned = _UNSAFE_NAME.sub("_", neutralise(name, "_")).strip().lstrip(".")
    return cleaned[:NAME_MAX] or "unnamed"


def read_upload(path: Path, max_bytes: int) -> bytes:
    """Read a regular file meant for upload, at most ``max_bytes``; every way it can be
    wrong (missing, a folder, a FIFO or device, unreadable, too big) is BadInput."""
    data = read_upload_within(path, max_bytes)
    if isinstance(data, OverLimit):
        raise BadInput(f"{visible(str(path))}: {data.reason}")
    return data


def read_upload_within(path: Path, max_bytes: int) -> bytes | OverLimit:
    """:func:`read_upload`, but a regular file over ``max_bytes`` is answered (and
    left unread) rather than refused: a batch that skips refused content tells a
    file too big, which is skipped, from a path that is wrong, which refuses it.

    The file type is checked with ``stat`` before opening (opening a FIFO blocks until
    a writer appears), and again on the open descriptor in case the path was swapped
    in between.
    """
    shown = visible(str(path))
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise BadInput(f"{shown}: no such file") from exc
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise BadInput(f"{shown}: cannot read ({_why(exc)})") from exc
    _check_regular(info.st_mode, shown)
    if info.st_size > max_bytes:
        return OverLimit(_over_limit_reason(info.st_size, max_bytes))
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise BadInput(f"{shown}: cannot read ({_why(exc)})") from exc
    try:
        _check_regular(os.fstat(fd).st_mode, shown)
        with os.fdopen(fd, "rb") as fh:
            fd = -1  # the file object owns it now
            return _read_at_most(fh, max_bytes, shown)
    except OSError as exc:
        raise BadInput(f"{shown}: cannot read ({_why(exc)})") from exc
    finally:
        if fd >= 0:
            os.close(fd)


def read_stream(stream: BinaryIO | None, max_bytes: int, name: str) -> bytes:
    """Read an upload from a stream (stdin for ``-``) with the same cap as a file:
    at most ``max_bytes + 1`` bytes are ever read.

    Args:
        stream: The binary stream; None when it is closed (a process started with
            ``<&-`` has no ``sys.stdin``).
        max_bytes: The upload limit.
        name: The display name the upload will get, for messages.

    Raises:
        BadInput: The stream is closed or unreadable, or holds more than the cap.
    """
    shown = display_name(name)
    if stream is None:
        raise BadInput(f"{shown}: stdin is closed, nothing to read for '-'")
    try:
        return _read_capped(stream, max_bytes, f"{shown} (stdin)")
    except (OSError, ValueError) as exc:  # ValueError: read of a closed file
        raise BadInput(f"{shown}: cannot read stdin ({_why(exc)})") from exc


def check_upload(data: Original, name: str, max_bytes: int) -> DocumentKind:
    """Judge an upload without writing anything (or, for one received as a stream and
    already stored, by its size and first bytes): its kind, or BadInput saying why not."""
    judged = judge_upload(data, name, max_bytes)
    if not isinstance(judged, DocumentKind):  # a str enum: test the kind, not str
        raise BadInput(f"{display_name(name)}: {judged}")
    return judged


def judge_upload(data: Original, name: str, max_bytes: int) -> DocumentKind | str:
    """:func:`check_upload`'s judgement: the upload's kind, or why its content is
    refused (empty, over the limit, unsupported), a reason that does not name it."""
    size, head = (data.size, data.head) if isinstance(data, StoredObject) else (len(data), data)
    if not size:
        return "the file is empty (0 bytes)"
    if size > max_bytes:
        return _over_limit_reason(size, max_bytes)
    # A stored object's head is the first HEAD_BYTES, all that sniffing reads.
    kind = sniff_kind(head, name)
    if kind is None:
        misnamed = kind_misnamed_pdf(head, name)
        if misnamed is not None:
            return _misnamed_pdf(misnamed)
        known = refused_content(head)
        if known is not None:
            what, advice = known
            return (
                f"unsupported file type (judged by content): {what}, which ingestdesk "
                f"does not read; {advice} (ingestdesk formats lists what it takes)"
            )
        return (
            "unsupported file type (judged by content); "
            "ingestdesk takes PDF, DOCX, PPTX, XLSX, HTML, EPUB, CSV, Markdown, plain "
            "text and PNG, JPEG or TIFF images (ingestdesk formats lists them)"
        )
    return kind


def _misnamed_pdf(kind: DocumentKind) -> str:
    """Why a ``.pdf`` whose content is another format is refused: what it is, and the
    name under which it would be accepted."""
    # A kind without a phrase here (one added later) is still named, by its value:
    # judged by content, it is let in under any name but .pdf.
    what, suffix = _CONTENT_NAMES.get(kind, (f"{kind.value.upper()} content", f".{kind.value}"))
    return (
        f"not a PDF: the content is {what}, but the name says .pdf; "
        f"rename it to {suffix} to upload it"
    )


def _read_capped(stream: BinaryIO, max_bytes: int, shown: str) -> bytes:
    data = _read_at_most(stream, max_bytes, shown)
    if isinstance(data, OverLimit):
        raise BadInput(f"{shown}: {data.reason}")
    return data


def _read_at_most(stream: BinaryIO, max_bytes: int, shown: str) -> bytes | OverLimit:
    # One byte over the cap is enough to know it is too big; reading on would let a
    # source without end (a device, a pipe from /dev/urandom) fill memory.
    data: bytes | None = stream.read(max_bytes + 1)
    if data is None:  # a non-blocking stream with nothing ready: not an empty upload
        raise BadInput(f"{shown}: nothing to read yet (the stream is non-blocking)")
    if len(data) > max_bytes:
        return OverLimit(_over_limit_reason(None, max_bytes))
    return bytes(data)


def _check_regular(mode: int, shown: str) -> None:
    if stat.S_ISDIR(mode):
        raise BadInput(f"{shown}: is a directory, not a file")
    if stat.S_ISREG(mode):
        return
    what = next((label for test, label in _KINDS if test(mode)), "something else")
    raise BadInput(
        f"{shown}: is {what}, not a regular file (to upload from a pipe, give - and --name)"
    )


def _over_limit_reason(size: int | None, max_bytes: int) -> str:
    if size is None:  # a capped read stopped one byte past the limit
        return f"more than {max_bytes} bytes, over the upload limit (read no further)"
    return f"{size} bytes is over the upload limit of {max_bytes} bytes"


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or type(exc).__name__
