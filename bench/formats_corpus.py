"""The formats corpus for :mod:`bench.formats`: for each accepted format, real files
when a corpus folder holds some, else files generated here, and distinct copies of
them so a round lasts long enough to be measured.

Real files come from ``<corpora>/formats`` and ``<corpora>/real-pdfs`` (documents
made by Word, LibreOffice, PowerPoint, Excel, web sites, EPUB packagers, pdfTeX, …;
see that folder's README for their sources and licences), Markdown from this
repository's own documents, plain text from Debian's licence texts. A file counts
only if ingestdesk and the bare library both read it (encrypted samples are refused
by design, a Strict Open XML DOCX is read by ingestdesk but not by python-docx,
image-only PDFs are OCR's business, not text extraction's): the worker and the bare
library must do the same work on every file.

Copies differ in bytes that no parser reads (a zip comment, a PDF comment after
``%%EOF``, trailing newlines or an HTML comment): identical bytes would let the
pipeline reuse the first copy's result, which would measure the ledger, not parsing.
"""

from __future__ import annotations

import io
import os
import random
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.common import REPO_ROOT

# --- tunables ---------------------------------------------------------------------------

DEFAULT_CORPORA = Path("/work/shared/corpora")  # overridden by INGESTDESK_CORPORA or --corpora
SYSTEM_TEXTS = Path("/usr/share/common-licenses")  # real plain text on Debian
GENERATED_SEED = 2_020
# A PDF page with fewer characters than this in its text layer is a scan's business
# (OCR), not text extraction's: such files stay out of the PDF row.
MIN_PDF_PAGE_CHARS = 20  # characters


@dataclass(frozen=True)
class Sample:
    """One distinct file of a format's corpus (before copies)."""

    name: str
    data: bytes
    units: int  # pages, slides, sheets or chapters, as the parse counts them


@dataclass(frozen=True)
class FormatCorpus:
    """A format's files as measured: ``copies`` variants of every sample."""

    kind: str  # a DocumentKind value
    label: str
    source: str  # "real (N files)" or "generated (N files)"
    files: list[Path]
    units: int
    megabytes: float


def corpora_root(given: Path | None) -> Path:
    """The folder of real corpora: ``--corpora``, else ``INGESTDESK_CORPORA``, else the
    shared default (which may not exist: then every format is generated)."""
    if given is not None:
        return given
    env = os.environ.get("INGESTDESK_CORPORA")
    return Path(env) if env else DEFAULT_CORPORA


# --- real files -------------------------------------------------------------------------


def real_candidates(root: Path) -> dict[str, list[Path]]:
    """Candidate real files by kind (sniffed from content, as intake does)."""
    from core.ingest.sniffing import sniff_kind

    found: dict[str, list[Path]] = {}
    paths: list[Path] = []
    for folder in (root / "formats", root / "real-pdfs"):
        if folder.is_dir():
            paths += sorted(p for p in folder.rglob("*") if p.is_file())
    paths += sorted(REPO_ROOT.glob("*.md"))
    if SYSTEM_TEXTS.is_dir():
        paths += sorted(p for p in SYSTEM_TEXTS.iterdir() if p.is_file())
    for path in paths:
        if path.suffix in (".json",) or (path.name == "README.md" and path.parent != REPO_ROOT):
            continue
        head = path.read_bytes()
        kind = sniff_kind(head, path.name)
        if kind is not None:
            found.setdefault(kind.value, []).append(path)
    return found


def readable(path: Path, kind: str) -> Sample | None:
    """The file as a sample when ingestdesk parses it as a text document, else None."""
    from core.ingest.parsing import ParseFailure, parse_document

    data = path.read_bytes()
    try:
        parsed = parse_document(data, kind)
    except ParseFailure:
        return None
    if kind == "pdf":
        chars = [0] * (parsed.pages + 1)
        for chunk in parsed.chunks:
            chars[chunk.page or 0] += len(chunk.text.strip())
        if min(chars[1:], default=0) < MIN_PDF_PAGE_CHARS:
            return None
    return Sample(path.name, data, parsed.pages)


