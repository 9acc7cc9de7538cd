"""Every state-machine rule of the ledger, on a real SQLite file and a real PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import insert, select, text

from core import (
    BadInput,
    ChunkRecord,
    Conflict,
    DocumentStatus,
    ErrorCode,
    Ledger,
    NotFound,
    Stage,
    TaskStatus,
)
from core.ledger.queue import LOST
from core.ledger.schema import CHUNKS, OUTBOX
from tests.conftest import FakeClock

TEXT = b"The quarterly report covers ingestion throughput and error budgets.\n"
STALE_KEY = "f" * 64  # a processing key only a stale claim ever asks to hold


async def submitted(ledger: Ledger, name: str = "report.txt", data: bytes = TEXT):  # type: ignore[no-untyped-def]
    doc = await ledger.operator.upload(data, name)
    return await ledger.operator.submit(doc.document_id, actor="alice")


async def doc_status(ledger: Ledger, document_id: str) -> DocumentStatus:
    return (await ledger.reads.get_document(document_id)).status


# ------------------------------------------------------------------ submit


async def test_upload_makes_a_draft_and_submit_queues_a_task(ledger: Ledger) -> None:
    doc = await ledger.operator.upload(TEXT, "report.txt")
    assert doc.status is DocumentStatus.DRAFT
    assert doc.version == 1
    task = await ledger.operator.submit(doc.document_id, actor="alice")
    answer = task.to_dict()
    for key in (
        "task_id",
        "document_id",
        "status",
        "stage",
        "completed",
        "total",
        "attempt",
        "error_code",
        "error_detail",
    ):
        assert key in answer
    assert (task.status, task.stage, task.attempt) == (TaskStatus.QUEUED, Stage.DOWNLOAD, 0)
    assert (task.completed, task.total, task.error_code) == (0, 1, None)
    after = await ledger.reads.get_document(doc.document_id)
    assert after.status is DocumentStatus.PROCESSING
    assert after.version == 2


async def test_submitting_a_non_draft_document_is_a_conflict(ledger: Ledger) -> None:
    task = await submitted(ledger)
    with pytest.raises(Conflict, match="only draft documents"):
        await ledger.operator.submit(task.document_id)
    assert len(await ledger.reads.list_tasks()) == 1


async def test_submit_with_a_stale_row_version_is_a_conflict(ledger: Ledger) -> None:
    doc = await ledger.operator.upload(TEXT, "report.txt")
    with pytest.raises(Conflict, match="changed"):
        await ledger.operator.submit(doc.document_id, expected_version=doc.version + 1)
    task = await ledger.operator.submit(doc.document_id, expected_version=doc.version)
    assert task.status is TaskStatus.QUEUED


async def test_unknown_ids_are_not_found(ledger: Ledger) -> None:
    with pytest.raises(NotFound):
        await ledger.operator.submit("0" * 32)
    with pytest.raises(NotFound):
        await ledger.operator.cancel("abcdef12")
    with pytest.raises(NotFound):
        await ledger.reads.get_task("not-an-id")


async def test_short_id_prefixes_resolve(ledger: Ledger) -> None:
    task = await submitted(ledger)
    assert (await ledger.reads.get_task(task.task_id[:8])).task_id == task.task_id
    assert (await ledger.reads.get_document(task.document_id[:6])).document_id == task.document_id


async def test_submit_writes_its_outbox_event_in_the_same_transaction(ledger: Ledger) -> None:

    task = await submitted(ledger)
    rows = await ledger.transactions.read(lambda conn: conn.execute(select(OUTBOX)).all())
    assert len(rows) == 1
    assert task.task_id in rows[0].payload
    assert rows[0].delivered_at is None


# ------------------------------------------------------------------ claims


async def test_only_one_worker_can_claim_a_queued_task(ledger: Ledger) -> None:
    task = await submitted(ledger)
    first = await ledger.queue.claim(task.task_id, "worker-one")
    second = await ledger.queue.claim(task.task_id, "worker-two")
    assert first is not None
    assert second is None
    view = await ledger.reads.get_task(task.task_id)
    assert (view.status, view.worker_id, view.attempt) == (TaskStatus.RUNNING, "worker-one", 1)
    assert view.lease_expires_at is not None


async def test_claim_next_takes_the_oldest_claimable_tasks(
    ledger: Ledger, clock: FakeClock
) -> None:
    ids = []
    for i in range(5):
        ids.append((await submitted(ledger, f"n{i}.txt")).task_id)
        clock.advance(1)
    claims = await ledger.queue.claim_next("w", limit=2)
    assert [c.task_id for c in claims] == ids[:2]
    rest = await ledger.queue.claim_next("w", limit=10)
    assert sorted(c.task_id for c in rest) == sorted(ids[2:])
    assert await ledger.queue.claim_next("w") == []


async def test_retry_wait_is_claimable_only_once_due(ledger: Ledger, clock: FakeClock) -> None:
    task = await submitted(ledger)
    claim = await ledger.queue.claim(task.task_id, "w")
    assert claim is not None
    waiting = await ledger.queue.fail(claim, ErrorCode.OBJECT_READ_ERROR, "ObjectReadError")
    assert waiting is not None
    assert waiting.status is TaskStatus.RETRY_WAIT
    assert waiting.next_attempt_at is not None and waiting.next_attempt_at > clock.now
    assert await doc_status(ledger, task.document_id) is DocumentStatus.PROCESSING
    assert await ledger.queue.claim(task.task_id, "w") is None
    assert await ledger.queue.claim_next("w") == []
    clock.advance(waiting.next_attempt_at - clock.now + 0.001)
    again = await ledger.queue.claim_next("w")
    assert [c.task_id for c in again] == [task.task_id]
    assert again[0].attempt == 2


async def test_transient_failures_fail_for_good_when_attempts_run_out(
    ledger: Ledger, clock: FakeClock
) -> None:
    task = await submitted(ledger)
    for attempt in range(1, ledger.settings.max_attempts + 1):
        clock.advance(ledger.settings.backoff_max_s + 1)
        claim = await ledger.queue.claim(task.task_id, "w")
        assert claim is not None and claim.attempt == attempt
        view = await ledger.queue.fail(claim, ErrorCode.PROVIDER_UNAVAILABLE, "ConnectionError")
        assert view is not None
    assert view.status is TaskStatus.FAILED
    assert view.error_code is ErrorCode.PROVIDER_UNAVAILABLE
    assert await doc_status(ledger, task.document_id) is DocumentStatus.FAILED


async def test_backoff_doubles_per_attempt_up_to_its_cap_with_equal_jitter(
    ledger: Ledger,
) -> None:
    base, cap = ledger.settings.backoff_base_s, ledger.settings.backoff_max_s
    capped_from = next(a for a in range(1, 64) if base * 2 ** (a - 1) >= cap)
    for attempt in range(1, capped_from + 3):
        ceiling = min(cap, base * 2 ** (attempt - 1))
        for _ in range(50):  # jitter is random: every draw stays in the band
            assert ceiling / 2 <= ledger.queue.backoff_s(attempt) <= ceiling
    assert ledger.queue.backoff_s(capped_from + 10) <= cap


async def test_permanent_failure_goes_straight_to_failed(ledger: Ledger) -> None:
    task = await submitted(ledger)
    claim = await ledger.queue.claim(task.task_id, "w")
    assert claim is not None
    view = await ledger.queue.fail(claim, ErrorCode.PARSE_ERROR, "x" * 2000)
    assert view is not None
    assert view.status is TaskStatus.FAILED
    assert view.error_detail is not None and len(view.error_detail) == 500
    assert await doc_status(ledger, task.document_id) is DocumentStatus.FAILED


# ------------------------------------------------- worker writes are fenced


async def test_progress_and_completion_only_from_the_holder(ledger: Ledger) -> None:
    task = await submitted(ledger)
    claim = await ledger.queue.claim(task.task_id, "worker-one")
    assert claim is not None
    stranger = type(claim)(**{**claim.__dict__, "worker_id": "worker-two"})
    assert await ledger.queue.report_progress(stranger, Stage.PARSE, 1, 3) is False
    assert await ledger.queue.report_progress(stranger, Stage.PARSE, 1, 3, options={}) is False
    assert await ledger.queue.hold_key(stranger, STALE_KEY) == LOST
    assert await ledger.queue.hand_back(stranger) is False
    assert await ledger.queue.finish(stranger, [ChunkRecord(0, "forged", None, 0, 6)]) is False
    assert await ledger.queue.report_progress(claim, Stage.PARSE, 2, 3) is True
    view = await ledger.reads.get_task(task.task_id)
    assert (view.stage, view.completed, view.total) == (Stage.PARSE, 2, 3)
    assert await ledger.queue.finish(claim, []) is True
    done = await ledger.reads.get_task(task.task_id)
    assert done.status is TaskStatus.SUCCEEDED
    assert await doc_status(ledger, task.document_id) is DocumentStatus.REVIEW_PENDING
    # Finished once; a second finish changes nothing.
    assert await ledger.queue.finish(claim, []) is False


async def test_a_failure_records_the_stage_and_progress_its_attempt_reached(
    ledger: Ledger,
) -> None:
    # Progress is coalesced: the row still said download 0/1 (the claim's) when the
    # attempt failed in embedding 0/9, and the failure kept that total.
    task = await submitted(ledger)
    claim = await ledger.queue.claim(task.task_id, "w")
    assert claim is not None
    stranger = type(claim)(**{**claim.__dict__, "worker_id": "worker-two"})
    reached = (Stage.EMBEDDING, 0, 9)
    assert await ledger.queue.fail(stranger, ErrorCode.PROVIDER_FAILED, progress=reached) is None
    view = await ledger.queue.fail(claim, ErrorCode.PROVIDER_UNAVAILABLE, progress=reached)
    assert view is not None and view.status is TaskStatus.RETRY_WAIT
    row = await ledger.reads.get_task(task.task_id)
    assert (row.stage, row.completed, row.total) == reached
    assert (await ledger.reads.task_history(task.task_id))[-1].stage is Stage.EMBEDDING


async def test_a_hand_back_records_what_its_attempt_reached(ledger: Ledger) -> None:
    task = await submitted(ledger)
    claim = await ledger.queue.claim(task.task_id, "w")
    assert claim is not None
    options = {"parser": "text", "processing_key": "k" * 64}
    assert await ledger.queue.hand_back(
        claim, reason="waiting", progress=(Stage.PARSE, 0, 4), options=options
    )
    row = await ledger.reads.get_task(task.task_id)
    assert (row.status, row.stage, row.completed, row.total) == (
        TaskStatus.RETRY_WAIT,
        Stage.PARSE,
        0,
        4,
    )
    assert row.options == options  # the key it waits with is shown, as for a failure
    assert (await ledger.reads.task_history(task.task_id))[-1].stage is Stage.PARSE


async def test_a_presumed_dead_worker_cannot_overwrite_the_newer_attempt(
    ledger: Ledger, clock: FakeClock
) -> None:
    task = await submitted(ledger)
    old = await ledger.queue.claim(task.task_id, "w")
    assert old is not None
    clock.advance(ledger.settings.lease_s + 1)
    reaped = await ledger.queue.reap()
    assert [(r.task_id, r.status) for r in reaped] == [(task.task_id, TaskStatus.RETRY_WAIT)]
    new = await ledger.queue.claim(task.task_id, "w")  # same worker name, new attempt
    assert new is not None and new.attempt == old.attempt + 1
    assert await ledger.queue.heartbeat(old) is False
    assert await ledger.queue.report_progress(old, Stage.EMBEDDING, 9, 9) is False
    # The statement the worker actually sends (progress carrying its options).
    stale_options = {"parser": "stale", "processing_key": STALE_KEY}
    stale_progress = ledger.queue.report_progress(old, Stage.PARSE, 1, 2, options=stale_options)
    assert await stale_progress is False
    assert await ledger.queue.hold_key(old, STALE_KEY) == LOST
    assert (await ledger.queue.hold_or_reuse(old, STALE_KEY)).holder == LOST
    assert await ledger.queue.finish(old, [ChunkRecord(0, "stale", None, 0, 5)]) is False
    assert await ledger.queue.fail(old, ErrorCode.PARSE_ERROR) is None
    assert await ledger.queue.hand_back(old) is False
    view = await ledger.reads.get_task(task.task_id)
    assert (view.status, view.attempt, view.stage) == (TaskStatus.RUNNING, 2, Stage.DOWNLOAD)
    assert (view.worker_id, view.completed, view.options) == ("w", 0, {})
    assert await held_key(ledger, task.task_id) is None
    assert await ledger.reads.chunks(task.document_id) == []
    # And the newer attempt still holds it: its own writes are heard.
    assert await ledger.queue.hold_key(new, STALE_KEY) is None
    assert await ledger.queue.hand_back(new) is True


async def test_a_lease_that_ends_exactly_now_is_not_reaped(
    ledger: Ledger, clock: FakeClock
) -> None:
    task = await submitted(ledger)
    assert await ledger.queue.claim(task.task_id, "w") is not None
    lease_ends = (await ledger.reads.get_task(task.task_id)).lease_expires_at
    assert lease_ends is not None
    clock.now = lease_ends  # the worker still has this instant
    assert await ledger.queue.reap() == []
    assert (await ledger.reads.get_task(task.task_id)).status is TaskStatus.RUNNING
    clock.advance(0.001)
    reaped = await ledger.queue.reap()
    assert [(r.task_id, r.status) for r in reaped] == [(task.task_id, TaskStatus.RETRY_WAIT)]


async def test_claim_next_never_returns_a_running_task(ledger: Ledger, clock: FakeClock) -> None:
    running = await submitted(ledger, "running.txt")
    clock.advance(1)
    finished = await submitted(ledger, "finished.txt")
    clock.advance(1)
    cancelled = await submitted(ledger, "cancelled.txt")
    clock.advance(1)
    queued = await submitted(ledger, "queued.txt")
    assert [c.task_id for c in await ledger.queue.claim_next("w1")] == [running.task_id]
    done = await ledger.queue.claim(finished.task_id, "w1")
    assert done is not None and await ledger.queue.finish(done, [])
    await ledger.operator.cancel(cancelled.task_id)
    # Claiming clears next_attempt_at, so a running row would be skipped by the due
    # check alone; give every row a due time in the past so that only the status rule
    # stands between claim_next and the running (and the ended) tasks.
    await ledger.transactions.write(
        lambda conn: conn.execute(
            text("UPDATE ingestion_tasks SET next_attempt_at = :due"), {"due": clock.now - 1}
        )
    )
    clock.advance(ledger.settings.lease_s + 1)  # its lease ran out; the reaper has not run
    got = await ledger.queue.claim_next("w2", limit=10)
    assert [c.task_id for c in got] == [queued.task_id]
    assert await ledger.queue.claim_next("w3", limit=10) == []
    view = await ledger.reads.get_task(running.task_id)
    assert (view.status, view.worker_id, view.attempt) == (TaskStatus.RUNNING, "w1", 1)


async def held_key(ledger: Ledger, task_id: str) -> str | None:
    """The processing key the task's row holds (None: no task holds one for it)."""
    found = await ledger.transactions.read(
        lambda conn: conn.execute(
            text("SELECT processing_key FROM ingestion_tasks WHERE id = :id"), {"id": task_id}
        ).scalar_one()
    )
    return None if found is None else str(found)


