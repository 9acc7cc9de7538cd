"""The review desk (v): versions waiting for review, what changed against the
published version, publish (p) and reject (r), refused in read-only mode. Driven
through Pilot on a real SQLite ledger, the versions made with the ledger's own roles
(upload, submit, claim, finish, publish, replace)."""

from __future__ import annotations

from typing import Any

import pytest
from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Label, Static

from core.states import DocumentStatus
from tests.tui.conftest import APP_SIZE, VERSIONED, Seeded, finish_version, seed_versions, wait_for
from tests.tui.driving import make_app, notes, ready, screen_text
from tui.app import IngestDeskApp
from tui.screens import review_desk
from tui.screens.dashboard import DashboardScreen
from tui.screens.document import DocumentScreen
from tui.screens.modals import ConfirmScreen
from tui.screens.review_desk import MINUS_STYLE, PLUS_STYLE, ReviewDeskScreen, diff_text
from tui.screens.search import SearchScreen

HANDBOOK, SAFETY = VERSIONED  # the handbook's v2 has waited longest


async def open_desk(pilot: Pilot[Any]) -> ReviewDeskScreen:
    """Press v on the dashboard; return the desk once its queue and the first
    version's detail are shown."""
    app = pilot.app
    assert isinstance(app, IngestDeskApp)
    await ready(pilot, rows=0)
    await pilot.press("v")
    await wait_for(pilot, lambda: isinstance(app.screen, ReviewDeskScreen), what="the desk")
    desk = app.screen
    assert isinstance(desk, ReviewDeskScreen)
    await wait_for(pilot, lambda: desk.diff is not None, what="the first version's detail")
    return desk


async def select_version(pilot: Pilot[Any], desk: ReviewDeskScreen, version_id: str) -> None:
    table = desk.query_one("#review-queue", DataTable)
    table.move_cursor(row=table.get_row_index(version_id))
    await wait_for(
        pilot,
        lambda: desk.diff is not None and desk.diff.candidate.document_id == version_id,
        what="the selected version's detail",
    )


def styled(text: Text, style: str) -> list[str]:
    """The parts of ``text`` drawn in ``style``."""
    return [text.plain[s.start : s.end] for s in text.spans if str(s.style) == style]


async def test_the_desk_lists_versions_oldest_first_with_what_changed(empty: Seeded) -> None:
    ids = await seed_versions(empty)
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        desk = await open_desk(pilot)
        table = desk.query_one("#review-queue", DataTable)
        assert [str(k.value) for k in table.rows] == [ids[HANDBOOK][1], ids[SAFETY][1]]
        await wait_for(pilot, lambda: table.get_cell(ids[SAFETY][1], "chunks") == "3")
        assert table.get_row(ids[HANDBOOK][1])[1:] == ["v2", "2m", "4"]
        summary = str(desk.query_one("#review-summary", Static).content)
        assert "staff-handbook.md  v2  row version 3" in summary
        assert "against v1" in summary and "chunks 3 → 4   pages 2 → 2   lines +2 -1" in summary
        diff = desk.query_one("#review-diff", Static).content
        assert isinstance(diff, Text)
        assert styled(diff, MINUS_STYLE) == ["-Working hours are nine to five."]
        assert styled(diff, PLUS_STYLE) == [
            "+Working hours are flexible between seven and seven.",
            "+Remote work is allowed two days a week.",
        ]
        assert "#0 p.1 Staff handbook" in str(desk.query_one("#review-chunks", Static).content)
        assert {"p", "r", "escape"} <= set(desk.active_bindings)
        # Enter opens the document: both versions and its history.
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, DocumentScreen))
        history = app.screen.query_one("#document-history", DataTable)
        await wait_for(pilot, lambda: history.row_count == 3, what="the history")
        assert app.screen.query_one("#document-versions", DataTable).row_count == 2
        await pilot.press("escape", "escape")
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen))


async def test_publish_switches_search_to_the_new_version(empty: Seeded) -> None:
    ids = await seed_versions(empty)
    v1, v2 = ids[SAFETY]
    assert [h.version_no for h in await empty.ledger.reads.search("helmets")] == [1]
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        desk = await open_desk(pilot)
        await select_version(pilot, desk, v2)
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        dialog = app.screen
        assert isinstance(dialog, ConfirmScreen)
        assert dialog.body.startswith(f"Publish safety-policy.md v2 ({v2[:8]}) as of row version 3")
        assert "v1, published now, is retired" in dialog.body
        await pilot.press("enter")
        await wait_for(
            pilot, lambda: any(m.startswith("published safety") for m in notes(app)), what="it"
        )
        # The desk reloads: the decided version leaves it, the cursor moves up.
        await wait_for(pilot, lambda: v2 not in desk.queue, what="the reload")
        assert desk.selected_version() is not None
        assert desk.selected_version().document_id == ids[HANDBOOK][1]  # type: ignore[union-attr]
        # The search box finds the new version, and only it.
        await pilot.press("ctrl+f")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen), what="search")
        search = app.screen
        assert isinstance(search, SearchScreen)
        await pilot.press(*"helmets", "enter")
        await wait_for(pilot, lambda: search.searched == "helmets", what="the hits")
        assert [(h.document_id, h.version_no) for h in search.hits.values()] == [(v2, 2)]
    reads = empty.ledger.reads
    assert (await reads.get_document(v2)).status is DocumentStatus.PUBLISHED
    assert (await reads.get_document(v1)).status is DocumentStatus.RETIRED
    hits = await reads.search("helmets")
    assert [(h.document_id, h.version_no) for h in hits] == [(v2, 2)]
    publish = (await reads.document_history(v2))[-1]
    assert (publish.action, publish.actor, publish.version_no) == ("publish", "tester", 2)


