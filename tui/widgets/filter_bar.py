"""The ``/`` filter bar: free words and ``field:value`` terms, ``!`` negates."""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding
from textual.message import Message
from textual.suggester import Suggester
from textual.widgets import Input

from core import ErrorCode, Stage, TaskStatus
from tui.widgets.plain_input import PlainInput

_COMPLETIONS: tuple[str, ...] = (
    *(f"status:{s.value}" for s in TaskStatus),
    *(f"code:{c.value}" for c in ErrorCode),
    *(f"stage:{s.value}" for s in Stage),
    "attempt:>1",
    "worker:",
    "name:",
    "id:",
    "document:",
)


class TermSuggester(Suggester):
    """Completes the last term of the filter (``st`` → ``status:``, ``code:p`` →
    ``code:parse_error``)."""

    def __init__(self) -> None:
        super().__init__(use_cache=True, case_sensitive=False)

    async def get_suggestion(self, value: str) -> str | None:
        head, _, last = value.rpartition(" ")
        bare = last.lstrip("!")
        if not bare:
            return None
        for option in _COMPLETIONS:
            if option.startswith(bare) and option != bare:
                prefix = f"{head} " if head else ""
                return prefix + last[: len(last) - len(bare)] + option
        return None


class FilterBar(PlainInput):
    """An Input that applies its filter on enter and closes on escape."""

    BINDINGS = [Binding("escape", "dismiss", "Close filter")]

    @dataclass
    class Applied(Message):
        """The operator asked for this filter."""

        bar: FilterBar
        text: str

    @dataclass
    class Dismissed(Message):
        """The operator closed the bar without changing the filter."""

        bar: FilterBar

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(
            placeholder="filter: words, status:failed code:parse_error stage:embedding "
            "attempt:>1 worker:w1 name:report id: document:, ! negates — enter applies",
            suggester=TermSuggester(),
            id=id,
        )

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.post_message(self.Applied(self, self.value))

    def action_dismiss(self) -> None:
        self.post_message(self.Dismissed(self))
