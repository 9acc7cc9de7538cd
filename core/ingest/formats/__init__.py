"""The accepted document formats: one module each, one :class:`~.base.Format` per
kind, looked up by the kind :mod:`core.ingest.sniffing` judged from the content.

Adding a format is adding a module here (its ``FORMAT``, its parser, its tests), a
:class:`~core.states.DocumentKind`, and its content rule in ``sniff_kind``.
"""

from __future__ import annotations

import functools

from core.ingest.formats import csv, docx, epub, html, image, pdf, pptx, text, xlsx
from core.ingest.formats.base import Block, Extracted, Format, PageReading, Parser, Prose, Table
from core.states import DocumentKind

FORMATS: dict[DocumentKind, Format] = {
    f.kind: f
    for f in (
        pdf.FORMAT,
        text.TEXT,
        text.MARKDOWN,
        docx.FORMAT,
        pptx.FORMAT,
        xlsx.FORMAT,
        html.FORMAT,
        epub.FORMAT,
        csv.FORMAT,
        *image.FORMATS,
    )
}
# The kinds whose pages may be read by OCR: their results depend on the engine too.
OCR_KINDS: frozenset[DocumentKind] = frozenset(
    {DocumentKind.PDF, DocumentKind.PNG, DocumentKind.JPEG, DocumentKind.TIFF}
)


def format_for(kind: DocumentKind | str) -> Format:
    """The format of a document kind.

    Raises:
        ValueError: Not a kind ingestdesk reads.
    """
    return FORMATS[DocumentKind(kind)]


@functools.cache
def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution, or None when it is missing."""
    import importlib.metadata

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def format_info(kind: DocumentKind | str, parser: str) -> dict[str, str]:
    """What parsed a document, as recorded on its task and in its processing key:
    PDFs name the PDF parser, text and Markdown ``text`` (as before formats had
    modules, so their keys are unchanged), others their library and its version, and
    the module's own revision when it has one. PDFs and images add what OCR'd text
    depends on (the engine and its version, the language data, the resolution:
    :func:`core.ingest.formats.ocr.engine_fingerprint`), so a change there reads them again
    rather than reusing text another engine made."""
    from core.ingest.failures import parser_info

    fmt = format_for(kind)
    if fmt.kind is DocumentKind.PDF:
        info = parser_info(parser)
    elif not fmt.needs:
        return {"parser": "text" if fmt.in_process else fmt.kind.value}
    else:
        library = fmt.needs[0]
        info = {"parser": library, "version": installed_version(library) or "missing"}
    if fmt.revision is not None:
        info["revision"] = fmt.revision
    if fmt.kind in OCR_KINDS:
        from core.ingest.formats.ocr import engine_fingerprint

        info |= engine_fingerprint()
    return info


__all__ = [
    "FORMATS",
    "OCR_KINDS",
    "Block",
    "Extracted",
    "Format",
    "PageReading",
    "Parser",
    "Prose",
    "Table",
    "format_for",
    "format_info",
    "installed_version",
]
