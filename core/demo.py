"""A demo ledger with a generated corpus, so a newcomer sees the dashboard at work.

``build_demo(directory)`` creates a SQLite ledger and an object store in ``directory``,
writes the corpus files to ``directory/corpus`` (so they can be submitted again from
the dashboard) and submits every one of them. Everything is generated from a fixed
seed: two runs produce byte-identical files.

The corpus, and what each file is there to show:

* valid PDFs of 1 to 60 pages, and three big ones (300, 500 and 800 pages) spread
  through the queue, so one worker is busy with a long parse while the other works
  through the stream of small files around it;
* Markdown and plain-text notes, weekly notes and scan batches: the fast path, a
  steady flow of rows changing state;
* ``scanner-output-corrupt.pdf``: a PDF header followed by damaged bytes, which fails
  with ``parse_error`` ("retrying will not help");
* ``scanned-receipt-no-text.pdf``: a well-formed PDF whose pages only hold drawn
  shapes, which fails with ``empty_document``;
* ``scanned-service-contract.pdf``: a scanned page (an image, no text layer), read by
  OCR where the engine is installed (its page shows ``ocr`` and a confidence in the
  document view) and ``ocr_unavailable``, naming what to install, where it is not;
* ``needs-retry-field-notes.md``: the file an operator has to retry. Its first attempt
  really runs, during ``build_demo``, while its stored original is missing from the
  object store (moved aside, as a half-finished restore or a flaky mount would leave
  it): reading the original fails with ``object_read_error`` and the task is recorded
  as failed by the worker ``demo-setup``. The original is then put back. The dashboard
  opens with that task in the failures screen; ``r`` retries it and the second attempt
  succeeds. The task was submitted with one allowed attempt so that it lands in
  ``failed`` at once instead of being retried automatically, which is what happens to
  ``object_read_error`` otherwise.

Nothing here imports a UI toolkit or reportlab (a test-only dependency): PDFs come
from a small hand-written writer that emits standard Type 1 fonts, no embedding; the
scan is drawn with Pillow's built-in font (a dependency: it decodes images for OCR).
"""

from __future__ import annotations

import asyncio
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.config import Settings, sqlite_url
from core.errors import BadInput, IngestDeskError, ObjectReadError, error_detail_of
from core.ledger import Ledger, Operator, new_id
from core.states import ErrorCode

DEMO_SEED = 20_240_611  # fixed: the corpus is byte-identical on every run
DEMO_DB_FILE = "ledger.db"
DEMO_STORE_DIR = "objects"
DEMO_CORPUS_DIR = "corpus"
DEMO_ACTOR = "demo"
DEMO_SETUP_WORKER = "demo-setup"
RETRY_DOCUMENT = "needs-retry-field-notes.md"

PAGE_WIDTH_PT = 612  # US Letter, points
PAGE_HEIGHT_PT = 792
LINES_PER_PAGE = 40
WORDS_PER_LINE = 11

# Sizes chosen so the 60-page files take a visible while and the small ones fly by.
# Big PDFs, spread through the queue: each keeps one worker parsing for seconds
# while the other works through the small files around it.
BIG_PDFS: tuple[tuple[str, int], ...] = (
    ("engineering-archive-2019-2025.pdf", 800),
    ("regulatory-filing.pdf", 500),
    ("site-survey-full.pdf", 300),
)
PDF_PAGES: tuple[tuple[str, int], ...] = (
    ("annual-report-2025.pdf", 60),
    ("site-survey-north.pdf", 60),
    ("maintenance-manual.pdf", 35),
    ("employee-handbook.pdf", 20),
    ("vendor-contract.pdf", 20),
    ("quarterly-review-q3.pdf", 12),
    ("incident-review-0412.pdf", 8),
    ("board-minutes-june.pdf", 5),
    ("safety-checklist.pdf", 5),
    ("travel-policy.pdf", 2),
    ("meeting-memo.pdf", 1),
    ("invoice-10233.pdf", 1),
)
MARKDOWN_NOTES: tuple[str, ...] = (
    "runbook-restarts.md",
    "onboarding-notes.md",
    "architecture-decisions.md",
    "release-checklist.md",
)
TEXT_NOTES: tuple[str, ...] = (
    "call-transcript-0311.txt",
    "support-ticket-8812.txt",
    "changelog-excerpt.txt",
)
# A steady stream of small files behind the big ones, so rows keep changing.
WEEKLY_NOTES = 24  # Markdown notes "weekly-sync-NN.md"
SCAN_BATCHES = 12  # PDFs "scan-batch-NN.pdf" of 3 to 8 pages
CORRUPT_PDF = "scanner-output-corrupt.pdf"
NO_TEXT_PDF = "scanned-receipt-no-text.pdf"
SCANNED_PDF = "scanned-service-contract.pdf"
SCANNED_LINES = (
    "SERVICE CONTRACT 2025-117",
    "",
    "The supplier maintains the cooling pumps",
    "at the north site every quarter. Each visit",
    "is recorded in the maintenance log and",
    "signed by the site manager.",
)

