"""The page record on both backends: each page's reading stored with its version's
chunks when a task finishes (through the real public ledger API, a claimed task
finished with given readings, since OCR readings come from the parser), replaced,
copied and dropped with the chunks, summarised, filtered, and the review flag that
stops a publish until a person accepts it. End to end through a worker and real
parser processes with real PDFs from the shared corpus."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from core import Conflict, Ledger, Settings, parse_filter
from core.errors import NeedsAcceptance
from core.ingest.formats.base import PageReading
from core.ingest.parse_pool import ParserPool
from core.ledger import ChunkRecord, DocumentView
from core.ledger.pages import PageView, page_runs
from core.states import DocumentStatus, ErrorCode, PageDecision, TaskStatus
from tests.core.test_worker import add, cli, drain

REAL_PDFS = Path("/work/shared/corpora/real-pdfs")
TEXT_PDF = REAL_PDFS / "004-pdflatex-4-pages" / "pdflatex-4-pages.pdf"
# The five pictures with no text at all among pypdf's sample files (issue 20).
IMAGE_ONLY_PDFS = [
    REAL_PDFS / path
    for path in (
        "007-imagemagick-images/imagemagick-ASCII85Decode.pdf",
        "007-imagemagick-images/imagemagick-CCITTFaxDecode.pdf",
        "007-imagemagick-images/imagemagick-lzw.pdf",
        "019-grayscale-image/grayscale-image.pdf",
        "023-cmyk-image/cmyk-image.pdf",
    )
]
needs_corpus = pytest.mark.skipif(
    not REAL_PDFS.is_dir(), reason="the shared corpus is not on this machine"
)

TXT, OCR, EMPTY, SKIP = (
    PageDecision.TEXT,
    PageDecision.OCR,
    PageDecision.OCR_EMPTY,
    PageDecision.SKIPPED,
)


def scan(low: tuple[int, ...] = (4, 7, 9), pages: int = 10) -> list[PageReading]:
    """A scanned document's readings: OCR at 91 except ``low`` pages at 42."""
    return [PageReading(n, OCR, 800, 42.0 if n in low else 91.0, 2.1) for n in range(1, pages + 1)]


async def finished(
    ledger: Ledger, readings: list[PageReading], name: str = "scan.pdf", data: bytes = b""
) -> DocumentView:
    """A document uploaded, submitted, claimed and finished with ``readings``."""
    doc = await ledger.operator.upload(data or f"%PDF-1.4 {name}\n".encode(), name)
    return await finish_with(ledger, doc, readings)


async def finish_with(
    ledger: Ledger, doc: DocumentView, readings: list[PageReading]
) -> DocumentView:
    task = await ledger.operator.submit(doc.document_id)
    claim = await ledger.queue.claim(task.task_id, "w1")
    assert claim is not None
    chunks = [ChunkRecord(0, "quarterly figures", 1, 0, 17, None)]
    assert await ledger.queue.finish(claim, chunks, readings=readings)
    return await ledger.reads.get_document(doc.document_id)


# ------------------------------------------------------------------ record


async def test_finish_records_each_page_and_a_summary_that_flags_low_confidence(
    ledger: Ledger,
) -> None:
    readings = [
        PageReading(1, TXT, 1200),
        PageReading(2, OCR, 640, 88.5, 2.0),
        PageReading(3, OCR, 310, 42.0, 2.5),
        PageReading(4, EMPTY, 0, None, 1.5),
        PageReading(5, SKIP, 0, None, 0.0, "over the OCR time budget (120 s)"),
    ]
    doc = await finished(ledger, list(reversed(readings)))  # stored in page order
    summary, pages = await ledger.reads.pages(doc.document_id[:8])
    assert pages == [PageView(**vars(r)) for r in readings]
    assert (summary.pages, summary.text, summary.ocr, summary.ocr_empty, summary.skipped) == (
        5,
        1,
        2,
        1,
        1,
    )
    assert summary.ocr_min_confidence == 42.0
    assert summary.ocr_mean_confidence == pytest.approx(65.25)
    assert summary.ocr_seconds == pytest.approx(6.0)
    assert summary.flagged
    assert summary.reason == (
        "1 page read by OCR at confidence < 60: page 3; 1 page skipped: page 5"
    )
    assert (await ledger.reads.page_summaries([doc.document_id]))[doc.document_id] == summary