async def test_reaper_fails_tasks_whose_attempts_are_used_up(
    ledger: Ledger, clock: FakeClock
) -> None:
    task = await submitted(ledger)
    for _ in range(ledger.settings.max_attempts):
        assert await ledger.queue.claim(task.task_id, "w") is not None
        clock.advance(ledger.settings.lease_s + 1)
        await ledger.queue.reap()
    view = await ledger.reads.get_task(task.task_id)
    assert (view.status, view.error_code) == (TaskStatus.FAILED, ErrorCode.LEASE_EXPIRED)
    assert await doc_status(ledger, task.document_id) is DocumentStatus.FAILED


async def test_heartbeat_keeps_a_live_worker_from_being_reaped(
    ledger: Ledger, clock: FakeClock
) -> None:
    task = await submitted(ledger)
    claim = await ledger.queue.claim(task.task_id, "w")
    assert claim is not None
    for _ in range(3):
        clock.advance(ledger.settings.lease_s * 0.6)
        assert await ledger.queue.heartbeat(claim) is True
        assert await ledger.queue.reap() == []
    assert (await ledger.reads.get_task(task.task_id)).status is TaskStatus.RUNNING


async def leftover_chunk(ledger: Ledger, document_id: str) -> None:
    """A chunk a ledger written by an older ingestdesk (which wrote chunks before
    completing, in a separate transaction) may hold for a running task."""
    row = {"document_id": document_id, "ordinal": 0, "text": "stale", "page": None}

    def write(conn: Any) -> None:
        conn.execute(insert(CHUNKS).values(**row, char_start=0, char_end=5))
        if conn.dialect.name == "sqlite":
            # Indexed, as every chunk row is (then by a trigger, now by the statement
            # that writes them): the delete trigger unindexes exactly what is there.
            conn.execute(
                text("INSERT INTO chunks_fts(rowid, text) VALUES (last_insert_rowid(), 'stale')")
            )

    await ledger.transactions.write(write)