_VOCABULARY = [
    "ledger",
    "ingestion",
    "document",
    "review",
    "quarter",
    "revenue",
    "pipeline",
    "worker",
    "claim",
    "lease",
    "stage",
    "parser",
    "chunk",
    "index",
    "embedding",
    "operator",
    "audit",
    "retry",
    "failure",
    "report",
    "survey",
    "contract",
    "policy",
    "vendor",
    "safety",
    "maintenance",
    "schedule",
    "inspection",
    "budget",
    "forecast",
    "customer",
    "incident",
    "response",
    "outage",
    "capacity",
    "storage",
    "archive",
    "retention",
    "compliance",
    "approval",
    "summary",
    "appendix",
    "section",
    "figure",
    "table",
    "north",
    "south",
    "site",
    "team",
    "project",
    "milestone",
    "risk",
    "mitigation",
    "owner",
    "deadline",
    "status",
    "update",
    "decision",
    "action",
    "follow",
    "review",
]


@dataclass(frozen=True)
class DemoFile:
    """One generated corpus file."""

    name: str
    data: bytes


# ------------------------------------------------------------------ PDF writer


def scanned_pdf(lines: Sequence[str]) -> bytes:
    """A one-page PDF holding only a picture of ``lines`` (what a scanner makes: no
    text layer), the same bytes on every run (its dates are fixed)."""
    import io

    from PIL import Image, ImageDraw, ImageFont

    dpi = 200
    page = Image.new("L", (dpi * 17 // 2, dpi * 11 // 2), 255)  # half a US Letter page
    draw = ImageDraw.Draw(page)
    font = ImageFont.load_default(size=40)
    for number, line in enumerate(lines):
        draw.text((150, 150 + 70 * number), line, fill=0, font=font)
    fixed = time.struct_time((2025, 1, 1, 0, 0, 0, 2, 1, 0))
    out = io.BytesIO()
    page.save(out, "PDF", resolution=dpi, creationDate=fixed, modDate=fixed)
    return out.getvalue()


def _pdf_escape(line: str) -> str:
    return line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def pdf_document(pages: Sequence[Sequence[str]], *, drawings_only: bool = False) -> bytes:
    """A minimal, valid PDF 1.4 file.

    Args:
        pages: Lines of ASCII text per page, set in Helvetica.
        drawings_only: Draw grey boxes instead of text: a PDF with pages but no
            extractable text, like a scan without OCR.

    Returns:
        The file's bytes, with a correct cross-reference table.
    """
    objects: list[bytes] = []
    page_count = len(pages)
    # Object numbers: 1 catalog, 2 page tree, 3 font, then (page, content) pairs.
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(page_count))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {page_count} >>".encode())
    objects.append(
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
    )
    for index, lines in enumerate(pages):
        content_ref = 5 + 2 * index
        objects.append(
            (
                f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {PAGE_WIDTH_PT} {PAGE_HEIGHT_PT}] "
                f"/Resources << /Font << /F1 3 0 R >> >> /Contents {content_ref} 0 R >>"
            ).encode()
        )
        if drawings_only:
            stream = "0.85 g 72 420 468 300 re f 0.6 g 90 460 200 40 re f"
        else:
            body = " T* ".join(f"({_pdf_escape(line)}) Tj" for line in lines)
            stream = f"BT /F1 10 Tf 14 TL 72 740 Td {body} ET"
        raw = stream.encode("latin-1")
        objects.append(b"<< /Length %d >>\nstream\n" % len(raw) + raw + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets: list[int] = []
    for number, obj in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + obj + b"\nendobj\n"
    xref_at = len(out)
    out += b"xref\n0 %d\n" % (len(objects) + 1)
    out += b"0000000000 65535 f \n"
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref_at,
    )
    return bytes(out)


