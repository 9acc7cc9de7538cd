"""Progress lines for long work a command does on many tasks (prune, bulk cancel and
retry): how far it got, of how many, and about how long is left, at most one line
every few seconds, through :meth:`core.cli.output.Output.log` (silent under --json)."""

from __future__ import annotations

import time

from core.cli.output import Output

PROGRESS_EVERY_S = 5.0  # seconds between progress lines, at least


def time_left(seconds: float) -> str:
    if seconds < 90:
        return f"about {max(1, round(seconds))} s left"
    return f"about {round(seconds / 60)} min left"


class ProgressLines:
    """Hears how many tasks each step did; says ``DOING: N of TOTAL tasks (P %)DETAIL
    (R tasks/s, about M min left)`` every ``every_s``. ``total`` is what was counted
    before the work began: a floor when more come meanwhile, never passed."""

    def __init__(
        self, out: Output, doing: str, total: int, every_s: float = PROGRESS_EVERY_S
    ) -> None:
        self.out = out
        self.doing = doing
        self.total = total
        self.every_s = every_s
        self.started = self.said = time.monotonic()
        self.done = 0

    def advance(self, tasks: int, detail: str = "") -> None:
        self.done += tasks
        now = time.monotonic()
        if now - self.said < self.every_s:
            return
        self.said = now
        rate = self.done / max(now - self.started, 1e-6)
        total = max(self.total, self.done)
        share = 100 * self.done // max(total, 1)
        self.out.log(
            f"{self.doing}: {self.done} of {total} tasks ({share} %){detail} "
            f"({rate:.0f} tasks/s, {time_left((total - self.done) / max(rate, 1e-6))})"
        )
