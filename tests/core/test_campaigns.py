"""Re-embedding campaigns: a new index gets the vectors of every published and
review-pending version through ordinary tasks (claimed, leased, fenced, reaped,
cancelled, retried), versions submitted meanwhile end in both indexes, and whatever
becomes of a re-embedding task, its version keeps its status, chunks and vectors."""

from __future__ import annotations

import asyncio

import pytest

from core import Conflict, Ledger
from core.ingest.embedder import HashingEmbedder
from core.ingest.embedding import index_key_of
from core.ingest.worker import Worker
from core.ledger import IndexKey
from core.states import DocumentStatus, ErrorCode, IndexState, Stage, TaskStatus
from tests.conftest import FakeClock

HASHED = index_key_of(HashingEmbedder())
SMALL = index_key_of(HashingEmbedder(64))
# An embedder no worker here can make: its tasks fail (transiently), as a worker
# without a model's package would.
UNMAKEABLE = IndexKey("nobody-has-this", "m", "1", 8)


def note(n: int) -> bytes:
    return (
        f"# Runbook {n}\n\nLeases expire after thirty seconds; runbook {n} says so.\n\n"
        f"Second paragraph of runbook {n}, about claims and fencing tokens.\n"
    ).encode()


async def drain(ledger: Ledger, name: str = "w") -> None:
    await Worker(ledger, name, concurrency=2, register=False).run(until_idle=True)


async def versions(ledger: Ledger, n: int, *, publish: int) -> list[str]:
    """``n`` versions processed with the hashed embedder, the first ``publish`` of
    them published (the rest review-pending)."""
    ids = []
    for i in range(n):
        doc = await ledger.operator.upload(note(i), f"runbook-{i}.md")
        await ledger.operator.submit(doc.document_id)
        ids.append(doc.document_id)
    await drain(ledger)
    for document_id in ids[:publish]:
        await ledger.versions.publish(document_id, actor="alice")
    return ids


async def snapshot(ledger: Ledger, ids: list[str]) -> list[tuple[object, ...]]:
    """What a re-embedding task must never change: each version's status, chunks and
    vectors in the hashed index."""
    out = []
    for document_id in ids:
        doc = await ledger.reads.get_document(document_id)
        records = await ledger.reads.chunk_records(document_id, HASHED)
        out.append((doc.status, tuple(records)))
    return out


async def test_a_campaign_embeds_every_servable_version_into_the_new_index(
    ledger: Ledger,
) -> None:
    ids = await versions(ledger, 4, publish=2)
    draft = await ledger.operator.upload(note(99), "draft.md")  # never processed
    before = await snapshot(ledger, ids)
    progress = await ledger.campaigns.create(SMALL, actor="alice")
    assert progress.index.state is IndexState.BUILDING
    assert (progress.total, progress.by_status) == (4, {"queued": 4})
    tasks = [t for t in await ledger.reads.list_tasks(limit=None) if t.index_id is not None]
    assert {t.document_id for t in tasks} == set(ids)
    assert draft.document_id not in {t.document_id for t in tasks}
    assert {t.stage for t in tasks} == {Stage.EMBEDDING}

    await drain(ledger)
    done = await ledger.campaigns.progress(progress.index.id)
    chunks = sum([len(await ledger.reads.chunk_records(d)) for d in ids])
    assert (done.index.state, done.done, done.index.vectors) == (IndexState.READY, 4, chunks)
    for document_id in ids:
        records = await ledger.reads.chunk_records(document_id, SMALL)
        assert [r.embedding for r in records] == HashingEmbedder(64).embed_now(
            [r.text for r in records]
        )
    # The versions themselves are as they were; search still answers from the old index.
    assert await snapshot(ledger, ids) == before
    active = await ledger.indexes.active()
    assert active is not None and active.key == HASHED

    switched = await ledger.campaigns.activate(progress.index.name)
    assert switched.state is IndexState.ACTIVE
    states = {i.key: i.state for i in await ledger.indexes.list()}
    assert states == {HASHED: IndexState.RETIRED, SMALL: IndexState.ACTIVE}


async def test_a_version_submitted_during_the_campaign_ends_in_both_indexes(
    ledger: Ledger,
) -> None:
    await versions(ledger, 2, publish=2)
    progress = await ledger.campaigns.create(SMALL)
    late = await ledger.operator.upload(note(7), "late.md")
    await ledger.operator.submit(late.document_id)
    await drain(ledger)
    for key in (HASHED, SMALL):
        records = await ledger.reads.chunk_records(late.document_id, key)
        assert records and all(r.embedding is not None for r in records), key
    assert (await ledger.campaigns.progress(progress.index.id)).index.state is IndexState.READY


