"""Parse progress per page, live: from a format's parser, through the parser process,
to the task's progress on the ledger; and the time budget that follows it.

Slowness is real work, never a test hook: pypdf re-tokenising a page's long content
stream (see :func:`tests.hostile.slow_pdf`) takes a fraction of a second a page, and
a loaded machine only makes it slower, which every assertion here allows for.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import threading
import time
import zlib
from collections.abc import AsyncIterator
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from core import ErrorCode, Ledger, Settings, Stage, TaskStatus
from core.config import sqlite_url
from core.ingest.parse_child import PROGRESS_EVERY_S, _ProgressSender
from core.ingest.parse_pool import ParserPool, estimate_pages
from core.ingest.parse_progress import reporting
from core.ingest.parsing import ParseFailure, parse_document
from core.ingest.sniffing import sniff_kind
from core.ingest.worker import Worker
from core.states import DocumentKind
from tests import hostile

FORMATS = Path(__file__).parent / "data" / "formats"
# Seconds a parse gets where the budget is not what is under test (a loaded machine).
LOADED_S = 120.0
SLOW_PAGES = 8
# Text operators on each slow page: ~0.3-0.5 s of pypdf a page on a quiet machine.
OPERATORS_PER_SLOW_PAGE = 25_000
# Seconds a parse may go on after a report, where that is under test. The up-front
# budget there is 1.5 s: the first (quick) page is surely reported before it ends.
IDLE_S = 3.0
QUICK_PAGE = hostile.stream(b"BT /F1 12 Tf 72 700 Td (quick page) Tj ET")


def slow_pages(pages: int = SLOW_PAGES) -> bytes:
    return hostile.slow_pdf(pages=pages, operators_per_page=OPERATORS_PER_SLOW_PAGE)


def a_quick_page_then_slow_ones(slow: int) -> bytes:
    """A page read in milliseconds (so the first report comes before any up-front
    budget runs out, however loaded the machine), then ``slow`` slow pages."""
    content = b"BT /F1 12 Tf 72 700 Td " + b"(a) Tj " * OPERATORS_PER_SLOW_PAGE + b"ET"
    shared = hostile.stream(zlib.compress(content, 9), b"/Filter /FlateDecode")
    return hostile.pages_pdf([0] + [1] * slow, [QUICK_PAGE, shared])


def fast_pages_then_a_stuck_one(fast: int = 3) -> bytes:
    """``fast`` pages read in milliseconds, then one that keeps pypdf busy for about
    10 s (800 000 text operators: under pypdf's 2 000 000-token budget per stream, so
    it is slow, not refused)."""
    content = b"BT /F1 12 Tf 72 700 Td " + b"(a) Tj " * 800_000 + b"ET"
    stuck = hostile.stream(zlib.compress(content, 9), b"/Filter /FlateDecode")
    return hostile.pages_pdf([0] * fast + [1], [QUICK_PAGE, stuck])


class Reports:
    """``on_progress`` for a parse: what arrived, when, and on which thread."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []
        self.threads: set[int] = set()

    def __call__(self, done: int, total: int) -> None:
        self.seen.append((done, total))
        self.threads.add(threading.get_ident())


# --- format parsers report their units --------------------------------------------------


@pytest.mark.parametrize(
    "name", ["powerpoint_sample.pptx", "test.xlsx", "winter-sports.epub"], ids=str
)
def test_slides_sheets_and_chapters_are_reported_one_by_one(name: str) -> None:
    data = (FORMATS / name).read_bytes()
    kind = sniff_kind(data, name)
    assert kind is not None
    reports = Reports()

    with reporting(reports):
        doc = parse_document(data, kind)

    units = doc.pages
    assert units > 1
    assert reports.seen == [(done, units) for done in range(1, units + 1)]


def test_pdf_pages_are_reported_one_by_one() -> None:
    reports = Reports()

    with reporting(reports):
        doc = parse_document(hostile.make_pdf(["one", "two", "three"]), DocumentKind.PDF)

    assert doc.pages == 3
    assert reports.seen == [(1, 3), (2, 3), (3, 3)]


# --- through the parser process ---------------------------------------------------------


