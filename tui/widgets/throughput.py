"""Throughput: tasks finished per bucket over the last minutes, as a sparkline."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label, Sparkline


class Throughput(Vertical):
    """A sparkline of finished tasks and a line of totals."""

    def __init__(self, *, bucket_s: float, buckets: int, id: str | None = None) -> None:
        super().__init__(id=id)
        self.bucket_s = bucket_s
        self.buckets = buckets
        minutes = bucket_s * buckets / 60
        self.border_title = f"Finished per {bucket_s:g}s, last {minutes:g} min"
        self._shown: tuple[tuple[int, ...], int] | None = None

    def compose(self) -> ComposeResult:
        yield Sparkline([0] * self.buckets, summary_function=max)
        yield Label("", id="throughput-summary")

    def update_series(self, series: Sequence[int], last_minute: int) -> None:
        # Called on every poll; only a change is worth a repaint.
        shown = (tuple(series), last_minute)
        if shown == self._shown:
            return
        self._shown = shown
        self.query_one(Sparkline).data = list(series)
        total = sum(series)
        peak = max(series, default=0)
        minutes = self.buckets * self.bucket_s / 60
        self.query_one("#throughput-summary", Label).update(
            f"last min {last_minute} · {minutes:g} min {total} · peak {peak}"
        )
