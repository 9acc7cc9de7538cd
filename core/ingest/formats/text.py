"""Plain text and Markdown: decoded by :func:`core.ingest.text_encoding.decode_text`, one
section, chunked as prose. Our own code on a string, so small documents are parsed in
the worker itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.ingest.chunker import Location
from core.ingest.formats.base import Extracted, Format, Prose
from core.states import DocumentKind

if TYPE_CHECKING:
    from core.ingest.formats.base import ParseOptions
    from core.ingest.parser_warnings import WarningCollector


def decoded(data: bytes, warnings: WarningCollector, what: str = "text") -> str:
    """``data`` as text, with a warning when it was not UTF-8.

    Raises:
        ParseFailure: No encoding fits.
    """
    from core.ingest.failures import ParseFailure
    from core.ingest.text_encoding import decode_text, is_unicode
    from core.states import ErrorCode

    result = decode_text(data, count_nul=False)
    if result is None:
        raise ParseFailure(ErrorCode.PARSE_ERROR, f"undecodable {what}")
    text, encoding = result
    if not is_unicode(encoding):
        warnings.add(f"{what} is not UTF-8; decoded as {encoding}")
    return text


def parse(data: bytes, request: ParseOptions, warnings: WarningCollector) -> Extracted:
    return Extracted(1, [Prose(decoded(data, warnings), Location())])


TEXT = Format(
    kind=DocumentKind.TEXT,
    name="plain text",
    recognised_by=(
        "decodes as text (UTF-8/16/32 with BOM, UTF-8, a declared or recognised code page,"
        " cp1252), few control characters"
    ),
    needs=(),
    parse=parse,
    captures_warnings=False,
    in_process=True,
)
MARKDOWN = Format(
    kind=DocumentKind.MARKDOWN,
    name="Markdown",
    recognised_by="text (as plain text) under a .md or .markdown name",
    needs=(),
    parse=parse,
    captures_warnings=False,
    in_process=True,
)
