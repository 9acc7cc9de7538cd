"""The footer every screen shows: Textual's, with only the keys that fit whole.

Textual's footer lays its keys out in one scrolling row, so on a terminal too narrow
for them all the last visible key is cut mid-word ("w +Wor") and the rest are
reachable only by scrolling it with a mouse wheel. This one leaves out each key that
would not fit whole, and every key after it (the footer's order, the screen's keys
before the app's, is its priority), so what is shown can be read; the help screen
(``?``) and the command palette (``ctrl+p``) list every key.
"""

from __future__ import annotations

from rich.cells import cell_len
from textual import events
from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

# Cells around a key's text in Textual's (non-compact) footer style: the key is
# padded one cell each side and its description one cell on the right; the command
# palette's key adds its left border and right padding.
KEY_PADDING = 2  # cells
DESCRIPTION_PADDING = 1  # cells
PALETTE_EXTRA = 2  # cells


def key_width(key: FooterKey) -> int:
    """Cells ``key`` takes in the footer."""
    width = cell_len(key.key_display) + KEY_PADDING
    if key.description:
        width += cell_len(key.description) + DESCRIPTION_PADDING
    if key.has_class("-command-palette"):
        width += PALETTE_EXTRA
    return width


class WholeKeysFooter(Footer):
    """A footer that shows a key whole or not at all."""

    def __init__(self) -> None:
        super().__init__()
        self._composed_for = 0  # the width the keys were chosen for
        self._composed: tuple[object, ...] | None = None  # what they were

    def compose(self) -> ComposeResult:
        chosen = self._choose()
        self._composed = _signature(chosen)
        yield from chosen

    async def recompose(self) -> None:
        # Textual's footer recomposes on every change of the screen's bindings (a
        # focus change, a refresh_bindings): at start-up six times over, each
        # mounting and styling every key again. The same keys need no new widgets.
        if self.is_attached and _signature(self._choose()) == self._composed:
            return
        await super().recompose()

    def _choose(self) -> list[Widget]:
        shown: list[Widget] = list(super().compose())
        width = self.size.width
        self._composed_for = width
        if not width:
            return shown  # not laid out yet: a resize composes again
        keys = [w for w in shown if isinstance(w, FooterKey)]
        if len(keys) != len(shown):
            return shown  # grouped keys (none here): Textual's own layout
        palette = [k for k in keys if k.has_class("-command-palette")]
        room = width - sum(key_width(k) for k in palette)
        chosen: list[Widget] = []
        for key in keys:
            if key in palette:
                continue
            need = key_width(key)
            if need > room:
                # The order is the priority: a shorter key further on is not let in
                # ahead of this one, so every width shows a prefix of the same row.
                break
            room -= need
            chosen.append(key)
        return chosen + palette

    def on_resize(self, event: events.Resize) -> None:
        if event.size.width != self._composed_for:
            self.call_after_refresh(self.recompose)


def _signature(widgets: list[Widget]) -> tuple[object, ...]:
    """What a row of footer keys shows (equal rows need no recompose)."""
    return tuple(
        (
            type(w).__name__,
            getattr(w, "key", None),
            getattr(w, "key_display", None),
            getattr(w, "description", None),
            getattr(w, "action", None),
            getattr(w, "_disabled", None),
            str(w.tooltip),
            tuple(sorted(w.classes)),
        )
        for w in widgets
    )
