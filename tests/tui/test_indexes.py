"""The indexes screen (I): every index of a real ledger with its campaign as a bar
that moves as the in-process workers run it; a new index from the dialog; activate
(asking, saying which index retires) switches the active index in the ledger; the
ledger's refusal to drop the active index is shown in its words; read-only shows the
view without the actions."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Button, Input, Label, ProgressBar, Static

from core.ingest.embedder import HashingEmbedder
from core.states import DocumentStatus, IndexState
from tests.tui.conftest import APP_SIZE, WAIT_S, Seeded, note, wait_for
from tests.tui.driving import make_app, notes, ready, screen_text
from tui.app import IngestDeskApp
from tui.screens.index_dialogs import CreateIndexScreen
from tui.screens.indexes import IndexesScreen, IndexRow
from tui.screens.modals import ConfirmScreen

DOCUMENTS = ("minutes.md", "handbook.md", "tariffs.md", "memo.md")


async def ingested(pilot: Pilot[Any], seeded: Seeded) -> None:
    """Upload and submit DOCUMENTS; wait until the app's workers have processed them
    all (the first makes the ledger's first index, hashed-256, active)."""
    ledger = seeded.ledger
    ids = []
    for name in DOCUMENTS:
        document = await ledger.operator.upload(note(name), name)
        await ledger.operator.submit(document.document_id, actor="tester")
        ids.append(document.document_id)

    async def processed() -> bool:
        for document_id in ids:
            doc = await ledger.reads.get_document(document_id)
            if doc.status is not DocumentStatus.REVIEW_PENDING:
                return False
        return True

    await until(pilot, processed, "the workers to process the documents")


async def until(pilot: Pilot[Any], check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Let the app run until the ledger says ``check`` (or fail after WAIT_S)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.1)


async def open_indexes(pilot: Pilot[Any]) -> IndexesScreen:
    app = pilot.app
    await pilot.press("I")
    await wait_for(pilot, lambda: isinstance(app.screen, IndexesScreen), what="the indexes")
    screen = app.screen
    assert isinstance(screen, IndexesScreen)
    await wait_for(pilot, lambda: screen.loads > 0, what="the first read")
    return screen


def row(screen: IndexesScreen, name: str) -> IndexRow:
    [found] = [r for r in screen.query(IndexRow) if r.progress.index.name == name]
    return found


def labels(found: IndexRow) -> str:
    return " ".join(str(label.content) for label in found.query(Label))


async def confirm(pilot: Pilot[Any]) -> str:
    """The confirm dialog's text, then confirm it."""
    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the dialog")
    dialog = app.screen
    assert isinstance(dialog, ConfirmScreen)
    said = f"{dialog.title_text}\n{dialog.body}"
    await pilot.click("#confirm")
    await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
    return said


async def test_a_campaign_runs_on_the_screen_then_activate_switches_and_drop_refuses(
    empty: Seeded,
) -> None:
    ledger = empty.ledger
    app = make_app(empty, workers=2, provider=HashingEmbedder(256))
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=0)
        await ingested(pilot, empty)
        screen = await open_indexes(pilot)
        await wait_for(pilot, lambda: len(screen.progress) == 1, what="the first index")
        first = row(screen, "hashed-256")
        assert first.has_class("-active")
        assert "hashed 256d" in labels(first)
        assert "4 vectors" in labels(first) and "no campaign" in labels(first)
        assert not first.query_one(ProgressBar).display

        # Paused, so the new campaign's bar is seen at 0 before it moves.
        await pilot.press("p")
        assert app.workforce is not None and app.workforce.paused
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, CreateIndexScreen))
        dialog = app.screen
        kinds = str(dialog.query_one("#index-kinds").content)
        assert all(kind in kinds for kind in ("hashed", "wordllama", "openai"))
        await pilot.press(*"hashed:128", "enter")
        await wait_for(pilot, lambda: len(screen.progress) == 2, what="the new index")
        await pilot.pause()
        new = row(screen, "hashed-128")
        bar = new.query_one(ProgressBar)
        assert (bar.total, bar.progress) == (4, 0) and bar.display
        assert new.has_class("-building")
        assert "campaign 0/4 · 4 queued" in labels(new)

        # Cancel its campaign (asked, with a reason), then resume it.
        await pilot.press("down")
        detail = str(screen.query_one("#index-detail", Static).content)
        assert "hashed-128  building" in detail and "campaign runs on the workers" in detail
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "its 4 re-embedding tasks still to run" in app.screen.body  # type: ignore[attr-defined]
        await pilot.press(*"wrong model", "enter")
        await wait_for(pilot, lambda: "4 cancelled" in labels(new), what=lambda: labels(new))
        cancelled = await ledger.campaigns.progress("hashed-128")
        assert cancelled.by_status == {"cancelled": 4}
        await pilot.press("r")
        await wait_for(pilot, lambda: "4 queued" in labels(new), what=lambda: labels(new))
        assert any("hashed-128 resumed: 4 re-embedding tasks to run" in n for n in notes(app))

        await pilot.press("p")  # the workers run the campaign
        await wait_for(
            pilot, lambda: new.has_class("-ready"), what=lambda: f"the campaign: {labels(new)}"
        )
        assert (bar.total, bar.progress) == (8, 4)  # 4 cancelled, 4 run again
        assert "campaign 4/8 · 4 cancelled" in labels(new) and "4 vectors" in labels(new)

        # Activate it: the dialog says which index retires; the ledger switches.
        assert screen.selected() is not None and screen.selected().index.name == "hashed-128"  # type: ignore[union-attr]
        await pilot.press("a")
        said = await confirm(pilot)
        assert "Activate index?" in said and "hashed-256 (hashed 256d) retires" in said

        async def switched() -> bool:
            active = await ledger.indexes.active()
            return active is not None and active.name == "hashed-128"

        await until(pilot, switched, "the ledger to switch the active index")
        states = {i.name: i.state for i in await ledger.indexes.list()}
        assert states == {"hashed-256": IndexState.RETIRED, "hashed-128": IndexState.ACTIVE}
        await wait_for(pilot, lambda: new.has_class("-active") and first.has_class("-retired"))

        # Drop the active one: asked, then refused by the ledger in its words.
        await pilot.press("d")
        said = await confirm(pilot)
        assert "Drop index?" in said and "with its 4 vectors" in said
        refusal = "index 'hashed-128' is active: search answers from it"
        await wait_for(
            pilot, lambda: any(refusal in n for n in notes(app)), what=lambda: str(notes(app))
        )
        assert "Traceback" not in screen_text(app)
        assert len(await ledger.indexes.list()) == 2

        # The retired one goes.
        await pilot.press("up", "d")
        said = await confirm(pilot)
        assert "hashed-256" in said
        await wait_for(pilot, lambda: list(screen.progress) == [new.index_id], what="the drop")
        assert [i.name for i in await ledger.indexes.list()] == ["hashed-128"]
        assert any("index hashed-256 dropped with its 4 vectors" in n for n in notes(app))