async def test_a_text_document_is_not_flagged_and_a_format_without_pages_has_none(
    ledger: Ledger,
) -> None:
    text = await finished(ledger, [PageReading(n, TXT, 900) for n in range(1, 4)], "text.pdf")
    notes = await finished(ledger, [], "notes.md", b"# notes\n")
    summary, _ = await ledger.reads.pages(text.document_id)
    assert (summary.pages, summary.text, summary.flagged, summary.reason) == (3, 3, False, None)
    summary, pages = await ledger.reads.pages(notes.document_id)
    assert (summary.pages, pages, summary.flagged) == (0, [], False)
    assert set(await ledger.reads.page_summaries([text.document_id, notes.document_id])) == {
        text.document_id
    }


async def test_the_reason_names_the_low_pages_as_a_person_reads_them(ledger: Ledger) -> None:
    doc = await finished(ledger, scan())
    summary, _ = await ledger.reads.pages(doc.document_id)
    assert summary.reason == "3 pages read by OCR at confidence < 60: pages 4, 7, 9"
    many = await finished(ledger, scan(low=tuple(range(1, 31)), pages=40), "many.pdf")
    summary, _ = await ledger.reads.pages(many.document_id)
    assert summary.reason == (
        "30 pages read by OCR at confidence < 60: pages 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12"
        " and 18 more"
    )


async def test_pages_go_with_the_chunks_rejected_replaced_on_reprocessing(ledger: Ledger) -> None:
    doc = await finished(ledger, scan())
    await ledger.versions.reject(doc.document_id, actor="pat", reason="rescan it")
    summary, pages = await ledger.reads.pages(doc.document_id)
    assert (summary.pages, pages) == (0, [])  # a draft keeps no chunks and no pages
    again = await finish_with(ledger, doc, [PageReading(1, TXT, 500), PageReading(2, TXT, 400)])
    summary, pages = await ledger.reads.pages(again.document_id)
    assert [p.page for p in pages] == [1, 2] and not summary.flagged


async def test_pages_are_dropped_with_a_retired_version_and_a_deleted_document(
    ledger: Ledger,
) -> None:
    v1 = await finished(ledger, scan(low=()), "guide.pdf")
    await ledger.versions.publish(v1.document_id, actor="pat")
    v2 = await ledger.versions.replace(v1.document_id, b"%PDF-1.4 v2\n", "guide.pdf")
    await finish_with(ledger, v2, [PageReading(1, TXT, 300)])
    await ledger.versions.publish(v2.document_id, actor="pat")  # retires v1
    assert (await ledger.reads.pages(v1.document_id))[1] == []
    assert len((await ledger.reads.pages(v2.document_id))[1]) == 1
    await ledger.versions.delete(v1.document_id, actor="pat")
    assert await ledger.reads.page_summaries([v1.document_id, v2.document_id]) == {}


async def test_a_cancelled_attempt_leaves_no_pages(ledger: Ledger) -> None:
    doc = await finished(ledger, scan())
    await ledger.versions.reject(doc.document_id, actor="pat", reason="again")
    task = await ledger.operator.submit(doc.document_id)
    claim = await ledger.queue.claim(task.task_id, "w1")
    assert claim is not None
    await ledger.operator.cancel(task.task_id, actor="pat")
    # The cancelled attempt can no longer write its pages: the fence refuses it.
    assert not await ledger.queue.finish(claim, [], readings=scan())
    assert (await ledger.reads.pages(doc.document_id))[1] == []


async def test_a_page_read_twice_keeps_its_last_reading(ledger: Ledger) -> None:
    doc = await finished(ledger, [PageReading(1, OCR, 10, 30.0), PageReading(1, OCR, 10, 95.0)])
    _, pages = await ledger.reads.pages(doc.document_id)
    assert [(p.page, p.confidence) for p in pages] == [(1, 95.0)]


# ------------------------------------------------------------------ publish