# ---------------------------------------------------------------------- corpus


def _sentence(rng: random.Random, words: int) -> str:
    picked = [rng.choice(_VOCABULARY) for _ in range(words)]
    return " ".join(picked).capitalize() + "."


def _page_lines(rng: random.Random, title: str, page: int, pages: int) -> list[str]:
    lines = [f"{title} - page {page} of {pages}", ""]
    lines += [_sentence(rng, WORDS_PER_LINE) for _ in range(LINES_PER_PAGE)]
    return lines


def _title(name: str) -> str:
    return name.rsplit(".", 1)[0].replace("-", " ").title()


def _pdf(rng: random.Random, name: str, page_count: int, title: str | None = None) -> DemoFile:
    title = title or _title(name)
    pages = [_page_lines(rng, title, n, page_count) for n in range(1, page_count + 1)]
    return DemoFile(name, pdf_document(pages))


def generate_corpus(seed: int = DEMO_SEED) -> list[DemoFile]:
    """The demo corpus, in submission order. Same seed, same bytes.

    The order is the show: a big PDF first, failures early enough to arrive while
    work is still flowing, and big PDFs again in the middle and near the end.
    """
    rng = random.Random(seed)
    big = [_pdf(rng, name, pages) for name, pages in BIG_PDFS]
    files: list[DemoFile] = [big[0]]
    files += [_pdf(rng, name, pages) for name, pages in PDF_PAGES]
    # A scanner that died mid-write: a real header, then bytes no reader can make
    # into a document (no objects, no cross-reference table, no trailer).
    damaged = bytes(rng.randrange(256) for _ in range(4096))
    files.append(DemoFile(CORRUPT_PDF, b"%PDF-1.7\n%\xb5\xb5\xb5\xb5\n" + damaged))
    for name in MARKDOWN_NOTES:
        sections = []
        for heading in ("Context", "Steps", "Open questions"):
            paragraph = " ".join(_sentence(rng, rng.randint(8, 16)) for _ in range(6))
            sections.append(f"## {heading}\n\n{paragraph}\n")
        files.append(DemoFile(name, f"# {_title(name)}\n\n{''.join(sections)}".encode()))
    for name in TEXT_NOTES:
        body = "\n".join(_sentence(rng, rng.randint(6, 14)) for _ in range(30))
        files.append(DemoFile(name, f"{_title(name)}\n\n{body}\n".encode()))
    files.append(big[1])
    for n in range(1, WEEKLY_NOTES + 1):
        body = " ".join(_sentence(rng, rng.randint(8, 16)) for _ in range(rng.randint(6, 30)))
        files.append(DemoFile(f"weekly-sync-{n:02}.md", f"# Weekly sync {n}\n\n{body}\n".encode()))
        if n == WEEKLY_NOTES // 2:
            files.append(DemoFile(NO_TEXT_PDF, pdf_document([[], []], drawings_only=True)))
            files.append(DemoFile(SCANNED_PDF, scanned_pdf(SCANNED_LINES)))
    for n in range(1, SCAN_BATCHES + 1):
        files.append(_pdf(rng, f"scan-batch-{n:02}.pdf", rng.randint(3, 8), f"Scan batch {n}"))
    files.append(big[2])
    notes = "\n".join(_sentence(rng, rng.randint(8, 14)) for _ in range(12))
    files.append(DemoFile(RETRY_DOCUMENT, f"# Field notes\n\n{notes}\n".encode()))
    return files


# ------------------------------------------------------------------ the ledger


def demo_settings(directory: Path) -> Settings:
    """Settings of the demo ledger kept in ``directory``."""
    directory = Path(directory)
    return Settings(
        db_url=sqlite_url(directory / DEMO_DB_FILE), store_root=directory / DEMO_STORE_DIR
    )


