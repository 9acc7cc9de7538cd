"""Counts per task status, one box each, with the key that filters on it; and under
them, once any request to a remote embedding provider exists, one line of the
provider requests that need watching.

A box shows its count in big digits under a border titled with its key and status;
on a narrow screen (app.tcss) the same box is two plain lines, key and status above
the count, so seven of them fit 80 columns with four-digit counts whole.

Big digits take three cells each, so a box shows its count whole while it fits and
shortened (``29.9k``, ``1.0M``, never rounded up) when it does not: a million tasks
in the "all" box (12 cells) would otherwise show as its first two digits and a half.
The table's subtitle keeps the exact total.
"""

from __future__ import annotations

from collections.abc import Mapping

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.widgets import Digits, Label, Static

from core import TaskStatus
from core.states import RequestState

# The single keys that filter the table on a status; 0 shows every status.
STATUS_KEYS: dict[str, TaskStatus | None] = {
    "0": None,
    "1": TaskStatus.QUEUED,
    "2": TaskStatus.RUNNING,
    "3": TaskStatus.RETRY_WAIT,
    "4": TaskStatus.FAILED,
    "5": TaskStatus.SUCCEEDED,
    "6": TaskStatus.CANCELLED,
}


# Shortened forms of a count, largest unit first.
_UNITS: tuple[tuple[int, str], ...] = ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k"))


def digits_width(text: str) -> int:
    """Cells ``text`` takes in big digits: three a digit, one a mark or letter."""
    return sum(3 if ch.isdigit() else 1 for ch in text)


def count_in(count: int, cells: int) -> str:
    """``count`` as big digits that fit ``cells`` columns: whole if it fits, else
    shortened down (``29997`` → ``29.9k``, ``999999`` → ``999k``), else the shortest
    form (a box too narrow for any is cut, as before)."""
    whole = str(count)
    if cells <= 0 or digits_width(whole) <= cells:
        return whole
    forms: list[str] = []
    for unit, suffix in _UNITS:
        if count >= unit:
            tenths = count * 10 // unit
            if tenths < 1000:
                forms.append(f"{tenths // 10}.{tenths % 10}{suffix}")
            forms.append(f"{count // unit}{suffix}")
    fitting = [f for f in forms if digits_width(f) <= cells]
    if fitting:
        return fitting[0]
    return min(forms, key=digits_width) if forms else whole


def _class(status: TaskStatus | None) -> str:
    return "-all" if status is None else f"-{status.value.replace('_', '-')}"


class StatusCount(Static):
    """One status: its name and key in the border, its count in big digits."""

    def __init__(self, key: str, status: TaskStatus | None) -> None:
        super().__init__(classes=f"status-count {_class(status)}")
        self.status = status
        self.count = 0  # the exact count shown, whole or shortened
        self.border_title = f"{key} {'all' if status is None else status.value}"

    def compose(self) -> ComposeResult:
        yield Label(self.border_title or "", classes="count-name")
        yield Digits("0")
        yield Label("0", classes="count-line")

    def set_count(self, count: int) -> None:
        self.count = count
        self._show_digits()
        self.query_one(".count-line", Label).update(str(count))
        self.set_class(count == 0, "-zero")

    def on_resize(self) -> None:
        # The box's width decides whether the count fits whole.
        self._show_digits()

    def _show_digits(self) -> None:
        digits = self.query_one(Digits)
        shown = count_in(self.count, self.content_size.width)
        if digits.value != shown:
            digits.update(shown)


class StatusCounts(Horizontal):
    """A row of :class:`StatusCount` boxes; the active status filter is highlighted."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._shown: dict[TaskStatus, int] | None = None

    def compose(self) -> ComposeResult:
        for key, status in STATUS_KEYS.items():
            yield StatusCount(key, status)

    def update_counts(self, counts: Mapping[TaskStatus, int]) -> None:
        # Called on every poll; only a change is worth a repaint.
        if self._shown == counts:
            return
        self._shown = dict(counts)
        total = sum(counts.values())
        for box in self.query(StatusCount):
            box.set_count(total if box.status is None else counts.get(box.status, 0))

    def set_active(self, status: TaskStatus | None, *, filtered: bool) -> None:
        """Highlight the box of the status the table is filtered on (``filtered``
        False with ``status`` None: no filter at all, highlight "all")."""
        for box in self.query(StatusCount):
            box.set_class(box.status == status and (filtered or status is None), "-active")


# The request states the provider line shows: those a person may have to watch or act
# on. done (the usual case) only makes the line appear at all.
PROVIDER_LINE_STATES: tuple[RequestState, ...] = (
    RequestState.UNKNOWN,
    RequestState.RECOVERED,
    RequestState.NEEDS_REVIEW,
)


def request_state_label(state: RequestState) -> str:
    """``needs review`` for ``needs_review``: a state as words in a sentence."""
    return state.value.replace("_", " ")


def provider_line(counts: Mapping[RequestState, int]) -> str | None:
    """``provider: unknown 2 · recovered 1 · needs review 0``, or None while no
    request to a remote provider exists (a local embedder: nothing to say)."""
    if not any(counts.values()):
        return None
    parts = (f"{request_state_label(s)} {counts.get(s, 0)}" for s in PROVIDER_LINE_STATES)
    return "provider: " + " · ".join(parts)


class ProviderLine(Static):
    """The provider requests' line; hidden until a request exists. ``-attention``
    (app.tcss) while any waits for a person's review."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self._shown: dict[RequestState, int] | None = None
        self.display = False

    def update_counts(self, counts: Mapping[RequestState, int]) -> None:
        # Called on every poll; the counts change every few seconds at most.
        if self._shown == counts:
            return
        self._shown = dict(counts)
        line = provider_line(counts)
        self.display = line is not None
        self.update(Content(line or ""))
        self.set_class(counts.get(RequestState.NEEDS_REVIEW, 0) > 0, "-attention")