async def test_finish_replaces_chunks_and_never_accumulates(ledger: Ledger) -> None:
    task = await submitted(ledger)
    claim = await ledger.queue.claim(task.task_id, "w")
    assert claim is not None
    await leftover_chunk(ledger, task.document_id)
    chunks = [ChunkRecord(i, f"chunk {i}", 1, 0, 7) for i in range(2)]
    assert await ledger.queue.finish(claim, chunks)
    assert [c.text for c in await ledger.reads.chunks(task.document_id)] == ["chunk 0", "chunk 1"]


# ------------------------------------------------------------ cancel/retry


async def test_ingestion_task_is_observable_and_cancellable(ledger: Ledger) -> None:
    task = await submitted(ledger)
    observed = await ledger.reads.get_task(task.task_id)
    assert (observed.status, observed.stage) == (TaskStatus.QUEUED, Stage.DOWNLOAD)
    claim = await ledger.queue.claim(task.task_id, "w")
    assert claim is not None
    assert await ledger.queue.report_progress(claim, Stage.INDEXING, 1, 1)
    observed = await ledger.reads.get_task(task.task_id)
    assert (observed.status, observed.stage) == (TaskStatus.RUNNING, Stage.INDEXING)

    cancelled = await ledger.operator.cancel(task.task_id, actor="alice", reason="wrong file")
    assert cancelled.status is TaskStatus.CANCELLED
    assert await doc_status(ledger, task.document_id) is DocumentStatus.DRAFT
    # The worker's late index cannot bring the run back.
    assert await ledger.queue.report_progress(claim, Stage.INDEXING, 1, 1) is False
    assert await ledger.queue.finish(claim, [ChunkRecord(0, "late", None, 0, 4)]) is False
    assert await ledger.reads.chunks(task.document_id) == []
    assert (await ledger.reads.get_task(task.task_id)).status is TaskStatus.CANCELLED
    history = await ledger.reads.task_history(task.task_id)
    assert history[-1].actor == "alice"
    assert history[-1].reason == "wrong file"
    assert (history[-1].from_status, history[-1].to_status) == (
        TaskStatus.RUNNING,
        TaskStatus.CANCELLED,
    )
    # A cancelled document may be submitted again.
    again = await ledger.operator.submit(task.document_id)
    assert again.task_id != task.task_id


