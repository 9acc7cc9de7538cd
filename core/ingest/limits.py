"""The guards every document format shares, in one home, named with their units.

A hostile upload attacks the parser, not the network: a zip that inflates to
gigabytes, ten thousand tiny entries, XML that expands or nests without end, a sheet
of a million rows. Each guard here is checked *before* the expensive work it protects
(a zip's declared sizes before anything is inflated), and every breach raises
:class:`LimitExceeded`, which :func:`core.ingest.parsing.run_parse` turns into
``parse_error`` with the exception's one-line message. The parser process's time
budget and memory cap (:mod:`core.ingest.parse_pool`) stay the backstop for what no
guard foresaw.

Standard library only: the parser child imports this before any format library.
"""

from __future__ import annotations

import zipfile

# --- tunables ---------------------------------------------------------------------------

# Zip containers (DOCX, PPTX, XLSX, EPUB). Real Office files hold 10-300 entries, a
# large deck or an EPUB with many images a few thousand.
MAX_ZIP_ENTRIES = 5_000  # entries in one container
# Declared uncompressed sizes. Python's zipfile never inflates past an entry's declared
# size (a lie there ends in a CRC error, measured), so checking the declared sizes
# bounds the real inflation too.
MAX_ZIP_ENTRY_BYTES = 256 << 20  # bytes, one entry uncompressed
MAX_ZIP_TOTAL_BYTES = 512 << 20  # bytes, all entries uncompressed
# Deflate's own ceiling is ~1032:1; XML that repeats one empty cell compresses ~200:1
# at worst in real sheets. Small entries may compress as they like: they cannot hurt.
MAX_ZIP_RATIO = 250  # uncompressed / compressed bytes, per entry
ZIP_RATIO_FLOOR_BYTES = 4 << 20  # bytes uncompressed below which the ratio is not checked
# What ingestdesk reads itself from a container (an EPUB chapter, the package file).
MAX_PART_BYTES = 64 << 20  # bytes read from one entry at most
# The compression methods Python's zipfile inflates. Others (Deflate64 from Windows'
# own zip tool, PPMd, WavPack...) raise NotImplementedError at the first read; they
# are refused by name before any library trips over them.
_ZIP_METHODS = frozenset(
    {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}
)
_UNSUPPORTED_METHOD_NAMES = {6: "implode", 9: "Deflate64", 93: "zstd", 95: "xz", 98: "PPMd"}

# Markup. libxml2 (under python-docx and python-pptx) refuses XML nested deeper than
# 256 levels unless asked for "huge" trees, which nothing here asks for.
MAX_HTML_DEPTH = 1_000  # open elements in HTML or XHTML (real pages: under 100)
MAX_GROUP_DEPTH = 32  # shapes grouped inside groups on a slide

# Tables (XLSX sheets, CSV files, tables in documents), per document. openpyxl reads
# ~20 000 rows a second here (measured, one cell a row), so the row limit keeps a
# sheet of a million rows to seconds, well inside the parse's time budget.
MAX_TABLE_ROWS = 100_000  # rows read, empty ones included
MAX_TABLE_CELLS = 2_000_000  # cells read
MAX_TABLE_COLUMNS = 2_000  # columns of one row

# Images (PNG, JPEG, TIFF frames). A 600-dpi A3 scan is 70 MP; decoded as RGB one
# such frame takes 210 MB, within the parser's memory cap with the OCR engine beside
# it. A PNG of zeros declaring a gigapixel compresses to a few hundred kilobytes.
MAX_IMAGE_PIXELS = 80_000_000  # pixels of one image or frame
MAX_IMAGE_FRAMES = 1_000  # frames (pages) of one TIFF


class LimitExceeded(Exception):
    """A document is over one of ingestdesk's safety limits; the message says which."""


def check_zip(archive: zipfile.ZipFile, what: str) -> None:
    """Refuse a container whose directory promises more than a document needs.

    Only the central directory is read (ZipFile has already parsed it); nothing is
    inflated.

    Args:
        archive: The opened container.
        what: What the container is, for the message ("DOCX").

    Raises:
        LimitExceeded: Too many entries, an entry or the whole too large, an entry
            compressed more than a real document's could be, two entries of one
            name, or a compression method zipfile cannot inflate.
    """
    entries = archive.infolist()
    if len(entries) > MAX_ZIP_ENTRIES:
        raise LimitExceeded(f"{what} has {len(entries)} zip entries (limit {MAX_ZIP_ENTRIES})")
    total = 0
    names: set[str] = set()
    for entry in entries:
        if entry.filename in names:
            # Readers disagree on which copy counts (zipfile takes the last, others
            # the first), so what was sniffed need not be what is parsed.
            raise LimitExceeded(f"{what} has two zip entries of the same name")
        names.add(entry.filename)
        if entry.compress_type not in _ZIP_METHODS:
            method = _UNSUPPORTED_METHOD_NAMES.get(entry.compress_type, "unknown")
            raise LimitExceeded(
                f"{what} entry uses zip compression method {entry.compress_type} ({method}), "
                f"which is not supported; save it again to use deflate"
            )
        size = entry.file_size
        if size > MAX_ZIP_ENTRY_BYTES:
            raise LimitExceeded(
                f"{what} entry inflates to {size} bytes (limit {MAX_ZIP_ENTRY_BYTES})"
            )
        if size > ZIP_RATIO_FLOOR_BYTES and size > MAX_ZIP_RATIO * max(1, entry.compress_size):
            raise LimitExceeded(
                f"{what} entry compressed {size // max(1, entry.compress_size)}:1, "
                f"like a zip bomb (limit {MAX_ZIP_RATIO}:1)"
            )
        total += size
    if total > MAX_ZIP_TOTAL_BYTES:
        raise LimitExceeded(f"{what} inflates to {total} bytes (limit {MAX_ZIP_TOTAL_BYTES})")


def read_part(archive: zipfile.ZipFile, name: str, what: str) -> bytes:
    """An entry's bytes, read no further than ``MAX_PART_BYTES``.

    Raises:
        LimitExceeded: The entry holds more.
        KeyError: No such entry.
    """
    with archive.open(name) as part:
        data = part.read(MAX_PART_BYTES + 1)
    if len(data) > MAX_PART_BYTES:
        raise LimitExceeded(f"{what} part is over {MAX_PART_BYTES} bytes")
    return data


class TableBudget:
    """Counts the rows and cells one document's tables use, against the table limits."""

    def __init__(self, what: str) -> None:
        self._what = what
        self.rows = 0
        self.cells = 0

    def take(self, cells: int) -> None:
        """Count one row of ``cells`` cells.

        Raises:
            LimitExceeded: The document is over a table limit.
        """
        self.rows += 1
        self.cells += cells
        if cells > MAX_TABLE_COLUMNS:
            raise LimitExceeded(
                f"{self._what} has a row of {cells} columns (limit {MAX_TABLE_COLUMNS})"
            )
        if self.rows > MAX_TABLE_ROWS:
            raise LimitExceeded(f"{self._what} has over {MAX_TABLE_ROWS} rows (limit)")
        if self.cells > MAX_TABLE_CELLS:
            raise LimitExceeded(f"{self._what} has over {MAX_TABLE_CELLS} cells (limit)")
