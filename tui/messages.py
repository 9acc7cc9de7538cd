"""Messages the app sends to its screens.

Widget-specific messages live in the widget that sends them (``TaskTable.WindowShort``,
``FilterBar.Applied``); these are the app-wide ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from textual.message import Message

from core import TaskView


@dataclass
class LedgerChanged(Message):
    """One poll's worth of news: tasks that changed since the last poll (oldest
    change first), the time of the poll, and worker log lines since the last one.

    Not coalesced (``can_replace`` stays False): every batch carries rows the table
    must see. Polls never overlap, so at most one is in flight anyway.
    """

    tasks: list[TaskView]
    now: float
    activity: list[str] = field(default_factory=list)


@dataclass
class WorkersChanged(Message):
    """An in-process worker stopped by itself, lost the ledger or found it again:
    the workers panel is redrawn now rather than at the next poll (which may be
    failing for the same reason). Coalesced: the panel reads the workforce anew."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, WorkersChanged)
