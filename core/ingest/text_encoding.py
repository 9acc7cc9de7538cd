"""How a text's bytes are encoded: :func:`decode_text`, shared by sniffing an upload
(:mod:`core.ingest.sniffing`) and parsing text, CSV and HTML.

Knowledge bases are fed text from every code page in use: Shift_JIS exports from
Japanese Excel, GBK and Big5 pages, Windows-1251 Russian notes, Latin-2 Polish ones.
Reading such a file as cp1252 indexes mojibake no search will ever match, and refusing
it loses the document, so the guess goes BOM, UTF-8, the charset the text declares,
then a statistical guess (charset-normalizer) where it has evidence, and cp1252 last.
The standard library does the common case (BOM or UTF-8); charset-normalizer is
imported only for a text that is neither.
"""

from __future__ import annotations

import codecs
import re

# Control characters (other than tab, newline, carriage return, form feed, vertical tab
# and escape) allowed in text before it is judged binary. Random bytes score about 13 %.
MAX_CONTROL_CHAR_RATIO = 0.01  # fraction of decoded characters
# Where a page or an XML file names its encoding: <meta charset=...>, <meta
# http-equiv="Content-Type" content="...; charset=...">, <?xml ... encoding="..."?>.
DECLARED_CHARSET_WINDOW_BYTES = 2048  # bytes
# How much of a text the statistical guess reads; it samples inside that window.
GUESS_SAMPLE_BYTES = 256 * 1024  # bytes

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
_DECLARED = re.compile(
    rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]+)"""
    rb"""|<\?xml[^>]*\sencoding\s*=\s*["']([A-Za-z0-9_.:-]+)""",
    re.IGNORECASE,
)
# Labels pages use that Python's codec registry does not know.
_WHATWG_LABELS = {
    "windows-874": "cp874",
    "x-mac-cyrillic": "mac_cyrillic",
    "x-mac-roman": "mac_roman",
    "x-sjis": "cp932",
    "iso-8859-8-i": "iso8859_8",
    "x-gbk": "gb18030",
    "x-euc-jp": "euc_jp",
}
# What browsers decode a declared label as (the WHATWG Encoding standard): each label
# on the left names a superset in practice, and pages labelled one use the other's
# extra characters (curly quotes in "ISO-8859-1" pages, NEC symbols in "Shift_JIS").
_WHATWG_SUPERSETS = {
    "ascii": "cp1252",
    "latin_1": "cp1252",
    "iso8859_1": "cp1252",
    "iso8859_9": "cp1254",
    "iso8859_11": "cp874",
    "tis_620": "cp874",
    "shift_jis": "cp932",
    "euc_kr": "cp949",
    "gb2312": "gb18030",
    "gbk": "gb18030",
}
# The encodings a page may declare (the WHATWG Encoding standard's, by Python's codec
# names, after the supersets above) and the legacy ones Python reads that pages of the
# same regions were written in.
_PAGE_ENCODINGS = frozenset(
    [
        "utf_8",
        "utf_16",
        "utf_16_be",
        "utf_16_le",
        "cp866",
        *(f"iso8859_{n}" for n in (2, 3, 4, 5, 6, 7, 8, 10, 13, 14, 15, 16)),
        "koi8_r",
        "koi8_u",
        "mac_roman",
        "mac_cyrillic",
        "cp874",
        *(f"cp{n}" for n in range(1250, 1259)),
        "gb18030",
        "big5",
        "big5hkscs",
        "euc_jp",
        "iso2022_jp",
        "cp932",
        "cp949",
        "cp437",
        "cp850",
        "cp852",
    ]
)
_UNICODE = ("utf-8", "utf-8-sig", "utf-16", "utf-32")


def decode_text(
    data: bytes, *, final: bool = True, count_nul: bool = True
) -> tuple[str, str] | None:
    """Decode text bytes the way a careful human would guess their encoding.

    In order: a BOM (unambiguous); strict UTF-8 (by far the commonest, and it almost
    never decodes other text by accident, so it wins over a page's mislabelled
    ``charset=iso-8859-1``); the charset the text declares in its first 2 KiB (an
    HTML ``<meta>`` or an XML declaration; a UTF-16 label without a BOM is ignored, as
    browsers do); charset-normalizer's guess when it has evidence (a language in the
    decoded words, or clean CJK multi-byte sequences); cp1252, which decodes nearly any
    bytes; and, for a short text whose bytes cp1252 cannot decode, the guess without
    evidence. Every candidate but a
    BOM's is believed only if at most 1 % of what it decodes is control characters.

    Args:
        data: The bytes.
        final: False when ``data`` is a prefix of a longer file, so a multi-byte
            character cut at the end is not held against it.
        count_nul: Whether NUL bytes count as control characters. Sniffing counts them
            (they mark binaries); parsing, which strips them anyway, does not.

    Returns:
        ``(text, encoding)`` with the codec's name, or None when no encoding fits.
    """
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return _decode_with(data, encoding, final=final)
    decoded = _decode_with(data, "utf-8", final=final)
    if decoded is not None:
        return decoded
    declared = codec_for(declared_charset(data))
    if declared is not None and not declared.startswith(("utf_16", "utf_32")):
        decoded = _believable(_decode_with(data, declared, final=final), count_nul)
        if decoded is not None:
            return decoded
    guessed, has_language = _guess(data, final=final)
    if guessed is not None and has_language:
        decoded = _believable(_decode_with(data, guessed, final=final), count_nul)
        if decoded is not None:
            return decoded
    if guessed == "cp1252" and has_language:
        return None  # cp1252 was just tried, and nothing else fits better
    decoded = _believable(_decode_with(data, "cp1252", final=final), count_nul)
    if decoded is None and guessed not in (None, "cp1252"):
        decoded = _believable(_decode_with(data, guessed, final=final), count_nul)
    return decoded


