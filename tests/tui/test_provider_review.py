"""Provider requests in the dashboard: the decisions on a request waiting for review
(resend, mark failed) from the failures screen, refused in read-only mode; a task's
requests in its detail; the provider line under the counts. Driven through Pilot on
a real SQLite ledger, the requests written through the ledger's own roles."""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Label

from core import ErrorCode, Stage, TaskStatus
from core.ledger import ProviderRequestView
from core.states import RequestState
from tests.tui.conftest import (
    APP_SIZE,
    LOST_REPLY,
    NO_RECORD,
    Seeded,
    seed_provider_requests,
    submit,
    wait_for,
)
from tests.tui.driving import dashboard, make_app, notes, open_failures, ready, screen_text, select
from tui.app import IngestDeskApp
from tui.screens.failures import FailuresScreen, group_key
from tui.screens.modals import ConfirmScreen
from tui.screens.task_detail import TaskDetailScreen, request_rows, requests_summary
from tui.widgets.counts import ProviderLine, provider_line

REVIEW_GROUP = group_key(ErrorCode.NEEDS_REVIEW, Stage.EMBEDDING)


async def needs_review(seeded: Seeded) -> tuple[str, str]:
    """A failed needs_review task (one request done, one waiting for review) and a
    parse_error one beside it; the first task's id and its waiting request's key."""
    task_id, keys = await seed_provider_requests(
        seeded,
        "lost-reply.md",
        [RequestState.DONE, RequestState.NEEDS_REVIEW],
        fail_with=ErrorCode.NEEDS_REVIEW,
    )
    other = await submit(seeded, "corrupt.md")
    (claim,) = await seeded.ledger.queue.claim_next("w9")
    assert claim.task_id == other.task_id
    await seeded.ledger.queue.report_progress(claim, Stage.PARSE, 0, 1)
    await seeded.ledger.queue.fail(claim, ErrorCode.PARSE_ERROR, "not a valid PDF")
    return task_id, keys[1]


async def review_group(pilot: Pilot[Any]) -> FailuresScreen:
    """Open the failures screen on the needs_review group, its one task selected."""
    screen = await open_failures(pilot)
    groups = screen.query_one("#failure-groups", DataTable)
    await wait_for(pilot, lambda: REVIEW_GROUP in screen.groups, what="the needs_review group")
    groups.move_cursor(row=groups.get_row_index(REVIEW_GROUP))
    tasks = screen.query_one("#failure-tasks", DataTable)
    await wait_for(
        pilot,
        lambda: (
            screen.current_group == REVIEW_GROUP and tasks.row_count == 1 and bool(screen.awaiting)
        ),
        what="the group's task and the review list",
    )
    tasks.focus()
    await pilot.pause()
    return screen


def provider_text(app: IngestDeskApp) -> str:
    line = dashboard(app).query_one(ProviderLine)
    return str(line.content) if line.display else ""


async def test_resend_requeues_the_task_and_records_the_decision(empty: Seeded) -> None:
    task_id, key = await needs_review(empty)
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=2)
        await wait_for(pilot, lambda: "needs review 1" in provider_text(app), what="the line")
        assert provider_text(app) == "provider: unknown 0 · recovered 0 · needs review 1"
        screen = await review_group(pilot)
        # The advice lists the request waiting, with its age and key.
        advice = screen_text(app)
        assert "waiting for review: 1 request " in advice
        assert f"{task_id[:8]} lost-reply.md  waiting 30s  request {key[:12]}" in advice
        assert {"s", "x"} <= set(screen.active_bindings)
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        # The dialog says what is known: the outcome is unknown (it once claimed "a
        # reply was lost" for every request, including one a crash left unsent).
        asked = " ".join(screen_text(app).split())
        assert "Their outcome is unknown" in asked and "a reply was lost" not in asked, asked
        app.screen.query_one("#reason", Input).value = "checked the provider's dashboard"
        await pilot.press("enter")
        await wait_for(
            pilot,
            lambda: any(m.startswith("resend approved") for m in notes(app)),
            what="the outcome",
        )
        assert isinstance(app.screen, FailuresScreen)
        # The group empties once the screen reloads; the line follows the poll.
        await wait_for(pilot, lambda: REVIEW_GROUP not in screen.groups, what="the reload")
        await wait_for(pilot, lambda: "needs review 0" in provider_text(app), what="the line")
    assert any(m.endswith("the task is queued") for m in notes(app))
    task = await empty.ledger.reads.get_task(task_id)
    assert task.status is TaskStatus.QUEUED
    last = (await empty.ledger.reads.task_history(task_id))[-1]
    assert last.actor == "tester"
    assert last.reason == "resend approved after review: checked the provider's dashboard"
    request = await empty.ledger.providers.get(key)
    assert request is not None and request.state is RequestState.RESEND


