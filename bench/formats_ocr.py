"""bench.formats, OCR rows: scanned pages through the pipeline against the bare engine,
and the OCR time of a text PDF.

* OCR pages/s through one worker (the real pipeline, its parser process rendering and
  reading each page) on an image-only PDF, against tesserocr reading the same pages
  rendered by pypdfium2 at the same resolution in this process: target >= 0.9x. In
  steady state, as bench.formats' other rows: each side reads a scan of P pages and
  one of 2P, and the ratio is of the marginal times (T(2P) - T(P)), so loading the
  engine's model and the document's fixed costs cancel out;
* the OCR seconds a 100-page text PDF costs (the sum of its parse's
  ``PageReading.ocr_seconds``, parsed by the real parser process): target 0.

The bare side reads with the pipeline's own settings (:func:`engine`: resolution,
language, language data). Without the engine or its data both rows print "skipped:
OCR engine not installed" and why.
"""

from __future__ import annotations

import asyncio
import io
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import Target, print_ratio, ratio
from bench.ingest_runs import settings_for, submit_all

OCR_RATIO_TARGET = 0.9  # pipeline OCR pages/s over the bare engine's, from the issue
SCAN_DPI = 200  # resolution the generated "scans" are stored at
TEXT_PDF_PAGES = 100  # the text PDF whose OCR time must be 0
SCAN_PAGES_FULL, SCAN_PAGES_QUICK = 4, 1  # pages of the scanned PDF (~2-2.5 s each)
LINES_PER_SCAN_PAGE = 30


@dataclass(frozen=True)
class Engine:
    """What the bare side needs to read pages as the pipeline does."""

    dpi: int
    language: str
    tessdata: str | None


def engine() -> Engine | str:
    """The pipeline's OCR settings (core.ingest.formats.ocr), or why OCR cannot be
    measured: the engine or its language data is missing."""
    from core.ingest.formats import ocr

    missing = ocr.unavailable_reason()
    if missing is not None:
        return f"OCR engine not installed ({missing})"
    folder = ocr.tessdata_dir()
    return Engine(ocr.OCR_DPI, ocr.OCR_LANGUAGE, None if folder is None else f"{folder}/")


# --- documents --------------------------------------------------------------------------


def scanned_pdf(pages: int) -> bytes:
    """An image-only PDF: text pages made by reportlab, rasterised by pypdfium2 at
    SCAN_DPI in grey, stored as images by Pillow (no text layer left)."""
    import pypdfium2

    from tests.hostile import make_pdf

    words = ["the", "quarterly", "report", "shows", "revenue", "grew", "in", "every", "region"]
    text = [
        "\n".join(
            " ".join(words[(p + i + j) % len(words)] for j in range(11))
            for i in range(LINES_PER_SCAN_PAGE)
        )
        for p in range(pages)
    ]
    document = pypdfium2.PdfDocument(make_pdf(text))
    try:
        images = [page.render(scale=SCAN_DPI / 72).to_pil().convert("L") for page in document]
    finally:
        document.close()
    buffer = io.BytesIO()
    images[0].save(buffer, "PDF", save_all=True, append_images=images[1:], resolution=SCAN_DPI)
    return buffer.getvalue()


def text_pdf(pages: int) -> bytes:
    from tests.hostile import make_pdf

    line = "Every page of this report has a text layer, so none of it needs OCR."
    return make_pdf(["\n".join(f"{p}.{i} {line}" for i in range(40)) for p in range(pages)])


# --- the two sides ----------------------------------------------------------------------


def bare_ocr(data: bytes, eng: Engine) -> tuple[float, int]:
    """Seconds for pypdfium2 rendering every page at the pipeline's resolution and
    tesserocr reading it, in this process; and the characters read."""
    import pypdfium2
    import tesserocr  # type: ignore[import-untyped, unused-ignore]

    kwargs: dict[str, Any] = {"lang": eng.language}
    if eng.tessdata:
        kwargs["path"] = eng.tessdata
    start, chars = time.perf_counter(), 0
    with tesserocr.PyTessBaseAPI(**kwargs) as api:
        document = pypdfium2.PdfDocument(data)
        try:
            for page in document:
                api.SetImage(page.render(scale=eng.dpi / 72, grayscale=True).to_pil())
                chars += len(api.GetUTF8Text())
        finally:
            document.close()
    return time.perf_counter() - start, chars


def _scan_file(data: bytes, workdir: Path) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "scan.pdf"
    path.write_bytes(data)
    return path