# --- generated files (no corpus folder) -------------------------------------------------


def _words(rng: random.Random, n: int) -> str:
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    return " ".join("".join(rng.choices(letters, k=rng.randint(2, 10))) for _ in range(n))


def _gen_text(rng: random.Random, i: int) -> tuple[str, bytes]:
    body = "\n\n".join(_words(rng, 80) for _ in range(40))
    return f"notes-{i:03d}.txt", body.encode()


def _gen_markdown(rng: random.Random, i: int) -> tuple[str, bytes]:
    parts = [f"# Report {i}"]
    for s in range(8):
        parts += [f"## Section {s}", _words(rng, 60), f"- {_words(rng, 8)}", _words(rng, 60)]
    return f"report-{i:03d}.md", "\n\n".join(parts).encode()


def _gen_csv(rng: random.Random, i: int) -> tuple[str, bytes]:
    rows = ["id,name,region,amount,comment"]
    rows += [
        f"{r},{_words(rng, 2)},{_words(rng, 1)},{r * 7 % 1000},{_words(rng, 6)}" for r in range(400)
    ]
    return f"export-{i:03d}.csv", "\n".join(rows).encode()


def _html_body(rng: random.Random, sections: int) -> str:
    parts = []
    for s in range(sections):
        parts.append(f"<h2>Part {s}</h2><p>{_words(rng, 70)}</p><p>{_words(rng, 70)}</p>")
        if s % 3 == 0:
            cells = "".join(
                f"<tr><td>{r}</td><td>{_words(rng, 3)}</td><td>{_words(rng, 4)}</td></tr>"
                for r in range(8)
            )
            parts.append(f"<table><tr><th>n</th><th>a</th><th>b</th></tr>{cells}</table>")
    return "".join(parts)


def _gen_html(rng: random.Random, i: int) -> tuple[str, bytes]:
    page = (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>Page {i}</title>'
        f"<style>p{{margin:0}}</style></head><body><h1>Page {i}</h1>"
        f"{_html_body(rng, 12)}</body></html>"
    )
    return f"page-{i:03d}.html", page.encode()


def _gen_epub(rng: random.Random, i: int) -> tuple[str, bytes]:
    chapters = 6
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as book:
        book.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        book.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" '
            'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
            '<rootfile full-path="OEBPS/content.opf" '
            'media-type="application/oebps-package+xml"/></rootfiles></container>',
            compress_type=zipfile.ZIP_DEFLATED,
        )
        items = "".join(
            f'<item id="c{c}" href="c{c}.xhtml" media-type="application/xhtml+xml"/>'
            for c in range(chapters)
        )
        spine = "".join(f'<itemref idref="c{c}"/>' for c in range(chapters))
        book.writestr(
            "OEBPS/content.opf",
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
            f"<manifest>{items}</manifest><spine>{spine}</spine></package>",
            compress_type=zipfile.ZIP_DEFLATED,
        )
        for c in range(chapters):
            book.writestr(
                f"OEBPS/c{c}.xhtml",
                '<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml"><head>'
                f"<title>Chapter {c}</title></head><body><h1>Chapter {c}</h1>"
                f"{_html_body(rng, 6)}</body></html>",
                compress_type=zipfile.ZIP_DEFLATED,
            )
    return f"book-{i:03d}.epub", buffer.getvalue()


def _gen_docx(rng: random.Random, i: int) -> tuple[str, bytes]:
    import docx

    document = docx.Document()
    document.add_heading(f"Handbook {i}", 0)
    for s in range(10):
        document.add_heading(f"Section {s}", 1)
        for _ in range(4):
            document.add_paragraph(_words(rng, 60))
        if s % 3 == 0:
            table = document.add_table(rows=8, cols=3)
            for row in table.rows:
                for cell in row.cells:
                    cell.text = _words(rng, 3)
    buffer = io.BytesIO()
    document.save(buffer)
    return f"handbook-{i:03d}.docx", buffer.getvalue()