async def test_a_parse_reports_pages_on_the_event_loop_as_they_finish() -> None:
    reports = Reports()
    async with ParserPool(base_timeout_s=LOADED_S) as pool:
        doc = await pool.parse(slow_pages(), "pdf", on_progress=reports)

    assert doc.pages == SLOW_PAGES
    assert reports.threads == {threading.get_ident()}  # the loop's thread, not the pool's
    done = [d for d, _ in reports.seen]
    assert done == sorted(set(done))  # each report newer than the last
    assert {total for _, total in reports.seen} == {SLOW_PAGES}
    assert any(0 < d < SLOW_PAGES for d in done)
    assert reports.seen[-1] == (SLOW_PAGES, SLOW_PAGES)  # the last one is never held back


async def test_a_fast_many_page_parse_sends_few_reports() -> None:
    pages = 3000
    data = hostile.make_pdf([f"page {n}" for n in range(pages)])
    reports = Reports()
    async with ParserPool(base_timeout_s=LOADED_S) as pool:
        await pool.parse(b"warm up", "text")  # the child's start-up is not the parse
        started = time.monotonic()
        doc = await pool.parse(data, "pdf", on_progress=reports)
        elapsed = time.monotonic() - started

    assert doc.pages == pages
    # At most one report per window (none in the first), plus the last; not one a page.
    assert len(reports.seen) <= elapsed / PROGRESS_EVERY_S + 1
    assert len(reports.seen) < pages / 10
    if reports.seen:  # the parse outlasted the first window: its last report came too
        assert reports.seen[-1] == (pages, pages)


class _TimedConnection:
    """One end of a real pipe that notes when each message was sent."""

    def __init__(self, conn: Connection) -> None:
        self.conn, self.sent_at = conn, list[float]()

    def send(self, message: object) -> None:
        self.sent_at.append(time.monotonic())
        self.conn.send(message)


def test_reports_sent_by_the_parse_and_by_the_held_report_thread_keep_their_window() -> None:
    # A parse reporting without pause: it sends one itself whenever a window has
    # ended, and the thread sends the held one when its window ends. The two met at a
    # window's end and both sent (two reports 2 ms apart: a CI run's flaky count).
    ours, theirs = Pipe()
    timed = _TimedConnection(ours)
    sender = _ProgressSender(timed)  # type: ignore[arg-type]  # what it uses of one
    sender.begin()
    deadline = time.monotonic() + 12 * PROGRESS_EVERY_S
    done = 0
    while time.monotonic() < deadline:
        done += 1
        sender(done, 10**9)
    sender.finish()
    while theirs.poll():
        theirs.recv()

    gaps = [b - a for a, b in itertools.pairwise(timed.sent_at)]
    assert len(timed.sent_at) >= 8
    # The last report before the reply is never held back (finish): not judged.
    assert min(gaps[:-1]) >= PROGRESS_EVERY_S * 0.99, gaps


async def test_a_parse_that_keeps_reporting_outlives_its_upfront_budget() -> None:
    data = a_quick_page_then_slow_ones(SLOW_PAGES)
    async with ParserPool(
        base_timeout_s=1.0, per_page_timeout_s=0.0, unit_timeout_s=LOADED_S
    ) as pool:
        upfront = pool.timeout_for(estimate_pages(data, "pdf"))
        await pool.parse(b"warm up", "text")
        started = time.monotonic()
        doc = await pool.parse(data, "pdf")
        elapsed = time.monotonic() - started

    assert upfront == 1.0
    assert elapsed > upfront  # ~3 s of pages: the old fixed budget would have cut it off
    assert doc.pages == SLOW_PAGES + 1


async def test_a_parse_that_stops_reporting_is_cut_off_at_its_idle_deadline() -> None:
    async with ParserPool(
        base_timeout_s=1.5, per_page_timeout_s=0.0, unit_timeout_s=IDLE_S
    ) as pool:
        await pool.parse(b"warm up", "text")
        started = time.monotonic()
        with pytest.raises(ParseFailure) as caught:
            await pool.parse(fast_pages_then_a_stuck_one(), "pdf")
        elapsed = time.monotonic() - started

        assert caught.value.code is ErrorCode.PARSE_ERROR
        found = re.fullmatch(
            r"parse timed out after (\d+\.\d)s \(3 of 4 done\)", caught.value.reason
        )
        assert found is not None, caught.value.reason
        # Given IDLE_S after its last report (in its first moments), far short of the
        # ~10 s the stuck page needs; the message says how long it really had.
        given = float(found.group(1))
        assert IDLE_S <= given < IDLE_S + 3.0
        assert given <= elapsed + 0.1
        assert elapsed < given + 3.0
        doc = await pool.parse(hostile.make_pdf(["after the cut-off"]), "pdf")
        assert doc.chunks[0].text == "after the cut-off"


