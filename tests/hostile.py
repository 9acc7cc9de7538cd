"""Generators for valid and hostile documents, built in memory.

Everything is made with pypdf, reportlab and the standard library, deterministically,
so a failing test can be reproduced byte for byte. Hand-built PDFs go through
:func:`raw_pdf`, which writes a correct cross-reference table so that the hostility is
exactly the one intended and pypdf does not fail early on a broken xref instead.
"""

from __future__ import annotations

import asyncio
import io
import os
import random
import time
import zipfile
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

from pypdf import PdfWriter
from reportlab.lib.pagesizes import letter
from reportlab.lib.utils import ImageReader
from reportlab.pdfgen import canvas

MIB = 1 << 20  # bytes
PARSING_CPU_S = 0.8  # CPU seconds a fresh parser child has used once it is surely parsing
BUSY_WAIT_S = 120.0  # seconds a test waits for a parser to get busy (a loaded machine)
# Seconds an in-process worker may take over an 8000-page PDF parsed twice: 122 s were
# measured under `stress-ng --cpu 2` on a shared 2-core machine, ~10 s quiet.
LOADED_RUN_S = 600.0

_FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


# --- building blocks ----------------------------------------------------------------------


def make_pdf(pages: list[str]) -> bytes:
    """A valid PDF with one page per string; newlines in a string start new lines.

    pypdf extracts the text back line for line, so tests can check page numbers and
    content.
    """
    buffer = io.BytesIO()
    # invariant=1 pins dates and ids, so the output is the same on every run.
    pdf = canvas.Canvas(buffer, pagesize=letter, invariant=1)
    for text in pages:
        lines = pdf.beginText(72, 720)
        lines.setFont("Helvetica", 10)
        for line in text.splitlines():
            lines.textLine(line)
        pdf.drawText(lines)
        pdf.showPage()
    pdf.save()
    return buffer.getvalue()


def raw_pdf(objects: list[bytes], *, root: int = 1) -> bytes:
    """Serialise numbered objects (1, 2, …) into a PDF with a correct xref table."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref_at = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        root,
        xref_at,
    )
    return bytes(out)


def stream(data: bytes, extra: bytes = b"") -> bytes:
    """A stream object body; ``extra`` goes into its dictionary (e.g. a /Filter)."""
    return b"<< /Length %d %s >>\nstream\n%s\nendstream" % (len(data), extra, data)


def one_page_pdf(content: bytes, *, page_extra: bytes = b"") -> bytes:
    """A one-page PDF around a content stream object body, with font /F1 available."""
    return raw_pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
            b"/Resources << /Font << /F1 5 0 R >> >> " + page_extra + b">>",
            content,
            _FONT,
        ]
    )


def pages_pdf(contents: list[int], content_objects: list[bytes]) -> bytes:
    """A PDF whose page ``i`` draws content object ``contents[i]`` (an index into
    ``content_objects``). Pages may share one content object."""
    first_content = 4
    first_page = first_content + len(content_objects)
    kids = b" ".join(b"%d 0 R" % (first_page + i) for i in range(len(contents)))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(contents)),
        _FONT,
        *content_objects,
    ]
    for index in contents:
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 3 0 R >> >> >>" % (first_content + index)
        )
    return raw_pdf(objects)


def _deflate_repeated(unit: bytes, total_bytes: int) -> bytes:
    """zlib stream of ``unit`` repeated to ``total_bytes``, without holding it all."""
    compressor = zlib.compressobj(9)
    block = unit * (MIB // len(unit))
    parts = [compressor.compress(block) for _ in range(total_bytes // len(block))]
    parts.append(compressor.flush())
    return b"".join(parts)


# --- hostile PDFs -------------------------------------------------------------------------


def truncated_pdf() -> bytes:
    """A valid PDF cut in the middle of its page content (no xref, no trailer)."""
    whole = make_pdf(["This document was cut short during upload."] * 3)
    return whole[: len(whole) // 2]


def garbage_pdf() -> bytes:
    """64 KiB of random bytes, as uploaded under a ``.pdf`` name."""
    return random.Random(1).randbytes(64 * 1024)


def html_as_pdf() -> bytes:
    """An HTML error page saved as ``report.pdf`` — a classic download failure."""
    return (
        b"<!DOCTYPE html>\n<html><head><title>403 Forbidden</title></head>\n"
        b"<body><h1>Forbidden</h1><p>You don't have permission to access report.pdf.</p>"
        b"</body></html>\n"
    )


def zip_as_pdf() -> bytes:
    """A ZIP archive (containing a PDF) renamed to ``.pdf``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("report.pdf", make_pdf(["zipped"]))
        archive.writestr("notes.txt", "plain text inside a zip")
    return buffer.getvalue()


