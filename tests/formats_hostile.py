"""Hostile documents in the office and web formats, generated (see
tests/core/test_formats_hostile.py): zip bombs, XML entity tricks, absurd nesting,
absurd tables, truncated containers."""

from __future__ import annotations

import io
import struct
import zipfile

DOCX_CONTENT_TYPES = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    b'<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    b'<Default Extension="rels" '
    b'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    b'<Default Extension="xml" ContentType="application/xml"/>'
    b'<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-'
    b'officedocument.wordprocessingml.document.main+xml"/></Types>'
)
DOCX_RELS = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    b'<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    b'<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
    b'relationships/officeDocument" Target="word/document.xml"/></Relationships>'
)
W = b'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def docx(body: bytes, *, prolog: bytes = b"", extra: dict[str, bytes] | None = None) -> bytes:
    """A minimal DOCX whose document.xml has ``body`` inside <w:body>."""
    document = (
        b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        + prolog
        + b"<w:document "
        + W
        + b"><w:body>"
        + body
        + b"</w:body></w:document>"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", DOCX_CONTENT_TYPES)
        archive.writestr("_rels/.rels", DOCX_RELS)
        archive.writestr("word/document.xml", document)
        for name, data in (extra or {}).items():
            archive.writestr(name, data)
    return buffer.getvalue()


def paragraph(text: str) -> bytes:
    return b"<w:p><w:r><w:t>" + text.encode() + b"</w:t></w:r></w:p>"


def zip_bomb() -> bytes:
    """A DOCX with a 64 MiB entry of zeros that deflates to ~64 KiB (1000:1)."""
    return docx(paragraph("bomb"), extra={"word/media/zeros.bin": bytes(64 << 20)})


def lying_sizes() -> bytes:
    """A DOCX whose directory declares a 4 GiB - 1 entry (nothing is that big inside)."""
    data = bytearray(docx(paragraph("liar"), extra={"word/media/big.bin": b"x" * 1000}))
    at = data.rfind(b"PK\x01\x02" + bytes(0))
    # The last central directory header is big.bin's: declare its size 0xFFFFFFFE.
    while at >= 0:
        name_length = struct.unpack_from("<H", data, at + 28)[0]
        if bytes(data[at + 46 : at + 46 + name_length]) == b"word/media/big.bin":
            struct.pack_into("<I", data, at + 24, 0xFFFFFFFE)
            break
        at = data.rfind(b"PK\x01\x02", 0, at)
    return bytes(data)


def many_entries(count: int = 10_000) -> bytes:
    """A DOCX with ``count`` tiny extra entries."""
    return docx(paragraph("many"), extra={f"word/x/{n}.xml": b"<a/>" for n in range(count)})


def billion_laughs_docx() -> bytes:
    """Entity expansion: ten levels of ten, a billion "lol"s if expanded."""
    entities = b'<!ENTITY lol0 "lol">' + b"".join(
        b'<!ENTITY lol%d "%s">' % (n, (b"&lol%d;" % (n - 1)) * 10) for n in range(1, 10)
    )
    body = b"<w:p><w:r><w:t>laugh &lol9;</w:t></w:r></w:p>"
    return docx(body, prolog=b"<!DOCTYPE w:document [" + entities + b"]>")


def external_entity_docx(url: str) -> bytes:
    """An external entity pointing at ``url`` (a file or a socket nobody may open)."""
    prolog = b'<!DOCTYPE w:document [<!ENTITY ext SYSTEM "' + url.encode() + b'">]>'
    return docx(b"<w:p><w:r><w:t>outside: &ext;</w:t></w:r></w:p>", prolog=prolog)


def deep_docx(levels: int = 100_000) -> bytes:
    """document.xml nested ``levels`` deep."""
    return docx(paragraph("top") + b"<w:sdt>" * levels + b"</w:sdt>" * levels)


def deep_html(levels: int = 300_000) -> bytes:
    return b"<!doctype html><html><body>" + b"<div>" * levels + b"deep" + b"</div>" * levels


def truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


XLSX_CONTENT_TYPES = (
    b'<?xml version="1.0" encoding="UTF-8"?>'
    b'<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    b'<Default Extension="rels" '
    b'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    b'<Default Extension="xml" ContentType="application/xml"/>'
    b'<Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-'
    b'officedocument.spreadsheetml.sheet.main+xml"/>'
    b'<Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-'
    b'officedocument.spreadsheetml.worksheet+xml"/></Types>'
)
_XLSX_RELS = (
    b'<?xml version="1.0" encoding="UTF-8"?>'
    b'<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    b'<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
    b'relationships/officeDocument" Target="xl/workbook.xml"/></Relationships>'
)
_WORKBOOK = (
    b'<?xml version="1.0" encoding="UTF-8"?>'
    b'<workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" '
    b'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">'
    b'<sheets><sheet name="Big" sheetId="1" r:id="rId1"/></sheets></workbook>'
)
_WORKBOOK_RELS = (
    b'<?xml version="1.0" encoding="UTF-8"?>'
    b'<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    b'<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
    b'relationships/worksheet" Target="worksheets/sheet1.xml"/></Relationships>'
)


def xlsx(sheet_rows: bytes, *, prolog: bytes = b"") -> bytes:
    """A minimal XLSX of one sheet whose <sheetData> holds ``sheet_rows``."""
    sheet = (
        b'<?xml version="1.0" encoding="UTF-8"?>'
        + prolog
        + b'<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
        b"<sheetData>" + sheet_rows + b"</sheetData></worksheet>"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", XLSX_CONTENT_TYPES)
        archive.writestr("_rels/.rels", _XLSX_RELS)
        archive.writestr("xl/workbook.xml", _WORKBOOK)
        archive.writestr("xl/_rels/workbook.xml.rels", _WORKBOOK_RELS)
        archive.writestr("xl/worksheets/sheet1.xml", sheet)
    return buffer.getvalue()


def million_rows(rows: int = 1_000_000) -> bytes:
    """A sheet of ``rows`` rows of one number each."""
    return xlsx(
        b"".join(
            b'<row r="%d"><c r="A%d"><v>%d</v></c></row>' % (n, n, n) for n in range(1, rows + 1)
        )
    )


def billion_laughs_xlsx() -> bytes:
    entities = b'<!ENTITY lol0 "lol">' + b"".join(
        b'<!ENTITY lol%d "%s">' % (n, (b"&lol%d;" % (n - 1)) * 10) for n in range(1, 10)
    )
    row = b'<row r="1"><c r="A1" t="inlineStr"><is><t>&lol9;</t></is></c></row>'
    return xlsx(row, prolog=b"<!DOCTYPE worksheet [" + entities + b"]>")


def epub(container: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("mimetype", b"application/epub+zip")
        archive.writestr("META-INF/container.xml", container)
    return buffer.getvalue()


def billion_laughs_epub() -> bytes:
    entities = b'<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
    return epub(
        b"<?xml version='1.0'?><!DOCTYPE container [" + entities + b"]><container>&b;</container>"
    )
