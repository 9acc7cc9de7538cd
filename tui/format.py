"""Plain formatting helpers shared by widgets and screens: ages, times, text bars, and
text from the ledger or the operator made safe to draw.

Pure functions of their arguments (the clock is always passed in), so snapshots with
a frozen clock are deterministic.

Anything the dashboard shows that a user supplied (document names, worker ids,
actors, reasons, error details, paths, filter text) goes through :func:`core.visible`
where it is drawn: a row written by an older ingestdesk, or straight into the
database, still cannot clear the operator's screen, retitle the window, forge a line
or reverse a name. Where Textual would parse a string as markup (labels, border
titles, notifications) it gets :class:`~textual.content.Content` or ``markup=False``
instead, so ``[bold]x[/]`` is shown as typed and ``[/x]`` cannot raise.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from urllib.parse import unquote, urlsplit

from rich.text import Text
from textual.content import Content

from core import (
    ERRORS,
    ErrorCode,
    IngestDeskError,
    LedgerUnavailable,
    TaskStatus,
    shown_url,
    visible,
)

HIT_STYLE = "bold black on yellow"  # a word search matched
# A matched word as the ledger's search marks it. No "*" inside: a chunk's own
# "**bold**" cannot be told apart from a mark, but neither can it swallow its
# neighbours.
_MARKED = re.compile(r"\*\*([^*]+?)\*\*")
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


def clock_time(ts: float | None, now: float | None = None) -> str:
    """Only the time of day (UTC), for dense tables; with ``now``, the date instead
    when ``ts`` is on another day (UTC) than ``now`` (``05 Jun 26``, as wide as a
    time): a failure from June listed as ``09:26:07`` reads as one from this morning."""
    if ts is None:
        return "-"
    moment = datetime.fromtimestamp(ts, UTC)
    if now is not None and moment.date() != datetime.fromtimestamp(now, UTC).date():
        return moment.strftime("%d %b %y")
    return moment.strftime("%H:%M:%S")


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


def plain(text: str) -> Content:
    """``text`` as content that is never parsed as markup, with unsafe characters
    escaped: for border titles and labels that quote user input."""
    return Content(visible(text))


def failure_line(exc: BaseException) -> str:
    """One line for a failure: the ledger's own message, or (a fault of the database,
    the disk or a row the ledger cannot read) the exception's type and text.

    A database layer's error wraps the driver's (``orig``) in text of its own: the
    statement, its parameters and a link to its documentation, over several lines.
    Only the driver's error is shown, by its own type, and only its first line.
    """
    if isinstance(exc, LedgerUnavailable):
        # The dashboard names its ledger already: only why it cannot be read.
        return visible(_first_line(exc.reason))
    if isinstance(exc, IngestDeskError):
        return visible(_first_line(exc.message))
    driver = getattr(exc, "orig", None)
    if isinstance(driver, BaseException):
        # An adapted driver (asyncpg through SQLAlchemy) raises a generic "Error"
        # whose cause is the driver's own, better-named one.
        exc = driver.__cause__ if isinstance(driver.__cause__, Exception) else driver
    return visible(f"{type(exc).__name__}: {_first_line(str(exc))}")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def snippet_text(snippet: str) -> Text:
    """A search snippet as one paragraph (whitespace folded) with the words the
    ledger marked ``**like this**`` in HIT_STYLE, the marks removed, every part
    escaped."""
    folded = " ".join(snippet.split())
    out = Text()
    at = 0
    for found in _MARKED.finditer(folded):
        out.append(visible(folded[at : found.start()]))
        out.append(visible(found.group(1)), style=HIT_STYLE)
        at = found.end()
    out.append(visible(folded[at:]))
    return out


def shown_lines(text: str) -> str:
    """``text`` escaped line by line: the line breaks a message was built with stay,
    every other unsafe character is shown as its escape."""
    return "\n".join(visible(line) for line in text.split("\n"))


def ledger_label(db_url: str, *, read_only: bool) -> str:
    """What the header says about the ledger: a PostgreSQL URL without its password,
    a SQLite ledger's file path, and whether the dashboard is read-only."""
    label = visible(shown_url(db_url))
    return f"{label}  [read-only]" if read_only else label


def without_password(text: str, db_url: str) -> str:
    """``text`` with the ledger URL's password replaced by ``***`` wherever it appears
    in a URL (``:password@``): a driver's error may quote the URL it was given.

    Only the ``:password@`` form is replaced: a short password would otherwise
    blank out every occurrence of its letters in ordinary words.
    """
    try:
        password = urlsplit(db_url).password  # as written: percent-encoded, if it was
    except ValueError:  # a malformed URL (the ledger refuses it before any message)
        return text
    if not password:
        return text
    for spelling in dict.fromkeys((password, unquote(password))):
        text = text.replace(f":{spelling}@", ":***@")
    return text
