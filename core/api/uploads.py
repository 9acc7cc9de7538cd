"""Reading a multipart upload as it streams in: to a file under the store, with the
size cap checked on the way, and only a few at once.

A framework's form parsing receives the whole body (into memory or a spooled file)
before the endpoint can look at it; a 10 GB upload would be read in full before being
refused. Here the body is fed chunk by chunk to python-multipart's push parser and
refused (413) the moment the ``file`` part passes the cap — and at once, when a
``Content-Length`` already says it will. The file part goes straight to an
``.incoming-*`` file in the object store, hashed as it arrives
(:meth:`core.store.Store.receive`): an upload costs WRITE_BUFFER_BYTES of
memory, not twice its size, and at most UPLOADS_AT_ONCE run at a time.

Every refusal made while the body is still arriving closes the connection
(:func:`~core.api.routing.hang_up`): the rest is never read.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fastapi import Request
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from core.api.problems import ApiProblem
from core.api.routing import hang_up
from core.store import Receiving, Store, StoredObject

if TYPE_CHECKING:
    pass

FORM_OVERHEAD_BYTES = 64 * 1024  # room for the multipart framing and the small fields
FIELD_MAX_BYTES = 4096  # bytes of a non-file field (name, replaces)
PARTS_MAX = 16  # parts of a form at most (it needs three: file, name, replaces)
PART_HEADERS_MAX_BYTES = 8 * 1024  # bytes of one part's header lines, names and values
PART_HEADER_LINES_MAX = 8  # header lines of one part (it needs one or two)
BOUNDARY_MAX_CHARS = 70  # RFC 2046 §5.1.1: a boundary is 1 to 70 characters
WRITE_BUFFER_BYTES = 1024 * 1024  # bytes of the file gathered before each write to disk
# Uploads received at once. Each holds a file descriptor, WRITE_BUFFER_BYTES and a
# share of the disk's bandwidth; past this, a new upload waits UPLOAD_SLOT_WAIT_S for
# a slot (a burst of a few is served), then is refused with 503 and Retry-After
# rather than queued without end (a queue would hold each waiting client's
# connection and buffers for as long as the slowest upload ahead of it takes).
UPLOADS_AT_ONCE = 4
UPLOAD_SLOT_WAIT_S = 5.0  # seconds a new upload waits for a slot before a 503
UPLOAD_RETRY_AFTER_S = 5  # seconds a refused client is told to wait (Retry-After)


@dataclass
class _Part:
    headers: dict[bytes, bytes] = field(default_factory=dict)
    data: bytearray = field(default_factory=bytearray)
    header_field: bytearray = field(default_factory=bytearray)
    header_value: bytearray = field(default_factory=bytearray)
    header_bytes: int = 0
    name: str = ""
    filename: str | None = None
    is_file: bool = False


@dataclass(frozen=True)
class Upload:
    original: StoredObject  # the file, already in the store
    filename: str | None
    name: str | None
    replaces: str | None = None  # the document this upload is the next version of


def upload_slots() -> asyncio.Semaphore:
    """The slots for uploads received at once (one per app)."""
    return asyncio.Semaphore(UPLOADS_AT_ONCE)


def upload_slots_of(request: Request) -> asyncio.Semaphore:
    slots: asyncio.Semaphore = request.app.state.upload_slots
    return slots


def _bad(detail: str) -> ApiProblem:
    return hang_up(ApiProblem(400, "BadInput", detail))


def _too_large(max_bytes: int) -> ApiProblem:
    return hang_up(
        ApiProblem(413, "BadInput", f"the file is over the upload limit of {max_bytes} bytes")
    )


def _text_field(parts: list[_Part], name: str) -> str | None:
    """A small form field's text (the first of that name), or None when absent or blank."""
    found = [p for p in parts if p.name == name and not p.is_file]
    text = bytes(found[0].data).decode("utf-8", "replace").strip() if found else ""
    return text or None


def _boundary(request: Request) -> bytes:
    kind, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise hang_up(
            ApiProblem(
                415, "BadInput", "send the document as multipart/form-data in the field 'file'"
            )
        )
    if len(boundary) > BOUNDARY_MAX_CHARS:
        # python-multipart refuses over 256 with an exception of its own; RFC 2046
        # allows 70, which every client keeps to.
        raise _bad(f"the multipart boundary is over {BOUNDARY_MAX_CHARS} characters")
    return boundary


async def read_upload(
    request: Request, store: Store, max_bytes: int, slots: asyncio.Semaphore
) -> Upload:
    """The ``file`` part (stored as it arrives) and the optional ``name`` and
    ``replaces`` fields of a multipart request.

    Raises:
        ApiProblem: 400/413/415/422 for the request's shape, 503 when UPLOADS_AT_ONCE
            uploads are running and none ends within UPLOAD_SLOT_WAIT_S.
    """
    boundary = _boundary(request)
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_bytes + FORM_OVERHEAD_BYTES:
        raise _too_large(max_bytes)
    try:
        await asyncio.wait_for(slots.acquire(), UPLOAD_SLOT_WAIT_S)
    except TimeoutError:
        raise hang_up(
            ApiProblem(
                503,
                "ServerBusy",
                f"{UPLOADS_AT_ONCE} uploads are being received; try again in "
                f"{UPLOAD_RETRY_AFTER_S} s",
                {"Retry-After": str(UPLOAD_RETRY_AFTER_S)},
            )
        ) from None
    try:
        return await _receive(request, store, boundary, max_bytes)
    finally:
        slots.release()


