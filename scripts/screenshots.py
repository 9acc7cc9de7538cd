"""Take the README's screenshots from the real dashboard on a demo ledger.

    python scripts/screenshots.py [--out screenshots] [--png]

Builds a demo ledger in a temporary folder (``core.demo``), runs the app headlessly
with two in-process workers parsing the demo corpus, drives it with Textual's Pilot
and saves one SVG per screen: main, failures, detail, race, review-desk, search,
indexes (a second index for another embedder, its re-embedding campaign under way) and
help, and the main screen once more in an 80x24 terminal (main-80x24: the narrow
layout). For the review desk most of what the demo processed is published and a
second version of one note is put up for review, so the desk shows a diff and the
search box finds published versions. With ``--png`` (and cairosvg installed) a PNG of
each is written too, for a quick look.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from textual.pilot import Pilot  # noqa: E402
from textual.widgets import DataTable  # noqa: E402

from core import DocumentStatus, Ledger, TaskStatus  # noqa: E402
from core.demo import RETRY_DOCUMENT, build_demo_async  # noqa: E402
from core.ingest.embedders import unavailable_reason  # noqa: E402
from core.ingest.embedding import index_key_for_spec  # noqa: E402
from tui.app import IngestDeskApp  # noqa: E402
from tui.screens.dashboard import DashboardScreen  # noqa: E402
from tui.screens.failures import FailuresScreen  # noqa: E402
from tui.screens.help import HelpScreen  # noqa: E402
from tui.screens.indexes import IndexesScreen  # noqa: E402
from tui.screens.race import RaceScreen  # noqa: E402
from tui.screens.review_desk import ReviewDeskScreen  # noqa: E402
from tui.screens.search import SearchScreen  # noqa: E402
from tui.screens.task_detail import TaskDetailScreen  # noqa: E402
from tui.widgets.task_columns import NARROW, WIDE  # noqa: E402
from tui.widgets.task_table import TaskTable  # noqa: E402

SIZE = (160, 48)  # columns, rows
SMALL_SIZE = (80, 24)  # the smallest terminal the dashboard is made for
WAIT_S = 60.0  # seconds any one step may take
SETTLE_S = 0.6  # seconds for a screen to finish painting before its picture
EDITED = "changelog-excerpt.txt"  # the demo note that gets a second version
STILL_WAITING = "scan-batch-"  # names of the versions left waiting for review
SEARCHED = "weekly sync"  # in the titles of the weekly notes: ranked, two words marked


async def until(pilot: Pilot[Any], predicate: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not predicate():
        if loop.time() > deadline:
            raise SystemExit(f"screenshots: timed out waiting for {what}")
        await pilot.pause(0.05)


async def until_true(pilot: Pilot[Any], check: Callable[[], Awaitable[bool]], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not await check():
        if loop.time() > deadline:
            raise SystemExit(f"screenshots: timed out waiting for {what}")
        await pilot.pause(0.1)


def second_version(text: str) -> str:
    """The edited note: two lines reworded, one removed, one added."""
    lines = text.split("\n")
    lines[4] = "Fixed: the reviewer now sees what changed before publishing."
    lines[9] = "Search finds only published versions; candidates stay out until approved."
    del lines[15]
    lines.insert(22, "New: withdraw takes a version out of search and keeps it for the record.")
    return "\n".join(lines)


async def put_up_versions(pilot: Pilot[Any], ledger: Ledger, corpus: Path) -> str:
    """Publish what the demo processed (the scan batches stay waiting for review),
    then upload a second version of EDITED and let the workers process it. Returns
    the second version's id."""
    waiting = await ledger.reads.list_documents(status=DocumentStatus.REVIEW_PENDING, limit=None)
    for doc in waiting:
        if not doc.filename.startswith(STILL_WAITING):
            await ledger.versions.publish(doc.document_id, actor="operator")
    first = next(d for d in waiting if d.filename == EDITED)
    edited = second_version((corpus / EDITED).read_text(encoding="utf-8"))
    draft = await ledger.versions.replace(
        first.document_id, edited.encode(), EDITED, actor="operator"
    )
    await ledger.operator.submit(draft.document_id, actor="operator")

    async def reviewable() -> bool:
        doc = await ledger.reads.get_document(draft.document_id)
        return doc.status is DocumentStatus.REVIEW_PENDING

    await until_true(pilot, reviewable, "the second version to be processed")
    return draft.document_id