def encrypted_pdf(user_password: str, text: str = "Confidential quarterly numbers") -> bytes:
    """A PDF encrypted with RC4-128. With ``user_password=""`` anyone may open it.

    RC4 rather than AES because pypdf decrypts AES only with the optional
    ``cryptography`` package.
    """
    writer = PdfWriter(clone_from=io.BytesIO(make_pdf([text])))
    writer.encrypt(user_password=user_password, owner_password="owner-secret", algorithm="RC4-128")
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def cyclic_page_tree_pdf() -> bytes:
    """A /Pages node whose /Kids lists itself (next to one real page)."""
    return raw_pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R 2 0 R] /Count 2 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
        ]
    )


def nested_arrays_pdf(depth: int = 100_000, *, in_content: bool = True) -> bytes:
    """``depth`` nested ``[`` … ``]`` in the page's content stream, or in an object."""
    nested = b"[" * depth + b"]" * depth
    text = b"BT /F1 12 Tf 72 700 Td (after the arrays) Tj ET"
    if in_content:
        return one_page_pdf(stream(nested + b"\n" + text))
    return one_page_pdf(stream(text), page_extra=b"/Nested " + nested + b" ")


def flate_bomb_pdf(inflated_bytes: int = 300 * MIB) -> bytes:
    """A content stream that inflates to ``inflated_bytes`` from well under 1 KiB.

    Two stacked FlateDecode filters: spaces deflate ~1000:1, and the deflated spaces are
    themselves repetitive enough to deflate ~500:1 again.
    """
    once = _deflate_repeated(b" ", inflated_bytes)
    return one_page_pdf(stream(zlib.compress(once, 9), b"/Filter [/FlateDecode /FlateDecode]"))


def memory_bomb_pdf(pages: int = 15, inflated_per_page: int = 70 * MIB) -> bytes:
    """Pages that each inflate a separate stream just under pypdf's 75 MB per-stream
    limit. pypdf keeps decoded streams cached on the reader, so memory grows by
    ~``inflated_per_page`` for every page: 15 pages pass 1 GiB from a file of ~8 KB."""
    blob = stream(
        zlib.compress(_deflate_repeated(b" ", inflated_per_page), 9),
        b"/Filter [/FlateDecode /FlateDecode]",
    )
    return pages_pdf(list(range(pages)), [blob] * pages)


def operator_flood_pdf(operators: int = 1_000_001) -> bytes:
    """One page with a million ``(a) Tj`` text operators (7 MB inflated, ~10 KB stored).

    pypdf tokenises ~2 µs per token and stops at its 2 000 000-token budget per stream
    (``LimitReachedError``), after about 4-5 s.
    """
    content = b"BT /F1 12 Tf 72 700 Td " + b"(a) Tj " * operators + b"ET"
    return one_page_pdf(stream(zlib.compress(content, 9), b"/Filter /FlateDecode"))


def slow_pdf(pages: int = 20, operators_per_page: int = 250_000) -> bytes:
    """A few KB that keep pypdf busy for about 3 s *per page*: every page draws the same
    compressed content stream of ``operators_per_page`` text operators, each under the
    token budget, and pypdf re-tokenises the shared stream for every page. 20 pages ≈ a
    minute: a real hang, without test hooks."""
    content = b"BT /F1 12 Tf 72 700 Td " + b"(a) Tj " * operators_per_page + b"ET"
    shared = stream(zlib.compress(content, 9), b"/Filter /FlateDecode")
    return pages_pdf([0] * pages, [shared])


