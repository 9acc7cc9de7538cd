"""What enters ingestdesk: display names, reading uploads with a cap, judging content.

Nothing here touches the ledger: an upload is judged (and refused with one clear
:class:`~core.errors.BadInput` line) before anything is stored or recorded.
"""

from __future__ import annotations

import re
from pathlib import Path

from core.errors import BadInput
from core.ingest.sniffing import sniff_kind
from core.safe_text import neutralise
from core.states import DocumentKind

NAME_MAX = 255  # characters of a display name

_UNSAFE_NAME = re.compile(r"\.\.|[/\\]")


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
    """Read a file meant for upload, turning every way it can be wrong into BadInput."""
    if not path.exists():
        raise BadInput(f"{path}: no such file")
    if path.is_dir():
        raise BadInput(f"{path}: is a directory, not a file")
    size = path.stat().st_size
    if size > max_bytes:
        raise BadInput(f"{path}: {size} bytes is over the upload limit of {max_bytes} bytes")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise BadInput(f"{path}: cannot read ({exc.strerror or type(exc).__name__})") from exc


def check_upload(data: bytes, name: str, max_bytes: int) -> DocumentKind:
    """Judge an upload without writing anything: its kind, or BadInput saying why not."""
    if not data:
        raise BadInput(f"{display_name(name)}: the file is empty (0 bytes)")
    if len(data) > max_bytes:
        raise BadInput(
            f"{display_name(name)}: {len(data)} bytes is over the upload limit of {max_bytes} bytes"
        )
    kind = sniff_kind(data, name)
    if kind is None:
        raise BadInput(
            f"{display_name(name)}: unsupported file type (judged by content); "
            "ingestdesk takes PDF, Markdown and plain text"
        )
    return kind
