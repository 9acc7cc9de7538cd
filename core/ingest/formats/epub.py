"""EPUB books, read as what they are: a zip of XHTML chapters listed in order by the
package file's spine. Each chapter is extracted like an HTML page, its heading paths
starting with the chapter's title (its ``<title>``, else its first heading, else its
file name).

Not ebooklib: it is AGPL-3.0. The container and package files are parsed with
defusedxml, which refuses entity declarations and external references; chapters go
through the HTML extractor, which reads no DTD.
"""

from __future__ import annotations

import posixpath
from dataclasses import replace
from typing import TYPE_CHECKING
from urllib.parse import unquote

from core.ingest.formats.base import Extracted, Format
from core.ingest.formats.html import decode_html, extract
from core.ingest.formats.package import library_failure, open_package
from core.ingest.limits import LimitExceeded, TableBudget, read_part
from core.ingest.parse_progress import report_units
from core.states import DocumentKind, ErrorCode

if TYPE_CHECKING:
    from xml.etree.ElementTree import Element

    from core.ingest.formats.base import ParseOptions
    from core.ingest.parser_warnings import WarningCollector

WHAT = "EPUB"
_CHAPTER_TYPES = frozenset({"application/xhtml+xml", "text/html"})


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _children(element: Element, name: str) -> list[Element]:
    return [child for child in element.iter() if _local(child.tag) == name]


def parse(data: bytes, request: ParseOptions, warnings: WarningCollector) -> Extracted:
    from core.ingest.failures import ParseFailure

    archive = open_package(data, WHAT, ooxml=False)
    try:
        chapters = _spine(archive)
        if _encrypted(archive) & set(chapters):
            raise ParseFailure(
                ErrorCode.PARSE_ERROR,
                "EPUB is DRM-protected (its chapters are encrypted); ingestdesk cannot read it",
            )
        out = Extracted()
        budget = TableBudget(WHAT)
        for number, path in enumerate(chapters, start=1):
            try:
                raw = read_part(archive, path, WHAT)
            except KeyError:
                warnings.add("EPUB spine names a chapter that is not in the book")
                report_units(number, len(chapters))
                continue
            out.units += 1
            text = decode_html(raw, warnings, WHAT)
            blocks, title = extract(text, budget, what=WHAT)
            name = title or posixpath.splitext(posixpath.basename(path))[0]
            # The chapter's title is known once it is read: it heads every path.
            for block in blocks:
                location = replace(block.location, headings=(name, *block.location.headings))
                out.blocks.append(replace(block, location=location))
            report_units(number, len(chapters))
        return out
    except (ParseFailure, LimitExceeded):
        raise
    except Exception as exc:
        raise ParseFailure(ErrorCode.PARSE_ERROR, library_failure(exc, WHAT)) from None
    finally:
        archive.close()


def _encrypted(archive: object) -> set[str]:
    """The paths ``META-INF/encryption.xml`` says are encrypted. Fonts obfuscated
    by the IDPF or Adobe scheme are listed there too; only chapters matter here."""
    import zipfile

    from defusedxml import ElementTree

    assert isinstance(archive, zipfile.ZipFile)
    try:
        listing = ElementTree.fromstring(read_part(archive, "META-INF/encryption.xml", WHAT))
    except KeyError:
        return set()
    return {
        posixpath.normpath(unquote(uri))
        for ref in _children(listing, "CipherReference")
        if (uri := ref.get("URI"))
    }


def _spine(archive: object) -> list[str]:
    """The chapters' paths in reading order, from container.xml and the package file."""
    import zipfile

    from defusedxml import ElementTree

    from core.ingest.failures import ParseFailure

    assert isinstance(archive, zipfile.ZipFile)
    try:
        container = ElementTree.fromstring(read_part(archive, "META-INF/container.xml", WHAT))
    except KeyError:
        raise ParseFailure(ErrorCode.PARSE_ERROR, "damaged EPUB (no container.xml)") from None
    rootfiles = [r.get("full-path") for r in _children(container, "rootfile")]
    package_path = next((p for p in rootfiles if p), None)
    if package_path is None:
        raise ParseFailure(ErrorCode.PARSE_ERROR, "damaged EPUB (no package file named)")
    try:
        package = ElementTree.fromstring(read_part(archive, package_path, WHAT))
    except KeyError:
        raise ParseFailure(ErrorCode.PARSE_ERROR, "damaged EPUB (package file missing)") from None
    base = posixpath.dirname(package_path)
    manifest = {
        item.get("id"): (item.get("href") or "", item.get("media-type") or "")
        for item in _children(package, "item")
    }
    chapters = []
    for ref in _children(package, "itemref"):
        href, media_type = manifest.get(ref.get("idref"), ("", ""))
        if href and media_type in _CHAPTER_TYPES:
            chapters.append(posixpath.normpath(posixpath.join(base, unquote(href))))
    return chapters


FORMAT = Format(
    kind=DocumentKind.EPUB,
    name="EPUB book",
    recognised_by="zip whose mimetype entry says application/epub+zip",
    needs=("defusedxml",),
    parse=parse,
)