async def test_a_flagged_version_is_published_only_when_its_pages_are_accepted(
    ledger: Ledger,
) -> None:
    doc = await finished(ledger, scan())
    with pytest.raises(NeedsAcceptance) as refused:
        await ledger.versions.publish(doc.document_id, actor="pat")
    assert isinstance(refused.value, Conflict)
    assert "is flagged for review: 3 pages read by OCR at confidence < 60: pages 4, 7, 9" in (
        refused.value.message
    )
    assert "--accept-low-confidence" in refused.value.message
    assert (await ledger.reads.get_document(doc.document_id)).status is (
        DocumentStatus.REVIEW_PENDING
    )
    published = await ledger.versions.publish(
        doc.document_id, actor="pat", reason="checked by hand", accept_low_confidence=True
    )
    assert published.status is DocumentStatus.PUBLISHED
    last = (await ledger.reads.document_history(doc.document_id))[-1]
    assert (last.action, last.actor) == ("publish", "pat")
    assert last.reason == (
        "checked by hand; accepted as read: 3 pages read by OCR at confidence < 60: pages 4, 7, 9"
    )


async def test_skipped_pages_flag_and_clean_scans_publish_without_a_word(ledger: Ledger) -> None:
    skipped = await finished(
        ledger, [PageReading(1, TXT, 100), PageReading(2, SKIP, 0, reason="over budget")]
    )
    with pytest.raises(NeedsAcceptance, match="1 page skipped: page 2"):
        await ledger.versions.publish(skipped.document_id, actor="pat")
    clean = await finished(ledger, scan(low=()), "clean.pdf")
    assert (await ledger.versions.publish(clean.document_id, actor="pat")).status is (
        DocumentStatus.PUBLISHED
    )
    assert (await ledger.reads.document_history(clean.document_id))[-1].reason is None


async def test_the_threshold_is_the_ledgers_setting(settings: Settings) -> None:
    async with await Ledger.open(settings.with_(ocr_review_below=40.0)) as ledger:
        doc = await finished(ledger, scan())  # 42 is not under 40
        summary, _ = await ledger.reads.pages(doc.document_id)
        assert not summary.flagged and summary.review_below == 40.0
        assert await ledger.reads.count_tasks(parse_filter("ocr:low")) == 0
        await ledger.versions.publish(doc.document_id, actor="pat")
    async with await Ledger.open(settings.with_(ocr_review_below=95.0)) as ledger:
        summary, _ = await ledger.reads.pages(doc.document_id)
        assert summary.low == 10  # judged when asked: the same pages, a stricter ledger


# ------------------------------------------------------------------ filters


async def test_page_filters_find_documents_by_how_their_pages_were_read(ledger: Ledger) -> None:
    low = await finished(ledger, scan(), "low.pdf")
    clean = await finished(ledger, scan(low=()), "clean.pdf")
    text = await finished(ledger, [PageReading(1, TXT, 100)], "text.pdf")
    skipped = await finished(ledger, [PageReading(1, SKIP, 0, reason="over budget")], "skip.pdf")
    empty = await finished(ledger, [PageReading(1, EMPTY, 0, None, 1.0)], "blank.pdf")
    await finished(ledger, [], "notes.md", b"# notes\n")

    async def names(text_: str) -> set[str]:
        f = parse_filter(text_)
        found = {t.document_name for t in await ledger.reads.list_tasks(filter=f)}
        assert await ledger.reads.count_tasks(f) == len(found)
        return {n for n in found if n}

    assert await names("ocr:low") == {"low.pdf"}
    assert await names("ocr:any") == {"low.pdf", "clean.pdf"}
    assert await names("ocr:empty") == {"blank.pdf"}
    assert await names("pages:skipped") == {"skip.pdf"}
    assert await names("pages:flagged") == {"low.pdf", "skip.pdf"}
    assert await names("ocr:any !ocr:low") == {"clean.pdf"}
    assert await names("!pages:flagged status:succeeded") == {
        "clean.pdf",
        "text.pdf",
        "blank.pdf",
        "notes.md",
    }
    assert {low.filename, clean.filename, text.filename, skipped.filename, empty.filename}
    f = parse_filter("ocr:low")
    assert f.needs_ledger and not parse_filter("status:failed").needs_ledger


