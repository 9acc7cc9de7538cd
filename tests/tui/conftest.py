"""Fixtures for the dashboard tests: a real SQLite ledger under tmp_path, a frozen
clock, deterministic ids, and a ledger seeded through the Ledger API (claims,
progress, failures, completions written directly; no real parsing)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from textual.message import Message
from textual.notifications import Notify
from textual.pilot import Pilot

from core import ChunkRecord, ErrorCode, Ledger, Settings, Stage, TaskView, sqlite_url
from core.states import RequestState
from tests.conftest import FakeClock

APP_SIZE = (160, 50)  # columns, rows of every test terminal
# Seconds a test waits for the app to show something: generous, since a wait ends as
# soon as its condition holds and a loaded 2-core machine can take many polls.
WAIT_S = 60.0


class CountingIds:
    """Deterministic, well-spread ids: distinct 8-character prefixes, like uuid4."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return hashlib.sha256(f"ingestdesk-test-{self.n}".encode()).hexdigest()[:32]


@dataclass
class Seeded:
    """A seeded ledger and the ids of its tasks by name."""

    ledger: Ledger
    clock: FakeClock
    tasks: dict[str, str] = field(default_factory=dict)

    def id(self, name: str) -> str:
        return self.tasks[name]


def note(name: str) -> bytes:
    return (
        f"# {name}\n\nQuarterly ingestion notes for {name}; the ledger keeps the audit.\n".encode()
    )


async def submit(seeded: Seeded, name: str, data: bytes | None = None) -> TaskView:
    document = await seeded.ledger.operator.upload(data or note(name), name)
    task = await seeded.ledger.operator.submit(document.document_id, actor="alice")
    seeded.tasks[name] = task.task_id
    seeded.clock.advance(7)
    return task


async def seed_states(seeded: Seeded) -> Seeded:
    """One task in each interesting state, created a few seconds apart."""
    ledger, clock = seeded.ledger, seeded.clock

    done = await submit(seeded, "board-minutes.md")
    claim = await ledger.queue.claim(done.task_id, "w1")
    assert claim is not None
    await ledger.queue.report_progress(claim, Stage.PARSE, 1, 1)
    chunks = [
        ChunkRecord(0, "The board approved the ingestion budget for Q3.", None, 0, 47),
        ChunkRecord(1, "Operators will triage failures every morning.", None, 48, 93),
        ChunkRecord(2, "The ledger keeps the audit trail of every action.", None, 94, 143),
    ]
    await ledger.queue.finish(claim, chunks)

    for name, code, detail in (
        ("scanned-receipt.md", ErrorCode.EMPTY_DOCUMENT, "no extractable text"),
        ("corrupt-export.md", ErrorCode.PARSE_ERROR, "not a valid PDF"),
        ("vendor-contract.md", ErrorCode.PARSE_ERROR, "xref table broken"),
    ):
        task = await submit(seeded, name)
        claim = await ledger.queue.claim(task.task_id, "w2")
        assert claim is not None
        await ledger.queue.report_progress(claim, Stage.PARSE, 0, 4)
        await ledger.queue.fail(claim, code, detail)

    waiting = await submit(seeded, "provider-outage.md")
    claim = await ledger.queue.claim(waiting.task_id, "w1")
    assert claim is not None
    await ledger.queue.report_progress(claim, Stage.EMBEDDING, 3, 12)
    await ledger.queue.fail(claim, ErrorCode.PROVIDER_UNAVAILABLE, "ProviderUnavailable")

    gone = await submit(seeded, "wrong-file.md")
    await ledger.operator.cancel(gone.task_id, actor="alice", reason="uploaded the wrong file")

    stalled = await submit(seeded, "huge-scan.md")
    claim = await ledger.queue.claim(stalled.task_id, "w3")
    assert claim is not None
    await ledger.queue.report_progress(claim, Stage.PARSE, 2, 60, lease_s=3600)
    clock.advance(120)  # no progress for two minutes: stalled

    running = await submit(seeded, "annual-report.md")
    claim = await ledger.queue.claim(running.task_id, "w1", lease_s=3600)
    assert claim is not None
    await ledger.queue.report_progress(claim, Stage.EMBEDDING, 40, 120, lease_s=3600)

    await submit(seeded, "queued-handbook.md")
    await submit(seeded, "queued-memo.md")
    return seeded


