"""Small modal dialogs: confirm (with a reason for the audit log, optional or
required)."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from tui.widgets.plain_input import PlainInput


class ConfirmScreen(ModalScreen[str | None]):
    """Ask before a change. Dismisses with the reason typed ("" when none) on
    confirm, or None when the operator backs out.

    Args:
        title: The question, short.
        body: What will happen, in plain words.
        confirm_label: The confirm button's label.
        ask_reason: Offer a reason Input (recorded in the audit log).
        require_reason: The reason may not be empty: confirming without one says so
            in the dialog and keeps it open (implies ``ask_reason``).
        kept_in: Whose history keeps the reason, as the refusal of an empty one says.
    """

    # Enter confirms even before the dialog has focused its first widget (focus is set
    # on the next turn of the app's loop): an enter typed at once, or sent by a test
    # the moment the dialog is up, was lost and left the dialog open. A focused Input
    # or Button handles enter itself first (Back stays Back).
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("enter", "confirm", "Confirm", show=False),
    ]

    def __init__(
        self,
        title: str,
        body: str,
        *,
        confirm_label: str = "Confirm",
        ask_reason: bool = False,
        require_reason: bool = False,
        kept_in: str = "the task's history",
    ) -> None:
        super().__init__()
        self.title_text = title
        self.body = body
        self.confirm_label = confirm_label
        self.ask_reason = ask_reason or require_reason
        self.require_reason = require_reason
        self.kept_in = kept_in

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog-title", markup=False)
            yield Static(self.body, classes="dialog-body", markup=False)
            if self.ask_reason:
                need = "required" if self.require_reason else "optional"
                yield PlainInput(placeholder=f"reason ({need}, kept in the audit log)", id="reason")
                # shrink: wrapped to the dialog's width, not cut at its edge.
                yield Label(
                    "", id="reason-missing", classes="dialog-error", markup=False, shrink=True
                )
            with Horizontal(classes="dialog-buttons"):
                yield Button(self.confirm_label, variant="error", id="confirm")
                yield Button("Back", id="back")
            yield Label("enter confirms · esc goes back", classes="dialog-hint")

    def on_mount(self) -> None:
        if self.ask_reason:
            self.query_one("#reason", Input).focus()
        else:
            self.query_one("#confirm", Button).focus()

    def _reason(self) -> str:
        return self.query_one("#reason", Input).value.strip() if self.ask_reason else ""

    @on(Input.Submitted, "#reason")
    @on(Button.Pressed, "#confirm")
    def action_confirm(self) -> None:
        reason = self._reason()
        if self.require_reason and not reason:
            # Refused here, where the reason is typed, rather than by the ledger
            # after the dialog has gone.
            missing = self.query_one("#reason-missing", Label)
            missing.update(f"a reason is required: say why (it is kept in {self.kept_in})")
            missing.add_class("-shown")
            self.query_one("#reason", Input).focus()
            return
        self.dismiss(reason)

    @on(Button.Pressed, "#back")
    def action_back(self) -> None:
        self.dismiss(None)
