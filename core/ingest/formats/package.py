"""Opening the zip containers of DOCX, PPTX, XLSX and EPUB, and naming what their
libraries raise, the same way for every one of them.

The container is checked against :mod:`core.ingest.limits` (entries, declared sizes,
compression ratio) before any library inflates a byte of it. An encrypted Office file
is not a zip at all but an OLE2 compound file holding an ``EncryptedPackage`` stream:
it fails with "needs a password", as an encrypted PDF does.
"""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Callable
from io import BytesIO
from typing import TYPE_CHECKING

from core.ingest.limits import LimitExceeded, check_zip, read_part
from core.states import ErrorCode

if TYPE_CHECKING:
    from core.ingest.formats.base import Extracted

OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")  # the OLE2 stream's name
# Strict Open XML's namespaces (ISO 29500 Strict) instead of the transitional ones that
# python-docx, python-pptx and openpyxl read: its relationship types say so.
STRICT_NAMESPACE = b"http://purl.oclc.org/ooxml/"
# Strict's namespaces and relationship-type prefixes → the transitional ones, for a
# format that reads Strict by renaming them (DOCX: its reader looks at text, styles
# and references, whose elements are the same in both; only the names differ).
STRICT_TO_TRANSITIONAL: tuple[tuple[bytes, bytes], ...] = tuple(
    (STRICT_NAMESPACE + strict.encode(), b"http://schemas.openxmlformats.org/" + ours.encode())
    for strict, ours in (
        ("wordprocessingml/main", "wordprocessingml/2006/main"),
        ("officeDocument/relationships", "officeDocument/2006/relationships"),
        ("officeDocument/math", "officeDocument/2006/math"),
        ("drawingml/main", "drawingml/2006/main"),
        ("drawingml/wordprocessingDrawing", "drawingml/2006/wordprocessingDrawing"),
        ("drawingml/picture", "drawingml/2006/picture"),
    )
)


def is_encrypted_office(data: bytes) -> bool:
    """Whether ``data`` is an Office file encrypted with a password (OLE2 + EncryptedPackage)."""
    return data.startswith(OLE2_MAGIC) and ENCRYPTED_PACKAGE in data


def open_package(
    data: bytes, what: str, *, ooxml: bool = True, reads_strict: bool = False
) -> zipfile.ZipFile:
    """The container, checked against the zip limits.

    Args:
        data: The document's bytes.
        what: Its format, for messages ("DOCX").
        ooxml: It is an Office Open XML package (not an EPUB): Strict Open XML, which
            the Office libraries cannot read, is refused by name.
        reads_strict: The format reads Strict Open XML too (see
            :func:`transitional_copy`), so it is not refused.

    Raises:
        ParseFailure: Encrypted, Strict Open XML, or not a readable zip (truncated,
            damaged).
        LimitExceeded: Over a zip limit.
    """
    from core.ingest.failures import ParseFailure

    if is_encrypted_office(data):
        raise ParseFailure(ErrorCode.PARSE_ERROR, f"encrypted {what} needs a password")
    try:
        archive = zipfile.ZipFile(BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError):
        raise ParseFailure(
            ErrorCode.PARSE_ERROR, f"damaged or truncated {what} (not a readable zip)"
        ) from None
    check_zip(archive, what)
    if ooxml and not reads_strict and is_strict(archive, what):
        archive.close()
        raise ParseFailure(
            ErrorCode.PARSE_ERROR,
            f"{what} is Strict Open XML, which is not supported; save it as a regular {what}",
        )
    return archive


def is_strict(archive: zipfile.ZipFile, what: str) -> bool:
    """Whether a package is Strict Open XML (its relationship types say so)."""
    return STRICT_NAMESPACE in _package_relationships(archive, what)


def transitional_copy(archive: zipfile.ZipFile, what: str) -> bytes:
    """A Strict Open XML package with its XML parts' namespaces renamed to the
    transitional ones (:data:`STRICT_TO_TRANSITIONAL`), stored uncompressed: what a
    transitional reader can open. Every part is read through the zip limits."""
    out = BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as copy:
        for item in archive.infolist():
            if item.is_dir():
                continue
            part = read_part(archive, item.filename, what)
            if item.filename.endswith((".xml", ".rels")):
                for strict, transitional in STRICT_TO_TRANSITIONAL:
                    part = part.replace(strict, transitional)
            copy.writestr(item.filename, part)
    return out.getvalue()


