"""What a document's bytes are: its kind (:func:`sniff_kind`), judged from content
when an upload enters (:mod:`core.intake`). Text is judged by the same rule that
decodes it when it is parsed (:func:`core.ingest.text_encoding.decode_text`).
Standard library only, so a parser child can import this without paying for anything
else.
"""

from __future__ import annotations

import csv
import io
import re
import struct
import zipfile

from core.ingest.text_encoding import MAX_CONTROL_CHAR_RATIO, control_ratio, decode_text
from core.states import DocumentKind

# --- tunables ---------------------------------------------------------------------------

# A PDF header must start within this many bytes; the same window Acrobat tolerates.
PDF_HEADER_WINDOW_BYTES = 1024  # bytes
# How much of an upload sniff_kind inspects to decide whether it is text.
TEXT_SNIFF_BYTES = 64 * 1024  # bytes

MARKDOWN_SUFFIXES = (".md", ".markdown")
TEXT_SUFFIXES = (".txt", ".text", *MARKDOWN_SUFFIXES)
CSV_SUFFIXES = (".csv", ".tsv")
# How far into a text an HTML page must have declared itself.
HTML_SIGNATURE_WINDOW = 1024  # characters
# A text is a table without a .csv name when its first lines (up to this many) all
# have the same number of fields, at least CSV_MIN_FIELDS, over CSV_MIN_ROWS lines.
CSV_SNIFF_ROWS = 50  # lines
CSV_MIN_ROWS = 3  # lines
CSV_MIN_FIELDS = 2  # fields per line
CSV_DELIMITERS = ",;\t|"
# Reading a zip's directory costs memory per entry: a container claiming more entries
# than this is not opened to be sniffed (its parse would refuse it anyway).
SNIFF_ZIP_MAX_ENTRIES = 100_000  # entries
CONTENT_TYPES_SNIFF_BYTES = 256 * 1024  # bytes of [Content_Types].xml searched
# The main part's content type tells an OOXML package's kind ([Content_Types].xml);
# macro-enabled, template and slideshow variants read alike.
_OOXML_MAIN_TYPES: tuple[tuple[DocumentKind, tuple[bytes, ...]], ...] = (
    (
        DocumentKind.DOCX,
        (
            b"wordprocessingml.document.main+xml",
            b"wordprocessingml.template.main+xml",
            b"ms-word.document.macroEnabled.main+xml",
            b"ms-word.template.macroEnabledTemplate.main+xml",
        ),
    ),
    (
        DocumentKind.PPTX,
        (
            b"presentationml.presentation.main+xml",
            b"presentationml.slideshow.main+xml",
            b"presentationml.template.main+xml",
            b"ms-powerpoint.presentation.macroEnabled.main+xml",
            b"ms-powerpoint.slideshow.macroEnabled.main+xml",
            b"ms-powerpoint.template.macroEnabled.main+xml",
        ),
    ),
    (
        DocumentKind.XLSX,
        (
            b"spreadsheetml.sheet.main+xml",
            b"spreadsheetml.template.main+xml",
            b"ms-excel.sheet.macroEnabled.main+xml",
            b"ms-excel.template.macroEnabled.main+xml",
        ),
    ),
)
# Names that break the tie when the content says "an Office file" but not which one:
# a zip too damaged to read its directory, or an encrypted package.
_OFFICE_SUFFIXES: tuple[tuple[tuple[str, ...], DocumentKind], ...] = (
    ((".docx", ".docm", ".dotx", ".dotm"), DocumentKind.DOCX),
    ((".pptx", ".pptm", ".ppsx", ".potx"), DocumentKind.PPTX),
    ((".xlsx", ".xlsm", ".xltx", ".xltm"), DocumentKind.XLSX),
    ((".epub",), DocumentKind.EPUB),
)
_ZIP_MAGIC = b"PK\x03\x04"
_EOCD = b"PK\x05\x06"
_OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")
_HTML_SIGNATURE = re.compile(r"<!doctype\s+html|<html[\s>]", re.IGNORECASE)
# An SVG's root element, after the prolog an XML file may open with (BOM, declaration,
# comments, processing instructions, a doctype).
_SVG_SIGNATURE = re.compile(
    r"\ufeff?\s*(?:(?:<\?[^>]*\?>|<!--.*?-->|<!doctype[^>]*>)\s*)*<svg[\s>/]",
    re.IGNORECASE | re.DOTALL,
)
# A BMP's DIB header sizes (core, OS/2 2, Windows 3 to 5): a white bitmap is all 0xFF
# bytes, which pass as cp1252 text without a single control character.
_BMP_DIB_HEADER_BYTES = frozenset({12, 16, 40, 52, 56, 64, 108, 124})