async def test_a_failing_reembedding_task_never_touches_its_version(
    ledger: Ledger, clock: FakeClock
) -> None:
    ids = await versions(ledger, 2, publish=1)
    before = await snapshot(ledger, ids)
    progress = await ledger.campaigns.create(UNMAKEABLE)
    for _ in range(ledger.settings.max_attempts):
        await drain(ledger)
        clock.advance(3600)  # past any backoff
    failed = [t for t in await ledger.reads.list_tasks(limit=None) if t.index_id is not None]
    assert {(t.status, t.error_code) for t in failed} == {
        (TaskStatus.FAILED, ErrorCode.PROVIDER_UNAVAILABLE)
    }
    assert await snapshot(ledger, ids) == before
    with pytest.raises(Conflict, match="not ready"):
        await ledger.campaigns.activate(progress.index.name)
    # A failed one is retried like any task, and its version is still untouched.
    retried = await ledger.operator.retry(failed[0].task_id, actor="alice")
    assert retried.status is TaskStatus.QUEUED and retried.stage is Stage.EMBEDDING
    assert await snapshot(ledger, ids) == before


async def test_cancelling_or_reaping_a_reembedding_task_keeps_its_version(
    ledger: Ledger, clock: FakeClock
) -> None:
    ids = await versions(ledger, 2, publish=2)
    before = await snapshot(ledger, ids)
    progress = await ledger.campaigns.create(SMALL)
    [held, *_] = await ledger.queue.claim_next("vanished", limit=1)
    assert held.index_id == progress.index.id
    clock.advance(held.lease_s + 1)
    reaped = await ledger.queue.reap()
    assert [r.task_id for r in reaped] == [held.task_id]
    assert await snapshot(ledger, ids) == before
    cancelled = await ledger.campaigns.cancel(progress.index.name, actor="alice")
    assert cancelled.by_status == {"cancelled": 2}
    assert await snapshot(ledger, ids) == before
    # The late worker's write is fenced off: nothing lands in the index.
    assert await ledger.queue.finish_reembedding(held, {0: b"\0" * 256}) == "lost"
    resumed = await ledger.campaigns.resume(progress.index.name)
    assert resumed.by_status.get("queued") == 2
    await drain(ledger)
    assert (await ledger.campaigns.progress(progress.index.id)).index.state is IndexState.READY
    assert await snapshot(ledger, ids) == before


async def test_an_active_index_cannot_be_dropped_and_a_dropped_one_leaves_nothing(
    ledger: Ledger,
) -> None:
    await versions(ledger, 2, publish=2)
    found = await ledger.indexes.active()
    assert found is not None
    active = await ledger.indexes.get(found.id)
    with pytest.raises(Conflict, match="is active"):
        await ledger.campaigns.drop(active.name)
    progress = await ledger.campaigns.create(SMALL)
    with pytest.raises(Conflict, match="already this embedder"):
        await ledger.campaigns.create(SMALL)
    gone = await ledger.campaigns.drop(progress.index.name, actor="alice")
    assert gone.name == progress.index.name
    assert [i.key for i in await ledger.indexes.list()] == [HASHED]
    left = [t for t in await ledger.reads.list_tasks(limit=None) if t.index_id is not None]
    assert {t.status for t in left} == {TaskStatus.CANCELLED}
    await drain(ledger)  # nothing left to run; the hashed index is whole
    assert (await ledger.indexes.get(active.id)).vectors == active.vectors


async def test_search_reads_one_active_index_throughout_an_activation(ledger: Ledger) -> None:
    await versions(ledger, 2, publish=2)
    progress = await ledger.campaigns.create(SMALL)
    await drain(ledger)
    seen: list[object] = []
    looking, switched = asyncio.Event(), asyncio.Event()

    async def look() -> None:
        # Reads the active index over and over, until it has seen the new one.
        while True:
            active = await ledger.indexes.active()
            seen.append(None if active is None else active.key)
            looking.set()
            if seen[-1] == SMALL:
                return
            await asyncio.sleep(0)

    watcher = asyncio.create_task(look())
    await looking.wait()
    await ledger.campaigns.activate(progress.index.name)
    switched.set()
    await asyncio.wait_for(watcher, timeout=60)
    assert seen[0] == HASHED and seen[-1] == SMALL
    assert set(seen) == {HASHED, SMALL}  # never None: no moment without an active index


async def test_a_rejected_version_is_not_embedded_and_its_task_still_ends(
    ledger: Ledger,
) -> None:
    ids = await versions(ledger, 2, publish=0)  # both review-pending
    progress = await ledger.campaigns.create(SMALL)
    await ledger.versions.reject(ids[0], actor="alice", reason="wrong file")
    await drain(ledger)
    done = await ledger.campaigns.progress(progress.index.id)
    assert done.by_status == {"succeeded": 2} and done.index.state is IndexState.READY
    assert (await ledger.reads.get_document(ids[0])).status is DocumentStatus.DRAFT
    assert (
        all(r.embedding is None for r in await ledger.reads.chunk_records(ids[1], HASHED)) is False
    )