async def _receive(request: Request, store: Store, boundary: bytes, max_bytes: int) -> Upload:
    parts: list[_Part] = []
    state: dict[str, _Part | None] = {"current": None}
    pending = bytearray()  # file bytes parsed and not yet written
    receiving: list[Receiving] = []  # the file part's, once it begins

    def part() -> _Part:
        current = state["current"]
        assert current is not None  # the parser calls part_begin first
        return current

    def on_part_begin() -> None:
        if len(parts) >= PARTS_MAX:
            raise _bad(f"a form of more than {PARTS_MAX} parts")
        state["current"] = _Part()

    def on_header_field(data: bytes, start: int, end: int) -> None:
        _header_bytes(part(), end - start).header_field += data[start:end]

    def on_header_value(data: bytes, start: int, end: int) -> None:
        _header_bytes(part(), end - start).header_value += data[start:end]

    def on_header_end() -> None:
        p = part()
        if not p.header_field.strip():
            raise _bad("a part's header line has no name")
        if len(p.headers) >= PART_HEADER_LINES_MAX:
            raise _bad(f"a part with more than {PART_HEADER_LINES_MAX} header lines")
        p.headers[bytes(p.header_field).strip().lower()] = bytes(p.header_value)
        p.header_field.clear()
        p.header_value.clear()

    def on_headers_finished() -> None:
        p = part()
        disposition = p.headers.get(b"content-disposition")
        if disposition is None:
            raise _bad("a part has no Content-Disposition header")
        kind, options = parse_options_header(disposition)
        if kind.lower() != b"form-data" or b"name" not in options:
            raise _bad("a part's Content-Disposition is not form-data with a name")
        p.name = options[b"name"].decode("utf-8", "replace")
        raw = options.get(b"filename")
        p.filename = None if raw is None else raw.decode("utf-8", "replace")
        # Only the part named file is the document; any other part is a small field,
        # even with a filename (held in memory, under FIELD_MAX_BYTES).
        p.is_file = p.name == "file"
        if p.is_file:
            if receiving:
                raise hang_up(
                    ApiProblem(422, "BadInput", "send exactly one file in the form field 'file'")
                )
            receiving.append(store.receive())

    def on_part_data(data: bytes, start: int, end: int) -> None:
        p = part()
        if p.is_file:
            pending.extend(data[start:end])
            if receiving[0].size + len(pending) > max_bytes:
                raise _too_large(max_bytes)
            return
        p.data += data[start:end]
        if len(p.data) > FIELD_MAX_BYTES:
            raise _bad(f"the field {p.name!r} is over {FIELD_MAX_BYTES} bytes")

    def on_part_end() -> None:
        parts.append(part())
        state["current"] = None

    callbacks = {
        "on_part_begin": on_part_begin,
        "on_header_field": on_header_field,
        "on_header_value": on_header_value,
        "on_header_end": on_header_end,
        "on_headers_finished": on_headers_finished,
        "on_part_data": on_part_data,
        "on_part_end": on_part_end,
    }
    received = 0
    try:
        parser = MultipartParser(boundary, callbacks)  # type: ignore[arg-type]
        async for chunk in request.stream():
            # The whole body is capped too, not only the file: a stream of endless
            # small fields (no Content-Length) must not grow memory either.
            received += len(chunk)
            if received > max_bytes + FORM_OVERHEAD_BYTES:
                raise _too_large(max_bytes)
            parser.write(chunk)
            if len(pending) >= WRITE_BUFFER_BYTES:
                await _flush(receiving[0], pending)
        parser.finalize()
        if not receiving or not any(p.is_file for p in parts):
            raise ApiProblem(422, "BadInput", "send exactly one file in the form field 'file'")
        _refuse_blank_replaces(parts)
        await _flush(receiving[0], pending)
        original = await asyncio.to_thread(receiving[0].store)
    except FormParserError as exc:
        _discard(receiving)
        raise _bad("the multipart body could not be read") from exc
    except BaseException:
        # A refusal, a client gone mid-body, a full disk, a stop: no partial file.
        _discard(receiving)
        raise
    file_part = next(p for p in parts if p.is_file)
    return Upload(
        original, file_part.filename, _text_field(parts, "name"), _text_field(parts, "replaces")
    )


def _refuse_blank_replaces(parts: list[_Part]) -> None:
    # A blank field is a client's mistake, not "no document": taken as absent, it
    # made a new, unrelated document (the CLI's --replaces '' is refused too).
    if _text_field(parts, "replaces") is None and any(p.name == "replaces" for p in parts):
        raise ApiProblem(
            422, "BadInput", "replaces is blank: name the document this is a version of"
        )


def _header_bytes(part: _Part, more: int) -> _Part:
    part.header_bytes += more
    if part.header_bytes > PART_HEADERS_MAX_BYTES:
        raise _bad(f"a part's headers are over {PART_HEADERS_MAX_BYTES} bytes")
    return part


async def _flush(receiving: Receiving, pending: bytearray) -> None:
    if pending:
        data = bytes(pending)
        pending.clear()
        # Off the event loop: a busy disk can block a write for a while.
        await asyncio.to_thread(receiving.write, data)


def _discard(receiving: list[Receiving]) -> None:
    for each in receiving:
        with contextlib.suppress(OSError):  # best effort: prune removes what is left
            each.discard()