# Magic numbers of formats people upload by mistake that can pass as "mostly text" in
# their first bytes. Anything else binary is caught by the control-character ratio.
_BINARY_MAGICS: tuple[bytes, ...] = (
    b"PK\x03\x04",  # ZIP, DOCX, XLSX, ODT, EPUB
    b"PK\x05\x06",  # empty ZIP
    b"PK\x07\x08",  # spanned ZIP
    b"\x1f\x8b",  # gzip
    b"BZh",  # bzip2
    b"\xfd7zXZ\x00",  # xz
    b"7z\xbc\xaf\x27\x1c",  # 7-Zip
    b"Rar!\x1a\x07",  # RAR
    b"\x89PNG\r\n\x1a\n",  # PNG
    b"\xff\xd8\xff",  # JPEG
    b"GIF87a",
    b"GIF89a",
    b"II*\x00",  # TIFF, little-endian
    b"MM\x00*",  # TIFF, big-endian
    b"\x7fELF",
    b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1",  # OLE2: .doc, .xls, .msg
    b"%!PS",  # PostScript: text-like but not something we can index meaningfully
    b"{\\rtf",  # RTF: text, but its words sit among control words (\fonttbl, \par, ...)
)
_PDF_MAGIC = b"%PDF-"
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_JPEG_MAGIC = b"\xff\xd8\xff"
_TIFF_MAGICS = (b"II*\x00", b"MM\x00*")