def test_page_terms_refuse_what_they_do_not_know() -> None:
    from core import BadInput

    with pytest.raises(BadInput, match="ocr must be one of any, low, empty"):
        parse_filter("ocr:bad")
    with pytest.raises(BadInput, match="pages must be one of skipped, flagged"):
        parse_filter("pages:ocr")


async def test_the_filter_seeks_the_page_index(tmp_path: Path) -> None:
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'l.db'}", store_root=tmp_path / "o")
    async with await Ledger.open(settings) as ledger:
        await finished(ledger, scan())
    from sqlalchemy.dialects import sqlite

    from core.ledger import rows
    from core.ledger.reads import term_clause

    query = rows.tasks_with_names().where(term_clause(parse_filter("ocr:low").terms[0]))
    sql = str(query.compile(dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True}))
    with sqlite3.connect(tmp_path / "l.db") as raw:
        plan = " ".join(str(r[-1]) for r in raw.execute(f"EXPLAIN QUERY PLAN {sql}"))
    assert "ix_document_pages_review" in plan


# ------------------------------------------------------------------ display


def test_runs_of_alike_pages_collapse_and_ocr_pages_stand_alone() -> None:
    pages = [PageView(n, TXT, 1000) for n in range(1, 481)]
    pages += [PageView(481, OCR, 700, 55.0, 2.0), PageView(482, OCR, 650, 93.0, 2.2)]
    pages += [PageView(n, TXT, 1000) for n in range(483, 499)]
    pages += [PageView(n, SKIP, 0, None, 0.0, "over budget") for n in (499, 500)]
    runs = page_runs(pages)
    assert [(r.pages, r.decision, r.chars) for r in runs] == [
        ("pages 1-480", TXT, 480_000),
        ("page 481", OCR, 700),
        ("page 482", OCR, 650),
        ("pages 483-498", TXT, 16_000),
        ("pages 499-500", SKIP, 0),
    ]


# ------------------------------------------------------- end to end (real PDFs)


@pytest.fixture
async def pool() -> object:
    async with ParserPool(workers=1) as p:
        yield p


@needs_corpus
async def test_a_text_pdf_through_a_worker_records_every_page_as_text(
    ledger: Ledger, pool: ParserPool
) -> None:
    task_id = await add(ledger, await asyncio.to_thread(TEXT_PDF.read_bytes), TEXT_PDF.name)
    await drain(ledger, pool)
    task = await ledger.reads.get_task(task_id)
    assert task.status is TaskStatus.SUCCEEDED
    summary, pages = await ledger.reads.pages(task.document_id)
    assert [p.page for p in pages] == [1, 2, 3, 4]
    assert all(p.decision is TXT and p.chars > 0 and p.ocr_seconds == 0 for p in pages)
    assert (summary.text, summary.ocr, summary.ocr_seconds, summary.flagged) == (4, 0, 0.0, False)
    await ledger.versions.publish(task.document_id, actor="pat")  # nothing to accept


@needs_corpus
async def test_a_reused_result_copies_its_pages(ledger: Ledger, pool: ParserPool) -> None:
    data = await asyncio.to_thread(TEXT_PDF.read_bytes)
    first = await add(ledger, data, "first.pdf")
    await drain(ledger, pool)
    second = await add(ledger, data, "second.pdf")
    await drain(ledger, pool)
    a, b = [await ledger.reads.get_task(t) for t in (first, second)]
    assert b.status is TaskStatus.SUCCEEDED and b.options.get("reused_from") == first
    assert (await ledger.reads.pages(b.document_id))[1] == (
        await ledger.reads.pages(a.document_id)
    )[1]


@needs_corpus
@pytest.mark.parametrize("path", IMAGE_ONLY_PDFS, ids=lambda p: p.name)
async def test_an_image_only_pdf_ends_empty_or_with_every_page_read_by_ocr(
    ledger: Ledger, pool: ParserPool, path: Path
) -> None:
    task_id = await add(ledger, await asyncio.to_thread(path.read_bytes), path.name)
    await drain(ledger, pool)
    task = await ledger.reads.get_task(task_id)
    summary, pages = await ledger.reads.pages(task.document_id)
    if task.status is TaskStatus.FAILED:
        # Nothing found: no version to review, so no page record either.
        assert task.error_code is ErrorCode.EMPTY_DOCUMENT
        assert pages == []
    else:  # with an OCR engine: every page was rendered and read, none from a text layer
        assert task.status is TaskStatus.SUCCEEDED
        assert pages and all(p.decision in (OCR, EMPTY, SKIP) for p in pages)
        assert summary.pages == len(pages)