async def test_reject_needs_a_reason_and_keeps_it_in_the_history(empty: Seeded) -> None:
    ids = await seed_versions(empty)
    v2 = ids[HANDBOOK][1]
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        desk = await open_desk(pilot)
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        dialog = app.screen
        await pilot.press("enter")  # no reason: refused in the dialog, which stays
        missing = dialog.query_one("#reason-missing", Label)
        await wait_for(pilot, lambda: missing.has_class("-shown"))
        assert "a reason is required" in str(missing.content)
        assert "the document's history" in str(missing.content)
        assert app.screen is dialog
        dialog.query_one("#reason", Input).value = "hours need legal sign-off"
        await pilot.press("enter")
        await wait_for(pilot, lambda: any(m.startswith("rejected") for m in notes(app)))
        await wait_for(pilot, lambda: v2 not in desk.queue, what="the reload")
    assert (await empty.ledger.reads.get_document(v2)).status is DocumentStatus.DRAFT
    reject = (await empty.ledger.reads.document_history(v2))[-1]
    assert (reject.action, reject.actor, reject.reason) == (
        "reject",
        "tester",
        "hours need legal sign-off",
    )


async def test_a_version_changed_meanwhile_is_refused_with_the_conflict_line(
    empty: Seeded,
) -> None:
    ids = await seed_versions(empty)
    v2 = ids[HANDBOOK][1]
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        await open_desk(pilot)
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        # While the reviewer reads the dialog, someone else publishes the version
        # and withdraws it again: publishable still, but not the row they saw.
        await empty.ledger.versions.publish(v2, actor="bob")
        await empty.ledger.versions.withdraw(v2, actor="bob", reason="not yet")
        await pilot.press("enter")
        await wait_for(pilot, lambda: any(n.title == "cannot publish" for n in app._notifications))
    line = next(n.message for n in app._notifications if n.title == "cannot publish")
    assert line == f"document {v2[:8]} changed since you looked: now version 5 (you expected 3)"
    assert (await empty.ledger.reads.get_document(v2)).status is DocumentStatus.WITHDRAWN


OLD, NEW = VERSIONED["staff-handbook.md"]


async def withdrawn_then_replaced(seeded: Seeded) -> tuple[str, str]:
    """v1 published then withdrawn; v2 waiting for review. (v1 id, v2 id)."""
    ledger = seeded.ledger
    v1 = await ledger.operator.upload("\n".join(OLD).encode(), "staff-handbook.md")
    await finish_version(seeded, v1.document_id, OLD)
    await ledger.versions.publish(v1.document_id, actor="alice")
    await ledger.versions.withdraw(v1.document_id, actor="alice", reason="under review")
    v2 = await ledger.versions.replace(v1.document_id, "\n".join(NEW).encode(), "staff-handbook.md")
    await finish_version(seeded, v2.document_id, NEW)
    return v1.document_id, v2.document_id


async def test_the_desk_compares_with_the_withdrawn_version_publishing_retires(
    empty: Seeded,
) -> None:
    v1, v2 = await withdrawn_then_replaced(empty)
    app = make_app(empty)
    async with app.run_test(size=(160, 50)) as pilot:
        desk = await open_desk(pilot)
        assert desk.diff is not None and desk.diff.candidate.document_id == v2
        summary = str(desk.query_one("#review-summary", Static).content)
        assert (
            f"against withdrawn version 1 ({v1[:8]}), not searchable now; publishing retires it"
        ) in summary
        assert "nothing of this document is searchable yet" not in summary
        assert "chunks 3 → 4" in summary
        assert desk.query_one("#review-diff", Static).border_title == (
            "What changed against withdrawn v1"
        )
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        body = str(app.screen.query_one(".dialog-body", Static).content)
        assert "withdrawn v1 (not searchable now) is retired in the same step" in body
        await pilot.press("enter")
        await wait_for(pilot, lambda: v2 not in desk.queue, what="the publish")
    reads = empty.ledger.reads
    assert (await reads.get_document(v1)).status is DocumentStatus.RETIRED