def sniff_kind(data: bytes, filename: str) -> DocumentKind | None:
    """Judge an upload's kind from its content, using the name only to break ties.

    Rules, in order:

    1. ``%PDF-`` at offset 0 → PDF. ``%PDF-`` later but within the first 1024 bytes
       (junk before the header, which readers tolerate) → PDF too, unless the name
       claims Markdown or text: a note *about* PDF headers is still a note.
    2. A name ending in ``.pdf`` whose content is not PDF → None. The content
       contradicts the name (HTML error pages, ZIPs, renamed files), so the upload is
       refused as bad input rather than indexed as something the user did not mean.
    3. A zip: EPUB when its ``mimetype`` entry says ``application/epub+zip``; DOCX,
       PPTX or XLSX when its ``[Content_Types].xml`` names that format's main part
       (macro-enabled and template variants included); any other zip → None. A zip
       whose directory cannot be read (truncated) is taken for the Office or EPUB
       file its name says, so its parse can say it is damaged; else None.
    4. An OLE2 file holding an ``EncryptedPackage`` (a password-protected Office
       file) → the Office kind its name says, DOCX if it says none: its parse fails
       "needs a password", since which format hides inside cannot be known.
    5. An image: PNG when its signature is followed by an ``IHDR`` header of a
       non-zero size; JPEG when ``FF D8 FF`` is followed by a marker; TIFF (either
       byte order) when its first directory lies past the header. A signature
       without that structure (a few bytes of a picture, random bytes after eight
       magic ones) → None: nothing could read it.
    6. Other known binary signatures (GIF, BMP, archives, ELF, old binary Office, …)
       → None.
    7. Text-like content: MARKDOWN for ``.md``/``.markdown`` names and TEXT for
       ``.txt``/``.text`` ones (the name asks for text, and a page's source is text);
       otherwise None for an SVG picture (``<svg`` after the XML prolog), HTML
       when ``<!doctype html`` or ``<html`` appears in its first 1024 characters,
       CSV when named ``.csv``/``.tsv`` or when its first lines (3 to 50) all split
       into the same number (2+) of fields on one of ``, ; tab |``, else TEXT.
       Text-like means it decodes (BOM-declared UTF-8/16/32, else strict UTF-8,
       else the charset a page declares, else a recognised code page such as
       Shift_JIS, GBK or Windows-1251, else cp1252: see ``decode_text``) and at most
       1 % of the first 64 KiB are control characters. NUL
       bytes count as control characters: a stray NUL in a log is tolerated (and
       stripped on parse), a binary file is not. UTF-16 without a BOM is not
       recognised.
    8. Anything else → None.

    An empty upload is text by rule 7 (and later fails as ``empty_document``), except
    under a ``.pdf`` name (rule 2).

    Args:
        data: The upload's bytes.
        filename: The name it was uploaded under; only its suffix is used.

    Returns:
        The document kind, or None when ingestdesk does not support the content.
    """
    name = filename.lower()
    header_at = data.find(_PDF_MAGIC, 0, PDF_HEADER_WINDOW_BYTES)
    if header_at == 0 or (header_at > 0 and not name.endswith(TEXT_SUFFIXES)):
        return DocumentKind.PDF
    if name.endswith(".pdf"):
        return None
    if data.startswith(_ZIP_MAGIC):
        return _zip_kind(data, name)
    if data.startswith(_OLE2_MAGIC) and _ENCRYPTED_PACKAGE in data:
        return _office_kind_named(name) or DocumentKind.DOCX
    image = _image_kind(data)
    if image is not None or data.startswith(_BINARY_MAGICS) or _is_bmp(data):
        return image
    final = len(data) <= TEXT_SNIFF_BYTES
    sample = decode_text(data[:TEXT_SNIFF_BYTES], final=final)
    if sample is None or control_ratio(sample[0]) > MAX_CONTROL_CHAR_RATIO:
        return None
    if name.endswith(MARKDOWN_SUFFIXES):
        return DocumentKind.MARKDOWN
    if name.endswith(TEXT_SUFFIXES):
        return DocumentKind.TEXT
    text = sample[0]
    if _SVG_SIGNATURE.match(text):
        return None  # a picture drawn in XML: its markup is not the document's text
    if _HTML_SIGNATURE.search(text, 0, HTML_SIGNATURE_WINDOW):
        return DocumentKind.HTML
    if name.endswith(CSV_SUFFIXES) or _looks_like_table(text, final=final):
        return DocumentKind.CSV
    return DocumentKind.TEXT


def _image_kind(data: bytes) -> DocumentKind | None:
    """PNG, JPEG or TIFF when the signature is followed by the structure every real
    file of that format has (checked within the first bytes only: an upload stored
    as a stream is sniffed from its head)."""
    if data.startswith(_PNG_MAGIC):
        # The first chunk is IHDR: length 13, then width and height, both non-zero.
        if data[8:16] == b"\x00\x00\x00\rIHDR" and len(data) >= 24:
            width, height = struct.unpack_from(">II", data, 16)
            if width and height:
                return DocumentKind.PNG
        return None
    if data.startswith(_JPEG_MAGIC):
        # A marker follows SOI: APPn (E0-EF), DQT (DB), SOFn (C0-CF), COM (FE) ...
        return DocumentKind.JPEG if len(data) > 3 and data[3] >= 0xC0 else None
    if data.startswith(_TIFF_MAGICS) and len(data) >= 8:
        order = "<" if data.startswith(b"II") else ">"
        (first_directory,) = struct.unpack_from(f"{order}I", data, 4)
        return DocumentKind.TIFF if first_directory >= 8 else None
    return None


def _is_bmp(data: bytes) -> bool:
    """A Windows bitmap: ``BM``, its reserved words zero, a known DIB header size."""
    if not data.startswith(b"BM") or len(data) < 18:
        return False
    (dib,) = struct.unpack_from("<I", data, 14)
    return data[6:10] == b"\x00\x00\x00\x00" and dib in _BMP_DIB_HEADER_BYTES


def _office_kind_named(name: str) -> DocumentKind | None:
    return next((kind for suffixes, kind in _OFFICE_SUFFIXES if name.endswith(suffixes)), None)


