"""Submit: a path Input that completes file names, several paths at once.

The folder's file names are shown escaped and never parsed as markup (a file named
``[/x].md`` in the current folder must not stop the screen from opening), and names
holding control or invisible characters are not offered as completions: one that
was would be drawn raw in the box.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from pathlib import Path
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.suggester import Suggester
from textual.widgets import Input, Label

from core import visible
from tui.widgets.plain_input import PlainInput

LISTED_FILES_MAX = 8  # files of the current folder named in the hint
LISTING_SCAN_MAX = 5000  # folder entries read for the hint: a huge folder must not freeze it


def complete_path(value: str, base: Path) -> str | None:
    """Complete the last space-separated path in ``value`` against the filesystem.

    Folders complete with a trailing ``/`` so the next press goes inside them.
    """
    head, sep, last = value.rpartition(" ")
    folder_part, _, prefix = last.rpartition("/")
    folder = Path(folder_part or ".").expanduser()
    if not folder.is_absolute():
        folder = base / folder
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return None
    for name in names:
        if (
            name.startswith(prefix)
            and name != prefix
            and not name.startswith(".")
            and name.isprintable()
        ):
            suffix = "/" if (folder / name).is_dir() else ""
            start = f"{folder_part}/" if folder_part or last.startswith("/") else ""
            return f"{head}{sep}{start}{name}{suffix}"
    return None


class PathSuggester(Suggester):
    """Suggests the completion of the last path; → accepts it."""

    def __init__(self, base: Path) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self.base = base

    async def get_suggestion(self, value: str) -> str | None:
        if not value or value.endswith(" "):
            return None
        # Listing a folder touches the disk: keep it off the event loop.
        return await asyncio.to_thread(complete_path, value, self.base)


class SubmitScreen(ModalScreen[str | None]):
    """Ask for one or more paths; dismisses with the typed text, or None."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "back", "Back")]

    def __init__(self, base: Path) -> None:
        super().__init__()
        self.base = base

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide"):
            yield Label("Submit files", classes="dialog-title")
            yield Label(
                f"Paths relative to {visible(str(self.base))}, separated by spaces (quote "
                "names with spaces). → accepts a completion. Accepted: PDF, Word, "
                "PowerPoint, Excel, HTML, EPUB, CSV, PNG/JPEG/TIFF scans, Markdown and "
                "text (recognised by content; `ingestdesk formats` lists them).",
                classes="dialog-body",
                markup=False,
            )
            yield PlainInput(
                placeholder="e.g. reports/q3.pdf notes.md",
                suggester=PathSuggester(self.base),
                id="paths",
            )
            yield Label(self._listing(), classes="dialog-hint", id="listing", markup=False)
            yield Label("enter uploads and submits · esc goes back", classes="dialog-hint")

    def _listing(self) -> str:
        try:
            with os.scandir(self.base) as entries:
                scanned = list(itertools.islice(entries, LISTING_SCAN_MAX))
            files = sorted(e.name for e in scanned if e.is_file())
        except OSError:
            return ""
        shown = ", ".join(visible(name) for name in files[:LISTED_FILES_MAX])
        if len(scanned) == LISTING_SCAN_MAX:
            more = " and more"
        elif len(files) > LISTED_FILES_MAX:
            more = f" and {len(files) - LISTED_FILES_MAX} more"
        else:
            more = ""
        return f"here: {shown}{more}" if files else "no files in this folder"

    def on_mount(self) -> None:
        self.query_one("#paths", Input).focus()

    @on(Input.Submitted, "#paths")
    def _submitted(self, event: Input.Submitted) -> None:
        value = event.value.strip()
        if not value:
            self.notify("type at least one path", severity="warning")
            return
        self.dismiss(value)

    def action_back(self) -> None:
        self.dismiss(None)
