"""The processing key: content or any result-changing option makes a new key; option
order, value spelling and the file's name never do."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import event, text

from core import Claim, ErrorCode, Ledger, ParserPool, Settings, TaskStatus, Worker
from core.ingest.keys import canonical_options, processing_key
from tests import hostile
from tests.conftest import FakeClock
from tests.core.test_provider_drills import note
from tests.core.test_worker import cli

OPTION_NAMES = st.sampled_from(
    ["parser", "version", "chunk_size", "chunk_overlap", "chunker", "embedder"]
)
# Seconds the twins' run may take: far below rounds of 10 s waits for each other, and
# generous for a loaded machine.
TWINS_RUN_S = 90.0
OPTIONS = st.dictionaries(OPTION_NAMES, st.text(min_size=1, max_size=12), min_size=1)


@given(data=st.binary(), options=OPTIONS)
def test_option_order_never_changes_the_key(data: bytes, options: dict[str, str]) -> None:
    reversed_order = dict(reversed(list(options.items())))
    assert processing_key(data, options) == processing_key(data, reversed_order)


@given(data=st.binary(), other=st.binary(), options=OPTIONS)
def test_different_content_makes_a_different_key(
    data: bytes, other: bytes, options: dict[str, str]
) -> None:
    assert (processing_key(data, options) == processing_key(other, options)) == (data == other)


@given(data=st.binary(), options=OPTIONS, name=OPTION_NAMES, value=st.text(max_size=12))
def test_changing_any_option_makes_a_different_key(
    data: bytes, options: dict[str, str], name: str, value: str
) -> None:
    changed = options | {name: value}
    same = changed == options
    assert (processing_key(data, changed) == processing_key(data, options)) == same


def test_the_key_is_sha256_of_bytes_nul_and_canonical_json() -> None:
    options = {"chunk_size": 1000, "parser": "pypdf"}
    canonical = b'{"chunk_size":"1000","parser":"pypdf"}'
    assert canonical_options(options) == canonical
    expected = hashlib.sha256(b"abc" + b"\0" + canonical).hexdigest()
    assert processing_key(b"abc", options) == expected
    assert processing_key(b"abc", {"parser": "pypdf", "chunk_size": "1000"}) == expected
    # Content and options cannot trade bytes across the separator.
    assert processing_key(b"abc\0", options) != expected


async def test_a_task_records_its_processing_key_and_a_rename_keeps_it(
    ledger: Ledger, tmp_path: Path
) -> None:
    note = b"# Runbook\n\nLeases expire after thirty seconds.\n"
    first = await ledger.operator.upload(note, "runbook.md")
    second = await ledger.operator.upload(note, "renamed-runbook.md")
    other = await ledger.operator.upload(note + b"!", "runbook.md")
    tasks = [await ledger.operator.submit(d.document_id) for d in (first, second, other)]
    worker = Worker(ledger, "w-keys", concurrency=1, register=False)
    await worker.run(until_idle=True)
    done = [await ledger.reads.get_task(t.task_id) for t in tasks]
    assert [t.status for t in done] == [TaskStatus.SUCCEEDED] * 3
    keys = [t.options["processing_key"] for t in done]
    assert keys[0] == keys[1] != keys[2]
    # What the key is made of: every recorded option but the key and the result's own.
    outputs = {"processing_key", "result_sha256", "reused_from"}
    recorded = {k: v for k, v in done[0].options.items() if k not in outputs}
    assert keys[0] == processing_key(note, recorded)
    assert json.loads(canonical_options(recorded))["chunk_size"] == recorded["chunk_size"]
    assert {"parser", "chunk_size", "chunk_overlap", "chunker", "embedder"} <= set(recorded)


async def test_a_failed_task_shows_its_processing_key(ledger: Ledger) -> None:
    # Text of only blanks parses to no text: empty_document, before any progress
    # write would have recorded the options.
    doc = await ledger.operator.upload(b"  \n\n \t \n", "hollow.txt")
    task = await ledger.operator.submit(doc.document_id)
    await Worker(ledger, "w-keys", concurrency=1, register=False).run(until_idle=True)
    failed = await ledger.reads.get_task(task.task_id)
    assert (failed.status, failed.error_code) == (TaskStatus.FAILED, ErrorCode.EMPTY_DOCUMENT)
    recorded = {k: v for k, v in failed.options.items() if k != "processing_key"}
    assert failed.options["processing_key"] == processing_key(b"  \n\n \t \n", recorded)


PDF_PAGES = [f"Page {i}: the ledger keeps every claim and lease. " * 12 for i in range(140)]


async def run_worker(ledger: Ledger, pool: ParserPool) -> Worker:
    worker = Worker(ledger, "w-reuse", pool=pool, concurrency=1, register=False)
    await worker.run(until_idle=True)
    return worker


async def test_the_same_pdf_again_reuses_the_result_instead_of_parsing(ledger: Ledger) -> None:
    pdf = hostile.make_pdf(PDF_PAGES)
    first = await ledger.operator.add_many([(pdf, "report.pdf")], submit=True)
    async with ParserPool(workers=1) as pool:
        await run_worker(ledger, pool)
        parses = pool.parses_started
        again = await ledger.operator.add_many([(pdf, "report-copy.pdf")], submit=True)
        await run_worker(ledger, pool)
        assert pool.parses_started == parses  # not parsed a second time
    (_, original), (_, copy) = first[0], again[0]
    assert original is not None and copy is not None
    done = await ledger.reads.get_task(copy.task_id)
    assert done.status is TaskStatus.SUCCEEDED
    assert done.options["reused_from"] == original.task_id
    before = await ledger.reads.chunk_records(original.document_id)
    after = await ledger.reads.chunk_records(copy.document_id)
    assert after == before and len(after) > 0


async def test_a_result_that_no_longer_verifies_is_made_again(ledger: Ledger) -> None:
    pdf = hostile.make_pdf(PDF_PAGES)
    [(doc, _)] = await ledger.operator.add_many([(pdf, "report.pdf")], submit=True)
    async with ParserPool(workers=1) as pool:
        await run_worker(ledger, pool)
        await ledger.transactions.write(
            lambda conn: conn.execute(
                text("UPDATE chunks SET text = 'tampered' WHERE document_id = :d AND ordinal = 0"),
                {"d": doc.document_id},
            )
        )
        parses = pool.parses_started
        [(_, copy)] = await ledger.operator.add_many([(pdf, "copy.pdf")], submit=True)
        await run_worker(ledger, pool)
        assert pool.parses_started == parses + 1
    assert copy is not None
    done = await ledger.reads.get_task(copy.task_id)
    assert done.status is TaskStatus.SUCCEEDED and "reused_from" not in done.options


async def twins_on_one_key(ledger: Ledger) -> tuple[Claim, Claim]:
    """Two tasks of the same content claimed by two workers: the first holds the key,
    the second was told to wait for it."""
    added = await ledger.operator.add_many([(b"same\n", "a.md"), (b"same\n", "b.md")], submit=True)
    first, second = (t for _, t in added if t is not None)
    a = await ledger.queue.claim(first.task_id, "w1")
    b = await ledger.queue.claim(second.task_id, "w2")
    assert a is not None and b is not None
    assert await ledger.queue.hold_key(a, "k" * 64) is None
    assert await ledger.queue.hold_key(b, "k" * 64) == first.task_id
    return a, b


async def test_a_second_task_with_the_same_key_waits_for_the_running_one(
    ledger: Ledger,
) -> None:
    a, b = await twins_on_one_key(ledger)
    assert await ledger.queue.hand_back(b, reason="waiting", delay_s=2.0)
    waiting = await ledger.reads.get_task(b.task_id)
    assert waiting.status is TaskStatus.RETRY_WAIT and waiting.next_attempt_at is not None
    assert await ledger.queue.finish(a, [])
    b2 = await ledger.queue.claim_next("w2")
    assert b2 == []  # not due for 2 s
    stale = a
    assert await ledger.queue.hold_key(stale, "k" * 64) == "lost"


@pytest.mark.parametrize(
    "maker_ends", ["succeeds", "fails", "is handed back", "is reaped", "is cancelled"]
)
async def test_a_waiting_twin_is_due_as_soon_as_the_task_making_its_result_ends(
    ledger: Ledger, clock: FakeClock, maker_ends: str
) -> None:
    a, b = await twins_on_one_key(ledger)
    assert await ledger.queue.hand_back(b, reason="waiting", delay_s=60.0, waits_for_key="k" * 64)
    assert await ledger.queue.claim_next("w2") == []  # waiting while the first runs
    if maker_ends == "succeeds":
        assert await ledger.queue.finish(a, [])
    elif maker_ends == "fails":
        assert await ledger.queue.fail(a, ErrorCode.PARSE_ERROR, "bad") is not None
    # Only finishing and failing woke it; these left it waiting its whole minute.
    elif maker_ends == "is handed back":
        assert await ledger.queue.hand_back(a, delay_s=30.0)
    elif maker_ends == "is reaped":
        clock.advance(ledger.settings.lease_s + 1)
        assert [r.task_id for r in await ledger.queue.reap()] == [a.task_id]
    else:
        await ledger.operator.cancel(a.task_id)
    claimed = [c.task_id for c in await ledger.queue.claim_next("w2", limit=5)]
    assert b.task_id in claimed


async def test_small_twins_claimed_together_run_once(ledger: Ledger) -> None:
    # Both are claimed in one claim-ahead batch and both read that their bytes are
    # shared: one makes the result, the other waits for it and reuses it.
    note = b"# Cranes\n\nEvery crane is inspected before a lease is granted.\n"
    added = await ledger.operator.add_many([(note, "a.md"), (note, "b.md")], submit=True)
    await Worker(ledger, "w-twins", concurrency=2, register=False).run(until_idle=True)
    tasks = [await ledger.reads.get_task(task.task_id) for _, task in added if task]
    assert [t.status for t in tasks] == [TaskStatus.SUCCEEDED] * 2
    assert sum("reused_from" in t.options for t in tasks) == 1


async def test_twins_handed_back_to_wait_reuse_the_verified_result_instead_of_waiting(
    settings: Settings,
) -> None:
    """Three identical 176 KB files: the first made the result while the other two
    were handed back to wait for it. Claimed again together, each looks for the
    verified result first (and a waiter never counts as the holder): both reuse it
    at once, instead of waiting for each other in 10 s rounds."""
    # On the real clock (not the fixture's frozen one): worker processes claim what is due.
    async with await Ledger.open(settings) as ledger:
        data = note(3, paragraphs=2500)
        assert len(data) > 170_000
        [(_, made)] = await ledger.operator.add_many([(data, "copy1.md")], submit=True)
        assert made is not None
        done = cli(settings, "worker", "--until-idle")
        assert done.returncode == 0, done.stderr
        made_view = await ledger.reads.get_task(made.task_id)
        key = made_view.options["processing_key"]
        added = await ledger.operator.add_many(
            [(data, "copy2.md"), (data, "copy3.md")], submit=True
        )
        twins = [t.task_id for _, t in added if t is not None]
        for n, task_id in enumerate(twins):
            claim = await ledger.queue.claim(task_id, f"w-twin-{n}")
            assert claim is not None
            # As Pipeline._defer left them while copy1 was being made (now due).
            assert await ledger.queue.hand_back(
                claim, reason="waiting for copy1", delay_s=0.0, waits_for_key=key
            )
        started = time.monotonic()
        run = cli(settings, "worker", "--until-idle", "--concurrency", "2")
        assert run.returncode == 0, run.stderr
        assert time.monotonic() - started < TWINS_RUN_S
        assert "deferred" not in run.stdout, run.stdout
        for task_id in twins:
            task = await ledger.reads.get_task(task_id)
            assert task.status is TaskStatus.SUCCEEDED, (task, run.stdout)
            # The first's result, or the other twin's copy of it if that one was quicker.
            assert task.options["reused_from"] in {made.task_id, *twins} - {task_id}
            assert task.attempt == 2  # the scene's claim, then one run


async def test_looking_for_a_result_to_reuse_is_one_round_trip(ledger: Ledger) -> None:
    """Holding the processing key and looking for a result to reuse are one write
    transaction (they were a write and a read): a document costs its claim, that
    look-up and its finish, nothing more."""
    data = note(8, paragraphs=1200)
    [(_, task)] = await ledger.operator.add_many([(data, "big.md")], submit=True)
    assert task is not None
    engine = ledger.transactions.engine  # type: ignore[attr-defined]
    engine = getattr(engine, "sync_engine", engine)  # PostgreSQL's engine is async
    transactions: list[object] = []

    def begun(conn: object) -> None:
        transactions.append(conn)

    # On a loaded machine the attempt may outlast the progress interval: its coalesced
    # progress writes and heartbeats are counted apart (they are not per document).
    renewals = 0
    progress, heartbeat = ledger.queue.report_progress, ledger.queue.heartbeat

    async def counted_progress(*args: Any, **kwargs: Any) -> bool:
        nonlocal renewals
        renewals += 1
        return await progress(*args, **kwargs)

    async def counted_heartbeat(*args: Any, **kwargs: Any) -> bool:
        nonlocal renewals
        renewals += 1
        return await heartbeat(*args, **kwargs)

    ledger.queue.report_progress = counted_progress  # type: ignore[method-assign]
    ledger.queue.heartbeat = counted_heartbeat  # type: ignore[method-assign]
    event.listen(engine, "begin", begun)
    try:
        async with ParserPool(workers=1) as pool:
            worker = Worker(ledger, "w-round-trips", pool=pool, register=False)
            assert await worker.run_task(task.task_id)
    finally:
        event.remove(engine, "begin", begun)
        ledger.queue.report_progress, ledger.queue.heartbeat = progress, heartbeat  # type: ignore[method-assign]
    assert (await ledger.reads.get_task(task.task_id)).status is TaskStatus.SUCCEEDED
    assert len(transactions) - renewals == 3  # claim, hold_or_reuse, finish


async def test_a_small_note_submitted_again_is_reused_not_processed(ledger: Ledger) -> None:
    # Once only originals of 64 KiB or more were looked up: a small note ran twice.
    note = b"# Leases\n\nA lease is renewed every third of its length.\n"
    first = await ledger.operator.upload(note, "leases.md")
    done = await ledger.operator.submit(first.document_id)
    await Worker(ledger, "w-small", concurrency=1, register=False).run(until_idle=True)
    second = await ledger.operator.upload(note, "leases-again.md")
    again = await ledger.operator.submit(second.document_id)
    await Worker(ledger, "w-small", concurrency=1, register=False).run(until_idle=True)
    reused = await ledger.reads.get_task(again.task_id)
    assert reused.status is TaskStatus.SUCCEEDED
    assert reused.options["reused_from"] == done.task_id


async def test_a_twin_submitted_together_waits_then_reuses(
    ledger: Ledger, clock: FakeClock
) -> None:
    """Two submits of the same bytes run by one worker at once: one parses, the other
    is handed back to wait (not a second execution), and then reuses the result."""
    pdf = hostile.make_pdf(PDF_PAGES)
    added = await ledger.operator.add_many([(pdf, "a.pdf"), (pdf, "b.pdf")], submit=True)
    first, second = (t for _, t in added if t is not None)
    async with ParserPool(workers=1) as pool:
        worker = Worker(ledger, "w-twins", pool=pool, concurrency=2, register=False)
        # One burst run finishes both: the twin waits while the first is parsed
        # (here, always, measured 5 of 5) and is due the moment the first ends, long
        # before KEY_WAIT_S (the clock here does not move at all); on a machine slow
        # enough that the first finished before the twin looked, the twin reuses at
        # once instead. Either way: one parse.
        await worker.run(until_idle=True)
        assert pool.parses_started == 1
    done = {t.task_id: t for t in await ledger.reads.list_tasks()}
    assert {t.status for t in done.values()} == {TaskStatus.SUCCEEDED}
    reused = [t for t in done.values() if "reused_from" in t.options]
    assert len(reused) == 1 and reused[0].options["reused_from"] in {first.task_id, second.task_id}
    history = await ledger.reads.task_history(reused[0].task_id)
    waited = [e for e in history if e.reason and "making the same result" in e.reason]
    assert len(waited) <= 1