async def shoot_indexes(pilot: Pilot[Any], app: IngestDeskApp, ledger: Ledger) -> None:
    """A second index for the local model (the hashed bag of words where it cannot
    load), its campaign under way on the indexes screen. The workers are left
    paused for the picture."""
    spec = "wordllama:128" if unavailable_reason("wordllama") is None else "hashed:128"
    await pilot.press("p")  # paused: the campaign starts while the screen is open
    await ledger.campaigns.create(index_key_for_spec(spec), actor="operator")
    await pilot.press("I")
    await until(pilot, lambda: isinstance(app.screen, IndexesScreen), "indexes")
    screen = app.screen
    assert isinstance(screen, IndexesScreen)
    await until(pilot, lambda: len(screen.progress) >= 2, "the new index listed")
    await pilot.press("down", "p")  # the new index selected; the workers resumed

    def under_way() -> bool:
        return any(p.done for p in screen.progress.values() if p.total)

    await until(pilot, under_way, "its campaign under way")
    await pilot.press("p")  # paused again for the picture: the caller resumes


async def shoot(out: Path, png: bool) -> list[Path]:
    saved: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="ingestdesk-demo-") as folder:
        demo = Path(folder) / "demo"
        settings = await build_demo_async(demo)
        ledger = await Ledger.open(settings)
        app = IngestDeskApp(ledger, workers=2, worker_prefix="demo", actor="operator")
        app.sub_title = "demo/ledger.db"

        async def save(name: str, settle_s: float = SETTLE_S) -> None:
            await pilot.pause(settle_s)
            path = Path(app.save_screenshot(f"{name}.svg", path=str(out)))
            saved.append(path)

        try:
            async with app.run_test(size=SIZE) as pilot:

                def count(status: TaskStatus) -> int:
                    return app.mirror.counts[status]

                await until(
                    pilot,
                    lambda: count(TaskStatus.SUCCEEDED) >= 8 and count(TaskStatus.RUNNING) >= 2,
                    "work to flow",
                )
                await save("main", settle_s=0.1)

                # The same moment in an 80x24 terminal: the narrow layout.
                table = app.screen.query_one(TaskTable)
                await pilot.resize_terminal(*SMALL_SIZE)
                await until(pilot, lambda: table.column_layout is NARROW, "the narrow layout")
                await save("main-80x24", settle_s=0.3)
                await pilot.resize_terminal(*SIZE)
                await until(pilot, lambda: table.column_layout is WIDE, "the wide layout")

                idle = (TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.RETRY_WAIT)
                await until(pilot, lambda: not any(count(s) for s in idle), "the queue to drain")
                await pilot.press("f")
                await until(pilot, lambda: isinstance(app.screen, FailuresScreen), "failures")
                failures = app.screen
                assert isinstance(failures, FailuresScreen)
                await until(pilot, lambda: len(failures.groups) >= 3, "failure groups")
                await until(pilot, lambda: bool(failures.tasks), "the group's tasks")
                await save("failures")
                await pilot.press("escape")

                # The demo's file that needs a retry: retry it, then open its detail,
                # which now shows the failed first attempt and the successful second.
                await until(pilot, lambda: isinstance(app.screen, DashboardScreen), "main")
                table = app.screen.query_one(TaskTable)
                retry = next(t for t in table.tasks.values() if t.document_name == RETRY_DOCUMENT)
                table.move_cursor(row=table.get_row_index(retry.task_id))
                await pilot.press("r")
                await until(
                    pilot,
                    lambda: table.tasks[retry.task_id].status is TaskStatus.SUCCEEDED,
                    "the retried task to succeed",
                )
                await pilot.press("enter")
                await until(pilot, lambda: isinstance(app.screen, TaskDetailScreen), "detail")
                detail = app.screen
                await until(
                    pilot,
                    lambda: detail.query_one("#detail-attempts").row_count == 2,  # type: ignore[attr-defined]
                    "two attempts",
                )
                await save("detail")
                await pilot.press("escape")

                await pilot.press("R")
                await until(pilot, lambda: isinstance(app.screen, RaceScreen), "the race")
                race = app.screen
                assert isinstance(race, RaceScreen)
                await until(pilot, lambda: race.outcome is not None, "the race result")
                await pilot.pause(1.0)  # let the winner finish its stages in its log
                await save("race")
                await pilot.press("escape")

                # The review desk on the second version: what changed against v1.
                candidate = await put_up_versions(pilot, ledger, demo / "corpus")
                await pilot.press("v")
                await until(pilot, lambda: isinstance(app.screen, ReviewDeskScreen), "review desk")
                desk = app.screen
                assert isinstance(desk, ReviewDeskScreen)
                await until(pilot, lambda: candidate in desk.queue, "the second version listed")
                queue = desk.query_one("#review-queue", DataTable)
                queue.move_cursor(row=queue.get_row_index(candidate))
                await until(
                    pilot,
                    lambda: desk.diff is not None and desk.diff.candidate.document_id == candidate,
                    "its diff",
                )
                await save("review-desk")

                await pilot.press("ctrl+f")
                await until(pilot, lambda: isinstance(app.screen, SearchScreen), "search")
                search = app.screen
                assert isinstance(search, SearchScreen)
                await pilot.press(*SEARCHED, "enter")
                await until(pilot, lambda: search.searched == SEARCHED, "the hits")
                await save("search")
                await pilot.press("escape", "escape", "escape")
                await until(pilot, lambda: isinstance(app.screen, DashboardScreen), "main")

                await shoot_indexes(pilot, app, ledger)
                await save("indexes", settle_s=1.0)
                await pilot.press("p", "escape")
                await until(pilot, lambda: isinstance(app.screen, DashboardScreen), "main")

                await pilot.press("question_mark")
                await until(pilot, lambda: isinstance(app.screen, HelpScreen), "help")
                await save("help")
                await pilot.press("escape", "q")
                await until(pilot, lambda: not app.is_running, "the app to quit")
        finally:
            await ledger.close()
    if png:
        saved += to_png(saved)
    return saved