def _zip_entries_declared(data: bytes) -> int | None:
    """The entry count a zip's end record declares (before its directory is read)."""
    at = data.rfind(_EOCD, max(0, len(data) - 65_557))  # 22-byte record + 64 KiB comment
    if at < 0 or at + 22 > len(data):
        return None
    (count,) = struct.unpack_from("<H", data, at + 10)
    return int(count)  # ZIP64 says 0xFFFF here: over the limit below either way


def _zip_kind(data: bytes, name: str) -> DocumentKind | None:
    declared = _zip_entries_declared(data)
    if declared is None or declared > SNIFF_ZIP_MAX_ENTRIES:
        # No readable directory: truncated or damaged, or absurdly many entries.
        return _office_kind_named(name)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
            if "mimetype" in names:
                with archive.open("mimetype") as part:
                    if part.read(64).strip() == b"application/epub+zip":
                        return DocumentKind.EPUB
            if "[Content_Types].xml" not in names:
                return None
            with archive.open("[Content_Types].xml") as part:
                content_types = part.read(CONTENT_TYPES_SNIFF_BYTES)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, ValueError, OSError):
        return _office_kind_named(name)
    except (EOFError, RuntimeError):  # truncated entry, an encrypted entry
        return _office_kind_named(name)
    for kind, main_types in _OOXML_MAIN_TYPES:
        if any(main in content_types for main in main_types):
            return kind
    return None


def _looks_like_table(text: str, *, final: bool) -> bool:
    lines = text.splitlines()
    if not final:
        lines = lines[:-1]  # the last line may be cut by the sample
    lines = [line for line in lines[:CSV_SNIFF_ROWS] if line.strip()]
    if len(lines) < CSV_MIN_ROWS:
        return False
    sample = "\n".join(lines)
    try:
        dialect = csv.Sniffer().sniff(sample, delimiters=CSV_DELIMITERS)
        widths = {len(row) for row in csv.reader(io.StringIO(sample), dialect)}
    except csv.Error:
        return False
    return len(widths) == 1 and widths.pop() >= CSV_MIN_FIELDS


def kind_misnamed_pdf(data: bytes, filename: str) -> DocumentKind | None:
    """What an upload named ``.pdf`` whose content is no PDF really is (a Word document
    renamed ``report.pdf``, an HTML error page saved as one), judged as if it had no
    name; None when the name is not ``.pdf`` or the content is not a kind ingestdesk
    reads either.

    :func:`sniff_kind` refuses such an upload (rule 2: the content contradicts the
    name); this only lets the refusal say what the content is. A password-protected
    Office file says nothing of its format, so it is not named here.
    """
    if not filename.lower().endswith(".pdf") or data.startswith(_OLE2_MAGIC):
        return None
    kind = sniff_kind(data, filename[: -len(".pdf")])
    if kind is None and data.startswith(_ZIP_MAGIC) and _zip_entries_declared(data) is None:
        # A stream upload is judged by its first 64 KiB, which hold no zip directory:
        # the entries' own headers still name the parts.
        kind = _kind_by_entries(data)
    return None if kind is DocumentKind.PDF else kind


# An Office package's parts live under a folder that names its format.
_OFFICE_FOLDERS = (
    (b"word/", DocumentKind.DOCX),
    (b"ppt/", DocumentKind.PPTX),
    (b"xl/", DocumentKind.XLSX),
)


def _kind_by_entries(data: bytes) -> DocumentKind | None:
    """The kind the local headers of a zip's first entries name, if any: an EPUB's
    first entry is its ``mimetype``, stored uncompressed; an Office package holds
    ``[Content_Types].xml`` and parts under its format's folder."""
    if data[30:38] == b"mimetype" and data[38:58] == b"application/epub+zip":
        return DocumentKind.EPUB
    content_types, found = False, None
    at = 0
    while (at := data.find(_ZIP_MAGIC, at)) >= 0 and at + 30 <= len(data):
        (length,) = struct.unpack_from("<H", data, at + 26)
        name = data[at + 30 : at + 30 + length]
        content_types = content_types or name == b"[Content_Types].xml"
        found = found or next((k for folder, k in _OFFICE_FOLDERS if name.startswith(folder)), None)
        if content_types and found is not None:
            return found
        at += 4
    return None