async def test_the_dialog_refuses_a_spec_that_is_not_an_embedder(empty: Seeded) -> None:
    app = make_app(empty)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=0)
        screen = await open_indexes(pilot)
        assert "no index yet" in screen_text(app)
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, CreateIndexScreen))
        dialog = app.screen
        assert isinstance(dialog, CreateIndexScreen)
        assert dialog.default in str(dialog.query_one("#spec", Input).placeholder)
        await pilot.press(*"bm25", "enter")
        refused = dialog.query_one("#spec-refused", Label)
        await wait_for(pilot, lambda: refused.has_class("-shown"))
        assert "unknown embedder 'bm25'" in str(refused.content)
        assert app.screen is dialog  # kept open, to fix the spec
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen)
        assert await empty.ledger.indexes.list() == []


async def test_read_only_shows_the_indexes_without_the_actions(empty: Seeded) -> None:
    ledger = empty.ledger
    await ledger.indexes.ensure(_key(256))  # the ledger's first index: active
    app = make_app(empty, read_only=True)
    assert isinstance(app, IngestDeskApp)
    async with app.run_test(size=APP_SIZE) as pilot:
        await ready(pilot, rows=0)
        screen = await open_indexes(pilot)
        await wait_for(pilot, lambda: len(screen.progress) == 1)
        assert "hashed-256" in screen_text(app)
        shown = set(screen.active_bindings)
        for key in ("n", "a", "r", "c", "d"):
            assert key not in shown or not screen.active_bindings[key].enabled, key
        await pilot.press("a")
        await wait_for(pilot, lambda: "read-only: cannot activate indexes" in notes(app))
        await pilot.press("d")
        await wait_for(pilot, lambda: "read-only: cannot drop indexes" in notes(app))
        assert not isinstance(app.screen, ConfirmScreen)
        assert [i.state for i in await ledger.indexes.list()] == [IndexState.ACTIVE]
        assert not screen.query(Button)


def _key(dimensions: int) -> Any:
    from core.ingest.embedding import index_key_of

    return index_key_of(HashingEmbedder(dimensions))