# ------------------------------------------------------------------ CLI


async def test_the_cli_lists_pages_and_publishes_a_flagged_version_only_when_accepted(
    ledger: Ledger, settings: Settings
) -> None:
    pages = [PageReading(n, TXT, 1000) for n in range(1, 481)]
    pages += [
        PageReading(481, OCR, 700, 42.5, 2.25),
        PageReading(482, SKIP, 0, None, 0.0, "budget"),
    ]
    doc = await finished(ledger, pages)
    shown = cli(settings, "document", doc.document_id)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "flagged   1 page read by OCR at confidence < 60: page 481; 1 page skipped" in out
    assert "pages     482: 480 text, 1 ocr, 1 skipped; OCR confidence lowest 42.5" in out
    assert "  pages 1-480   text         480000 chars\n" in out
    assert "  page 481      ocr             700 chars  confidence 42.5  ocr 2.2s\n" in out
    assert "  page 482      skipped           0 chars  budget\n" in out
    assert len(out.splitlines()) < 40  # 482 pages, readable

    as_json = cli(settings, "--json", "document", doc.document_id)
    import json

    value = json.loads(as_json.stdout)
    assert value["page_summary"]["flagged"] is True and len(value["pages"]) == 482
    assert value["pages"][480] == {
        "page": 481,
        "decision": "ocr",
        "chars": 700,
        "confidence": 42.5,
        "ocr_seconds": 2.25,
        "reason": None,
    }

    refused = cli(settings, "publish", doc.document_id)
    assert refused.returncode == 3
    assert "flagged for review: 1 page read by OCR at confidence < 60: page 481" in refused.stderr
    accepted = cli(settings, "publish", doc.document_id, "--accept-low-confidence")
    assert accepted.returncode == 0, accepted.stderr
    assert "accepted: 1 page read by OCR" in accepted.stdout


async def test_a_ledger_from_before_pages_were_recorded_gains_the_table(tmp_path: Path) -> None:
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'l.db'}", store_root=tmp_path / "o")
    async with await Ledger.open(settings) as ledger:
        old = await finished(ledger, [])
    with sqlite3.connect(tmp_path / "l.db") as raw:  # the ledger as 0012 left it
        raw.execute("DROP TABLE document_pages")
        raw.execute("DROP INDEX ix_tasks_index_status")  # 0015 undone
        raw.execute("ALTER TABLE ingestion_tasks DROP COLUMN index_id")
        raw.execute("DROP TABLE chunk_vectors")  # and as 0014 found it
        raw.execute("DROP TABLE indexes")
        raw.execute("ALTER TABLE chunks ADD COLUMN embedding BLOB")
        raw.execute("UPDATE alembic_version SET version_num = '0012'")
    async with await Ledger.open(settings) as ledger:
        assert (await ledger.reads.pages(old.document_id))[1] == []  # none recorded then
        new = await finished(ledger, scan(), "new.pdf")
        assert len((await ledger.reads.pages(new.document_id))[1]) == 10


async def test_the_documents_list_says_why_a_version_is_flagged(
    ledger: Ledger, settings: Settings
) -> None:
    low = await finished(ledger, scan(), "low.pdf")
    clean = await finished(ledger, scan(low=()), "clean.pdf")
    listed = cli(settings, "documents")
    assert listed.returncode == 0, listed.stderr
    [low_line] = [line for line in listed.stdout.splitlines() if low.document_id[:8] in line]
    assert low_line.endswith(
        "low.pdf  flagged: 3 pages read by OCR at confidence < 60: pages 4, 7, 9"
    )
    [clean_line] = [line for line in listed.stdout.splitlines() if clean.document_id[:8] in line]
    assert clean_line.endswith("clean.pdf")
