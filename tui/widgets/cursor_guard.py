"""The task under the cursor changed without the operator moving it.

A live table drops a row when its task leaves the list (finished, retried or
cancelled elsewhere); the cursor then stands on the neighbouring task. A key pressed
in that moment (the operator meant the task that just left) would act on a task they
never looked at: ``r`` retried the next failed task. An action that changes a task
asks for the key again instead when the cursor's task changed under it moments ago.
"""

from __future__ import annotations

import time
from collections import deque

# Tasks this screen acted on lately: one of them leaving is the operator's own doing,
# and "r r r" down a column of failures must not ask twice for each.
ACTED_ON_KEPT = 32  # task ids
# How long after the cursor's task left a key is taken as meant for it: longer than
# seeing a row change and a key already on its way, short of reading the new row.
SETTLE_S = 1.5  # seconds


class CursorGuard:
    """Remembers which task left from under the cursor, and when."""

    def __init__(self) -> None:
        self._left: tuple[str, float] | None = None
        self._acted_on: deque[str] = deque(maxlen=ACTED_ON_KEPT)

    def acting_on(self, task_id: str) -> None:
        """The operator acts on ``task_id`` here: its leaving will be no surprise."""
        self._acted_on.append(task_id)

    def left(self, task_id: str, short_id: str) -> None:
        """The cursor's task left the table; the cursor is on another."""
        if task_id not in self._acted_on:
            self._left = (short_id, time.monotonic())

    def just_left(self) -> str | None:
        """The task that left from under the cursor within :data:`SETTLE_S`, once:
        asking clears it, so the key pressed again acts."""
        if self._left is None:
            return None
        short_id, at = self._left
        self._left = None
        return short_id if time.monotonic() - at < SETTLE_S else None


def moved_notice(left: str, now_on: str, key: str, action: str) -> str:
    """What to say instead of acting on a task the operator did not choose."""
    return (
        f"task {left} left the list just now and the cursor moved to task {now_on}: "
        f"press {key} again to {action} it"
    )