@pytest.mark.parametrize("end", ["succeeded", "failed", "cancelled"])
async def test_cancel_of_a_finished_task_is_a_conflict(ledger: Ledger, end: str) -> None:
    task = await submitted(ledger)
    if end == "cancelled":
        await ledger.operator.cancel(task.task_id)
    else:
        claim = await ledger.queue.claim(task.task_id, "w")
        assert claim is not None
        if end == "succeeded":
            await ledger.queue.finish(claim, [])
        else:
            await ledger.queue.fail(claim, ErrorCode.EMPTY_DOCUMENT)
    before = await ledger.reads.get_task(task.task_id)
    with pytest.raises(Conflict, match=f"is {end}; only queued, running or retry_wait"):
        await ledger.operator.cancel(task.task_id)
    assert await ledger.reads.get_task(task.task_id) == before


async def test_cancel_of_a_waiting_retry(ledger: Ledger) -> None:
    task = await submitted(ledger)
    claim = await ledger.queue.claim(task.task_id, "w")
    assert claim is not None
    await ledger.queue.fail(claim, ErrorCode.OBJECT_READ_ERROR)
    assert (await ledger.operator.cancel(task.task_id)).status is TaskStatus.CANCELLED
    assert await doc_status(ledger, task.document_id) is DocumentStatus.DRAFT