async def test_no_parse_runs_past_the_overall_cap_however_it_moves() -> None:
    async with ParserPool(
        base_timeout_s=1.5, per_page_timeout_s=0.0, unit_timeout_s=LOADED_S, max_timeout_s=3.0
    ) as pool:
        await pool.parse(b"warm up", "text")
        with pytest.raises(ParseFailure) as caught:
            await pool.parse(a_quick_page_then_slow_ones(40), "pdf")  # ~15 s

    assert re.fullmatch(r"parse timed out after 3\.0s \(\d+ of 41 done\)", caught.value.reason)


# --- through a worker, onto the ledger --------------------------------------------------


@pytest.fixture
async def real_time_ledger(tmp_path: Path) -> AsyncIterator[Ledger]:
    """A ledger on the real clock: leases are renewed in real seconds here."""
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "obj")
    async with await Ledger.open(settings) as ledger:
        yield ledger


async def add(ledger: Ledger, data: bytes, name: str) -> str:
    doc = await ledger.operator.upload(data, name)
    return (await ledger.operator.submit(doc.document_id)).task_id


SAMPLE_EVERY_S = 0.05  # seconds between reads of the running task's row


async def watch(
    ledger: Ledger, task_id: str, done: asyncio.Event
) -> list[tuple[Stage, int, int, float | None]]:
    """The task's stage, progress and lease as the ledger holds them, read while it runs."""
    rows: list[tuple[Stage, int, int, float | None]] = []
    while not done.is_set():
        task = await ledger.reads.get_task(task_id)
        if task.status is TaskStatus.RUNNING:
            rows.append((task.stage, task.completed, task.total, task.lease_expires_at))
        # A sample every 50 ms until the task is done, and not a moment after.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), SAMPLE_EVERY_S)
    return rows


async def test_a_running_parse_moves_page_by_page_on_the_ledger(
    real_time_ledger: Ledger,
) -> None:
    ledger = real_time_ledger
    task_id = await add(ledger, slow_pages(), "slow.pdf")
    done = asyncio.Event()
    async with ParserPool(base_timeout_s=LOADED_S) as pool:
        watching = asyncio.create_task(watch(ledger, task_id, done))
        worker = Worker(ledger, "w-progress", pool=pool, lease_s=6.0)
        try:
            await worker.run(until_idle=True)
        finally:
            done.set()
        rows = await watching

    assert (await ledger.reads.get_task(task_id)).status is TaskStatus.SUCCEEDED
    parsing = [(c, t, lease) for stage, c, t, lease in rows if stage is Stage.PARSE]
    between = {c for c, t, _ in parsing if t == SLOW_PAGES and 0 < c < SLOW_PAGES}
    # Not 0/P then P/P: pages in between were on the row while the parse ran.
    assert between, parsing
    # The lease was renewed as the pages moved (progress writes carry the lease).
    leases = [lease for _, _, lease in parsing if lease is not None]
    assert max(leases) > min(leases)


async def test_a_stuck_parse_fails_its_task_with_how_far_it_got(
    real_time_ledger: Ledger,
) -> None:
    ledger = real_time_ledger
    task_id = await add(ledger, fast_pages_then_a_stuck_one(), "stuck.pdf")
    async with ParserPool(
        base_timeout_s=1.5, per_page_timeout_s=0.0, unit_timeout_s=IDLE_S
    ) as pool:
        await Worker(ledger, "w-progress", pool=pool).run(until_idle=True)

    task = await ledger.reads.get_task(task_id)
    assert (task.status, task.error_code) == (TaskStatus.FAILED, ErrorCode.PARSE_ERROR)
    assert task.error_detail is not None
    assert re.fullmatch(r"parse timed out after \d+\.\ds \(3 of 4 done\)", task.error_detail)
    # The failure records how far the parse really got, not the estimate's 0.
    assert (task.stage, task.completed, task.total) == (Stage.PARSE, 3, 4)
