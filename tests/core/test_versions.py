"""Document versions on both backends: a candidate is not searchable until it is
published, publishing switches search to it and retires the old version atomically
(checked by another process searching in a loop during the switches), optimistic
locking, concurrent publishes, reject / withdraw round trips, delete, history."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from core import BadInput, Conflict, Ledger, NotFound, Settings
from core.ledger import ChunkRecord, DocumentView
from core.states import DocumentStatus, ErrorCode, TaskStatus

WORD = "lighthouse"  # in every version's text: a search that must always find one


async def finish_version(ledger: Ledger, doc: DocumentView, marker: str) -> None:
    """Submit a version and finish its task with chunks naming ``marker``."""
    task = await ledger.operator.submit(doc.document_id)
    claim = await ledger.queue.claim(task.task_id, "w1")
    assert claim is not None
    records = [
        ChunkRecord(i, f"{WORD} keeper {marker} part {i}", 1 + i // 2, i * 40, i * 40 + 30, None)
        for i in range(4)
    ]
    assert await ledger.queue.finish(claim, records)


async def published_doc(ledger: Ledger, marker: str = "alpha") -> DocumentView:
    doc = await ledger.operator.upload(f"{WORD} {marker}\n".encode(), "guide.md")
    await finish_version(ledger, doc, marker)
    return await ledger.versions.publish(doc.document_id, actor="pat")


async def candidate(ledger: Ledger, family: str, marker: str) -> DocumentView:
    draft = await ledger.versions.replace(family, f"{WORD} {marker}\n".encode(), "guide.md")
    await finish_version(ledger, draft, marker)
    return await ledger.reads.get_document(draft.document_id)


def markers(hits: list) -> set[str]:  # type: ignore[type-arg]
    return {h.text.split()[2] for h in hits}


async def test_a_candidate_is_searchable_only_once_published(ledger: Ledger) -> None:
    v1 = await published_doc(ledger)
    assert markers(await ledger.reads.search(WORD)) == {"alpha"}

    v2 = await candidate(ledger, v1.document_id, "beta")
    assert (v2.family_id, v2.version_no, v2.status) == (
        v1.document_id,
        2,
        DocumentStatus.REVIEW_PENDING,
    )
    assert markers(await ledger.reads.search(WORD)) == {"alpha"}  # review_pending is not
    assert markers(await ledger.reads.search("beta")) == set()

    await ledger.versions.publish(v2.document_id, actor="pat")
    hits = await ledger.reads.search(WORD)
    assert markers(hits) == {"beta"}
    assert {(h.family_id, h.version_no) for h in hits} == {(v1.document_id, 2)}
    assert all(f"**{WORD}**" in h.snippet for h in hits)
    old = await ledger.reads.get_document(v1.document_id)
    assert old.status is DocumentStatus.RETIRED
    assert await ledger.reads.chunks(v1.document_id) == []  # retired: never searched
    versions = await ledger.reads.versions(v2.document_id)
    assert [(v.version_no, v.status) for v in versions] == [
        (1, DocumentStatus.RETIRED),
        (2, DocumentStatus.PUBLISHED),
    ]
    actions = [
        (e.version_no, e.action) for e in await ledger.reads.document_history(v1.document_id)
    ]
    assert actions == [(1, "upload"), (1, "publish"), (2, "upload"), (1, "retire"), (2, "publish")]


async def test_ranking_puts_the_denser_chunk_first(ledger: Ledger) -> None:
    doc = await ledger.operator.upload(b"ranked\n", "ranked.md")
    task = await ledger.operator.submit(doc.document_id)
    claim = await ledger.queue.claim(task.task_id, "w1")
    assert claim is not None
    texts = [
        "the harbour has a long quay and many boats and one beacon far away",
        "beacon beacon: the beacon keeper lights the beacon",
    ]
    records = [ChunkRecord(i, t, None, 0, len(t), None) for i, t in enumerate(texts)]
    assert await ledger.queue.finish(claim, records)
    await ledger.versions.publish(doc.document_id)
    hits = await ledger.reads.search("beacon")
    assert [h.ordinal for h in hits] == [1, 0]
    assert hits[0].score > hits[1].score


async def test_a_stale_expected_version_is_refused_with_the_current_one(ledger: Ledger) -> None:
    v1 = await published_doc(ledger)
    v2 = await candidate(ledger, v1.document_id, "beta")
    with pytest.raises(Conflict, match=rf"changed since you looked: now version {v2.version}"):
        await ledger.versions.publish(v2.document_id, expected_version=v2.version - 1)
    published = await ledger.versions.publish(v2.document_id, expected_version=v2.version)
    assert published.version == v2.version + 1


async def test_two_concurrent_publishes_of_one_candidate_one_wins(ledger: Ledger) -> None:
    v1 = await published_doc(ledger)
    v2 = await candidate(ledger, v1.document_id, "beta")
    outcomes = await asyncio.gather(
        *(
            ledger.versions.publish(v2.document_id, actor=f"r{i}", expected_version=v2.version)
            for i in range(4)
        ),
        return_exceptions=True,
    )
    assert sum(isinstance(o, DocumentView) for o in outcomes) == 1
    assert all(isinstance(o, Conflict) for o in outcomes if not isinstance(o, DocumentView))
    publishes = [
        e for e in await ledger.reads.document_history(v1.document_id) if e.version_no == 2
    ]
    assert [e.action for e in publishes].count("publish") == 1


async def test_publishing_a_published_version_points_at_the_candidate(ledger: Ledger) -> None:
    v1 = await published_doc(ledger)
    v2 = await candidate(ledger, v1.document_id, "beta")
    # Pinned to the version the id names (its row version), the published v1 is the
    # only one acted on, and the answer points at the candidate.
    with pytest.raises(Conflict, match=rf"version 2 \({v2.document_id[:8]}\) waits for review"):
        await ledger.versions.publish(v1.document_id, expected_version=v1.version)
    # Unpinned, the document's id names the document: its candidate is published.
    published = await ledger.versions.publish(v1.document_id)
    assert (published.document_id, published.version_no) == (v2.document_id, 2)
    assert markers(await ledger.reads.search(WORD)) == {"beta"}


async def test_reject_returns_the_candidate_to_draft_with_its_reason(ledger: Ledger) -> None:
    v1 = await published_doc(ledger)
    v2 = await candidate(ledger, v1.document_id, "beta")
    with pytest.raises(BadInput):
        await ledger.versions.reject(v2.document_id, actor="pat", reason="  ")
    rejected = await ledger.versions.reject(v2.document_id, actor="pat", reason="typos")
    assert rejected.status is DocumentStatus.DRAFT
    assert await ledger.reads.chunks(v2.document_id) == []
    assert markers(await ledger.reads.search(WORD)) == {"alpha"}  # v1 still searched
    last = (await ledger.reads.document_history(v1.document_id))[-1]
    assert (last.action, last.actor, last.reason, last.to_status) == (
        "reject",
        "pat",
        "typos",
        "draft",
    )
    with pytest.raises(Conflict, match="only versions waiting for review"):
        await ledger.versions.reject(v2.document_id, actor="pat", reason="again")
    # A rejected draft may be submitted again, and published.
    await finish_version(ledger, rejected, "gamma")
    await ledger.versions.publish(v2.document_id)
    assert markers(await ledger.reads.search(WORD)) == {"gamma"}


async def test_withdraw_takes_it_out_of_search_and_it_may_be_published_again(
    ledger: Ledger,
) -> None:
    v1 = await published_doc(ledger)
    gone = await ledger.versions.withdraw(v1.document_id, actor="pat", reason="outdated")
    assert gone.status is DocumentStatus.WITHDRAWN
    assert await ledger.reads.search(WORD) == []
    with pytest.raises(Conflict, match="only published documents can be withdrawn"):
        await ledger.versions.withdraw(v1.document_id, actor="pat", reason="again")
    back = await ledger.versions.publish(v1.document_id, actor="pat")
    assert back.status is DocumentStatus.PUBLISHED
    assert markers(await ledger.reads.search(WORD)) == {"alpha"}


async def test_an_old_withdrawn_version_cannot_be_published_over_a_newer_one(
    ledger: Ledger,
) -> None:
    v1 = await published_doc(ledger)
    await ledger.versions.withdraw(v1.document_id, actor="pat", reason="outdated")
    v2 = await candidate(ledger, v1.document_id, "beta")
    await ledger.versions.publish(v2.document_id)
    # Publishing v2 retired the withdrawn v1 too: one published version, no strays.
    assert (await ledger.reads.get_document(v1.document_id)).status is DocumentStatus.RETIRED
    v3 = await candidate(ledger, v1.document_id, "gamma")
    await ledger.versions.publish(v3.document_id)
    await ledger.versions.withdraw(v3.document_id, actor="pat", reason="oops")
    v4 = await candidate(ledger, v1.document_id, "delta")
    await ledger.versions.publish(v4.document_id)
    with pytest.raises(Conflict, match=r"version 4 .* is published and newer"):
        await ledger.versions.publish(v3.document_id)
    assert markers(await ledger.reads.search(WORD)) == {"delta"}


async def test_deleting_forgets_idempotency_keys_that_named_the_document(ledger: Ledger) -> None:
    first = await ledger.operator.add_once(b"lighthouse\n", "k.md", key="k-1", submit=False)
    (doc, _) = first.value
    await ledger.versions.delete(doc.document_id, actor="pat")
    again = await ledger.operator.add_once(b"lighthouse\n", "k.md", key="k-1", submit=False)
    assert not again.replayed
    assert again.value[0].document_id != doc.document_id


async def test_a_new_version_supersedes_waiting_candidates_but_not_a_processing_one(
    ledger: Ledger,
) -> None:
    v1 = await published_doc(ledger)
    v2 = await candidate(ledger, v1.document_id, "beta")
    v3 = await ledger.versions.replace(v1.document_id, b"lighthouse delta\n", "guide.md")
    assert v3.version_no == 3
    assert (await ledger.reads.get_document(v2.document_id)).status is DocumentStatus.RETIRED
    await ledger.operator.submit(v3.document_id)
    objects = sorted(ledger.settings.store_root.rglob("*"))
    with pytest.raises(Conflict, match="is processing"):
        await ledger.versions.replace(v1.document_id, b"lighthouse epsilon\n", "guide.md")
    with pytest.raises(NotFound):
        await ledger.versions.replace("f" * 32, b"lighthouse zeta\n", "guide.md")
    # Refused before the original was stored: no object is left behind.
    assert sorted(ledger.settings.store_root.rglob("*")) == objects


async def test_a_worker_of_an_old_version_cannot_touch_the_new_one(ledger: Ledger) -> None:
    v1 = await published_doc(ledger)
    draft = await ledger.versions.replace(v1.document_id, b"lighthouse beta\n", "guide.md")
    task = await ledger.operator.submit(draft.document_id)
    claim = await ledger.queue.claim(task.task_id, "w1")
    assert claim is not None
    records = [ChunkRecord(0, f"{WORD} keeper beta part 0", 1, 0, 10, None)]
    assert await ledger.queue.finish(claim, records)
    # v1's chunks were not replaced by v2's finish: two versions never mix.
    assert markers(await ledger.reads.search(WORD)) == {"alpha"}
    assert len(await ledger.reads.chunks(v1.document_id)) == 4


async def test_delete_refuses_a_running_task_and_queued_tasks_then_find_it_gone(
    ledger: Ledger,
) -> None:
    doc = await ledger.operator.upload(b"lighthouse\n", "gone.md")
    task = await ledger.operator.submit(doc.document_id)
    claim = await ledger.queue.claim(task.task_id, "w1")
    assert claim is not None
    with pytest.raises(Conflict, match="is running"):
        await ledger.versions.delete(doc.document_id, actor="pat")
    await ledger.queue.hand_back(claim)
    removed = await ledger.versions.delete(doc.document_id, actor="pat", reason="dup")
    assert [d.document_id for d in removed] == [doc.document_id]
    with pytest.raises(NotFound):
        await ledger.reads.get_document(doc.document_id)
    history = await ledger.reads.document_history(doc.document_id)
    assert [e.action for e in history] == ["upload", "delete"]
    assert history[-1].reason == "dup"
    view = await ledger.reads.get_task(task.task_id)
    assert view.status is TaskStatus.RETRY_WAIT  # a worker will find it gone


SEARCHER = textwrap.dedent(
    """
    import asyncio, json, sys
    from pathlib import Path
    from core import Ledger, Settings

    async def main(db_url, store, stop):
        ledger = await Ledger.open(Settings(db_url=db_url, store_root=Path(store)))
        try:
            while not Path(stop).exists():
                hits = await ledger.reads.search("{word}", limit=100)
                print(json.dumps(sorted({{h.version_no for h in hits}})), flush=True)
        finally:
            await ledger.close()

    asyncio.run(main(*sys.argv[1:]))
    """
).format(word=WORD)


async def version_ids(ledger: Ledger, family: str) -> dict[int, tuple[str, DocumentStatus]]:
    return {v.version_no: (v.document_id, v.status) for v in await ledger.reads.versions(family)}


async def test_the_documents_name_reaches_the_version_each_decision_is_about(
    ledger: Ledger,
) -> None:
    v1 = await published_doc(ledger)
    family = v1.document_id
    v2 = await candidate(ledger, family, "beta")
    # v1 is published, so "reject D" can only mean the version waiting for review.
    rejected = await ledger.versions.reject(family, actor="pat", reason="typos")
    assert (rejected.document_id, rejected.status) == (v2.document_id, DocumentStatus.DRAFT)
    # "submit D": v1 is not a draft; its one draft is v2.
    task = await ledger.operator.submit(family)
    assert task.document_id == v2.document_id
    claim = await ledger.queue.claim(task.task_id, "w1")
    assert claim is not None
    assert await ledger.queue.finish(claim, [ChunkRecord(0, f"{WORD} keeper beta", 1, 0, 9, None)])
    published = await ledger.versions.publish(family, actor="pat")
    assert (published.document_id, published.version_no) == (v2.document_id, 2)
    assert markers(await ledger.reads.search(WORD)) == {"beta"}
    # v1 is retired now: "withdraw D" is v2, and "publish D" puts v2 back.
    withdrawn = await ledger.versions.withdraw(family, actor="pat", reason="stale")
    assert (withdrawn.document_id, withdrawn.status) == (v2.document_id, DocumentStatus.WITHDRAWN)
    back = await ledger.versions.publish(family, actor="pat")
    assert (back.document_id, back.status) == (v2.document_id, DocumentStatus.PUBLISHED)
    history = await ledger.reads.document_history(family)
    assert [(e.action, e.version_no) for e in history[-4:]] == [
        ("retire", 1),
        ("publish", 2),
        ("withdraw", 2),
        ("publish", 2),
    ]


async def test_the_first_versions_id_reaches_a_newer_candidate_past_retired_ones(
    ledger: Ledger,
) -> None:
    # The audit's case: v1 retired, v4 published, v5 waiting for review.
    v1 = await published_doc(ledger)
    for marker in ("beta", "gamma", "delta"):
        version = await candidate(ledger, v1.document_id, marker)
        await ledger.versions.publish(version.document_id)
    v5 = await candidate(ledger, v1.document_id, "epsilon")
    published = await ledger.versions.publish(v1.document_id)
    assert (published.document_id, published.version_no) == (v5.document_id, 5)
    assert markers(await ledger.reads.search(WORD)) == {"epsilon"}


async def test_a_named_version_that_is_eligible_acts_itself(ledger: Ledger) -> None:
    # v1 withdrawn, v2 waiting for review: v1's id is v1's own before it is the
    # document's name, so publishing it puts v1 back and leaves v2 waiting.
    v1 = await published_doc(ledger)
    await ledger.versions.withdraw(v1.document_id, actor="pat", reason="check figures")
    v2 = await candidate(ledger, v1.document_id, "beta")
    back = await ledger.versions.publish(v1.document_id)
    assert back.document_id == v1.document_id
    versions = await version_ids(ledger, v1.document_id)
    assert versions[2] == (v2.document_id, DocumentStatus.REVIEW_PENDING)


async def test_a_later_versions_id_never_acts_on_another_version(ledger: Ledger) -> None:
    v1 = await published_doc(ledger)
    v2 = await candidate(ledger, v1.document_id, "beta")
    with pytest.raises(Conflict) as refusal:
        await ledger.versions.withdraw(v2.document_id, actor="pat", reason="no")
    assert str(refusal.value) == (
        f"version 2 ({v2.document_id[:8]}) of document {v1.document_id[:8]} is review_pending; "
        f"only published documents can be withdrawn; its version 1 ({v1.document_id[:8]}) "
        "is published: withdraw that"
    )
    assert (await ledger.reads.get_document(v1.document_id)).status is DocumentStatus.PUBLISHED


async def test_two_versions_the_name_could_mean_are_a_conflict_naming_both(
    ledger: Ledger,
) -> None:
    v1 = await published_doc(ledger)
    v2 = await candidate(ledger, v1.document_id, "beta")
    await ledger.versions.publish(v2.document_id)
    await ledger.versions.withdraw(v2.document_id, actor="pat", reason="check")
    v3 = await candidate(ledger, v1.document_id, "gamma")
    with pytest.raises(Conflict) as refusal:
        await ledger.versions.publish(v1.document_id)
    message = str(refusal.value)
    assert message.startswith(
        f"version 1 ({v1.document_id[:8]}) of document {v1.document_id[:8]} is retired; "
    )
    assert f"version 2 ({v2.document_id[:8]}) is withdrawn" in message
    assert f"version 3 ({v3.document_id[:8]}) waits for review" in message
    versions = await version_ids(ledger, v1.document_id)
    assert [versions[n][1] for n in (2, 3)] == [
        DocumentStatus.WITHDRAWN,
        DocumentStatus.REVIEW_PENDING,
    ]


async def test_an_expected_row_version_belongs_to_the_version_named(ledger: Ledger) -> None:
    v1 = await published_doc(ledger)
    v2 = await candidate(ledger, v1.document_id, "beta")
    with pytest.raises(Conflict, match="publish it by its own id, whose row version you expect"):
        await ledger.versions.publish(v1.document_id, expected_version=v2.version)
    with pytest.raises(Conflict, match=rf"changed since you looked: now version {v2.version}"):
        await ledger.versions.publish(v2.document_id, expected_version=v2.version - 1)
    published = await ledger.versions.publish(v2.document_id, expected_version=v2.version)
    assert published.version == v2.version + 1


async def test_chunks_of_the_document_are_those_search_finds(ledger: Ledger) -> None:
    from core.ledger import version_reads

    v1 = await published_doc(ledger)
    v2 = await candidate(ledger, v1.document_id, "beta")

    async def chunks(ident: str) -> tuple[DocumentView, list[str]]:
        shown, found = await ledger.transactions.read(
            lambda conn: version_reads.document_chunks(conn, ident)
        )
        return shown, [c.text.split()[2] for c in found]

    # Each version's own chunks while it keeps them.
    assert (await chunks(v1.document_id))[1] == ["alpha"] * 4
    assert (await chunks(v2.document_id))[1] == ["beta"] * 4
    await ledger.versions.publish(v2.document_id)
    shown, texts = await chunks(v1.document_id[:8])
    assert (shown.document_id, texts) == (v2.document_id, ["beta"] * 4)
    await ledger.versions.withdraw(v2.document_id, actor="pat", reason="check")
    assert (await chunks(v1.document_id))[0].document_id == v2.document_id  # kept, withdrawn
    # A later version's id is its own: a rejected version shows none.
    v3 = await candidate(ledger, v1.document_id, "gamma")
    await ledger.versions.reject(v3.document_id, actor="pat", reason="no")
    shown, texts = await chunks(v3.document_id)
    assert (shown.document_id, texts) == (v3.document_id, [])


async def test_submitting_the_documents_name_once_submits_its_draft_once(ledger: Ledger) -> None:
    v1 = await published_doc(ledger)
    v2 = await ledger.versions.replace(v1.document_id, b"lighthouse beta\n", "guide.md")
    first = await ledger.operator.submit_once(v1.document_id, key="k-1")
    assert (first.replayed, first.value.document_id) == (False, v2.document_id)
    again = await ledger.operator.submit_once(v1.document_id, key="k-1")
    assert (again.replayed, again.value.task_id) == (True, first.value.task_id)
    with pytest.raises(Conflict, match="only draft documents can be submitted"):
        await ledger.operator.submit(v1.document_id)  # its draft is processing now


async def test_a_deleted_documents_history_is_found_by_any_versions_prefix(
    ledger: Ledger,
) -> None:
    v1 = await published_doc(ledger)
    v2 = await candidate(ledger, v1.document_id, "beta")
    await ledger.versions.delete(v2.document_id, actor="pat", reason="gone")
    for ident in (v1.document_id, v1.document_id[:6], v2.document_id[:6]):
        history = await ledger.reads.document_history(ident)
        assert history[-1].action == "delete" and history[-1].reason == "gone", ident
        assert {e.family_id for e in history} == {v1.document_id}
    with pytest.raises(NotFound):
        await ledger.reads.document_history("f" * 32)


async def test_cancel_and_retry_answers_carry_the_documents_name(ledger: Ledger) -> None:
    doc = await ledger.operator.upload(b"lighthouse\n", "named.md")
    task = await ledger.operator.submit(doc.document_id)
    cancelled = await ledger.operator.cancel(task.task_id, reason="later")
    assert cancelled.document_name == "named.md"
    again = await ledger.operator.submit(doc.document_id)
    claim = await ledger.queue.claim(again.task_id, "w1")
    assert claim is not None
    await ledger.queue.fail(claim, ErrorCode.PARSE_ERROR, "corrupt")
    retried = await ledger.operator.retry(again.task_id)
    assert (retried.status, retried.document_name) == (TaskStatus.QUEUED, "named.md")
    assert retried.document_name == (await ledger.reads.get_task(again.task_id)).document_name


def start_searcher(settings: Settings, stop: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", SEARCHER, settings.db_url, str(settings.store_root), str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_a_search_in_another_process_never_sees_two_versions_or_none(
    ledger: Ledger, settings: Settings, tmp_path: Path
) -> None:
    v1 = await published_doc(ledger)
    stop = tmp_path / "stop"
    searcher = start_searcher(settings, stop)
    try:
        assert searcher.stdout is not None
        searcher.stdout.readline()  # it is searching
        for n in range(2, 8):
            doc = await candidate(ledger, v1.document_id, f"m{n}")
            await ledger.versions.publish(doc.document_id)
            await asyncio.sleep(0.02)
    finally:
        stop.touch()
        out, err = searcher.communicate(timeout=60)
    assert searcher.returncode == 0, err
    seen = [json.loads(line) for line in out.splitlines()]
    assert len(seen) > 10
    assert all(len(versions) == 1 for versions in seen), [s for s in seen if len(s) != 1]
    assert seen[-1] == [7]


async def test_the_review_diff_shows_only_the_lines_that_changed(ledger: Ledger) -> None:
    from core.ingest.chunker import chunk_text

    lines = [f"line {i} of the keeper's log, with words enough to span chunks" for i in range(30)]
    before = "\n".join(lines)
    after = "\n".join([*lines[:10], "an inserted line shifts every chunk boundary", *lines[10:]])

    async def version(doc: DocumentView, text: str) -> None:
        task = await ledger.operator.submit(doc.document_id)
        claim = await ledger.queue.claim(task.task_id, "w1")
        assert claim is not None
        spans = chunk_text(text, chunk_size=120, overlap=30)
        records = [ChunkRecord(i, text[a:b], 1, a, b, None) for i, (a, b) in enumerate(spans)]
        assert await ledger.queue.finish(claim, records)

    v1 = await ledger.operator.upload(before.encode(), "log.txt")
    await version(v1, before)
    await ledger.versions.publish(v1.document_id)
    v2 = await ledger.versions.replace(v1.document_id, after.encode(), "log.txt")
    await version(v2, after)
    review = await ledger.reads.review(v2.document_id)
    assert review.published is not None and review.published.document_id == v1.document_id
    assert review.added == ["an inserted line shifts every chunk boundary"]
    assert review.removed == []
    assert review.chunks_after > review.chunks_before > 1


async def test_the_review_compares_with_the_withdrawn_version_publishing_retires(
    ledger: Ledger,
) -> None:
    v1 = await published_doc(ledger)
    await ledger.versions.withdraw(v1.document_id, actor="pat", reason="outdated")
    v2 = await candidate(ledger, v1.document_id, "beta")
    review = await ledger.reads.review(v2.document_id)
    assert review.published is not None
    assert (review.published.document_id, review.published.status) == (
        v1.document_id,
        DocumentStatus.WITHDRAWN,
    )
    assert (review.chunks_before, review.chunks_after) == (4, 4)
    assert any("alpha" in line for line in review.removed)
    # It is what publishing v2 retires.
    await ledger.versions.publish(v2.document_id)
    assert (await ledger.reads.get_document(v1.document_id)).status is DocumentStatus.RETIRED


async def test_a_first_version_has_nothing_to_compare_with(ledger: Ledger) -> None:
    doc = await ledger.operator.upload(b"lighthouse\n", "first.md")
    await finish_version(ledger, doc, "alpha")
    review = await ledger.reads.review(doc.document_id)
    assert review.published is None and review.chunks_before == 0


async def test_the_search_index_stays_exact_through_every_version_move(ledger: Ledger) -> None:
    # SQLite indexes a document's chunks with one statement in the finish transaction
    # and unindexes them by trigger; FTS5's own check compares the index with the
    # chunks table and fails on any row indexed twice, missing or stale.
    v1 = await published_doc(ledger)
    v2 = await candidate(ledger, v1.document_id, "beta")
    await ledger.versions.reject(v2.document_id, actor="pat", reason="typos")
    await finish_version(ledger, v2, "gamma")
    await ledger.versions.publish(v2.document_id)  # retires v1: its chunks go
    v3 = await candidate(ledger, v1.document_id, "delta")
    await ledger.versions.withdraw(v2.document_id, actor="pat", reason="old")
    await ledger.versions.publish(v3.document_id)
    other = await published_doc(ledger, "omega")
    await ledger.versions.delete(other.document_id, actor="pat")
    assert markers(await ledger.reads.search(WORD)) == {"delta"}
    if ledger.backend == "sqlite":
        from sqlalchemy import text

        def check(conn: Any) -> None:
            # rank 1: also compare the index with the chunks table, row by row.
            conn.execute(
                text("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)")
            )

        await ledger.transactions.write(check)