async def test_failed_ingestion_can_be_requeued_by_an_authorized_user(ledger: Ledger) -> None:
    task = await submitted(ledger)
    claim = await ledger.queue.claim(task.task_id, "w")
    assert claim is not None
    await ledger.queue.fail(claim, ErrorCode.PARSE_ERROR, "PdfReadError")
    requeued = await ledger.operator.retry(task.task_id, actor="operator-bob", reason="new parser")
    assert requeued.task_id == task.task_id
    assert (requeued.status, requeued.stage, requeued.attempt) == (
        TaskStatus.QUEUED,
        Stage.DOWNLOAD,
        1,
    )
    assert (requeued.error_code, requeued.error_detail, requeued.worker_id) == (None, None, None)
    assert (requeued.completed, requeued.total) == (0, 1)
    assert await doc_status(ledger, task.document_id) is DocumentStatus.PROCESSING
    history = await ledger.reads.task_history(task.task_id)
    assert (history[-1].actor, history[-1].reason) == ("operator-bob", "new parser")
    reclaimed = await ledger.queue.claim(task.task_id, "w")
    assert reclaimed is not None and reclaimed.attempt == 2


async def test_retry_of_a_cancelled_task_says_submit_again(ledger: Ledger) -> None:
    task = await submitted(ledger)
    await ledger.operator.cancel(task.task_id)
    with pytest.raises(Conflict, match="submit the document again"):
        await ledger.operator.retry(task.task_id)