async def test_mark_failed_needs_a_reason_then_says_provider_failed(empty: Seeded) -> None:
    task_id, key = await needs_review(empty)
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=2)
        await review_group(pilot)
        await pilot.press("x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        dialog = app.screen
        # No reason: refused in the dialog, which stays open.
        await pilot.press("enter")
        await pilot.pause()
        missing = dialog.query_one("#reason-missing", Label)
        assert app.screen is dialog and missing.has_class("-shown")
        assert "a reason is required" in str(missing.content)
        dialog.query_one("#reason", Input).value = "duplicate batch, dropped upstream"
        await pilot.press("enter")
        await wait_for(
            pilot,
            lambda: any(m.startswith("marked the requests") for m in notes(app)),
            what="the outcome",
        )
    assert any(m.endswith("failed: provider_failed") for m in notes(app))
    task = await empty.ledger.reads.get_task(task_id)
    assert task.status is TaskStatus.FAILED
    assert task.error_code is ErrorCode.PROVIDER_FAILED
    assert task.error_detail == "duplicate batch, dropped upstream"
    last = (await empty.ledger.reads.task_history(task_id))[-1]
    assert last.reason == "marked failed after review: duplicate batch, dropped upstream"
    request = await empty.ledger.providers.get(key)
    assert request is not None and request.state is RequestState.FAILED


async def test_backing_out_of_a_decision_changes_nothing(empty: Seeded) -> None:
    task_id, _ = await needs_review(empty)
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=2)
        await review_group(pilot)
        for key in ("s", "x"):
            await pilot.press(key)
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("escape")
            await wait_for(pilot, lambda: isinstance(app.screen, FailuresScreen))
    task = await empty.ledger.reads.get_task(task_id)
    assert task.status is TaskStatus.FAILED and task.error_code is ErrorCode.NEEDS_REVIEW


async def test_review_keys_belong_to_the_needs_review_group_only(empty: Seeded) -> None:
    await needs_review(empty)
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=2)
        screen = await review_group(pilot)
        groups = screen.query_one("#failure-groups", DataTable)
        parse = group_key(ErrorCode.PARSE_ERROR, Stage.PARSE)
        groups.focus()
        groups.move_cursor(row=groups.get_row_index(parse))
        await wait_for(pilot, lambda: screen.current_group == parse)
        await pilot.pause()
        assert not {"s", "x"} & set(screen.active_bindings)
        assert "r" in screen.active_bindings
        await pilot.press("s")
        await pilot.pause()
        assert isinstance(app.screen, FailuresScreen)  # no dialog for a parse error
        assert "waiting for review" not in screen_text(app)


