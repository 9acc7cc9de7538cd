"""The task filter language shared by ``ingestdesk tasks --filter`` and the
dashboard's ``/`` bar.

    status:failed code:parse_error stage:embedding attempt:>1 worker:w1 name:report
    !status:succeeded  quarterly  ocr:low  pages:skipped

Terms are AND-ed. ``field:value`` matches a field (``!`` in front negates);
a bare word matches the document name, the task id prefix or the error code.
``attempt`` takes ``>``, ``>=``, ``<``, ``<=`` or ``=`` before its number.

The page terms ask about the task's document version's page record
(:mod:`core.ledger.pages`): ``ocr:any`` (a page read by OCR), ``ocr:low`` (an OCR page
under the ledger's review threshold, ``ocr_review_below``), ``ocr:empty`` (a page OCR
found nothing on), ``pages:skipped`` (a page skipped) and ``pages:flagged`` (what flags
a version for review: ``ocr:low`` or ``pages:skipped``). A task row does not carry its
pages, so only the ledger decides these (:attr:`TaskFilter.needs_ledger`).

Names and worker ids match without regard to case, in every script: ``name:ärger``
finds ``ÄRGER.txt``. A filter is decided twice, in SQL by the ledger (a list, a bulk
action's count) and in memory by :meth:`Term.matches` (the dashboard deciding whether
a changed task belongs in its window), so both use one case mapping, :func:`fold`:
the SQLite ledger registers it as a SQL function on every connection, and on
PostgreSQL it matches ``lower()`` under a UTF-8 ctype (SQLite's own ``lower()`` only
knows ASCII, so ``name:ÄRGER`` once found nothing there and ``ärger.txt`` in memory).

A filter is bounded (FILTER_TEXT_MAX, FILTER_TERMS_MAX, TERM_VALUE_MAX) before it is
split into terms: every face passes text from whoever types or sends it to one SQL
statement, and a statement of 990 terms is what SQLite refuses ("Expression tree is
too large") and what took a server's memory from 202 to 662 MB. What a person types
in the ``/`` bar is a handful of terms.
"""

from __future__ import annotations

import operator
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.errors import BadInput
from core.states import ErrorCode, Stage, TaskStatus

if TYPE_CHECKING:
    from core.ledger.views import TaskView

ATTEMPT_MAX = 1_000_000  # the largest attempt number a filter may name
FILTER_TEXT_MAX = 1000  # characters of a filter at most
FILTER_TERMS_MAX = 32  # terms of a filter at most
# Characters of one term's value at most: a display name's own limit (core.intake.NAME_MAX,
# not imported: intake imports the store), so no longer value could match anything.
TERM_VALUE_MAX = 255
# The name of :func:`fold` as a SQL function on SQLite ledgers (core.ledger.transactions).
SQLITE_FOLD_FUNCTION = "ingestdesk_fold"


def fold(text: str) -> str:
    """``text`` in lower case for matching, one character at a time (Unicode's simple
    case mapping: what PostgreSQL's ``lower()`` does under a UTF-8 ctype, character by
    character, and unlike ``str.lower`` no context rules such as the final sigma,
    whose results SQL could not reproduce). Deterministic, so SQLite may use it in
    queries like a built-in."""
    if text.isascii():
        return text.lower()
    return "".join(_fold_char(ch) for ch in text)


def _fold_char(ch: str) -> str:
    lowered = ch.lower()
    # Only U+0130 (İ) lowers to two characters (i + a combining dot); its simple
    # mapping is the first of them.
    return lowered if len(lowered) == 1 else lowered[0]