@pytest.mark.parametrize("state", ["queued", "running", "succeeded", "retry_wait"])
async def test_retry_of_anything_but_failed_is_a_conflict(ledger: Ledger, state: str) -> None:
    task = await submitted(ledger)
    if state != "queued":
        claim = await ledger.queue.claim(task.task_id, "w")
        assert claim is not None
        if state == "succeeded":
            await ledger.queue.finish(claim, [])
        elif state == "retry_wait":
            await ledger.queue.fail(claim, ErrorCode.OBJECT_READ_ERROR)
    before = await ledger.reads.get_task(task.task_id)
    with pytest.raises(Conflict, match="only failed tasks can be retried"):
        await ledger.operator.retry(task.task_id)
    assert await ledger.reads.get_task(task.task_id) == before


async def test_retry_needs_the_document_failed_too(ledger: Ledger) -> None:
    task = await submitted(ledger)
    claim = await ledger.queue.claim(task.task_id, "w")
    assert claim is not None
    await ledger.queue.fail(claim, ErrorCode.PARSE_ERROR)
    await ledger.versions.delete(task.document_id)
    with pytest.raises(Conflict, match="no longer exists"):
        await ledger.operator.retry(task.task_id)


async def test_publish_only_from_review_pending(ledger: Ledger) -> None:
    task = await submitted(ledger)
    with pytest.raises(Conflict, match="waiting for review"):
        await ledger.versions.publish(task.document_id)
    claim = await ledger.queue.claim(task.task_id, "w")
    assert claim is not None
    await ledger.queue.finish(claim, [])
    published = await ledger.versions.publish(task.document_id)
    assert published.status is DocumentStatus.PUBLISHED


