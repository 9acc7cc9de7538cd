"""Defects found in the review desk and the dashboard's footer, each pinned by a test
that failed before its fix: the desk compares a candidate with the withdrawn version
publishing it retires, and says so; the reject dialog's refusal wraps instead of
being cut at the dialog's edge; an 80-column dashboard footer shows ^f Search."""

from __future__ import annotations

from textual.widgets import Label, Static

from core.states import DocumentStatus
from tests.tui.conftest import VERSIONED, Seeded, finish_version, wait_for
from tests.tui.driving import make_app, ready, screen_text
from tests.tui.test_review_desk import open_desk
from tests.tui.test_small_terminal import SMALL
from tui.screens.dashboard import DashboardScreen
from tui.screens.modals import ConfirmScreen
from tui.screens.search import SearchScreen

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
        await wait_for(pilot, lambda: missing.has_class("-shown"))
        await pilot.pause(0.1)
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


async def test_an_80_column_dashboard_footer_shows_search(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=SMALL) as pilot:
        await ready(pilot, rows=len(seeded.tasks))
        await pilot.pause(0.2)
        footer = screen_text(app).splitlines()[-1]
        assert "^f Search" in footer and "v Review" in footer and "i Panel" in footer
        await pilot.press("ctrl+f")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen), what="search")


async def test_a_wide_dashboard_keeps_search_last_and_the_palette_hint(seeded: Seeded) -> None:
    app = make_app(seeded)
    async with app.run_test(size=(160, 50)) as pilot:
        await ready(pilot, rows=len(seeded.tasks))
        await pilot.pause(0.2)
        footer = screen_text(app).splitlines()[-1]
        assert footer.rstrip().endswith("^p palette")
        assert footer.index("^f Search") > footer.index("R Race")
        # Narrow and back: the footer follows the width.
        await pilot.resize_terminal(*SMALL)
        await pilot.pause(0.3)
        assert isinstance(app.screen, DashboardScreen) and app.screen.has_class("-narrow")
        narrow = screen_text(app).splitlines()[-1]
        assert "^f Search" in narrow and "palette" not in narrow
        await pilot.resize_terminal(160, 50)
        await pilot.pause(0.3)
        assert screen_text(app).splitlines()[-1].rstrip().endswith("^p palette")
        await pilot.press("ctrl+f")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen), what="search")


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
        await pilot.pause()
        history = app.screen.query_one("#document-history", DataTable)
        await wait_for(pilot, lambda: history.row_count > 0, what="the kept history")
        actions = [history.get_row_at(n)[2] for n in range(history.row_count)]
        assert actions[-2:] == ["delete", "delete"]
        await pilot.pause(0.1)
        assert "deleted: no longer in the ledger" in screen_text(app)


async def test_a_query_without_words_says_so_and_drops_the_last_hits(empty: Seeded) -> None:
    from textual.widgets import OptionList

    from tests.tui.conftest import seed_versions
    from tests.tui.test_search import open_search

    await seed_versions(empty)
    app = make_app(empty)
    async with app.run_test(size=(160, 50)) as pilot:
        await ready(pilot, rows=0)
        screen = await open_search(pilot)
        await pilot.press(*"helmets", "enter")
        hits = screen.query_one("#search-hits", OptionList)
        await wait_for(pilot, lambda: hits.option_count == 1, what="a hit")
        await pilot.press("escape")  # from the hits back to the box
        box = screen.query_one("#search-query")
        assert box.has_focus
        await pilot.press(*["backspace"] * 7, *"!!!", "enter")
        await wait_for(pilot, lambda: screen.searched == "!!!", what="the refusal")
        status = str(screen.query_one("#search-status", Static).content)
        assert status == "nothing to search for: the query has no words"
        assert hits.option_count == 0 and screen.hits == {}