async def test_the_reject_dialogs_refusal_wraps_in_a_120_column_terminal(empty: Seeded) -> None:
    await withdrawn_then_replaced(empty)
    app = make_app(empty)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_desk(pilot)
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        dialog = app.screen
        await pilot.press("enter")  # no reason
        missing = dialog.query_one("#reason-missing", Label)
        await wait_for(pilot, lambda: missing.has_class("-shown") and missing.size.height >= 2)
        message = str(missing.content)
        assert message.endswith("(it is kept in the document's history)")
        # Every word of it is on screen, the end on a line of its own.
        assert missing.size.height >= 2
        lines = screen_text(app).splitlines()
        at = next(n for n, line in enumerate(lines) if "a reason is required" in line)
        assert "(it is kept in the document's" in lines[at]
        assert "history)" in lines[at + 1]
        inner = missing.parent
        assert inner is not None and missing.region.right <= inner.content_region.right


async def test_a_deleted_documents_screen_shows_its_kept_history(empty: Seeded) -> None:
    from textual.widgets import DataTable

    from tui.screens.document import DocumentScreen

    v1, v2 = await withdrawn_then_replaced(empty)
    await empty.ledger.versions.delete(v1, actor="alice", reason="gone for good")
    app = make_app(empty)
    async with app.run_test(size=(160, 50)) as pilot:
        await ready(pilot, rows=0)
        await app.push_screen(DocumentScreen(v2))
        await wait_for(pilot, lambda: isinstance(app.screen, DocumentScreen))
        history = app.screen.query_one("#document-history", DataTable)
        await wait_for(pilot, lambda: history.row_count > 0, what="the kept history")
        actions = [history.get_row_at(n)[2] for n in range(history.row_count)]
        assert actions[-2:] == ["delete", "delete"]
        await wait_for(
            pilot,
            lambda: "deleted: no longer in the ledger" in screen_text(app),
            what="the deleted mark",
        )


async def test_read_only_hides_and_refuses_publish_and_reject(empty: Seeded) -> None:
    ids = await seed_versions(empty)
    app = make_app(empty, read_only=True)
    assert app.versions is None
    async with app.run_test(size=APP_SIZE) as pilot:
        desk = await open_desk(pilot)
        assert not {"p", "r"} & set(desk.active_bindings)
        assert "Publish" not in screen_text(app)
        await pilot.press("p", "r")
        await pilot.pause()
        assert app.screen is desk  # no dialog
        refusals = [m for m in notes(app) if m.startswith("read-only")]
        assert refusals == [
            "read-only: cannot publish document versions",
            "read-only: cannot reject document versions",
        ]
    for _, v2 in ids.values():
        assert (await empty.ledger.reads.get_document(v2)).status is DocumentStatus.REVIEW_PENDING


async def test_the_desk_follows_the_ledger_and_keeps_the_cursor_on_its_version(
    empty: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(review_desk, "RESYNC_S", 0.2)  # decisions elsewhere, soon
    ids = await seed_versions(empty)
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        desk = await open_desk(pilot)
        await select_version(pilot, desk, ids[SAFETY][1])
        # Decided in another process: the row above goes, the cursor stays.
        await empty.ledger.versions.reject(ids[HANDBOOK][1], actor="bob", reason="wrong file")
        await wait_for(pilot, lambda: ids[HANDBOOK][1] not in desk.queue, what="the reload")
        table = desk.query_one("#review-queue", DataTable)
        assert table.cursor_row == 0
        assert desk.selected_version().document_id == ids[SAFETY][1]  # type: ignore[union-attr]
        # A task finishing puts a new version up for review.
        draft = await empty.ledger.operator.upload(b"Fire drill every March.", "fire-drill.md")
        await finish_version(empty, draft.document_id, ["Fire drill every March."])
        await wait_for(pilot, lambda: draft.document_id in desk.queue, what="the new version")
        assert desk.selected_version().document_id == ids[SAFETY][1]  # type: ignore[union-attr]


async def test_an_empty_queue_says_so(empty: Seeded) -> None:
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=0)
        await pilot.press("v")
        await wait_for(pilot, lambda: isinstance(app.screen, ReviewDeskScreen))
        await wait_for(pilot, lambda: "no version is waiting for review" in screen_text(app))
        await pilot.press("p")
        await wait_for(pilot, lambda: "no version selected" in notes(app))
        assert isinstance(app.screen, ReviewDeskScreen)


def test_diff_lines_are_styled_and_never_read_as_markup() -> None:
    shown = diff_text(["@@ -1 +1 @@", " same", "-[red]old[/]", "+new\x1b[2J", "+[/x]"])
    assert shown.plain.splitlines() == [
        "@@ -1 +1 @@",
        " same",
        "-[red]old[/]",
        "+new\\x1b[2J",
        "+[/x]",
    ]
    assert styled(shown, MINUS_STYLE) == ["-[red]old[/]"]
    assert styled(shown, PLUS_STYLE) == ["+new\\x1b[2J", "+[/x]"]
    many = diff_text([f"+line {n}" for n in range(10)], shown_max=4)
    assert many.plain.splitlines()[-1] == "… 6 more diff lines not shown"