LOST_REPLY = "sent; the reply was lost"
NO_RECORD = "looked up: the provider has no record of it; resending needs a person"


def request_key_for(name: str, n: int) -> str:
    """A request key as the workers make them (64 hex), distinct per task and call."""
    return hashlib.sha256(f"{name}/{n}".encode()).hexdigest()


async def seed_provider_requests(
    seeded: Seeded,
    name: str,
    states: Sequence[RequestState],
    *,
    fail_with: ErrorCode | None = None,
) -> tuple[str, list[str]]:
    """A task of its own that sent one provider request per entry of ``states`` and
    left each there, through the ledger's roles as a worker and reconcile would: the
    task is claimed with ``claim_next`` (so the ledger must have nothing else
    claimable), each request's intent recorded, then settled; with ``fail_with``
    the attempt then fails with that code. Returns the task id and request keys."""
    ledger = seeded.ledger
    task = await submit(seeded, name)
    (claim,) = await ledger.queue.claim_next("w9")
    assert claim.task_id == task.task_id, "something else was claimable"
    await ledger.queue.report_progress(claim, Stage.EMBEDDING, 0, len(states))
    keys: list[str] = []
    for n, state in enumerate(states):
        key = request_key_for(name, n)
        answer = await ledger.providers.intend(
            claim, key, provider="demo-provider", model="m1", endpoint="http://p", texts=4
        )
        assert answer.intent.value == "send"
        keys.append(key)
        seeded.clock.advance(1)
        if state is RequestState.UNKNOWN:
            await ledger.providers.settle(key, RequestState.UNKNOWN, detail=LOST_REPLY)
        else:
            detail = NO_RECORD if state is RequestState.NEEDS_REVIEW else "reply verified"
            await ledger.providers.settle(key, state, detail=detail)
    if fail_with is not None:
        await ledger.queue.fail(claim, fail_with, "provider request needs review")
    seeded.clock.advance(30)
    return task.task_id, keys


# Two documents, each with a published v1 and a v2 waiting for review: one line per
# chunk, so the review desk's diff is the lines below that changed.
VERSIONED: dict[str, tuple[list[str], list[str]]] = {
    "staff-handbook.md": (
        [
            "Staff handbook",
            "Working hours are nine to five.",
            "Travel must be approved by a manager.",
        ],
        [
            "Staff handbook",
            "Working hours are flexible between seven and seven.",
            "Travel must be approved by a manager.",
            "Remote work is allowed two days a week.",
        ],
    ),
    "safety-policy.md": (
        ["Safety policy", "Helmets are required on site.", "Visitors sign in at the gate."],
        [
            "Safety policy",
            "Helmets and boots are required on site.",
            "Report every incident within a day.",
        ],
    ),
}


