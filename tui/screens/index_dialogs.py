"""The dialog that asks for a new index's embedder: the kinds there are (from the
registry, :data:`core.ingest.embedders.KINDS`, with what each needs here), the
default, and the spec typed, checked as it is submitted."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from core import BadInput
from core.ingest.embedders import KINDS, EmbedderSpec, default_spec, unavailable_reason
from tui.widgets.plain_input import PlainInput

INTRO = (
    "The workers re-embed every published and review-pending version into it, from the "
    "stored chunks; search answers from the active index until you activate this one."
)


def kinds_text() -> Text:
    """Two lines per kind: its name and an example; its dimensions, and why it is
    not available here if it is not."""
    out = Text()
    for kind in KINDS:
        out.append(f"{kind.name:<10}", style="bold")
        out.append(f" {kind.example}\n")
        missing = unavailable_reason(kind.name)
        out.append(f"{'':<11}dimensions {kind.dimensions}\n")
        if missing is not None:
            out.append(f"{'':<11}not here: {missing}\n")
    out.rstrip()
    return out


class CreateIndexScreen(ModalScreen[tuple[str, str | None] | None]):
    """Ask for an embedder spec (empty: the default) and an optional name. Dismisses
    with ``(spec, name or None)``, or None when the operator backs out."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "back", "Back")]

    def __init__(self) -> None:
        super().__init__()
        self.default = default_spec().text()

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide"):
            yield Label("New index", classes="dialog-title")
            yield Static(INTRO, classes="dialog-body", markup=False)
            yield Static(kinds_text(), id="index-kinds", classes="dialog-body")
            # Compact (one row each): the dialog fits an 80x24 terminal.
            yield PlainInput(
                placeholder=f"embedder (empty: {self.default})", id="spec", compact=True
            )
            yield PlainInput(
                placeholder="name (empty: from the embedder)", id="index-name", compact=True
            )
            yield Label("", id="spec-refused", classes="dialog-error", markup=False, shrink=True)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Create", variant="primary", id="create", compact=True)
                yield Button("Back", id="back", compact=True)
            yield Label("enter creates · esc goes back", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#spec", Input).focus()

    @on(Input.Submitted)
    @on(Button.Pressed, "#create")
    def _create(self) -> None:
        spec = self.query_one("#spec", Input).value.strip() or self.default
        name = self.query_one("#index-name", Input).value.strip() or None
        try:
            # Checked here, where it is typed; whether this process can make it is
            # the ledger action's to say (the registry's one line).
            spec = EmbedderSpec.parse(spec).text()
        except BadInput as exc:
            refused = self.query_one("#spec-refused", Label)
            refused.update(exc.message)
            refused.add_class("-shown")
            self.query_one("#spec", Input).focus()
            return
        self.dismiss((spec, name))

    @on(Button.Pressed, "#back")
    def action_back(self) -> None:
        self.dismiss(None)