def blank_pages_pdf(pages: int = 20_000) -> bytes:
    """``pages`` blank pages (about 2.5 MB); parses, but holds no text."""
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(612, 792)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def image_only_pdf() -> bytes:
    """One page holding only an image, as a scanner without OCR makes."""
    from PIL import Image  # reportlab's own dependency

    image = Image.new("RGB", (64, 64), (200, 30, 30))
    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, pagesize=letter, invariant=1)
    pdf.drawImage(ImageReader(image), 72, 400, 300, 300)
    pdf.showPage()
    pdf.save()
    return buffer.getvalue()


def warning_flood_pdf(copies: int = 10_000) -> bytes:
    """A readable page whose dictionary repeats one key ``copies`` times: pypdf logs a
    "Multiple definitions in dictionary" warning for every repeat (~10 000 here), then
    extracts the page's text ("survivor").

    Not a deeply nested dictionary, which floods too: how pypdf recovers from the
    RecursionError it hits depends on how deep the caller's stack already is (a few
    frames more or less flip it between recovering and "not a valid PDF"), so the
    outcome changed with test order and with how the parser process was started."""
    return one_page_pdf(
        stream(b"BT /F1 12 Tf 72 700 Td (survivor) Tj ET"),
        page_extra=b"/Junk 1 " * copies,
    )


# --- text ---------------------------------------------------------------------------------


def cp1252_text() -> bytes:
    """Windows-1252 text that is not valid UTF-8 (curly quotes, é, €)."""
    return "“Café” costs 5 € — naïve façade.\n".encode("cp1252") * 20


def utf16_text() -> bytes:
    """UTF-16 little-endian text with a byte-order mark."""
    return "Grüße aus Köln. Ελληνικά too.\n".encode("utf-16")


def nul_text() -> bytes:
    """A UTF-8 log with a few NUL bytes in it, as a crashed logger leaves behind.

    Rare enough (3 in ~4 KB) that sniffing still calls it text; parsing strips them.
    """
    lines = [f"2024-05-01T12:00:{i:02d} worker ok, queue depth {i}\n" for i in range(60)]
    return ("first line\x00 of the log\n" + "".join(lines) + "last\x00\x00 line\n").encode()


def long_line_text(size: int = 2 * MIB) -> bytes:
    """A single ``size``-byte word: no spaces or newlines anywhere."""
    return b"x" * size


# --- parser processes attacked from outside ----------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_of(pid: int) -> list[int]:
    """The pids of the processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _first_busy(pids: Iterable[int], not_before: set[int], used: Callable[[int], float]) -> int:
    for pid in pids:
        if pid not in not_before and cpu_seconds(pid) - used(pid) >= PARSING_CPU_S:
            return pid
    return 0


def kill_busy_child(
    parent: int, sig: int, *, not_before: set[int], timeout_s: float = BUSY_WAIT_S
) -> int:
    """Send ``sig`` to the child of ``parent`` (not one in ``not_before``) once it has
    used PARSING_CPU_S of CPU: past its imports, inside the parse. Its pid.

    Waits for the CPU the child has used, not for a time: on a loaded machine a child
    can take seconds of wall clock to get that far.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pid = _first_busy(children_of(parent), not_before, lambda _: 0.0)
        if pid:
            os.kill(pid, sig)
            return pid
        time.sleep(0.02)
    raise AssertionError(f"no parser child of {parent} got busy within {timeout_s}s")


async def kill_busy_parser(
    pids: Callable[[], Iterable[int]],
    sig: int,
    *,
    not_before: set[int] = frozenset(),  # type: ignore[assignment]
    used_before: dict[int, float] | None = None,
    timeout_s: float = BUSY_WAIT_S,
) -> int:
    """:func:`kill_busy_child` for a pool in this process (``pids``: its
    ``child_pids``), without blocking its loop. ``used_before``: CPU seconds a child
    had used before the parse (a warmed-up child), counted off."""
    before = used_before or {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pid = _first_busy(pids(), set(not_before), lambda p: before.get(p, 0.0))
        if pid:
            os.kill(pid, sig)
            return pid
        await asyncio.sleep(0.02)
    raise AssertionError(f"no parser process got busy within {timeout_s}s")
