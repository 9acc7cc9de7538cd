"""The two state machines under random sequences of every ledger operation.

A hypothesis :class:`RuleBasedStateMachine` drives uploads, submits, claims, worker
writes (by the holder, with stale claims and by strangers), operator actions, the
reaper and publishing against a real SQLite file, and after every step checks what
must always hold:

* the document's status is the one ``PAIRED_DOCUMENT_STATUS`` pairs with its current
  task (``published`` also pairs with ``succeeded``); a document's earlier tasks are
  all cancelled, since only a cancel returns a document to draft for a new submit;
* a document has at most one task in an active status;
* ``attempt`` and ``revision`` never decrease, and every task change gets a revision
  above everything a reader could already have seen;
* chunks are exactly what the last successful ``finish`` wrote, only for a
  document whose current task wrote them, and never for a draft;
* each task's event history chains ``None → queued → … → its current status``.

Refused operator actions raise :class:`Conflict` and writes with a stale or forged
claim answer False/None; either way the ledger must be byte-for-byte unchanged.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Callable, Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    rule,
)
from sqlalchemy import text

from core import (
    ERRORS,
    PAIRED_DOCUMENT_STATUS,
    ChunkRecord,
    Claim,
    Conflict,
    DocumentStatus,
    DocumentView,
    ErrorCode,
    Ledger,
    Settings,
    Stage,
    TaskStatus,
    TaskView,
    sqlite_url,
)
from tests.conftest import FakeClock

T = TypeVar("T")

MAX_ATTEMPTS = 2  # small, so that exhausted attempts happen within 30 steps
LEASE_S = 30.0  # seconds
BACKOFF_BASE_S = 2.0  # seconds
# Below BACKOFF_BASE_S * 2: the cap holds from the second attempt on, so the capped
# rule is checked within MAX_ATTEMPTS, not only at attempts no example reaches.
BACKOFF_MAX_S = 3.0  # seconds
ERROR_DETAIL_MAX = 500  # characters the ledger keeps of a failure's detail
WORKERS = st.sampled_from(["worker-a", "worker-b"])
STRANGER = "stranger"  # a worker id no claim is ever made with
ACTIVE = frozenset({TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.RETRY_WAIT})
CLOCK_STEPS = st.sampled_from([0.0, 1.0, 5.0, LEASE_S + 1.0, 300.0])  # seconds
TRANSIENT = [code for code, info in ERRORS.items() if info.transient]
SNAPSHOT_TABLES = ("documents", "ingestion_tasks", "chunks", "task_events", "outbox")


class LedgerMachine(RuleBasedStateMachine):
    """One fresh ledger file per example, driven from one event loop."""

    documents = Bundle("documents")
    tasks = Bundle("tasks")
    claims = Bundle("claims")
    # Where a step just led, so that the next steps (publish, retry) often find
    # something they can act on instead of being refused.
    reviewable = Bundle("reviewable")
    failed = Bundle("failed")

    def __init__(self) -> None:
        super().__init__()
        # Function-scoped fixtures are not reset between hypothesis examples, so each
        # example makes (and teardown removes) its own folder and event loop.
        self.loop = asyncio.new_event_loop()
        self.folder = Path(tempfile.mkdtemp(prefix="ingestdesk-property-"))
        self.clock = FakeClock()
        self.settings = Settings(
            db_url=sqlite_url(self.folder / "ledger.db"),
            store_root=self.folder / "objects",
            max_attempts=MAX_ATTEMPTS,
            lease_s=LEASE_S,
            backoff_base_s=BACKOFF_BASE_S,
            backoff_max_s=BACKOFF_MAX_S,
        )
        # Ids decide claim_next's tie-break order, so they must repeat when hypothesis
        # replays an example; random uuids would make shrinking flaky.
        id_source = random.Random(0)
        try:
            self.ledger = self.run(
                Ledger.open(
                    self.settings,
                    clock=self.clock,
                    ids=lambda: f"{id_source.getrandbits(128):032x}",
                )
            )
        except BaseException:
            self._dispose()
            raise
        self.uploads = 0
        self.highest_attempt: dict[str, int] = {}
        self.seen_rows: dict[str, tuple[Any, ...]] = {}
        self.seen_revision = 0
        # What the chunks table must hold per document, and which tasks wrote chunks.
        self.expected_chunks: dict[str, list[str]] = defaultdict(list)
        self.indexed_by: dict[str, str] = {}  # document id → task id that wrote its chunks

    def teardown(self) -> None:
        try:
            self.run(self.ledger.close())
        finally:
            self._dispose()

    def _dispose(self) -> None:
        try:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
        finally:
            self.loop.close()
            shutil.rmtree(self.folder, ignore_errors=True)

    # ------------------------------------------------------------------ helpers

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def task(self, task_id: str) -> TaskView:
        return self.run(self.ledger.reads.get_task(task_id))

    def document(self, document_id: str) -> DocumentView:
        return self.run(self.ledger.reads.get_document(document_id))

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """Raw rows, read in one transaction of the ledger's own runner."""
        return self.run(
            self.ledger.transactions.read(
                lambda conn: [tuple(r) for r in conn.execute(text(sql)).all()]
            )
        )

    def snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        return {table: self.rows(f"SELECT * FROM {table} ORDER BY 1") for table in SNAPSHOT_TABLES}

    def refused(self, action: Callable[[], Coroutine[Any, Any, Any]], match: str) -> None:
        """An operator action the rules refuse: Conflict, and nothing written."""
        event("refused operator action")
        before = self.snapshot()
        with pytest.raises(Conflict, match=match):
            self.run(action())
        assert self.snapshot() == before

    def ignored(self, action: Callable[[], Coroutine[Any, Any, Any]], answer: Any) -> None:
        """A write by a worker that does not hold the task: a quiet no, nothing written."""
        event("ignored worker write")
        before = self.snapshot()
        assert self.run(action()) is answer
        assert self.snapshot() == before

    def holds(self, claim: Claim) -> bool:
        """The fence, stated independently of the ledger's SQL."""
        task = self.task(claim.task_id)
        return (
            task.status is TaskStatus.RUNNING
            and task.attempt == claim.attempt
            and task.worker_id == claim.worker_id
        )

    def chunk_texts(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for document_id, chunk in self.rows(
            "SELECT document_id, text FROM chunks ORDER BY document_id, ordinal"
        ):
            out[document_id].append(chunk)
        return out

    def event_chains(self) -> dict[str, list[tuple[str | None, str]]]:
        out: dict[str, list[tuple[str | None, str]]] = defaultdict(list)
        for task_id, source, target in self.rows(
            "SELECT task_id, from_status, to_status FROM task_events ORDER BY id"
        ):
            out[task_id].append((source, target))
        return out

    # --------------------------------------------------------- documents, submit

    @rule(target=documents, name=st.sampled_from(["notes.txt", "runbook.md", "report.text"]))
    def upload(self, name: str) -> str:
        self.uploads += 1
        doc = self.run(self.ledger.operator.upload(f"document {self.uploads}\n".encode(), name))
        assert doc.status is DocumentStatus.DRAFT
        return doc.document_id

    def _submit(self, document_id: str) -> Any:
        doc = self.document(document_id)
        if doc.status is not DocumentStatus.DRAFT:
            self.refused(lambda: self.ledger.operator.submit(document_id), "only draft documents")
            return multiple()
        task = self.run(self.ledger.operator.submit(document_id, actor="operator"))
        event("submit applied")
        assert (task.status, task.stage, task.attempt) == (TaskStatus.QUEUED, Stage.DOWNLOAD, 0)
        assert task.document_id == document_id
        after = self.document(document_id)
        assert after.status is DocumentStatus.PROCESSING
        assert after.version == doc.version + 1
        return task.task_id

    @initialize(target=tasks, n=st.integers(1, 3))
    def some_queued_tasks(self, n: int) -> Any:
        return multiple(*(self._submit(self.upload("first.txt")) for _ in range(n)))

    @rule(target=tasks, document_id=documents)
    def submit(self, document_id: str) -> Any:
        return self._submit(document_id)

    @rule(target=tasks)
    def upload_and_submit(self) -> Any:
        return self._submit(self.upload("queued.txt"))

    @rule(target=tasks, task_id=tasks)
    def submit_again(self, task_id: str) -> Any:
        """Submit a task's document again: allowed only once that task was cancelled."""
        return self._submit(self.task(task_id).document_id)

    # ------------------------------------------------------------------ claims

    @rule(target=claims, task_id=tasks, worker=WORKERS)
    def claim(self, task_id: str, worker: str) -> Any:
        before = self.task(task_id)
        now = self.clock()
        due = before.next_attempt_at is not None and before.next_attempt_at <= now
        if not (
            before.status is TaskStatus.QUEUED or (before.status is TaskStatus.RETRY_WAIT and due)
        ):
            self.ignored(lambda: self.ledger.queue.claim(task_id, worker), None)
            return multiple()
        claim = self.run(self.ledger.queue.claim(task_id, worker))
        assert claim is not None
        event(f"claim of a {before.status.value} task applied")
        self._check_claimed(claim, before, worker)
        return claim

    @rule(target=claims, worker=WORKERS, limit=st.integers(1, 3))
    def claim_next(self, worker: str, limit: int) -> Any:
        now = self.clock()
        before = {t.task_id: t for t in self.run(self.ledger.reads.list_tasks(limit=None))}
        due = sorted(
            (
                t
                for t in before.values()
                if t.status in (TaskStatus.QUEUED, TaskStatus.RETRY_WAIT)
                and t.next_attempt_at is not None
                and t.next_attempt_at <= now
            ),
            key=lambda t: (t.next_attempt_at, t.task_id),
        )
        before_rows = self.snapshot()
        claims = self.run(self.ledger.queue.claim_next(worker, limit=limit))
        if not due:
            assert claims == []
            assert self.snapshot() == before_rows
            return multiple()
        assert sorted(c.task_id for c in claims) == sorted(t.task_id for t in due[:limit])
        event(f"claim_next took {len(claims)}")
        for claim in claims:
            self._check_claimed(claim, before[claim.task_id], worker)
        return multiple(*claims)

    def _check_claimed(self, claim: Claim, before: TaskView, worker: str) -> None:
        assert claim.worker_id == worker
        assert claim.document_id == before.document_id
        assert claim.attempt == before.attempt + 1
        assert claim.lease_expires_at == self.clock() + LEASE_S
        after = self.task(claim.task_id)
        assert (after.status, after.stage, after.worker_id) == (
            TaskStatus.RUNNING,
            Stage.DOWNLOAD,
            worker,
        )
        assert (after.attempt, after.error_code, after.next_attempt_at) == (
            claim.attempt,
            None,
            None,
        )

    # ----------------------------------------------------- worker-side writes

    @rule(claim=claims)
    def heartbeat(self, claim: Claim) -> None:
        if not self.holds(claim):
            self.ignored(lambda: self.ledger.queue.heartbeat(claim), False)
            return
        assert self.run(self.ledger.queue.heartbeat(claim)) is True
        assert self.task(claim.task_id).lease_expires_at == self.clock() + LEASE_S

    @rule(
        claim=claims,
        stage=st.sampled_from(Stage),
        completed=st.integers(0, 5),
        total=st.integers(1, 5),
    )
    def report_progress(self, claim: Claim, stage: Stage, completed: int, total: int) -> None:
        if not self.holds(claim):
            self.ignored(
                lambda: self.ledger.queue.report_progress(claim, stage, completed, total), False
            )
            return
        assert self.run(self.ledger.queue.report_progress(claim, stage, completed, total)) is True
        after = self.task(claim.task_id)
        assert (after.status, after.stage, after.completed, after.total) == (
            TaskStatus.RUNNING,
            stage,
            completed,
            total,
        )
        assert after.lease_expires_at == self.clock() + LEASE_S
        assert after.progress_at == self.clock()

    @rule(claim=claims, forged=st.sampled_from(["worker", "task"]), other=tasks)
    def write_with_a_forged_claim(self, claim: Claim, forged: str, other: str) -> None:
        """A stranger's claim is never heard, whatever it writes."""
        if forged == "worker":
            fake = replace(claim, worker_id=STRANGER)
        else:
            fake = replace(claim, task_id=other, worker_id=STRANGER)
        self.ignored(lambda: self.ledger.queue.report_progress(fake, Stage.PARSE, 1, 2), False)
        self.ignored(lambda: self.ledger.queue.heartbeat(fake), False)
        self.ignored(lambda: self.ledger.queue.fail(fake, ErrorCode.INTERNAL_ERROR), None)
        self.ignored(
            lambda: self.ledger.queue.finish(fake, [ChunkRecord(0, "forged", None, 0, 6)]),
            False,
        )

    # finish, fail and hand_back use their claim up (a worker does not write after
    # them); claims made stale by cancel or the reaper stay around for the other rules.
    @rule(target=reviewable, claim=consumes(claims), n=st.integers(0, 3))
    def finish(self, claim: Claim, n: int) -> Any:
        """Index and finalize in one step: exactly these chunks, task succeeded,
        document review_pending; from anyone but the holder, nothing at all."""
        records = [
            ChunkRecord(i, f"chunk {i} of attempt {claim.attempt}", None, 10 * i, 10 * i + 9)
            for i in range(n)
        ]
        if not self.holds(claim):
            self.ignored(lambda: self.ledger.queue.finish(claim, records), False)
            return multiple()
        assert self.run(self.ledger.queue.finish(claim, records)) is True
        event("finish applied")
        after = self.task(claim.task_id)
        assert (after.status, after.stage, after.completed, after.total) == (
            TaskStatus.SUCCEEDED,
            Stage.FINALIZING,
            n,
            n,
        )
        assert after.lease_expires_at is None
        assert self.document(claim.document_id).status is DocumentStatus.REVIEW_PENDING
        self.expected_chunks[claim.document_id] = [r.text for r in records]
        self.indexed_by[claim.document_id] = claim.task_id
        return claim.document_id

    @rule(
        target=failed,
        claim=consumes(claims),
        code=st.sampled_from(TRANSIENT) | st.sampled_from(ErrorCode),
        detail=st.sampled_from([None, "", "ValueError", "x" * (ERROR_DETAIL_MAX + 20)]),
    )
    def fail(self, claim: Claim, code: ErrorCode, detail: str | None) -> Any:
        if not self.holds(claim):
            self.ignored(lambda: self.ledger.queue.fail(claim, code, detail), None)
            return multiple()
        before = self.task(claim.task_id)
        now = self.clock()
        answer = self.run(self.ledger.queue.fail(claim, code, detail))
        assert answer is not None
        event(f"fail applied: {answer.status.value}")
        after = self.task(claim.task_id)
        assert answer.status is after.status
        assert (after.error_code, after.error_detail) == (
            code,
            (detail or "")[:ERROR_DETAIL_MAX] or None,
        )
        assert (after.stage, after.attempt, after.lease_expires_at) == (
            before.stage,
            claim.attempt,
            None,
        )
        doc = self.document(claim.document_id)
        # An attempt that did not finish leaves no chunks behind.
        self.expected_chunks[claim.document_id] = []
        if ERRORS[code].transient and claim.attempt < claim.max_attempts:
            # Exponential in the attempt, capped at backoff_max_s, with equal jitter:
            # between half the ceiling and the ceiling (the settings the ledger runs on).
            ceiling = min(
                self.settings.backoff_max_s,
                self.settings.backoff_base_s * 2 ** max(claim.attempt - 1, 0),
            )
            event("retry backoff capped" if ceiling == self.settings.backoff_max_s else "retry")
            assert after.status is TaskStatus.RETRY_WAIT
            assert after.next_attempt_at is not None
            assert now + ceiling / 2 <= after.next_attempt_at <= now + ceiling
            assert doc.status is DocumentStatus.PROCESSING
            return multiple()
        assert after.status is TaskStatus.FAILED
        assert doc.status is DocumentStatus.FAILED
        return claim.task_id

    @rule(target=reviewable, task_id=tasks, worker=WORKERS, n=st.integers(0, 3))
    def worker_runs_the_pipeline(self, task_id: str, worker: str, n: int) -> Any:
        """One whole attempt as the worker makes it: claim, progress, chunks, complete."""
        claimed = self.claim(task_id, worker)
        if not isinstance(claimed, Claim):
            return multiple()
        self.report_progress(claimed, Stage.PARSE, 1, 1)
        self.report_progress(claimed, Stage.EMBEDDING, n, n)
        return self.finish(claimed, n)

    @rule(target=claims, task_id=tasks, worker=WORKERS, n=st.integers(1, 3))
    def cancel_during_indexing(self, task_id: str, worker: str, n: int) -> Any:
        """The operator cancels a run that reached indexing: the draft keeps no
        chunks, and the worker's claim (returned, now stale) can write nothing more."""
        claimed = self.claim(task_id, worker)
        if not isinstance(claimed, Claim):
            return multiple()
        self.report_progress(claimed, Stage.INDEXING, n, n)
        self.cancel(task_id)
        assert self.chunk_texts().get(claimed.document_id, []) == []
        records = [ChunkRecord(i, f"late chunk {i}", None, 0, 1) for i in range(n)]
        self.ignored(lambda: self.ledger.queue.finish(claimed, records), False)
        return claimed

    @rule(target=claims, task_id=tasks, worker=WORKERS)
    def worker_vanishes(self, task_id: str, worker: str) -> Any:
        """A worker claims and dies: once its lease runs out the reaper takes the task
        back, and the dead worker's claim (returned, now stale) is never heard again."""
        claimed = self.claim(task_id, worker)
        if not isinstance(claimed, Claim):
            return multiple()
        self.reap(LEASE_S + 1.0)
        assert not self.holds(claimed)
        return claimed

    @rule(target=failed, task_id=tasks, worker=WORKERS)
    def flaky_provider_until_attempts_run_out(self, task_id: str, worker: str) -> Any:
        """Claim and fail transiently again and again: retry_wait while attempts remain,
        then failed. (A path too long for random steps to find often.)"""
        # Hand-backs and manual retries widen a task's budget, so count from the row.
        start = self.task(task_id)
        budget = max(start.max_attempts - start.attempt, 0) + 1
        for _ in range(budget):
            task = self.task(task_id)
            if task.status is TaskStatus.RETRY_WAIT and task.next_attempt_at is not None:
                self.clock.advance(max(0.0, task.next_attempt_at - self.clock()))
            claimed = self.claim(task_id, worker)
            if not isinstance(claimed, Claim):
                return multiple()
            self.fail(claimed, ErrorCode.PROVIDER_UNAVAILABLE, "ConnectError")
            if self.task(task_id).status is TaskStatus.FAILED:
                event("attempts ran out")
                return task_id
        raise AssertionError(f"task {task_id} was still retrying after {budget} attempts")

    @rule(claim=consumes(claims))
    def hand_back(self, claim: Claim) -> None:
        if not self.holds(claim):
            self.ignored(lambda: self.ledger.queue.hand_back(claim), False)
            return
        assert self.run(self.ledger.queue.hand_back(claim)) is True
        event("hand_back applied")
        after = self.task(claim.task_id)
        assert (after.status, after.next_attempt_at) == (TaskStatus.RETRY_WAIT, self.clock())
        assert after.attempt == claim.attempt
        # A hand-back is not a failure: it gives its attempt back to the budget.
        assert after.max_attempts == claim.max_attempts + 1

    # -------------------------------------------------------- operator actions

    @rule(task_id=tasks)
    def cancel(self, task_id: str) -> None:
        before = self.task(task_id)
        if before.status not in ACTIVE:
            self.refused(
                lambda: self.ledger.operator.cancel(task_id, actor="operator"),
                f"is {before.status.value}; only",
            )
            return
        answer = self.run(
            self.ledger.operator.cancel(task_id, actor="operator", reason="changed my mind")
        )
        event(f"cancel of a {before.status.value} task applied")
        after = self.task(task_id)
        assert answer.status is after.status is TaskStatus.CANCELLED
        assert after.attempt == before.attempt
        assert (after.lease_expires_at, after.next_attempt_at) == (None, None)
        assert self.document(before.document_id).status is DocumentStatus.DRAFT
        self.expected_chunks[before.document_id] = []

    @rule(task_id=failed)
    def retry_failed(self, task_id: str) -> None:
        self.retry(task_id)

    @rule(task_id=tasks)
    def retry(self, task_id: str) -> None:
        before = self.task(task_id)
        doc = self.document(before.document_id)
        if before.status is TaskStatus.CANCELLED:
            self.refused(lambda: self.ledger.operator.retry(task_id), "submit the document again")
            return
        if before.status is not TaskStatus.FAILED or doc.status is not DocumentStatus.FAILED:
            self.refused(
                lambda: self.ledger.operator.retry(task_id), "cannot be retried|only failed"
            )
            return
        self.run(self.ledger.operator.retry(task_id, actor="operator"))
        event("retry applied")
        after = self.task(task_id)
        assert (after.status, after.stage, after.completed, after.total) == (
            TaskStatus.QUEUED,
            Stage.DOWNLOAD,
            0,
            1,
        )
        assert (after.error_code, after.error_detail, after.worker_id) == (None, None, None)
        assert after.attempt == before.attempt
        # A human retry restarts the automatic retry budget from here.
        assert after.max_attempts == before.attempt + MAX_ATTEMPTS
        assert after.next_attempt_at == self.clock()
        assert self.document(before.document_id).status is DocumentStatus.PROCESSING

    def _publish(self, document_id: str) -> None:
        doc = self.document(document_id)
        if doc.status is not DocumentStatus.REVIEW_PENDING:
            self.refused(lambda: self.ledger.versions.publish(document_id), "waiting for review")
            return
        published = self.run(self.ledger.versions.publish(document_id, actor="operator"))
        event("publish applied")
        assert published.status is DocumentStatus.PUBLISHED
        assert published.version == doc.version + 1

    @rule(document_id=reviewable)
    def publish_reviewable(self, document_id: str) -> None:
        self._publish(document_id)

    @rule(document_id=documents)
    def publish_document(self, document_id: str) -> None:
        self._publish(document_id)

    # ------------------------------------------------------------ time, reaper

    @rule(seconds=CLOCK_STEPS)
    def advance_clock(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(seconds=CLOCK_STEPS)
    def reap(self, seconds: float) -> None:
        self.clock.advance(seconds)
        now = self.clock()
        before = {t.task_id: t for t in self.run(self.ledger.reads.list_tasks(limit=None))}
        expired = {
            t.task_id: TaskStatus.FAILED if t.attempt >= t.max_attempts else TaskStatus.RETRY_WAIT
            for t in before.values()
            if t.status is TaskStatus.RUNNING
            and t.lease_expires_at is not None
            and t.lease_expires_at < now
        }
        if not expired:
            self.ignored(lambda: self._reap_ids(), None)
            return
        reaped = self.run(self.ledger.queue.reap())
        event(f"reap took {len(reaped)}")
        assert {r.task_id: r.status for r in reaped} == expired
        for task_id, status in expired.items():
            after = self.task(task_id)
            assert (after.status, after.error_code) == (status, ErrorCode.LEASE_EXPIRED)
            assert after.attempt == before[task_id].attempt
            assert after.lease_expires_at is None
            self.expected_chunks[after.document_id] = []  # the unfinished attempt's go
            doc = self.document(after.document_id)
            if status is TaskStatus.FAILED:
                assert after.next_attempt_at is None
                assert doc.status is DocumentStatus.FAILED
            else:
                assert after.next_attempt_at == now
                assert doc.status is DocumentStatus.PROCESSING

    async def _reap_ids(self) -> None:
        assert await self.ledger.queue.reap() == []

    # --------------------------------------------------------------- invariants

    @invariant()
    def documents_are_paired_with_their_current_task(self) -> None:
        tasks = self.run(self.ledger.reads.list_tasks(limit=None))
        docs = self.run(self.ledger.reads.list_documents(limit=None))
        by_document: dict[str, list[TaskView]] = defaultdict(list)
        for task in tasks:
            by_document[task.document_id].append(task)
        assert set(by_document) <= {d.document_id for d in docs}
        for doc in docs:
            mine = by_document[doc.document_id]
            active = [t for t in mine if t.status in ACTIVE]
            assert len(active) <= 1, (doc, active)
            current = [t for t in mine if t.status is not TaskStatus.CANCELLED]
            assert len(current) <= 1, (doc, current)
            if not current:
                # Never submitted, or every run cancelled: (cancelled, draft) is the pair.
                assert doc.status is PAIRED_DOCUMENT_STATUS[TaskStatus.CANCELLED], (doc, mine)
                continue
            (task,) = current
            allowed = {PAIRED_DOCUMENT_STATUS[task.status]}
            if task.status is TaskStatus.SUCCEEDED:
                allowed.add(DocumentStatus.PUBLISHED)
            assert doc.status in allowed, (task.status, doc.status)

    @invariant()
    def task_fields_match_their_status(self) -> None:
        for task in self.run(self.ledger.reads.list_tasks(limit=None)):
            running = task.status is TaskStatus.RUNNING
            assert (task.lease_expires_at is not None) == running, task
            if running:
                assert task.worker_id is not None
                assert task.attempt >= 1
            if task.status in (TaskStatus.QUEUED, TaskStatus.RETRY_WAIT):
                assert task.next_attempt_at is not None, task
            if task.status is TaskStatus.QUEUED:
                assert task.error_code is None, task
            if task.status is TaskStatus.FAILED:
                assert task.error_code is not None, task

    @invariant()
    def attempts_and_revisions_never_go_back(self) -> None:
        tasks = self.run(self.ledger.reads.list_tasks(limit=None))
        top = self.seen_revision
        for task in tasks:
            assert task.attempt >= self.highest_attempt.get(task.task_id, 0), task
            self.highest_attempt[task.task_id] = task.attempt
            row = (task.status, task.stage, task.completed, task.total, task.attempt)
            if self.seen_rows.get(task.task_id) != row:
                # A reader that has seen revision `top` must be shown this change.
                assert task.revision > top, (task, top)
            self.seen_rows[task.task_id] = row
            self.seen_revision = max(self.seen_revision, task.revision)
        assert self.run(self.ledger.reads.revision()) == self.seen_revision

    @invariant()
    def chunks_belong_to_indexed_documents(self) -> None:
        actual = self.chunk_texts()
        docs = {d.document_id: d for d in self.run(self.ledger.reads.list_documents(limit=None))}
        for document_id, texts in actual.items():
            assert texts == self.expected_chunks[document_id], document_id
            assert docs[document_id].status is not DocumentStatus.DRAFT
            writer = self.task(self.indexed_by[document_id])
            assert writer.document_id == document_id
            assert writer.status is not TaskStatus.CANCELLED
        for document_id, texts in self.expected_chunks.items():
            assert actual.get(document_id, []) == texts, document_id

    @invariant()
    def histories_chain_to_the_current_status(self) -> None:
        chains = self.event_chains()
        tasks = self.run(self.ledger.reads.list_tasks(limit=None))
        assert set(chains) == {t.task_id for t in tasks}
        for task in tasks:
            chain = chains[task.task_id]
            assert chain[0] == (None, TaskStatus.QUEUED.value), chain
            for (_, reached), (source, _) in itertools.pairwise(chain):
                assert source == reached, chain
            assert chain[-1][1] == task.status.value, (chain, task.status)


LedgerMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.mark.slow
class TestLedgerStateMachine(LedgerMachine.TestCase):  # type: ignore[misc,valid-type]
    pass
