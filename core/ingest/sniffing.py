"""What a document's bytes are: its kind (:func:`sniff_kind`) and, for text, its
encoding (:func:`decode_text`).

Both guess from content, with the same rule for "looks like text", so they live
together: an upload is judged by :func:`sniff_kind` when it enters
(:mod:`core.intake`) and decoded by :func:`decode_text` when it is parsed. Standard
library only, so a parser child can import this without paying for anything else.
"""

from __future__ import annotations

import codecs
import re

from core.states import DocumentKind

# --- tunables ---------------------------------------------------------------------------

# A PDF header must start within this many bytes; the same window Acrobat tolerates.
PDF_HEADER_WINDOW_BYTES = 1024  # bytes
# How much of an upload sniff_kind inspects to decide whether it is text.
TEXT_SNIFF_BYTES = 64 * 1024  # bytes
# Control characters (other than tab, newline, carriage return, form feed, vertical tab
# and escape) allowed in text before it is judged binary. Random bytes score about 13 %.
MAX_CONTROL_CHAR_RATIO = 0.01  # fraction of decoded characters

MARKDOWN_SUFFIXES = (".md", ".markdown")
TEXT_SUFFIXES = (".txt", ".text", *MARKDOWN_SUFFIXES)

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
)
# C0 and C1 controls except tab, LF, VT, FF, CR and ESC (ANSI colours in logs).
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f-\x9f]")
# The endian-neutral codecs read the BOM, pick the byte order from it and drop it.
_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    # UTF-32 BOMs start with the UTF-16 ones, so they must be tested first.
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_PDF_MAGIC = b"%PDF-"


def sniff_kind(data: bytes, filename: str) -> DocumentKind | None:
    """Judge an upload's kind from its content, using the name only to tell text apart.

    Rules, in order:

    1. ``%PDF-`` at offset 0 → PDF. ``%PDF-`` later but within the first 1024 bytes
       (junk before the header, which readers tolerate) → PDF too, unless the name
       claims Markdown or text: a note *about* PDF headers is still a note.
    2. A name ending in ``.pdf`` whose content is not PDF → None. The content
       contradicts the name (HTML error pages, ZIPs, renamed files), so the upload is
       refused as bad input rather than indexed as something the user did not mean.
    3. Known binary signatures (ZIP, images, ELF, …) → None.
    4. Text-like content → MARKDOWN for ``.md``/``.markdown`` names, TEXT otherwise.
       Text-like means it decodes (BOM-declared UTF-8/16/32, else strict UTF-8, else
       cp1252) and at most 1 % of the first 64 KiB are control characters. NUL bytes
       count as control characters: a stray NUL in a log is tolerated (and stripped on
       parse), a binary file is not. UTF-16 without a BOM is not recognised.
    5. Anything else → None.

    An empty upload is text by rule 4 (and later fails as ``empty_document``), except
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
    if data.startswith(_BINARY_MAGICS):
        return None
    sample = decode_text(data[:TEXT_SNIFF_BYTES], final=len(data) <= TEXT_SNIFF_BYTES)
    if sample is None or _control_ratio(sample[0]) > MAX_CONTROL_CHAR_RATIO:
        return None
    if name.endswith(MARKDOWN_SUFFIXES):
        return DocumentKind.MARKDOWN
    return DocumentKind.TEXT


def decode_text(
    data: bytes, *, final: bool = True, count_nul: bool = True
) -> tuple[str, str] | None:
    """Decode text bytes the way a careful human would guess their encoding.

    BOM first (it is unambiguous), then strict UTF-8 (by far the commonest, and it
    almost never decodes non-UTF-8 text by accident), then cp1252 — which decodes nearly
    any byte string, so it is only believed if the result has few control characters.

    Args:
        data: The bytes.
        final: False when ``data`` is a prefix of a longer file, so a multi-byte
            character cut at the end is not held against it.
        count_nul: Whether NUL bytes count against cp1252. Sniffing counts them (they
            mark binaries); parsing, which strips them anyway, does not.

    Returns:
        ``(text, encoding)``, or None when no candidate encoding fits.
    """
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return _decode_with(data, encoding, final=final)
    decoded = _decode_with(data, "utf-8", final=final)
    if decoded is not None:
        return decoded
    decoded = _decode_with(data, "cp1252", final=final)
    if (
        decoded is not None
        and _control_ratio(decoded[0], count_nul=count_nul) <= MAX_CONTROL_CHAR_RATIO
    ):
        return decoded
    return None


def _control_ratio(text: str, *, count_nul: bool = True) -> float:
    """Fraction of ``text`` that is control characters a text file would not contain."""
    if not count_nul:
        text = text.replace("\x00", "")
    if not text:
        return 0.0
    # Deleting them with a regex runs in C; counting per character in Python would make
    # a 50 MB upload take seconds.
    return (len(text) - len(_CONTROL_CHARS.sub("", text))) / len(text)


def _decode_with(data: bytes, encoding: str, *, final: bool) -> tuple[str, str] | None:
    decoder = codecs.getincrementaldecoder(encoding)("strict")
    try:
        return decoder.decode(data, final=final), encoding
    except UnicodeDecodeError:
        return None