def _package_relationships(archive: zipfile.ZipFile, what: str) -> bytes:
    try:
        return read_part(archive, "_rels/.rels", what)
    except KeyError:
        return b""


# Where a part's DOCTYPE would be: before its root element, after at most a declaration
# and a comment or two.
PROLOG_BYTES = 4096  # bytes read from the start of each XML part
_DOCTYPES = tuple("<!doctype".encode(codec) for codec in ("ascii", "utf-16-le", "utf-16-be"))


def refuse_doctypes(archive: zipfile.ZipFile, what: str) -> None:
    """Refuse a package whose XML parts declare a DTD, as defusedxml refuses one under
    openpyxl and EPUB's reader does. Office never writes a DOCTYPE in a package
    (Open Packaging Conventions forbid DTDs); one there is a crafted file. libxml2
    under python-docx and python-pptx expands nothing and fetches nothing, but
    silently drops the text after an entity it did not expand: the document would be
    indexed with words missing. Custom XML parts (an add-in's data, never read here)
    may hold anything and are not checked.

    Raises:
        ParseFailure: A part's prolog holds a DOCTYPE.
    """
    from core.ingest.failures import ParseFailure

    for item in archive.infolist():
        name = item.filename
        if item.is_dir() or not name.endswith((".xml", ".rels")) or name.startswith("customXml/"):
            continue
        try:
            with archive.open(item) as part:
                prolog = part.read(PROLOG_BYTES).lower()
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError):
            continue  # a damaged part fails where the library reads it, if it does
        if any(doctype in prolog for doctype in _DOCTYPES):
            raise ParseFailure(
                ErrorCode.PARSE_ERROR,
                f"{what} XML declares a DTD (entities), which is refused",
            )


def library_failure(exc: BaseException, what: str) -> str:
    """A short, path-free reason for an exception a format library raised."""
    from core.ingest.failures import OUT_OF_MEMORY_REASON

    if isinstance(exc, MemoryError):
        return OUT_OF_MEMORY_REASON
    if isinstance(exc, RecursionError):
        return f"{what} structure nested too deeply"
    # Libraries wrap the parser's error (openpyxl: "could not read worksheets"): the
    # cause says what it was.
    chain: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and len(chain) < 5:
        chain.append(link)
        link = link.__cause__ or link.__context__
    message = " ".join(f"{type(e).__name__} {e}" for e in chain).lower()
    if "depth" in message and "excessive" in message:  # libxml2 past 256 levels
        return f"{what} XML nested too deeply (limit 256 levels)"
    if "entit" in message:  # defusedxml, libxml2 entity errors
        return f"{what} XML declares entities, which are refused"
    if isinstance(exc, zipfile.BadZipFile):
        return f"damaged {what} (bad zip entry)"
    if isinstance(exc, KeyError):
        return f"damaged {what} (a required part is missing)"
    # The type name tells a developer where to look without leaking paths or content.
    return f"damaged {what} ({type(exc).__name__})"


def parse_package(
    data: bytes,
    what: str,
    extract: Callable[[bytes], Extracted],
    *,
    reads_strict: bool = False,
) -> Extracted:
    """Check an Office package (its zip guards, its parts) before its library opens it,
    then run ``extract``: a library's own failure becomes one ``parse_error`` line, while
    the guards' refusals and our own failures pass unchanged. With ``reads_strict`` a
    Strict Open XML package is handed to ``extract`` as its transitional copy."""
    from core.ingest.failures import ParseFailure

    with open_package(data, what, reads_strict=reads_strict) as archive:
        refuse_doctypes(archive, what)
        strict = reads_strict and is_strict(archive, what)
    try:
        if strict:  # copied inside the try: a damaged part fails as the library would
            with zipfile.ZipFile(BytesIO(data)) as archive:
                data = transitional_copy(archive, what)
        return extract(data)
    except (ParseFailure, LimitExceeded):
        raise
    except Exception as exc:
        raise ParseFailure(ErrorCode.PARSE_ERROR, library_failure(exc, what)) from None
