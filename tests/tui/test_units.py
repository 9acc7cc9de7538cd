"""Plain-Python parts of the dashboard: the ledger mirror, attempt grouping, the
filter completion and the formatting helpers."""

from __future__ import annotations

from dataclasses import replace

from core import ErrorCode, Stage, TaskEventView, TaskStatus, TaskView
from tui.format import age, shorten, text_bar
from tui.mirror import LedgerMirror, status_at
from tui.screens.task_detail import attempts_from
from tui.widgets.filter_bar import TermSuggester

T0 = 1_800_000_000.0


def task(task_id: str, status: TaskStatus, revision: int, *, created: float = T0 - 100) -> TaskView:
    return TaskView(
        task_id=task_id * 8,
        document_id="d" * 32,
        status=status,
        stage=Stage.PARSE,
        completed=0,
        total=1,
        attempt=1,
        error_code=None,
        error_detail=None,
        created_at=created,
        updated_at=T0 + revision,
        revision=revision,
    )


def event(
    n: int,
    at: float,
    source: TaskStatus | None,
    target: TaskStatus,
    attempt: int = 0,
    actor: str = "w1",
    code: ErrorCode | None = None,
) -> TaskEventView:
    return TaskEventView(n, "a" * 32, at, actor, source, target, Stage.PARSE, attempt, code, None)


def started(counts: dict[TaskStatus, int]) -> LedgerMirror:
    mirror = LedgerMirror(stall_after_s=60)
    mirror.start(counts=counts, revision=10, at=T0)
    return mirror


def test_known_tasks_move_between_counts() -> None:
    mirror = started({TaskStatus.QUEUED: 1})
    new = task("a", TaskStatus.QUEUED, 11, created=T0 + 1)
    mirror.apply([new])  # created after the baseline: nothing to subtract
    assert mirror.counts[TaskStatus.QUEUED] == 2
    mirror.apply([replace(new, status=TaskStatus.RUNNING, revision=12)])
    assert (mirror.counts[TaskStatus.QUEUED], mirror.counts[TaskStatus.RUNNING]) == (1, 1)
    assert set(mirror.running) == {new.task_id}
    mirror.apply([replace(new, status=TaskStatus.RUNNING, revision=12)])  # duplicate
    assert mirror.counts[TaskStatus.RUNNING] == 1
    mirror.apply([replace(new, status=TaskStatus.SUCCEEDED, revision=13, updated_at=T0 + 5)])
    assert mirror.counts[TaskStatus.SUCCEEDED] == 1 and not mirror.running
    assert mirror.finished_within(T0 + 9, 60) == 1
    assert mirror.throughput(T0 + 9)[-1] == 1


def test_old_tasks_are_resolved_from_their_history() -> None:
    mirror = started({TaskStatus.FAILED: 2, TaskStatus.QUEUED: 1})
    old = task("b", TaskStatus.QUEUED, 11)  # an operator retried an old failed task
    mirror.apply([old])
    assert old.task_id in mirror.unresolved
    history = [
        event(1, T0 - 100, None, TaskStatus.QUEUED),
        event(2, T0 - 90, TaskStatus.QUEUED, TaskStatus.RUNNING, 1),
        event(3, T0 - 80, TaskStatus.RUNNING, TaskStatus.FAILED, 1),
        event(4, T0, TaskStatus.FAILED, TaskStatus.QUEUED, 1, actor="alice"),
    ]
    mirror.resolve(old.task_id, status_at(history, mirror.baseline_at))
    assert mirror.counts[TaskStatus.FAILED] == 1 and mirror.counts[TaskStatus.QUEUED] == 2
    assert not mirror.unresolved


def test_reconcile_replaces_the_counts() -> None:
    mirror = started({TaskStatus.QUEUED: 5})
    mirror.reconcile({TaskStatus.QUEUED: 4, TaskStatus.SUCCEEDED: 1})
    assert mirror.total == 5 and mirror.counts[TaskStatus.CANCELLED] == 0


def test_stalled_means_no_progress_for_a_while() -> None:
    mirror = started({})
    running = replace(task("c", TaskStatus.RUNNING, 11), progress_at=T0)
    assert not mirror.is_stalled(running, T0 + 59)
    assert mirror.is_stalled(running, T0 + 61)


def test_attempts_are_grouped_from_events() -> None:
    history = [
        event(1, T0, None, TaskStatus.QUEUED, 0, actor="alice"),
        event(2, T0 + 1, TaskStatus.QUEUED, TaskStatus.RUNNING, 1, actor="w1"),
        event(
            3,
            T0 + 3,
            TaskStatus.RUNNING,
            TaskStatus.RETRY_WAIT,
            1,
            code=ErrorCode.PROVIDER_UNAVAILABLE,
        ),
        event(4, T0 + 9, TaskStatus.RETRY_WAIT, TaskStatus.RUNNING, 2, actor="w2"),
        event(5, T0 + 12, TaskStatus.RUNNING, TaskStatus.SUCCEEDED, 2, actor="w2"),
    ]
    attempts = attempts_from(history)
    assert [(a.number, a.worker, a.outcome, a.error_code) for a in attempts] == [
        (1, "w1", "retry_wait", "provider_unavailable"),
        (2, "w2", "succeeded", ""),
    ]
    assert attempts[1].ended_at == T0 + 12


async def test_filter_terms_complete() -> None:
    suggest = TermSuggester()
    assert await suggest.get_suggestion("stat") == "status:queued"
    assert await suggest.get_suggestion("report !code:e") == "report !code:empty_document"
    assert await suggest.get_suggestion("zzz") is None


def test_formatting() -> None:
    assert [age(s) for s in (5, 47, 125, 7200, 200000)] == ["0s", "40s", "2m", "2h", "2d"]
    assert text_bar(1, 2, 4) == "██░░" and text_bar(0, 0, 3) == "░░░"
    assert shorten("abcdef", 4) == "abc…" and shorten("ab", 4) == "ab"
