"""Defects found in document versions, review and search, each pinned by a test that
failed before its fix: an id that names the document acts on the version the action
is about; a deleted document's history is shown from the CLI; PostgreSQL search
folds diacritics as SQLite's does; bulk retry counts with the single retry's rule;
cancel and retry answers carry the document's name; search refuses a query with no
words and a limit it would cut; the review compares with the withdrawn version that
publishing retires.

The ledger tests run on both backends (the ``ledger`` fixture); the command-line
tests run ``python -m core.cli`` as a shell would, on SQLite.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core import BadInput, Conflict, Ledger, NotFound, Settings, sqlite_url
from core.filters import parse_filter
from core.ledger import ChunkRecord, DocumentView
from core.ledger.search import SEARCH_LIMIT_MAX
from core.states import DocumentStatus, ErrorCode, TaskStatus
from tests.core.test_cli_versions import (
    EXIT_BAD_INPUT,
    EXIT_CONFLICT,
    V2_TEXT,
    Cli,
    ok,
    published_v1,
    refused,
    reviewed_v2,
    run_cli,
    value,
    write,
)
from tests.core.test_versions import WORD, candidate, finish_version, markers, published_doc

NO_WORDS = "nothing to search for: the query has no words"  # the one line, on every face


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """``ingestdesk ARGS`` on a SQLite ledger of this test's own."""
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "objects")
    return lambda *args, stdin=b"": run_cli(settings, *args, stdin=stdin)


async def version_ids(ledger: Ledger, family: str) -> dict[int, tuple[str, DocumentStatus]]:
    return {v.version_no: (v.document_id, v.status) for v in await ledger.reads.versions(family)}


# -------------------------------------------- 1. the document's name and its versions


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


def test_the_cli_acts_on_the_version_the_documents_name_means(cli: Cli, tmp_path: Path) -> None:
    family = published_v1(cli, tmp_path)
    (draft,) = value(cli, "upload", "--replaces", family, write(tmp_path / "v2.txt", V2_TEXT))
    v2 = draft["document_id"]
    submitted = ok(cli("submit", family))
    assert f"document={v2} status=queued" in submitted.stdout
    assert f"{family} names the document; its draft {v2[:8]} is the one submitted" in (
        submitted.stdout
    )
    ok(cli("worker", "--until-idle"))
    published = ok(cli("publish", family))
    assert published.stdout.startswith(f"published document={family} version=v2 ({v2})")
    assert f"{family} names the document; its version v2 is the one acted on" in published.stdout
    (header, *lines) = ok(cli("chunks", family[:8])).lines
    assert header == (
        f"document={family} version=v2 ({v2}) published ({family[:8]} names the document; "
        "its version v2 is the one shown):"
    )
    assert lines and all("sixty" in line for line in lines)
    assert [c["document_id"] for c in value(cli, "chunks", family)] == [v2] * len(lines)
    withdrawn = value(cli, "withdraw", family, "--reason", "stale")
    assert (withdrawn["document_id"], withdrawn["status"]) == (v2, "withdrawn")
    message = refused(cli, EXIT_CONFLICT, "withdraw", family, "--reason", "twice")
    assert message == (
        f"version 1 ({family[:8]}) of document {family[:8]} is retired; only published "
        f"documents can be withdrawn; its newest version, 2 ({v2[:8]}), is withdrawn"
    )
    assert value(cli, "publish", family[:8])["document_id"] == v2


# ---------------------------------------------- 4. a deleted document's history


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


def test_the_cli_shows_a_deleted_document_from_its_history(cli: Cli, tmp_path: Path) -> None:
    family = published_v1(cli, tmp_path)
    v2 = reviewed_v2(cli, tmp_path, family)
    ok(cli("delete", family, "--reason", "gone"))
    for ident in (family, family[:8], v2[:8]):
        shown = ok(cli("document", ident)).stdout
        assert "(deleted)" in shown, ident
        assert re.search(r"delete +v1 +published -> -  reason='gone'", shown), shown
        assert re.search(r"delete +v2 +review_pending -> -  reason='gone'", shown), shown
    answer = value(cli, "document", v2)
    assert (answer["deleted"], answer["status"], answer["document_id"]) == (True, "deleted", v2)
    assert answer["reason"] == "gone" and answer["history"][-1]["action"] == "delete"
    assert [(v["version_no"], v["status_before"]) for v in answer["versions"]] == [
        (1, "published"),
        (2, "review_pending"),
    ]
    assert value(cli, "document", family)["family_id"] == family


# ----------------------------------------------------- 6. diacritics on both backends


ACCENTED = "Au café on sert une crème brûlée; l'ÉCOLE est fermée le lundi."


async def published_text(ledger: Ledger, text: str, name: str = "cafe.md") -> DocumentView:
    doc = await ledger.operator.upload(f"{text}\n".encode(), name)
    task = await ledger.operator.submit(doc.document_id)
    claim = await ledger.queue.claim(task.task_id, "w1")
    assert claim is not None
    assert await ledger.queue.finish(claim, [ChunkRecord(0, text, None, 0, len(text), None)])
    return await ledger.versions.publish(doc.document_id)


@pytest.mark.parametrize(
    ("query", "marked"),
    [
        ("cafe", "café"),
        ("creme brulee", "crème"),
        ("ecole", "ÉCOLE"),
        ("école", "ÉCOLE"),
        ("CAFÉ", "café"),
        ("fermee", "fermée"),
    ],
)
async def test_search_folds_diacritics_on_both_backends(
    ledger: Ledger, query: str, marked: str
) -> None:
    doc = await published_text(ledger, ACCENTED)
    (hit,) = await ledger.reads.search(query)
    assert hit.document_id == doc.document_id
    assert f"**{marked}**" in hit.snippet  # the word as written, marked
    assert await ledger.reads.search("cafeteria") == []


