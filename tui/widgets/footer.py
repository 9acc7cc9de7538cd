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

    def compose(self) -> ComposeResult:
        shown: list[Widget] = list(super().compose())
        width = self.size.width
        self._composed_for = width
        if not width:
            yield from shown  # not laid out yet: a resize composes again
            return
        keys = [w for w in shown if isinstance(w, FooterKey)]
        if len(keys) != len(shown):
            yield from shown  # grouped keys (none here): Textual's own layout
            return
        palette = [k for k in keys if k.has_class("-command-palette")]
        room = width - sum(key_width(k) for k in palette)
        for key in keys:
            if key in palette:
                continue
            need = key_width(key)
            if need > room:
                # The order is the priority: a shorter key further on is not let in
                # ahead of this one, so every width shows a prefix of the same row.
                break
            room -= need
            yield key
        yield from palette

    def on_resize(self, event: events.Resize) -> None:
        if event.size.width != self._composed_for:
            self.call_after_refresh(self.recompose)