def is_unicode(encoding: str) -> bool:
    """Whether ``encoding``, as :func:`decode_text` names it, is a Unicode one (UTF-8,
    or UTF-8/16/32 a BOM declared): nothing was guessed."""
    return encoding in _UNICODE


def declared_charset(data: bytes) -> str | None:
    """The encoding label a page or XML file declares near its top, as written."""
    found = _DECLARED.search(data, 0, DECLARED_CHARSET_WINDOW_BYTES)
    if found is None:
        return None
    label = found.group(1) or found.group(2)
    return label.decode("ascii")


def codec_for(label: str | None) -> str | None:
    """The codec to read a declared ``label`` with, or None for a label that names no
    character encoding a page may use (unknown, or one of Python's byte transforms
    such as ``base64``, ``zlib`` or ``unicode_escape``, which a hostile page could
    name)."""
    if label is None:
        return None
    label = _WHATWG_LABELS.get(label.lower(), label)
    try:
        name = codecs.lookup(label).name
    except LookupError:
        return None
    name = name.replace("-", "_")
    name = _WHATWG_SUPERSETS.get(name, name)
    return name if name in _PAGE_ENCODINGS else None


def control_ratio(text: str, *, count_nul: bool = True) -> float:
    """Fraction of ``text`` that is control characters a text file would not contain."""
    if not count_nul:
        text = text.replace("\x00", "")
    if not text:
        return 0.0
    # Deleting them with a regex runs in C; counting per character in Python would make
    # a 50 MB upload take seconds.
    return (len(text) - len(_CONTROL_CHARS.sub("", text))) / len(text)


def _believable(decoded: tuple[str, str] | None, count_nul: bool) -> tuple[str, str] | None:
    if decoded is None or control_ratio(decoded[0], count_nul=count_nul) > MAX_CONTROL_CHAR_RATIO:
        return None
    return decoded


def _guess(data: bytes, *, final: bool) -> tuple[str | None, bool]:
    """charset-normalizer's encoding for ``data`` and whether it has evidence for it;
    (None, False) when it finds none or is not installed."""
    try:
        from charset_normalizer import from_bytes
        from charset_normalizer.utils import is_multi_byte_encoding
    except ImportError:  # a declared dependency; without it, cp1252 as before it came
        return None, False
    sample = data[:GUESS_SAMPLE_BYTES]
    if len(sample) < len(data) or not final:
        # Cut at a line end, so a multi-byte character cut by the sample does not
        # count against the right encoding.
        sample = sample[: sample.rfind(b"\n") + 1] or sample
    # Text without a BOM is never taken for UTF-16/32 (sniff_kind's rule).
    matches = [m for m in from_bytes(sample) if not m.encoding.startswith(("utf_16", "utf_32"))]
    if not matches:
        return None, False
    best = matches[0]
    # Evidence: words of a language in the decoded text, or CJK multi-byte sequences,
    # which decode cleanly from almost nothing but text in that encoding.
    evidence = best.coherence > 0 or (is_multi_byte_encoding(best.encoding) and best.chaos < 0.1)
    # Western text decodes about as cleanly in cp1250 or cp1257 as in cp1252, and the
    # guess can rank either first ("naïve" read as "naďve"), even naming a language
    # for each from a few accented letters among markup: cp1252, the commonest, wins
    # any tie. (So can Czech in cp1250 that cp1252 reads without noise.)
    if "cp1252" in best.could_be_from_charset or any(
        m.encoding == "cp1252" and m.chaos <= best.chaos for m in matches
    ):
        return "cp1252", evidence
    return best.encoding, evidence


def _decode_with(data: bytes, encoding: str, *, final: bool) -> tuple[str, str] | None:
    decoder = codecs.getincrementaldecoder(encoding)("strict")
    try:
        return decoder.decode(data, final=final), encoding
    except UnicodeError:
        return None
