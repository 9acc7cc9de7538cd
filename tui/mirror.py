"""What the dashboard knows about the ledger, kept current from changes alone.

The dashboard reads the whole ledger once (counts per status, the running tasks) and
from then on only applies what ``Ledger.reads.tasks_since(revision)`` returns, so the cost
of a refresh follows the rate of change, not the size of the ledger.

Counting needs each changed task's *previous* status. The mirror remembers the status
of every task it has seen change; a task it has never seen is either new (created
after the baseline: nothing to subtract) or an old one, whose status at the baseline
is looked up once in its event history (see :attr:`LedgerMirror.unresolved`). While
the ledger is quiet the counts are also re-read and replaced, which heals any drift.

No Textual here: this is plain state, unit-tested on its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from core import TaskEventView, TaskStatus, TaskView

THROUGHPUT_BUCKET_S = 10.0  # seconds per sparkline bar
THROUGHPUT_BUCKETS = 30  # bars: 5 minutes of history
FINISHED = frozenset({TaskStatus.SUCCEEDED, TaskStatus.FAILED})


def status_at(history: Sequence[TaskEventView], at: float) -> TaskStatus | None:
    """A task's status just before time ``at`` from its event history (None: it did
    not exist yet). An event stamped exactly ``at`` counts as after: the baseline is
    read at ``at``, and a change in the same instant cannot have been in it."""
    status: TaskStatus | None = None
    for event in history:
        if event.at >= at:
            break
        status = event.to_status
    return status


class LedgerMirror:
    """Counts per status, running tasks and throughput, updated incrementally.

    Args:
        stall_after_s: Seconds without progress after which a running task is stalled.
        bucket_s: Seconds per throughput bucket.
        buckets: Number of throughput buckets kept.
    """

    def __init__(
        self,
        *,
        stall_after_s: float,
        bucket_s: float = THROUGHPUT_BUCKET_S,
        buckets: int = THROUGHPUT_BUCKETS,
    ) -> None:
        self.stall_after_s = stall_after_s
        self.bucket_s = bucket_s
        self.buckets = buckets
        self.revision = 0
        self.baseline_at = 0.0
        self.counts: dict[TaskStatus, int] = dict.fromkeys(TaskStatus, 0)
        self.running: dict[str, TaskView] = {}
        # Old tasks seen changing whose status at the baseline is not known yet;
        # their new status is already counted, the old one still has to go.
        self.unresolved: dict[str, TaskView] = {}
        self._known: dict[str, tuple[TaskStatus, int]] = {}
        self._finished: Counter[int] = Counter()

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def start(
        self,
        *,
        counts: Mapping[TaskStatus, int],
        revision: int,
        at: float,
        running: Iterable[TaskView] = (),
    ) -> None:
        """Take the baseline: ``counts`` as of ``revision``, read at time ``at``."""
        self.counts = {status: int(counts.get(status, 0)) for status in TaskStatus}
        self.revision = revision
        self.baseline_at = at
        self.unresolved.clear()
        self._known.clear()
        self.running = {}
        for task in running:
            if task.revision <= revision and task.status is TaskStatus.RUNNING:
                self.running[task.task_id] = task
                self._known[task.task_id] = (task.status, task.revision)

    def apply(self, tasks: Sequence[TaskView]) -> list[TaskView]:
        """Apply changed tasks (oldest change first).

        Returns:
            The tasks whose change was new to the mirror (duplicates dropped).
        """
        fresh: list[TaskView] = []
        for task in tasks:
            self.revision = max(self.revision, task.revision)
            known = self._known.get(task.task_id)
            if known is not None and task.revision <= known[1]:
                continue
            fresh.append(task)
            if known is not None:
                self.counts[known[0]] -= 1
            elif task.created_at < self.baseline_at:
                self.unresolved[task.task_id] = task
            self.counts[task.status] += 1
            self._known[task.task_id] = (task.status, task.revision)
            if task.status is TaskStatus.RUNNING:
                self.running[task.task_id] = task
            else:
                self.running.pop(task.task_id, None)
            if task.status in FINISHED and (
                known is not None or task.updated_at >= self.baseline_at
            ):
                self._finished[self._bucket(task.updated_at)] += 1
        self._forget_old_buckets()
        return fresh

    def resolve(self, task_id: str, status_at_baseline: TaskStatus | None) -> None:
        """Settle an unresolved task with its status at the baseline (None: it was
        created after the baseline after all)."""
        if self.unresolved.pop(task_id, None) is not None and status_at_baseline is not None:
            self.counts[status_at_baseline] -= 1

    def reconcile(self, counts: Mapping[TaskStatus, int]) -> None:
        """Replace the counts with ones read while nothing changed (exact)."""
        self.counts = {status: int(counts.get(status, 0)) for status in TaskStatus}
        self.unresolved.clear()

    def is_stalled(self, task: TaskView, now: float) -> bool:
        """Whether ``task`` is stalled at ``now`` (``TaskView.is_stalled`` with this
        mirror's threshold)."""
        return task.is_stalled(now, self.stall_after_s)

    def throughput(self, now: float) -> list[int]:
        """Tasks finished (succeeded or failed) per bucket, oldest bucket first."""
        last = self._bucket(now)
        return [self._finished.get(b, 0) for b in range(last - self.buckets + 1, last + 1)]

    def finished_within(self, now: float, seconds: float) -> int:
        """Tasks finished in the last ``seconds`` (bucket resolution)."""
        last = self._bucket(now)
        first = self._bucket(now - seconds) + 1
        return sum(self._finished.get(b, 0) for b in range(first, last + 1))

    def _bucket(self, ts: float) -> int:
        return int(ts // self.bucket_s)

    def _forget_old_buckets(self) -> None:
        if len(self._finished) <= self.buckets * 2:
            return
        newest = max(self._finished)
        for bucket in [b for b in self._finished if b <= newest - self.buckets]:
            del self._finished[bucket]