# The page terms and the values each takes (see the module's docstring).
PAGE_TERMS: dict[str, tuple[str, ...]] = {
    "ocr": ("any", "low", "empty"),
    "pages": ("skipped", "flagged"),
}
PAGE_FIELDS = frozenset(PAGE_TERMS)
FIELDS = ("status", "code", "stage", "attempt", "worker", "name", "id", "document", *PAGE_TERMS)
ALIASES = {"error": "code", "error_code": "code", "doc": "document", "task": "id"}
COMPARISONS: dict[str, Callable[[int, int], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "=": operator.eq,
}


@dataclass(frozen=True)
class Term:
    """One condition. ``field`` is None for free text."""

    field: str | None
    value: str
    negate: bool = False
    op: str = "="

    def matches(self, task: TaskView) -> bool:
        """Whether ``task`` meets the term. A page term cannot be decided from a task
        row (see :attr:`TaskFilter.needs_ledger`): it counts as met here, so a caller
        deciding in memory keeps the task and asks the ledger."""
        if self.field in PAGE_FIELDS:
            return True
        return self._test(task) != self.negate

    def _test(self, task: TaskView) -> bool:
        # Keep in step with core.ledger.reads.term_clause, the same test in SQL.
        value = self.value
        if self.field is None:
            v = fold(value)
            return (
                v in fold(task.document_name or "")
                or task.task_id.startswith(v)
                or (task.error_code is not None and v in task.error_code.value)
            )
        if self.field == "status":
            return task.status.value == value
        if self.field == "code":
            return task.error_code is not None and task.error_code.value == value
        if self.field == "stage":
            return task.stage.value == value
        if self.field == "attempt":
            return COMPARISONS[self.op](task.attempt, int(value))
        if self.field == "worker":
            return task.worker_id is not None and fold(value) in fold(task.worker_id)
        if self.field == "name":
            return fold(value) in fold(task.document_name or "")
        if self.field == "id":
            return task.task_id.startswith(value.lower())
        if self.field == "document":
            return task.document_id.startswith(value.lower())
        raise AssertionError(self.field)


@dataclass(frozen=True)
class TaskFilter:
    """A parsed filter: all terms must match.

    A filter with no terms matches every task, which is what a list wants and never
    what an action that changes state may assume: :attr:`everything` is the explicit
    word for "every task" (``cancel --all``), and bulk actions refuse an empty filter
    without it.
    """

    terms: tuple[Term, ...] = ()
    text: str = ""
    everything: bool = False

    def matches(self, task: TaskView) -> bool:
        return all(t.matches(task) for t in self.terms)

    def __bool__(self) -> bool:
        return bool(self.terms)

    @property
    def needs_ledger(self) -> bool:
        """Whether only the ledger can decide this filter (it has a page term):
        :meth:`matches` cannot tell a changed task in from out."""
        return any(t.field in PAGE_FIELDS for t in self.terms)

    @property
    def never_matches(self) -> bool:
        """Whether no task can meet the filter, by its terms alone: a wanted term that
        implies one the filter negates (``name:report !name:rep``: a name holding
        "report" holds "rep"), or attempt bounds that leave no number
        (``attempt:>3 attempt:<2``). The ledger then answers at once rather than
        read every task to find none (2.8 s at a million on SQLite)."""
        wanted = [t for t in self.terms if not t.negate and t.field not in PAGE_FIELDS]
        negated = [t for t in self.terms if t.negate and t.field not in PAGE_FIELDS]
        if any(_implies(w, n) for w in wanted for n in negated):
            return True
        return attempt_bounds(self.terms) is None

    @property
    def names_tasks(self) -> bool:
        """Whether an action may use this filter: it has terms, or says "every task"."""
        return bool(self.terms) or self.everything


EVERY_TASK = TaskFilter(text="every task", everything=True)


def _implies(wanted: Term, negated: Term) -> bool:
    """Whether every task meeting ``wanted`` (not negated) meets ``negated``'s test,
    so that the two together match nothing. Only what :meth:`Term._test` makes
    plain: equal values of one field; a value inside another where the test is
    "contains" (name, worker); a prefix of another where it is "starts with" (id,
    document), and a bare word, which tests a name and an error code for the word
    and a task id for its start, is implied by a bare word or an id it starts, by a
    name holding it and by an error code holding it."""
    field, value = negated.field, negated.value
    if field is None:
        word = fold(value)
        if wanted.field is None:
            return fold(wanted.value).startswith(word)
        if wanted.field == "name":
            return word in fold(wanted.value)
        if wanted.field == "id":
            return wanted.value.lower().startswith(word)
        if wanted.field == "code":
            return word in wanted.value
        return False
    if wanted.field != field:
        return False
    if field in ("name", "worker"):
        return fold(value) in fold(wanted.value)
    if field in ("id", "document"):
        return wanted.value.lower().startswith(value.lower())
    if field in ("status", "code", "stage"):
        return wanted.value == value
    return False  # attempt: see attempt_bounds


def attempt_bounds(terms: tuple[Term, ...]) -> tuple[int, int | None, frozenset[int]] | None:
    """The attempt numbers ``terms`` allow: the lowest, the highest (None: no bound)
    and those excluded, or None when no number is left (``attempt:>3 attempt:<2``,
    ``attempt:=2 attempt:=3``, ``attempt:=2 !attempt:=2``)."""
    low, high = 0, None
    excluded: set[int] = set()
    for term in terms:
        if term.field != "attempt":
            continue
        number = int(term.value)
        op = _NEGATED_COMPARISON[term.op] if term.negate else term.op
        if op == "!=":
            excluded.add(number)
            continue
        if op in (">", ">=", "="):
            low = max(low, number + 1 if op == ">" else number)
        if op in ("<", "<=", "="):
            top = number - 1 if op == "<" else number
            high = top if high is None else min(high, top)
    if high is not None:
        left = high - low + 1  # numbers in the range, before the exclusions
        if left <= 0 or (left <= len(excluded) and excluded.issuperset(range(low, high + 1))):
            return None
        excluded = {n for n in excluded if low <= n <= high}
    else:
        excluded = {n for n in excluded if n >= low}
    return low, high, frozenset(excluded)


# A negated comparison is the opposite comparison: !attempt:>3 is attempt:<=3.
_NEGATED_COMPARISON = {">": "<=", ">=": "<", "<": ">=", "<=": ">", "=": "!="}


class FilterTooLarge(BadInput):
    """A filter over its limits (characters, terms, a term's length); the message
    names the limit. Over HTTP a 400: the request is refused for its size, as a body
    over its cap is, before any of it is looked at."""


def parse_filter(text: str) -> TaskFilter:
    """Parse filter text, refusing unknown fields and values with a clear message,
    and a filter over its limits (:class:`FilterTooLarge`) before it is split."""
    if len(text) > FILTER_TEXT_MAX:
        raise FilterTooLarge(
            f"filter: at most {FILTER_TEXT_MAX} characters (this one has {len(text)})"
        )
    control = _CONTROL.search(text)
    if control is not None:
        # No display name holds one (core.intake.display_name makes each a "_"), nor
        # does a task id or an error code, so such a term could only match nothing,
        # and only after reading every task (FTS5 cannot take a NUL in its query:
        # 5-12 s at a million tasks); PostgreSQL refuses a NUL in any text. What
        # was meant is unclear: ask, on every face and backend alike.
        raise BadInput(f"filter: a control character ({control.group()!r}) cannot be in a filter")
    words = _words(text)
    if len(words) > FILTER_TERMS_MAX:
        raise FilterTooLarge(
            f"filter: at most {FILTER_TERMS_MAX} terms (this one has {len(words)})"
        )
    terms = [_term(word) for word in words]
    return TaskFilter(tuple(terms), text.strip())


# C0 and C1 control characters, but for the whitespace that separates terms.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# What shlex (POSIX mode) splits on, and what makes its work more than a split.
_SHELL_SPACE = re.compile(r"[ \t\r\n]+")
_SHELL_QUOTING = frozenset("\"'\\")


def _words(text: str) -> list[str]:
    """Shell-style words. shlex reads a character at a time (~2 ms for a filter at
    FILTER_TEXT_MAX, on the server's event loop); text without quotes or backslashes
    splits the same on its whitespace alone."""
    if _SHELL_QUOTING.isdisjoint(text):
        return [w for w in _SHELL_SPACE.split(text) if w]
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise BadInput(f"filter: {exc}") from exc


def _term(word: str) -> Term:
    if not word:
        # A quoted empty word ('""'): not a stray "!", which is the message below.
        raise BadInput('filter: an empty term ("") names nothing; give a word or field:value')
    negate = word.startswith("!")
    if negate:
        word = word[1:]
    if not word:
        raise BadInput("filter: '!' needs a term after it")
    field, sep, value = word.partition(":")
    if not sep:
        value = word
    if len(value) > TERM_VALUE_MAX:
        raise FilterTooLarge(
            f"filter: a term's value is at most {TERM_VALUE_MAX} characters (one has {len(value)})"
        )
    if not sep:
        return Term(None, word, negate)
    field = ALIASES.get(field.lower(), field.lower())
    if field not in FIELDS:
        raise BadInput(f"filter: unknown field {field!r} (fields: {', '.join(FIELDS)})")
    if not value:
        raise BadInput(f"filter: {field}: needs a value")
    choices: tuple[str, ...] = ()
    if field == "status":
        choices = tuple(s.value for s in TaskStatus)
    elif field == "code":
        choices = tuple(c.value for c in ErrorCode)
    elif field == "stage":
        choices = tuple(s.value for s in Stage)
    elif field in PAGE_TERMS:
        choices = PAGE_TERMS[field]
    if choices and value.lower() not in choices:
        raise BadInput(f"filter: {field} must be one of {', '.join(choices)}")
    if field == "attempt":
        op = next((o for o in COMPARISONS if value.startswith(o)), "=")
        number = value[len(op) :] if value.startswith(op) else value
        if not (number.isascii() and number.isdigit()):
            raise BadInput(f"filter: attempt needs a number, e.g. attempt:>1 (got {value!r})")
        if int(number) > ATTEMPT_MAX:
            # Beyond what any task reaches, and beyond what SQLite's integers hold.
            raise BadInput(f"filter: attempt must be at most {ATTEMPT_MAX} (got {number})")
        return Term(field, number, negate, op)
    return Term(field, value.lower() if choices else value, negate)