async def test_read_only_hides_and_refuses_the_decisions(empty: Seeded) -> None:
    task_id, _ = await needs_review(empty)
    app = make_app(empty, read_only=True)
    assert app.provider_review is None
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=2)
        screen = await review_group(pilot)
        assert not {"s", "x", "r"} & set(screen.active_bindings)
        await pilot.press("s", "x")
        await pilot.pause()
        assert isinstance(app.screen, FailuresScreen)
        refusals = [m for m in notes(app) if m.startswith("read-only")]
        assert refusals == [
            "read-only: cannot resend provider requests",
            "read-only: cannot mark provider requests failed",
        ]
    task = await empty.ledger.reads.get_task(task_id)
    assert task.status is TaskStatus.FAILED and task.error_code is ErrorCode.NEEDS_REVIEW


async def test_detail_shows_the_tasks_provider_requests(empty: Seeded) -> None:
    done, recovered, unknown = RequestState.DONE, RequestState.RECOVERED, RequestState.UNKNOWN
    task_id, keys = await seed_provider_requests(
        empty, "embedded.md", [done, done, unknown, recovered, done]
    )
    local = await submit(empty, "local.md")  # no provider request: nothing shown
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=2)
        await wait_for(pilot, lambda: "unknown 1" in provider_text(app), what="the line")
        assert provider_text(app) == "provider: unknown 1 · recovered 1 · needs review 0"
        await select(pilot, task_id)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, TaskDetailScreen))
        detail = app.screen
        assert isinstance(detail, TaskDetailScreen)
        await wait_for(pilot, lambda: detail.task_view is not None, what="the detail")
        await pilot.pause()
        shown = " ".join(screen_text(app).split())  # the grid's spacing aside
        assert "provider requests 3 done, 1 recovered, 1 unknown" in shown
        assert f"request {keys[2][:12]} unknown try 1 · sends 1: {LOST_REPLY}" in shown
        assert keys[0][:12] not in shown  # done requests are only counted
        await pilot.press("escape")
        await select(pilot, local.task_id)
        await pilot.press("enter")
        await wait_for(
            pilot,
            lambda: isinstance(app.screen, TaskDetailScreen) and app.screen.task_view is not None,
        )
        await pilot.pause()
        assert "provider requests" not in screen_text(app)


async def test_the_provider_line_stays_hidden_without_requests(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=len(seeded.tasks))
        await wait_for(pilot, lambda: app.poller.polls >= 2)
        assert not dashboard(app).query_one(ProviderLine).display
        assert "provider:" not in screen_text(app)


# ------------------------------------------------------------------ plain parts


def request(state: RequestState, n: int = 0, detail: str | None = None) -> ProviderRequestView:
    return ProviderRequestView(
        request_key=f"{n:x}" * 64,
        provider="p",
        model="m",
        endpoint=None,
        task_id="t" * 32,
        attempt=2,
        state=state,
        texts=1,
        request_id=None,
        result_key=None,
        result_sha256=None,
        dimensions=None,
        usage={},
        detail=detail,
        sends=1,
        lookups=3,
        next_lookup_at=None,
        created_at=0.0,
        updated_at=0.0,
    )


def test_provider_line_and_summary_words() -> None:
    counts = dict.fromkeys(RequestState, 0)
    assert provider_line(counts) is None
    counts[RequestState.DONE] = 4  # done alone: shown, all watched states zero
    assert provider_line(counts) == "provider: unknown 0 · recovered 0 · needs review 0"
    counts[RequestState.NEEDS_REVIEW] = 2
    assert provider_line(counts) == "provider: unknown 0 · recovered 0 · needs review 2"
    requests = [
        request(RequestState.UNKNOWN, 1, "sent; the reply was lost"),
        request(RequestState.DONE, 2),
        request(RequestState.NEEDS_REVIEW, 3, NO_RECORD),
        request(RequestState.DONE, 4),
    ]
    assert requests_summary(requests) == "2 done, 1 unknown, 1 needs review"
    rows = request_rows(requests)
    assert [label for label, _ in rows] == [
        "provider requests",
        f"  request {'1' * 12}",
        f"  request {'3' * 12}",
    ]
    assert str(rows[1][1]) == "unknown  try 2 · sends 1 · look-ups 3: sent; the reply was lost"
    assert request_rows([]) == []