# --------------------------------------------------------------- readers


async def test_tasks_since_returns_only_what_changed(ledger: Ledger) -> None:
    a = await submitted(ledger, "a.txt")
    b = await submitted(ledger, "b.txt")
    seen = await ledger.reads.revision()
    assert seen >= 2
    assert await ledger.reads.tasks_since(seen) == []
    await ledger.queue.claim(b.task_id, "w")
    changed = await ledger.reads.tasks_since(seen)
    assert [t.task_id for t in changed] == [b.task_id]
    assert changed[0].revision > seen
    assert a.task_id not in {t.task_id for t in changed}


async def test_counts_and_failure_groups(ledger: Ledger) -> None:
    for i in range(3):
        task = await submitted(ledger, f"{i}.txt")
        claim = await ledger.queue.claim(task.task_id, "w")
        assert claim is not None
        await ledger.queue.fail(claim, ErrorCode.PARSE_ERROR if i else ErrorCode.EMPTY_DOCUMENT)
    await submitted(ledger, "q.txt")
    counts = await ledger.reads.counts()
    assert counts[TaskStatus.FAILED] == 3
    assert counts[TaskStatus.QUEUED] == 1
    assert counts[TaskStatus.RUNNING] == 0
    groups = await ledger.reads.failure_groups()
    assert [(g.error_code, g.count) for g in groups] == [
        (ErrorCode.PARSE_ERROR, 2),
        (ErrorCode.EMPTY_DOCUMENT, 1),
    ]
    only = await ledger.reads.list_tasks(error_code=ErrorCode.EMPTY_DOCUMENT)
    assert len(only) == 1


async def test_stalled_is_shown_not_killed(ledger: Ledger, clock: FakeClock) -> None:
    task = await submitted(ledger)
    claim = await ledger.queue.claim(task.task_id, "w")
    assert claim is not None
    clock.advance(ledger.settings.stall_after_s + 1)
    assert await ledger.queue.heartbeat(claim)  # alive, but no progress
    view = await ledger.reads.get_task(task.task_id)
    after = ledger.settings.stall_after_s
    assert view.is_stalled(clock(), after) and view.status is TaskStatus.RUNNING
    await ledger.queue.report_progress(claim, Stage.PARSE, 1, 2)
    assert not (await ledger.reads.get_task(task.task_id)).is_stalled(clock(), after)


# ---------------------------------------------------------------- uploads


async def test_upload_refuses_bad_input_and_writes_nothing(ledger: Ledger) -> None:
    with pytest.raises(BadInput, match="empty"):
        await ledger.operator.upload(b"", "empty.txt")
    with pytest.raises(BadInput, match="unsupported"):
        await ledger.operator.upload(b"PK\x03\x04" + bytes(200), "archive.pdf")
    small = ledger.settings.with_(max_upload_bytes=10)
    tight = Ledger(ledger.transactions, small)
    with pytest.raises(BadInput, match="over the upload limit"):
        await tight.operator.upload(b"x" * 11, "big.txt")
    assert await ledger.reads.list_documents() == []