# What formats people upload that ingestdesk refuses are, and what to save them as,
# for the refusal's wording (see :func:`refused_content`).
_SAVE_AS_DOCX = "save it as DOCX or PDF"
_SAVE_AS_XLSX = "save it as XLSX or CSV"
_SAVE_AS_PPTX = "save it as PPTX or PDF"
_SAVE_AS_IMAGE = "save it as PNG, JPEG or TIFF"
_OPENDOCUMENT = {
    b"application/vnd.oasis.opendocument.text": ("an OpenDocument text (ODT)", _SAVE_AS_DOCX),
    b"application/vnd.oasis.opendocument.spreadsheet": (
        "an OpenDocument spreadsheet (ODS)",
        _SAVE_AS_XLSX,
    ),
    b"application/vnd.oasis.opendocument.presentation": (
        "an OpenDocument presentation (ODP)",
        _SAVE_AS_PPTX,
    ),
}
# An OLE2 compound file names its main stream in UTF-16 in its directory.
_OLE2_STREAMS = (
    ("WordDocument", ("a binary Word document (.doc)", _SAVE_AS_DOCX)),
    ("Workbook", ("a binary Excel workbook (.xls)", _SAVE_AS_XLSX)),
    ("Book", ("a binary Excel workbook (.xls)", _SAVE_AS_XLSX)),
    ("PowerPoint Document", ("a binary PowerPoint deck (.ppt)", _SAVE_AS_PPTX)),
)
_REFUSED_MAGICS: tuple[tuple[bytes, tuple[str, str]], ...] = (
    (b"{\\rtf", ("an RTF document", _SAVE_AS_DOCX)),
    (b"%!PS", ("a PostScript file", "save it as PDF")),
    (b"GIF87a", ("a GIF image", _SAVE_AS_IMAGE)),
    (b"GIF89a", ("a GIF image", _SAVE_AS_IMAGE)),
    (b"\x1f\x8b", ("a gzip archive", "unpack it and upload its files")),
    (b"7z\xbc\xaf\x27\x1c", ("a 7-Zip archive", "unpack it and upload its files")),
    (b"Rar!\x1a\x07", ("a RAR archive", "unpack it and upload its files")),
)


def refused_content(data: bytes) -> tuple[str, str] | None:
    """What a refused upload's content is and what to save it as, when it is a format
    people commonly mean to upload (OpenDocument, binary Office, RTF, GIF, WebP, BMP,
    HEIC, SVG, archives); None for anything else. Only the first bytes and a zip's
    ``mimetype`` entry are read."""
    for magic, answer in _REFUSED_MAGICS:
        if data.startswith(magic):
            return answer
    if data.startswith(_OLE2_MAGIC):
        named = (a for stream, a in _OLE2_STREAMS if stream.encode("utf-16-le") in data)
        return next(named, ("a binary Office file (OLE2)", "save it as DOCX, XLSX, PPTX or PDF"))
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "a WebP image", _SAVE_AS_IMAGE
    if data[4:8] == b"ftyp" and data[8:12] in (b"heic", b"heix", b"mif1", b"heim", b"avif"):
        return "a HEIC/AVIF image", _SAVE_AS_IMAGE
    if _is_bmp(data):
        return "a BMP image", _SAVE_AS_IMAGE
    if data.startswith(_ZIP_MAGIC):
        # OpenDocument stores its mimetype first, uncompressed, as EPUB does.
        if data[30:38] == b"mimetype" and len(data) >= 30:
            size, _, _, extra = struct.unpack_from("<IIHH", data, 18)
            start = 38 + extra
            return _OPENDOCUMENT.get(data[start : start + min(size, 128)].strip())
        return None
    sample = decode_text(data[:TEXT_SNIFF_BYTES], final=len(data) <= TEXT_SNIFF_BYTES)
    if sample is not None and _SVG_SIGNATURE.match(sample[0]):
        return "an SVG image", _SAVE_AS_IMAGE
    return None
