"""The bare libraries of :mod:`bench.formats`: each format's text out of its bytes with
the cheapest walk its library offers, and nothing else (no chunking, no limits, no
locations). Where ingestdesk reads a library through a faster path than its obvious API
(python-docx's table rows, openpyxl's declared dimensions), the baseline takes the same
path, so a row measures the pipeline, not a slow baseline.
"""

from __future__ import annotations

import csv
import io
import posixpath
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any
from xml.etree import ElementTree

# --- bare libraries: text out of bytes, nothing else -------------------------------------


def _decode(data: bytes) -> str:
    for bom, codec in (
        (b"\xef\xbb\xbf", "utf-8-sig"),
        (b"\xff\xfe", "utf-16"),
        (b"\xfe\xff", "utf-16"),
    ):
        if data.startswith(bom):
            return data.decode(codec, "replace")
    return data.decode("utf-8", "replace")


def bare_text(data: bytes) -> int:
    return len(_decode(data))


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.chars = 0

    def handle_data(self, data: str) -> None:
        self.chars += len(data)


def _html_chars(text: str) -> int:
    parser = _Text()
    parser.feed(text)
    parser.close()
    return parser.chars


def bare_html(data: bytes) -> int:
    return _html_chars(_decode(data))


def bare_epub(data: bytes) -> int:
    def local(tag: str) -> str:
        return tag.rsplit("}", 1)[-1]

    with zipfile.ZipFile(io.BytesIO(data)) as book:
        container = ElementTree.fromstring(book.read("META-INF/container.xml"))
        opf_path = next(e.get("full-path") for e in container.iter() if local(e.tag) == "rootfile")
        assert opf_path is not None
        package = ElementTree.fromstring(book.read(opf_path))
        manifest = {
            e.get("id"): e.get("href") or "" for e in package.iter() if local(e.tag) == "item"
        }
        base, chars = posixpath.dirname(opf_path), 0
        for ref in (e for e in package.iter() if local(e.tag) == "itemref"):
            href = manifest.get(ref.get("idref"), "")
            name = posixpath.normpath(posixpath.join(base, href))
            if href.endswith(("html", "htm")) and name in book.NameToInfo:
                chars += _html_chars(_decode(book.read(name)))
        return chars


def bare_csv(data: bytes) -> int:
    text = _decode(data)
    try:
        dialect: Any = csv.Sniffer().sniff(text[:16_384], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    return sum(len(cell) for row in csv.reader(io.StringIO(text), dialect) for cell in row)


def bare_docx(data: bytes) -> int:
    import docx
    from docx.table import Table, _Cell

    document = docx.Document(io.BytesIO(data))
    chars = 0
    # Table cells by their XML rows, as ingestdesk reads them: python-docx's Row.cells
    # resolves spans with XPath and would make the baseline, not the worker, slow.
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            chars += sum(len(_Cell(tc, item).text) for tr in item._tbl.tr_lst for tc in tr.tc_lst)
        else:
            chars += len(item.text)
    return chars


def bare_pptx(data: bytes) -> int:
    import pptx

    def shapes(group: Any) -> Any:
        for shape in group:
            if hasattr(shape, "shapes"):
                yield from shapes(shape.shapes)
            else:
                yield shape

    chars = 0
    for slide in pptx.Presentation(io.BytesIO(data)).slides:
        for shape in shapes(slide.shapes):
            if getattr(shape, "has_table", False):
                chars += sum(len(c.text) for row in shape.table.rows for c in row.cells)
            elif getattr(shape, "has_text_frame", False):
                chars += len(shape.text_frame.text)
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            chars += len(slide.notes_slide.notes_text_frame.text)
    return chars


def bare_xlsx(data: bytes) -> int:
    import openpyxl

    book = openpyxl.load_workbook(
        io.BytesIO(data), read_only=True, data_only=True, keep_links=False
    )
    chars = 0
    try:
        for sheet in book.worksheets:
            # As ingestdesk does: a declared dimension of 16384 columns would pad rows.
            sheet.reset_dimensions()
            for values in sheet.iter_rows(values_only=True):
                chars += sum(len(str(v)) for v in values if v is not None)
    finally:
        book.close()
    return chars


def bare_pdf(data: bytes) -> int:
    from pypdf import PdfReader

    return sum(len(page.extract_text()) for page in PdfReader(io.BytesIO(data)).pages)


@dataclass(frozen=True)
class Spec:
    kind: str  # DocumentKind value
    label: str
    unit: str  # what the format counts: pages, slides, sheets, chapters, or MB
    bare: Callable[[bytes], int]
    library: str  # what the bare side runs, for the report


SPECS = (
    Spec("docx", "DOCX", "MB", bare_docx, "python-docx paragraphs + table cells"),
    Spec("pptx", "PPTX", "slides", bare_pptx, "python-pptx text frames, tables, notes"),
    Spec("xlsx", "XLSX", "sheets", bare_xlsx, "openpyxl read-only rows"),
    Spec("html", "HTML", "MB", bare_html, "html.parser text"),
    Spec("epub", "EPUB", "chapters", bare_epub, "zipfile + html.parser, spine order"),
    Spec("csv", "CSV", "MB", bare_csv, "csv.Sniffer + csv.reader"),
    Spec("pdf", "PDF", "pages", bare_pdf, "pypdf extract_text"),
    Spec("markdown", "Markdown", "MB", bare_text, "UTF-8 decode"),
    Spec("text", "text", "MB", bare_text, "UTF-8 decode"),
)