async def test_user_names_are_display_text_only(ledger: Ledger) -> None:
    doc = await ledger.operator.upload(TEXT, "../../etc/passwd.txt")
    assert "/" not in doc.filename and ".." not in doc.filename
    assert doc.filename.endswith("passwd.txt")
    assert ledger.operator.store.exists(doc.object_key)
    stored = ledger.operator.store.root / doc.object_key
    assert stored.resolve().is_relative_to(ledger.operator.store.root.resolve())


async def test_a_handed_back_attempt_does_not_use_up_the_retry_budget(
    ledger: Ledger, clock: FakeClock
) -> None:
    task = await submitted(ledger)
    for _ in range(ledger.settings.max_attempts + 2):  # more hand-backs than attempts
        claim = await ledger.queue.claim(task.task_id, "w")
        assert claim is not None
        assert await ledger.queue.hand_back(claim)
    claim = await ledger.queue.claim(task.task_id, "w")
    assert claim is not None
    waiting = await ledger.queue.fail(claim, ErrorCode.OBJECT_READ_ERROR)
    assert waiting is not None and waiting.status is TaskStatus.RETRY_WAIT


async def test_a_manual_retry_restores_the_automatic_retry_budget(
    ledger: Ledger, clock: FakeClock
) -> None:
    task = await submitted(ledger)
    for _ in range(ledger.settings.max_attempts):
        clock.advance(ledger.settings.backoff_max_s + 1)
        claim = await ledger.queue.claim(task.task_id, "w")
        assert claim is not None
        await ledger.queue.fail(claim, ErrorCode.PROVIDER_UNAVAILABLE)
    assert (await ledger.reads.get_task(task.task_id)).status is TaskStatus.FAILED
    await ledger.operator.retry(task.task_id)
    claim = await ledger.queue.claim(task.task_id, "w")
    assert claim is not None and claim.attempt == ledger.settings.max_attempts + 1
    again = await ledger.queue.fail(claim, ErrorCode.PROVIDER_UNAVAILABLE)
    assert again is not None and again.status is TaskStatus.RETRY_WAIT


async def test_an_unfinished_attempt_leaves_no_chunks(ledger: Ledger, clock: FakeClock) -> None:
    task = await submitted(ledger)
    claim = await ledger.queue.claim(task.task_id, "w")
    assert claim is not None
    await leftover_chunk(ledger, task.document_id)
    await ledger.queue.fail(claim, ErrorCode.PROVIDER_UNAVAILABLE)
    assert await ledger.reads.chunks(task.document_id) == []
    clock.advance(ledger.settings.backoff_max_s + 1)
    claim = await ledger.queue.claim(task.task_id, "w")
    assert claim is not None
    await leftover_chunk(ledger, task.document_id)
    clock.advance(ledger.settings.lease_s + 1)
    await ledger.queue.reap()
    assert await ledger.reads.chunks(task.document_id) == []


async def test_finish_indexes_and_completes_in_one_step(ledger: Ledger) -> None:
    task = await submitted(ledger)
    claim = await ledger.queue.claim(task.task_id, "w", with_document=True)
    assert claim is not None and claim.document is not None
    assert claim.document.document_id == task.document_id
    chunks = [ChunkRecord(i, f"chunk {i}", None, 0, 7) for i in range(3)]
    assert await ledger.queue.finish(claim, chunks, options={"parser": "text"})
    done = await ledger.reads.get_task(task.task_id)
    assert (done.status, done.completed, done.total) == (TaskStatus.SUCCEEDED, 3, 3)
    assert done.options == {"parser": "text"}
    assert len(await ledger.reads.chunks(task.document_id)) == 3
    assert await ledger.queue.finish(claim, chunks) is False