def line_chunks(lines: Sequence[str], *, per_page: int = 2) -> list[ChunkRecord]:
    """One chunk per line, ``per_page`` lines to a page, at their offsets in the text."""
    chunks, at = [], 0
    for n, line in enumerate(lines):
        chunks.append(ChunkRecord(n, line, 1 + n // per_page, at, at + len(line)))
        at += len(line) + 1
    return chunks


async def finish_version(seeded: Seeded, document_id: str, lines: Sequence[str]) -> None:
    """Submit a version and finish its task with ``lines`` as chunks, as a worker
    would: the version is then waiting for review."""
    ledger = seeded.ledger
    task = await ledger.operator.submit(document_id, actor="alice")
    claim = await ledger.queue.claim(task.task_id, "w1")
    assert claim is not None
    assert await ledger.queue.finish(claim, line_chunks(lines))


async def seed_versions(seeded: Seeded) -> dict[str, tuple[str, str]]:
    """The documents of VERSIONED: v1 published, v2 waiting for review (the first
    listed has waited longest). Returns (v1 id, v2 id) by name."""
    ledger, clock = seeded.ledger, seeded.clock
    ids: dict[str, tuple[str, str]] = {}
    for name, (old, _) in VERSIONED.items():
        v1 = await ledger.operator.upload("\n".join(old).encode(), name)
        await finish_version(seeded, v1.document_id, old)
        await ledger.versions.publish(v1.document_id, actor="alice")
        clock.advance(5)
    for name, (_, new) in VERSIONED.items():
        v1_id = next(
            d.document_id for d in await ledger.reads.list_documents() if d.filename == name
        )
        v2 = await ledger.versions.replace(v1_id, "\n".join(new).encode(), name, actor="alice")
        await finish_version(seeded, v2.document_id, new)
        ids[name] = (v1_id, v2.document_id)
        clock.advance(60)
    return ids


def settings_for(tmp_path: Path) -> Settings:
    return Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "objects")


async def open_seeded(tmp_path: Path, *, states: bool = True) -> Seeded:
    clock = FakeClock()
    ledger = await Ledger.open(settings_for(tmp_path), clock=clock, ids=CountingIds())
    seeded = Seeded(ledger, clock)
    if states:
        await seed_states(seeded)
    return seeded


@pytest.fixture
async def seeded(tmp_path: Path) -> AsyncIterator[Seeded]:
    """A ledger with one task in each state, open on the test's event loop."""
    result = await open_seeded(tmp_path)
    try:
        yield result
    finally:
        await result.ledger.close()


@pytest.fixture
async def empty(tmp_path: Path) -> AsyncIterator[Seeded]:
    """An empty ledger with a frozen clock."""
    result = await open_seeded(tmp_path, states=False)
    try:
        yield result
    finally:
        await result.ledger.close()


@pytest.fixture
def seeded_sync(tmp_path: Path) -> Any:
    """A seeded ledger for snapshot tests, which run the app on their own loop.

    The ledger is built on a throwaway loop and closed; the app gets a second handle
    on the same (already migrated) database, whose connections open on its own loop.
    """
    yield from _for_the_apps_loop(asyncio.run(open_seeded(tmp_path)))


@pytest.fixture
def review_sync(tmp_path: Path) -> Any:
    """Like ``seeded_sync``, with one more failed task: its provider request waits
    for review (``needs_review``), another of its requests is done."""

    async def build() -> Seeded:
        seeded = await open_seeded(tmp_path, states=False)
        # First, while nothing else is claimable (the helper claims with claim_next).
        await seed_provider_requests(
            seeded,
            "lost-reply.md",
            [RequestState.DONE, RequestState.NEEDS_REVIEW],
            fail_with=ErrorCode.NEEDS_REVIEW,
        )
        return await seed_states(seeded)

    yield from _for_the_apps_loop(asyncio.run(build()))


@pytest.fixture
def versions_sync(tmp_path: Path) -> Any:
    """Like ``seeded_sync``, on a ledger holding only the documents of VERSIONED."""

    async def build() -> Seeded:
        seeded = await open_seeded(tmp_path, states=False)
        await seed_versions(seeded)
        return seeded

    yield from _for_the_apps_loop(asyncio.run(build()))


def _for_the_apps_loop(built: Seeded) -> Iterator[Seeded]:
    # A SQLite ledger's transactions run on its own threads, not on an event loop,
    # so the app can use the same handle on the loop it runs on.
    ledger = Ledger(
        built.ledger.transactions, built.ledger.settings, clock=built.clock, ids=CountingIds()
    )
    yield Seeded(ledger, built.clock, built.tasks)
    asyncio.run(ledger.close())


class Notices:
    """Every notification an app raised, in order: pass it as ``message_hook`` to
    ``app.run_test``. The app's own list forgets a toast once it expires (4-5 s),
    which a loaded machine can let pass before a test looks; and ``notify`` only posts
    a message, so a state change made beside it (the header) can be seen first."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, message: Message) -> None:
        if isinstance(message, Notify):
            self.seen.append(message.notification.message)


async def wait_for(
    pilot: Pilot[Any],
    predicate: Callable[[], bool],
    *,
    within: float = WAIT_S,
    what: str | Callable[[], str] = "",
) -> None:
    """Let the app run until ``predicate()`` holds (or fail after ``within`` seconds).
    ``what`` may be a callable, so the failure says what was on screen at the time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not predicate():
        if loop.time() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out waiting for {said or predicate}")
        await pilot.pause(0.05)