async def build_demo_async(
    directory: Path,
    *,
    seed: int = DEMO_SEED,
    clock: Callable[[], float] = time.time,
    ids: Callable[[], str] = new_id,
) -> Settings:
    """Create the demo ledger in ``directory`` and submit the corpus.

    Args:
        directory: An empty or missing folder; it is created.
        seed: Seed of the generated corpus.
        clock: Clock of the ledger (tests pass a fixed one).
        ids: Id factory of the ledger (tests pass a deterministic one).

    Returns:
        Settings that open the demo ledger.

    Raises:
        BadInput: ``directory`` already holds a ledger, or cannot be a folder (it, or
            a folder above it, is a file).
        IngestDeskError: ``directory`` cannot be created (no permission, a full disk).
    """
    directory = Path(directory)
    if (directory / DEMO_DB_FILE).exists():
        raise BadInput(
            f"{directory} already holds a ledger; open it with "
            f"--db {directory / DEMO_DB_FILE} --store {directory / DEMO_STORE_DIR}, "
            "or give the demo an empty folder"
        )
    corpus_dir = make_demo_directory(directory)
    settings = demo_settings(directory)
    files = generate_corpus(seed)
    for item in files:
        (corpus_dir / item.name).write_bytes(item.data)
    ledger = await Ledger.open(settings, clock=clock, ids=ids)
    try:
        for item in files:
            if item.name == RETRY_DOCUMENT:
                await _submit_failed_once(ledger, item, directory, ids)
            else:
                doc = await ledger.operator.upload(item.data, item.name)
                await ledger.operator.submit(doc.document_id, actor=DEMO_ACTOR)
    finally:
        await ledger.close()
    return settings


def make_demo_directory(directory: Path) -> Path:
    """Create ``directory`` and its corpus folder; the corpus folder.

    Raises:
        BadInput: ``directory``, or a folder above it, is a file: "cannot create DIR:
            not a directory".
        IngestDeskError: The folder cannot be made for another reason (permissions,
            a full disk), named in words, never as an unexpected error.
    """
    corpus_dir = Path(directory) / DEMO_CORPUS_DIR
    try:
        corpus_dir.mkdir(parents=True, exist_ok=True)
    except (NotADirectoryError, FileExistsError) as exc:
        # FileExistsError: the folder's own name (or corpus/ in it) is taken by a file.
        raise BadInput(f"cannot create {directory}: not a directory") from exc
    except OSError as exc:
        why = (exc.strerror or type(exc).__name__).lower()
        raise IngestDeskError(f"cannot create {directory}: {why}") from exc
    return corpus_dir


async def _submit_failed_once(
    ledger: Ledger, item: DemoFile, directory: Path, ids: Callable[[], str]
) -> None:
    """Run one real attempt of ``item`` while its stored original is missing, then
    put the original back, leaving a failed task that a retry will fix."""
    doc = await ledger.operator.upload(item.data, item.name)
    # One allowed attempt: object_read_error is transient and would otherwise be
    # retried automatically (and succeed) before the operator ever saw it. Only the
    # operator role is made again, on the ledger's own open transactions (nothing is
    # opened, so nothing more to close) and with the ledger's clock and id factory.
    single = Operator(
        ledger.transactions,
        ledger.settings.with_(max_attempts=1),
        ledger.operator.store,
        ledger.reads,
        ledger.clock,
        ids,
    )
    task = await single.submit(doc.document_id, actor=DEMO_ACTOR)
    stored = ledger.settings.store_root / doc.object_key
    aside = directory / "withheld" / doc.sha256
    aside.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(stored, aside)
    try:
        claim = await ledger.queue.claim(task.task_id, DEMO_SETUP_WORKER)
        if claim is None:  # pragma: no cover - nothing else runs during the build
            raise RuntimeError("demo setup could not claim its own task")
        try:
            ledger.operator.store.get(doc.object_key, doc.sha256)
        except ObjectReadError as exc:
            await ledger.queue.fail(claim, ErrorCode.OBJECT_READ_ERROR, error_detail_of(exc))
        else:  # pragma: no cover - the object was just moved away
            raise RuntimeError("the withheld object was still readable")
    finally:
        shutil.move(aside, stored)
        aside.parent.rmdir()


def build_demo(
    directory: Path,
    *,
    seed: int = DEMO_SEED,
    clock: Callable[[], float] = time.time,
    ids: Callable[[], str] = new_id,
) -> Settings:
    """Synchronous :func:`build_demo_async` (same arguments) for command-line entry
    points.

    Raises:
        RuntimeError: Called from inside a running event loop (use the async one).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(build_demo_async(directory, seed=seed, clock=clock, ids=ids))
    raise RuntimeError("build_demo() was called inside an event loop; await build_demo_async()")
