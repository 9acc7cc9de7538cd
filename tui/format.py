"""Plain formatting helpers shared by widgets and screens: ages, times, text bars.

Pure functions of their arguments (the clock is always passed in), so snapshots with
a frozen clock are deterministic.
"""

from __future__ import annotations

from datetime import UTC, datetime

from core import ERRORS, ErrorCode, TaskStatus

BAR_FULL = "█"
BAR_EMPTY = "░"
ELLIPSIS = "…"

# Theme variable that colours each task status; the same names the .tcss uses.
STATUS_THEME_VARIABLE: dict[TaskStatus, str] = {
    TaskStatus.QUEUED: "foreground-darken-1",
    TaskStatus.RUNNING: "primary-lighten-2",
    TaskStatus.RETRY_WAIT: "warning",
    TaskStatus.SUCCEEDED: "success",
    TaskStatus.FAILED: "error",
    TaskStatus.CANCELLED: "foreground-darken-3",
}
STALLED_THEME_VARIABLE = "warning"

# Short labels where a column is narrow.
STATUS_LABEL: dict[TaskStatus, str] = {
    TaskStatus.QUEUED: "queued",
    TaskStatus.RUNNING: "running",
    TaskStatus.RETRY_WAIT: "retry_wait",
    TaskStatus.SUCCEEDED: "succeeded",
    TaskStatus.FAILED: "failed",
    TaskStatus.CANCELLED: "cancelled",
}


def age(seconds: float) -> str:
    """A compact age: ``40s``, ``7m``, ``3h``, ``12d``.

    Under a minute it moves in 10 s steps: every change of an age text repaints the
    whole task table, and per-second ages made that happen on every refresh.
    """
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{int(seconds // 10) * 10}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h"
    return f"{int(seconds // 86400)}d"


def when(ts: float | None) -> str:
    """A timestamp as the CLI prints it (UTC), or ``-``."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def clock_time(ts: float | None) -> str:
    """Only the time of day (UTC), for dense tables."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S")


def text_bar(completed: int, total: int, width: int = 8) -> str:
    """A fixed-width bar of block characters for ``completed`` out of ``total``."""
    if total <= 0:
        return BAR_EMPTY * width
    filled = round(width * min(max(completed, 0), total) / total)
    return BAR_FULL * filled + BAR_EMPTY * (width - filled)


def shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, ending in an ellipsis when cut."""
    if len(text) <= width:
        return text
    return text[: max(width - 1, 0)] + ELLIPSIS


def error_line(code: ErrorCode | None) -> str:
    """An error code with its one-line meaning, or an empty string."""
    if code is None:
        return ""
    return f"{code.value}: {ERRORS[code].meaning}"