# ------------------------------------------- 8. bulk retry counts as retry does


async def failed_then_superseded(ledger: Ledger) -> tuple[str, str]:
    """A document whose v2 failed and was superseded by a newer upload; (family,
    the failed task)."""
    v1 = await published_doc(ledger)
    v2 = await ledger.versions.replace(v1.document_id, b"lighthouse beta\n", "guide.md")
    task = await ledger.operator.submit(v2.document_id)
    claim = await ledger.queue.claim(task.task_id, "w1")
    assert claim is not None
    await ledger.queue.fail(claim, ErrorCode.PARSE_ERROR, "corrupt")
    await ledger.versions.replace(v1.document_id, b"lighthouse gamma\n", "guide.md")
    assert (await ledger.reads.get_document(v2.document_id)).status is DocumentStatus.RETIRED
    return v1.document_id, task.task_id


async def test_bulk_retry_counts_a_failed_task_of_a_retired_version_as_not_eligible(
    ledger: Ledger,
) -> None:
    _, task_id = await failed_then_superseded(ledger)
    with pytest.raises(Conflict, match="is retired, not failed"):
        await ledger.operator.retry(task_id)
    failed = parse_filter("status:failed")
    dry = await ledger.operator.bulk_retry(failed, dry_run=True)
    assert (dry.matched, dry.eligible) == (1, 0)
    assert dry.ineligible == {"failed: its document is retired, not failed": 1}
    done = await ledger.operator.bulk_retry(failed)
    assert (done.eligible, done.done, done.refused) == (0, 0, 0)
    assert (await ledger.reads.get_task(task_id)).status is TaskStatus.FAILED


async def test_bulk_retry_still_requeues_a_failed_task_of_a_failed_document(
    ledger: Ledger,
) -> None:
    doc = await ledger.operator.upload(b"lighthouse\n", "a.md")
    task = await ledger.operator.submit(doc.document_id)
    claim = await ledger.queue.claim(task.task_id, "w1")
    assert claim is not None
    await ledger.queue.fail(claim, ErrorCode.PARSE_ERROR, "corrupt")
    other = await ledger.operator.upload(b"lighthouse two\n", "b.md")
    gone = await ledger.operator.submit(other.document_id)
    claim = await ledger.queue.claim(gone.task_id, "w1")
    assert claim is not None
    await ledger.queue.fail(claim, ErrorCode.PARSE_ERROR, "corrupt")
    await ledger.versions.delete(other.document_id, actor="pat")
    failed = parse_filter("status:failed")
    dry = await ledger.operator.bulk_retry(failed, dry_run=True)
    assert (dry.matched, dry.eligible) == (2, 1)
    assert dry.ineligible == {"failed: its document no longer exists; upload it again": 1}
    done = await ledger.operator.bulk_retry(failed)
    assert (done.done, done.refused) == (1, 0)


# ------------------------------------------ 5b. cancel and retry name the document


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


# ------------------------------------------- 9. search limits and empty queries


async def test_a_query_without_words_and_a_limit_past_the_maximum_are_bad_input(
    ledger: Ledger,
) -> None:
    await published_text(ledger, ACCENTED)
    for query in ("", "   ", "!!!", "(((", '"'):
        with pytest.raises(BadInput, match=NO_WORDS):
            await ledger.reads.search(query)
    with pytest.raises(BadInput, match=f"from 1 to {SEARCH_LIMIT_MAX} hits"):
        await ledger.reads.search("lundi", limit=SEARCH_LIMIT_MAX + 1)
    assert len(await ledger.reads.search("lundi", limit=SEARCH_LIMIT_MAX)) == 1


def test_the_cli_search_refuses_what_the_ledger_would_not_do(cli: Cli, tmp_path: Path) -> None:
    published_v1(cli, tmp_path)
    for query in ("", "!!!", "((("):
        assert refused(cli, EXIT_BAD_INPUT, "search", query) == NO_WORDS
    message = refused(cli, EXIT_BAD_INPUT, "search", "reaper", "--limit", "5000")
    assert "--limit" in message and f"from 1 to {SEARCH_LIMIT_MAX}" in message
    assert len(value(cli, "search", "reaper", "--limit", str(SEARCH_LIMIT_MAX))) == 1


# ------------------------------ 10. the review compares with what publishing retires


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


@pytest.mark.postgres
async def test_a_postgres_ledger_upgraded_past_0009_folds_what_it_held(
    pg_url: str, tmp_path: Path
) -> None:
    # Chunks written at schema 0008 (a 'simple' tsvector) are indexed again by the
    # upgrade: the column is generated, so adding it back computes every row.
    from alembic import command
    from alembic.config import Config
    from sqlalchemy.engine import Connection

    from core.ledger.migrate import MIGRATIONS_DIR

    def to(revision: str, conn: Connection) -> None:
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)

    settings = Settings(db_url=pg_url, store_root=tmp_path / "objects")
    ledger = await Ledger.open(settings)
    try:
        await published_text(ledger, ACCENTED)
        await ledger.transactions.write(lambda conn: to("0008", conn))
    finally:
        await ledger.close()
    ledger = await Ledger.open(settings)  # upgrades again
    try:
        (hit,) = await ledger.reads.search("ecole")
        assert "**ÉCOLE**" in hit.snippet
    finally:
        await ledger.close()