PNG_FONT = "DejaVu Sans Mono"  # Debian fonts-dejavu-core; any installed monospace face works


def to_png(svgs: list[Path]) -> list[Path]:
    try:
        import cairosvg  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        print("screenshots: cairosvg is not installed; skipping PNGs", file=sys.stderr)
        return []
    pngs = []
    for svg in svgs:
        png = svg.with_suffix(".png")
        # The same scale for every picture: an 80-column one is half as wide.
        width = 1600 if "80x24" not in svg.stem else 1600 * SMALL_SIZE[0] // SIZE[0]
        # The SVG asks for Fira Code (a web font fetched by a browser) and falls back to
        # "monospace", which cairosvg resolves to a proportional face: bold words then
        # overran the next cell ("empty_documentat parse"). A monospaced face that is
        # installed where the script runs keeps every glyph in its cell.
        text = svg.read_text(encoding="utf-8")
        for asked in ('"Fira Code"', "Fira Code, monospace"):
            text = text.replace(asked, f'"{PNG_FONT}"')
        cairosvg.svg2png(bytestring=text.encode(), write_to=str(png), output_width=width)
        pngs.append(png)
    return pngs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "screenshots")
    parser.add_argument("--png", action="store_true", help="also write PNGs (needs cairosvg)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for path in asyncio.run(shoot(args.out, args.png)):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
