"""The search box (ctrl+f): ranked hits as you type, each with its document, version,
page, score and a highlighted snippet; enter opens the document. Driven through Pilot
on a real SQLite ledger whose versions were made with the ledger's own roles."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, OptionList, Static

from core import Ledger
from tests.conftest import FakeClock
from tests.tui.conftest import (
    APP_SIZE,
    VERSIONED,
    Seeded,
    finish_version,
    seed_versions,
    wait_for,
)
from tests.tui.driving import make_app, ready, screen_text
from tui.app import IngestDeskApp
from tui.format import HIT_STYLE, snippet_text
from tui.screens.dashboard import DashboardScreen
from tui.screens.document import DocumentScreen, hit_chunk_text
from tui.screens.modals import ConfirmScreen
from tui.screens.review_desk import ReviewDeskScreen
from tui.screens.search import DEBOUNCE_S, SearchScreen

HANDBOOK, SAFETY = VERSIONED


async def open_search(pilot: Pilot[Any]) -> SearchScreen:
    app = pilot.app
    await pilot.press("ctrl+f")
    await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen), what="the search box")
    screen = app.screen
    assert isinstance(screen, SearchScreen)
    return screen


def marked(text: Text) -> list[str]:
    return [text.plain[s.start : s.end] for s in text.spans if str(s.style) == HIT_STYLE]


async def test_hits_come_as_you_type_with_version_page_and_marked_words(empty: Seeded) -> None:
    ids = await seed_versions(empty)
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=0)
        screen = await open_search(pilot)
        box = screen.query_one("#search-query", Input)
        assert box.has_focus
        await pilot.press("w")  # one character: nothing is searched
        await pilot.pause(DEBOUNCE_S * 2)
        assert screen.searched is None
        await pilot.press("backspace", *"helmets")  # no enter: searched once typing pauses
        await wait_for(pilot, lambda: screen.searched == "helmets", what="the search")
        hits = screen.query_one("#search-hits", OptionList)
        assert hits.option_count == 1 and box.has_focus
        (hit,) = screen.hits.values()
        assert (hit.document_id, hit.version_no, hit.page) == (ids[SAFETY][0], 1, 1)
        prompt = hits.get_option_at_index(0).prompt
        assert isinstance(prompt, Text)
        first_line = prompt.plain.splitlines()[0]
        assert first_line.startswith("safety-policy.md  v1 · page 1 · chunk #1 · score ")
        assert prompt.plain.splitlines()[1] == "Helmets are required on site."
        assert marked(prompt) == ["Helmets"]
        assert "1 hit for “helmets”" in str(screen.query_one("#search-status", Static).content)
        # Enter searches at once and moves to the hits; enter there opens the document.
        await pilot.press("enter")
        await wait_for(pilot, lambda: hits.has_focus, what="the hits")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, DocumentScreen), what="the document")
        document = app.screen
        versions = document.query_one("#document-versions", DataTable)
        history = document.query_one("#document-history", DataTable)
        await wait_for(pilot, lambda: history.row_count == 3, what="the history")
        assert versions.row_count == 2
        shown = screen_text(app)
        assert "this version  v1" in shown and "search finds  v1" in shown
        assert "The hit: chunk #1, page 1" in shown
        chunk = document.query_one("#document-chunk", Static).content
        assert isinstance(chunk, Text) and marked(chunk) == ["Helmets"]
        # ctrl+f from the document: back to the same search box, query and hits kept.
        await pilot.press("ctrl+f")
        await wait_for(pilot, lambda: app.screen is screen, what="the search box again")
        assert box.has_focus and box.value == "helmets" and len(screen.hits) == 1
        assert sum(isinstance(s, SearchScreen) for s in app.screen_stack) == 1
        # Back: the hits, the box, the dashboard.
        await pilot.press("enter")
        await wait_for(pilot, lambda: hits.has_focus, what="the hits")
        await pilot.press("escape")
        assert box.has_focus
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen))


async def test_search_finds_the_published_version_only(empty: Seeded) -> None:
    ids = await seed_versions(empty)
    await empty.ledger.versions.publish(ids[SAFETY][1], actor="alice")
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=0)
        screen = await open_search(pilot)
        await pilot.press(*"required on site", "enter")
        await wait_for(pilot, lambda: screen.searched == "required on site", what="the search")
        assert [(h.document_id, h.version_no) for h in screen.hits.values()] == [
            (ids[SAFETY][1], 2)
        ]
        assert "safety-policy.md  v2 · page 1" in screen_text(app)
        # The handbook's v2 waits for review: its words are not found yet.
        screen.query_one("#search-query", Input).value = ""
        screen.focus_query()
        await pilot.press(*"remote", "enter")
        await wait_for(pilot, lambda: screen.searched == "remote", what="the second search")
        assert screen.hits == {}
        assert "no published document holds “remote”" in screen_text(app)


async def test_ctrl_f_opens_search_from_any_screen_but_not_over_a_dialog(empty: Seeded) -> None:
    await seed_versions(empty)
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=0)
        assert "ctrl+f" in app.screen.active_bindings
        await pilot.press("v")
        await wait_for(pilot, lambda: isinstance(app.screen, ReviewDeskScreen))
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("ctrl+f")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)  # its answer must not wait unseen
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, ReviewDeskScreen))
        screen = await open_search(pilot)
        await pilot.press(*"hours", "enter")
        await wait_for(pilot, lambda: screen.searched == "hours", what="the search")
        assert screen.query_one("#search-hits", OptionList).has_focus
        await pilot.press("ctrl+f")  # on the search screen: back to the box, no second one
        assert screen.query_one("#search-query", Input).has_focus
        assert sum(isinstance(s, SearchScreen) for s in app.screen_stack) == 1
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, ReviewDeskScreen))


async def test_what_a_user_typed_or_a_document_holds_is_shown_as_written(empty: Seeded) -> None:
    name = "[bold]notes[i].md"
    draft = await empty.ledger.operator.upload(b"x", name)
    await finish_version(empty, draft.document_id, ["[red]alarm[/] \x1b[2J rings at noon"])
    await empty.ledger.versions.publish(draft.document_id, actor="alice")
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        assert isinstance(app, IngestDeskApp)
        await ready(pilot, rows=0)
        screen = await open_search(pilot)
        await pilot.press(*"[/alarm", "enter")
        await wait_for(pilot, lambda: screen.searched == "[/alarm", what="the search")
        shown = screen_text(app)
        assert "[bold]notes[i].md  v1" in shown
        assert "[red]alarm[/] \\x1b[2J rings at noon" in shown
        assert "1 hit for “[/alarm”" in shown


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


def test_snippets_mark_words_and_escape_everything_else() -> None:
    shown = snippet_text("the **ledger**\nkeeps\t[b]**audit**[/b] \x07 trails**")
    assert shown.plain == "the ledger keeps [b]audit[/b] \\x07 trails**"
    assert marked(shown) == ["ledger", "audit"]
    assert snippet_text("no marks here").spans == []


def test_the_hits_chunk_marks_the_words_the_snippet_marked() -> None:
    from core import SearchHit

    hit = SearchHit(
        document_id="d" * 32,
        filename="a.md",
        ordinal=0,
        page=None,
        text="Budget talks: the budget grew.\nBudgets aside.",
        snippet="the **budget** grew",
    )
    shown = hit_chunk_text(hit)
    assert shown.plain == "Budget talks: the budget grew. Budgets aside."
    assert marked(shown) == ["Budget", "budget"]


async def test_review_and_search_on_both_backends(ledger: Ledger, clock: FakeClock) -> None:
    """The same flow on SQLite (FTS5 snippets) and PostgreSQL (ts_headline): the
    marked words are highlighted, and publishing from the desk switches the hits."""
    seeded = Seeded(ledger, clock)
    ids = await seed_versions(seeded)
    app = make_app(seeded)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=0)
        screen = await open_search(pilot)
        await pilot.press(*"helmets", "enter")
        await wait_for(pilot, lambda: screen.searched == "helmets", what="the search")
        (hit,) = screen.hits.values()
        assert hit.version_no == 1 and marked(snippet_text(hit.snippet)) == ["Helmets"]
        await pilot.press("escape", "escape")
        await pilot.press("v")
        await wait_for(pilot, lambda: isinstance(app.screen, ReviewDeskScreen))
        desk = app.screen
        assert isinstance(desk, ReviewDeskScreen)
        await wait_for(pilot, lambda: ids[SAFETY][1] in desk.queue, what="the queue")
        table = desk.query_one("#review-queue", DataTable)
        table.move_cursor(row=table.get_row_index(ids[SAFETY][1]))
        await wait_for(
            pilot,
            lambda: desk.diff is not None and desk.diff.candidate.document_id == ids[SAFETY][1],
        )
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("enter")
        await wait_for(pilot, lambda: ids[SAFETY][1] not in desk.queue, what="the publish")
        screen = await open_search(pilot)
        await pilot.press(*"helmets", "enter")
        await wait_for(pilot, lambda: screen.searched == "helmets", what="the new search")
        assert [(h.document_id, h.version_no) for h in screen.hits.values()] == [
            (ids[SAFETY][1], 2)
        ]


async def test_ctrl_t_steps_the_mode_and_the_hits_say_how_they_were_found(
    empty: Seeded,
) -> None:
    from tests.core.test_vector_search import published, searcher

    searcher(empty.ledger)  # an index of a real model's name: hybrid by default
    await published(empty.ledger, "canteen.md", "the cafeteria opens at noon")
    await published(empty.ledger, "parking.md", "parking permits come from facilities")
    app = make_app(empty)
    async with app.run_test(size=(160, 50)) as pilot:
        await ready(pilot, rows=0)
        screen = await open_search(pilot)
        hits = screen.query_one("#search-hits", OptionList)

        def title() -> str:
            return str(hits.border_title)

        def first_line() -> str:
            prompt = hits.get_option_at_index(0).prompt
            assert isinstance(prompt, Text)
            return prompt.plain.splitlines()[0]

        await pilot.press(*"cafeteria", "enter")
        await wait_for(pilot, lambda: screen.answer is not None, what="the hybrid answer")
        assert title() == "Hits, best first · hybrid (test-model-256)"
        assert hits.option_count == 2  # the vector leg brings the other chunk too
        assert first_line().startswith("canteen.md  v1")
        assert first_line().endswith("· keyword #1 · vector #1")
        await pilot.press("ctrl+t")  # hybrid -> keyword: searched again
        await wait_for(pilot, lambda: title() == "Hits, best first · keyword", what="keyword")
        assert hits.option_count == 1 and "vector" not in first_line()
        await pilot.press("ctrl+t")
        await wait_for(pilot, lambda: title().endswith("vector (test-model-256)"), what="vector")
        assert hits.option_count == 2 and first_line().endswith("· vector #1")
        assert "^t" in screen_text(app) and "Mode" in screen_text(app)  # in the footer