def _gen_pptx(rng: random.Random, i: int) -> tuple[str, bytes]:
    import pptx

    deck = pptx.Presentation()
    layout = deck.slide_layouts[1]  # title and content
    for s in range(12):
        slide = deck.slides.add_slide(layout)
        slide.shapes.title.text = f"Slide {s}: {_words(rng, 3)}"
        slide.placeholders[1].text = "\n".join(_words(rng, 10) for _ in range(5))
        slide.notes_slide.notes_text_frame.text = _words(rng, 30)
    buffer = io.BytesIO()
    deck.save(buffer)
    return f"deck-{i:03d}.pptx", buffer.getvalue()


def _gen_xlsx(rng: random.Random, i: int) -> tuple[str, bytes]:
    import openpyxl

    book = openpyxl.Workbook()
    for s in range(3):
        sheet = book.active if s == 0 else book.create_sheet()
        assert sheet is not None
        sheet.title = f"Sheet {s}"
        sheet.append(["id", "name", "amount", "comment"])
        for r in range(300):
            sheet.append([r, _words(rng, 2), r * 3.5, _words(rng, 5)])
    buffer = io.BytesIO()
    book.save(buffer)
    return f"book-{i:03d}.xlsx", buffer.getvalue()


def _gen_pdf(rng: random.Random, i: int) -> tuple[str, bytes]:
    from tests.hostile import make_pdf  # reportlab: a test dependency

    pages = ["\n".join(_words(rng, 13) for _ in range(40)) for _ in range(10)]
    return f"report-{i:03d}.pdf", make_pdf(pages)


GENERATORS: dict[str, Callable[[random.Random, int], tuple[str, bytes]]] = {
    "docx": _gen_docx,
    "pptx": _gen_pptx,
    "xlsx": _gen_xlsx,
    "html": _gen_html,
    "epub": _gen_epub,
    "csv": _gen_csv,
    "pdf": _gen_pdf,
    "markdown": _gen_markdown,
    "text": _gen_text,
}
GENERATED_FILES = 8  # per format, when no real file of it is found


def generated(kind: str, count: int = GENERATED_FILES) -> list[Sample]:
    """Deterministic generated samples of a format (parsed once to count units)."""
    from core.ingest.parsing import parse_document

    rng = random.Random(f"{GENERATED_SEED}-{kind}")
    out = []
    for i in range(count):
        name, data = GENERATORS[kind](rng, i)
        out.append(Sample(name, data, parse_document(data, kind).pages))
    return out


# --- distinct copies --------------------------------------------------------------------


def distinct_copy(data: bytes, kind: str, n: int) -> bytes:
    """``data`` changed where no parser looks, so copy ``n`` hashes differently."""
    if n == 0:
        return data
    if kind in ("docx", "pptx", "xlsx", "epub"):
        buffer = io.BytesIO(data)
        with zipfile.ZipFile(buffer, "a") as archive:
            archive.comment = f"bench copy {n}".encode()
        return buffer.getvalue()
    if kind == "pdf":
        return data + f"\n%bench copy {n}\n".encode()
    if kind == "html":
        return data + f"\n<!-- bench copy {n} -->\n".encode()
    # text, Markdown, CSV: trailing line ends, which every reader skips.
    newline = "\r\n" if b"\r\n" in data[:4096] else "\n"
    if data.startswith(b"\xff\xfe"):
        extra = (newline * n).encode("utf-16-le")
    elif data.startswith(b"\xfe\xff"):
        extra = (newline * n).encode("utf-16-be")
    else:
        extra = (newline * n).encode("ascii")
    return data + extra


def write_copies(samples: list[Sample], kind: str, copies: int, folder: Path) -> list[Path]:
    """Every sample ``copies`` times under ``folder``, each copy's bytes distinct."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for n in range(copies):
        for i, sample in enumerate(samples):
            stem, dot, suffix = sample.name.rpartition(".")
            name = f"{i:03d}-{stem or suffix}-c{n}{dot}{suffix if stem else ''}"
            path = folder / name
            path.write_bytes(distinct_copy(sample.data, kind, n))
            paths.append(path)
    return paths
