"""An Input whose text is always safe to draw.

Typed keys are printable, but a paste is not: a copied path or reason may carry an
escape sequence, a bell or a bidi override, which the Input would otherwise draw raw
on the operator's terminal (and the ledger would then refuse or neutralise anyway).
Here such characters arrive as their escapes (``\\x1b``), so the box shows what was
pasted and the operator can fix it.
"""

from __future__ import annotations

from textual.widgets import Input

from core import visible


class PlainInput(Input):
    """:class:`~textual.widgets.Input` that keeps unsafe characters as escapes."""

    def replace(self, text: str, start: int, end: int) -> None:
        # Every edit (keys, paste, completion) goes through here.
        super().replace(visible(text), start, end)
