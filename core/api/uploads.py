"""Reading a multipart upload as it streams in, with the size cap checked on the way.

A framework's form parsing receives the whole body (into memory or a spooled file)
before the endpoint can look at it; a 10 GB upload would be read in full before being
refused. Here the body is fed chunk by chunk to python-multipart's push parser and
refused (413) the moment the ``file`` part passes the cap — and at once, when a
``Content-Length`` already says it will.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Request
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from core.api.problems import ApiProblem
from core.api.routing import hang_up

FORM_OVERHEAD_BYTES = 64 * 1024  # room for the multipart framing and the small fields
FIELD_MAX_BYTES = 4096  # bytes of a non-file field (name, replaces)
PARTS_MAX = 16  # parts of a form at most (it needs three: file, name, replaces)


@dataclass
class _Part:
    headers: dict[bytes, bytes] = field(default_factory=dict)
    data: bytearray = field(default_factory=bytearray)
    header_field: bytearray = field(default_factory=bytearray)
    header_value: bytearray = field(default_factory=bytearray)

    @property
    def name(self) -> str:
        _, options = parse_options_header(self.headers.get(b"content-disposition", b""))
        return options.get(b"name", b"").decode("utf-8", "replace")

    @property
    def filename(self) -> str | None:
        _, options = parse_options_header(self.headers.get(b"content-disposition", b""))
        raw = options.get(b"filename")
        return None if raw is None else raw.decode("utf-8", "replace")


@dataclass(frozen=True)
class Upload:
    data: bytes
    filename: str | None
    name: str | None
    replaces: str | None = None  # the document this upload is the next version of


def _too_large(max_bytes: int) -> ApiProblem:
    return hang_up(
        ApiProblem(413, "BadInput", f"the file is over the upload limit of {max_bytes} bytes")
    )


def _text_field(parts: list[_Part], name: str) -> str | None:
    """A small form field's text (the first of that name), or None when absent or blank."""
    found = [p for p in parts if p.name == name]
    text = bytes(found[0].data).decode("utf-8", "replace").strip() if found else ""
    return text or None


async def read_upload(request: Request, max_bytes: int) -> Upload:
    """The ``file`` part (and the optional ``name`` and ``replaces`` fields) of a
    multipart request."""
    kind, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise ApiProblem(
            415, "BadInput", "send the document as multipart/form-data in the field 'file'"
        )
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_bytes + FORM_OVERHEAD_BYTES:
        raise _too_large(max_bytes)

    parts: list[_Part] = []
    state: dict[str, _Part | None] = {"current": None}

    def part() -> _Part:
        current = state["current"]
        assert current is not None  # the parser calls part_begin first
        return current

    def on_part_begin() -> None:
        if len(parts) >= PARTS_MAX:
            raise ApiProblem(400, "BadInput", f"a form of more than {PARTS_MAX} parts")
        state["current"] = _Part()

    def on_header_field(data: bytes, start: int, end: int) -> None:
        part().header_field += data[start:end]

    def on_header_value(data: bytes, start: int, end: int) -> None:
        part().header_value += data[start:end]

    def on_header_end() -> None:
        p = part()
        p.headers[bytes(p.header_field).lower()] = bytes(p.header_value)
        p.header_field.clear()
        p.header_value.clear()

    def on_part_data(data: bytes, start: int, end: int) -> None:
        p = part()
        p.data += data[start:end]
        limit = max_bytes if p.filename is not None or p.name == "file" else FIELD_MAX_BYTES
        if len(p.data) > limit:
            raise (
                _too_large(max_bytes)
                if limit == max_bytes
                else ApiProblem(400, "BadInput", f"the field {p.name!r} is too long")
            )

    def on_part_end() -> None:
        parts.append(part())
        state["current"] = None

    parser = MultipartParser(
        boundary,
        {
            "on_part_begin": on_part_begin,
            "on_header_field": on_header_field,
            "on_header_value": on_header_value,
            "on_header_end": on_header_end,
            "on_part_data": on_part_data,
            "on_part_end": on_part_end,
        },
    )
    received = 0
    try:
        async for chunk in request.stream():
            # The whole body is capped too, not only the file: a stream of endless
            # small fields (no Content-Length) must not grow memory either.
            received += len(chunk)
            if received > max_bytes + FORM_OVERHEAD_BYTES:
                raise _too_large(max_bytes)
            parser.write(chunk)
        parser.finalize()
    except MultipartParseError as exc:
        raise ApiProblem(400, "BadInput", "the multipart body could not be read") from exc
    files = [p for p in parts if p.name == "file"]
    if len(files) != 1:
        raise ApiProblem(422, "BadInput", "send exactly one file in the form field 'file'")
    replaces = _text_field(parts, "replaces")
    if replaces is None and any(p.name == "replaces" for p in parts):
        # A blank field is a client's mistake, not "no document": taken as absent, it
        # made a new, unrelated document (the CLI's --replaces '' is refused too).
        raise ApiProblem(
            422, "BadInput", "replaces is blank: name the document this is a version of"
        )
    return Upload(bytes(files[0].data), files[0].filename, _text_field(parts, "name"), replaces)