async def pipeline_ocr(data: bytes, workdir: Path, warm_up: bool) -> tuple[float, bool]:
    """Seconds for one Worker to ingest the scanned PDF (with ``warm_up``, its parser
    process reads a one-page scan first), and whether it succeeded."""
    from core import Ledger
    from core.ingest.parse_pool import ParserPool
    from core.ingest.worker import Worker

    path = _scan_file(data, workdir)
    db_path, store = workdir / "ocr.db", workdir / "objects"
    await submit_all(db_path, store, [path])
    async with ParserPool(workers=1) as pool:
        if warm_up:
            await pool.parse(scanned_pdf(1), "pdf")  # the engine loads its model once
        async with await Ledger.open(settings_for(db_path, store)) as ledger:
            worker = Worker(ledger, "bench-ocr", pool=pool, concurrency=2)
            start = time.perf_counter()
            stats = await worker.run(until_idle=True)
            seconds = time.perf_counter() - start
    return seconds, list(stats.outcomes.values()) == ["succeeded"]


async def text_pdf_ocr_seconds(pages: int) -> tuple[float, int]:
    """OCR seconds recorded on a text PDF's parse in the real parser process, and how
    many page readings it recorded."""
    from core.ingest.parse_pool import ParserPool

    async with ParserPool(workers=1) as pool:
        parsed = await pool.parse(text_pdf(pages), "pdf")
    return sum(r.ocr_seconds for r in parsed.readings), len(parsed.readings)


# --- the rows ---------------------------------------------------------------------------


def run_ocr(quick: bool, workdir: Path) -> list[Target]:
    eng = engine()
    if isinstance(eng, str):
        print(f"OCR pages/s, pipeline / bare engine: skipped: {eng}")
        print(f"OCR seconds on a {TEXT_PDF_PAGES}-page text PDF: skipped: {eng}", flush=True)
        return []
    pages = SCAN_PAGES_QUICK if quick else SCAN_PAGES_FULL
    scans = {size: scanned_pdf(size) for size in (pages, 2 * pages)}
    # --quick only shows the rows work: no warm-up page (~2.5 s each side), one round.
    if not quick:
        bare_ocr(scanned_pdf(1), eng)  # load the model outside the timing
    bare: dict[int, float] = {}
    pipe: dict[int, float] = {}
    chars, ok = 0, True
    for r in range(1 if quick else 2):  # two rounds of each, the faster counts
        for size, scan in scans.items():
            took, read = bare_ocr(scan, eng)
            bare[size] = min(bare.get(size, took), took)
            chars = max(chars, read)
            took, done = asyncio.run(
                pipeline_ocr(scan, workdir / f"round-{r}-{size}", warm_up=not quick)
            )
            pipe[size] = min(pipe.get(size, took), took)
            ok = ok and done
    bare_m, pipe_m = bare[2 * pages] - bare[pages], pipe[2 * pages] - pipe[pages]
    # pages/s over pages/s, the same pages; a document that failed never passes (NaN).
    value = bare_m / pipe_m if ok and bare_m > 0 and pipe_m > 0 else float("nan")
    print_ratio(
        "OCR pages/s, pipeline / bare engine",
        value,
        f"marginal (scans of {pages} and {2 * pages} pages at {eng.dpi} dpi), higher is "
        f"better; bare {ratio(pages, bare_m):.2f} pages/s, pipeline "
        f"{ratio(pages, pipe_m):.2f} pages/s "
        f"({chars} characters); whole {2 * pages}-page scan "
        f"{bare[2 * pages] / pipe[2 * pages]:.3f}x"
        + ("" if ok else "; a document did NOT succeed"),
    )
    ocr_s, readings = asyncio.run(text_pdf_ocr_seconds(TEXT_PDF_PAGES))
    print(
        f"OCR seconds on a {TEXT_PDF_PAGES}-page text PDF: {ocr_s:.3f} s "
        f"({readings} page readings recorded)",
        flush=True,
    )
    return [
        Target("OCR: pipeline / bare engine pages/s", value, OCR_RATIO_TARGET, ">="),
        Target(f"OCR seconds, {TEXT_PDF_PAGES}-page text PDF", ocr_s, 0, "==", "seconds"),
        Target(
            f"page readings, {TEXT_PDF_PAGES}-page text PDF",
            readings,
            TEXT_PDF_PAGES,
            "==",
            "count",
        ),
    ]
