"""The dashboard's view of a task filter.

Core owns the language (``core.parse_filter``): the ledger evaluates a filter in SQL
to load the table's window, and ``TaskFilter.matches`` decides in memory whether a
*changed* task belongs in it, so the two can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from core import Reads, TaskFilter, TaskStatus, TaskView, parse_filter
from core.ledger import TaskPosition


@dataclass(frozen=True)
class TaskQuery:
    """A parsed filter, as the dashboard uses it."""

    filter: TaskFilter

    @property
    def text(self) -> str:
        return self.filter.text

    @property
    def empty(self) -> bool:
        return not self.filter

    @property
    def status(self) -> TaskStatus | None:
        """The status, when the filter is exactly one ``status:`` term."""
        terms = self.filter.terms
        if len(terms) == 1 and terms[0].field == "status" and not terms[0].negate:
            return TaskStatus(terms[0].value)
        return None

    def matches(self, task: TaskView) -> bool:
        return self.filter.matches(task)

    async def window(
        self, reads: Reads, limit: int, *, before: TaskPosition | None = None
    ) -> list[TaskView]:
        """The newest ``limit`` matching tasks (older than ``before``), newest first."""
        return await reads.list_tasks(filter=self.filter or None, limit=limit, before=before)


def parse_query(text: str) -> TaskQuery:
    """Parse the filter bar's text.

    Raises:
        BadInput: A malformed term, in words the operator can act on.
    """
    return TaskQuery(parse_filter(text))


def status_query(status: TaskStatus | None) -> TaskQuery:
    """The query a single-key status filter stands for."""
    return parse_query("" if status is None else f"status:{status.value}")
