"""Task commands: ``tasks``, ``task``, ``cancel``, ``retry``, and ``errors`` (the
error codes a task can fail with)."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import TYPE_CHECKING

from core.cli import progress
from core.cli.command import Command, on_ledger
from core.cli.options import limit_argument
from core.cli.output import EXIT_OK, Output, task_line, when
from core.cli.progress import ProgressLines
from core.errors import BadInput
from core.filters import EVERY_TASK, TaskFilter, parse_filter
from core.states import ERRORS, ErrorCode, TaskStatus

if TYPE_CHECKING:
    from core.ledger import BulkResult, Ledger

DEFAULT_LIST_LIMIT = 1000  # tasks listed at most


async def cmd_tasks(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk tasks``: tasks, newest first, narrowed by status, code or filter."""
    tasks = await ledger.reads.list_tasks(
        status=args.status,
        error_code=args.error_code,
        filter=parse_filter(args.filter) if args.filter is not None else None,
        limit=args.limit,
    )
    out.emit([t.to_dict() for t in tasks], [task_line(t) for t in tasks] or ["no tasks"])


async def cmd_task(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk task TASK_ID``: one task with its event history."""
    task = await ledger.reads.get_task(args.task_id)
    detail = await ledger.task_detail(task)
    value = detail.to_dict()
    history, requests, stalled = detail.history or [], detail.requests, detail.stalled
    lines = [
        f"task      {task.task_id}",
        f"document  {task.document_id}  {task.document_name or '(gone)'}",
        f"status    {task.status.value}{'  (stalled)' if stalled else ''}",
        f"stage     {task.stage.value} {task.completed}/{task.total}",
        f"attempt   {task.attempt} of {task.max_attempts}",
        f"worker    {task.worker_id or '-'}",
        f"key       {task.options.get('processing_key', '-')}"
        + (
            f"  (reused from task {task.options['reused_from']})"
            if "reused_from" in task.options
            else ""
        ),
        f"error     {task.error_code.value if task.error_code else '-'}"
        + (f" ({task.error_detail})" if task.error_detail else ""),
    ]
    if requests:
        states = Counter(r.state.value for r in requests)
        lines.append("provider  " + ", ".join(f"{n} {state}" for state, n in states.items()))
        lines.extend(
            f"  request {r.request_key[:12]} {r.state.value}: {r.detail or ''}"
            for r in requests
            if r.state.value not in ("done", "recovered")
        )
    lines.append("history:")
    for e in history:
        lines.append(
            f"  {when(e.at)}  {e.from_status or '-':>10} -> {e.to_status:<10} stage={e.stage} "
            f"attempt={e.attempt} actor={e.actor}"
            + (f" code={e.error_code}" if e.error_code else "")
            + (f" reason={e.reason!r}" if e.reason else "")
        )
    out.emit(value, lines)


def _bulk_lines(verb: str, past: str, result: BulkResult) -> list[str]:
    head = "would " + verb if result.dry_run else past
    count = result.eligible if result.dry_run else result.done
    lines = [f"{head} {count} of {result.matched} matching tasks"]
    lines += [f"  not eligible: {n} x {why}" for why, n in sorted(result.ineligible.items())]
    if result.refused:
        lines.append(f"  refused at execution (changed meanwhile): {result.refused}")
    return lines


class _BulkProgress:
    """A bulk action's progress lines (a million tasks' retry takes minutes)."""

    def __init__(self, out: Output, doing: str) -> None:
        self.lines = ProgressLines(out, doing, 0, every_s=progress.PROGRESS_EVERY_S)

    def __call__(self, so_far: BulkResult) -> None:
        self.lines.total = so_far.eligible
        detail = f", {so_far.refused} changed meanwhile and left alone" if so_far.refused else ""
        self.lines.advance(so_far.done + so_far.refused - self.lines.done, detail)


def _target(args: argparse.Namespace) -> str | TaskFilter:
    """The one task to act on, or the filter naming the tasks. An action that changes
    state needs exactly one of TASK_ID, ``--filter`` or ``--all``: never "every task"
    by default, and a filter without terms (``--filter ' '``) is not a way to say it."""
    given = [args.task_id is not None, args.filter is not None, args.all]
    if given.count(True) != 1:
        raise BadInput("give one of TASK_ID, --filter EXPR or --all")
    if args.task_id is not None:
        if args.dry_run:
            raise BadInput("--dry-run goes with --filter or --all")
        task_id: str = args.task_id
        return task_id
    if args.all:
        return EVERY_TASK
    chosen = parse_filter(args.filter)
    if not chosen.names_tasks:
        raise BadInput(
            f"--filter {args.filter!r} has no terms and would match every task; "
            "give a filter, or --all to act on every task"
        )
    return chosen


async def cmd_cancel(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk cancel``: cancel one task, or every task matching a filter."""
    target = _target(args)
    if isinstance(target, str):
        task = await ledger.operator.cancel(target, actor=args.actor, reason=args.reason)
        line = f"cancelled task={task.task_id} document={task.document_id} (a draft again)"
        out.emit(task.to_dict(), line)
        return
    result = await ledger.operator.bulk_cancel(
        target,
        actor=args.actor,
        reason=args.reason,
        dry_run=args.dry_run,
        on_batch=_BulkProgress(out, "cancelling"),
    )
    out.emit(result.to_dict(), _bulk_lines("cancel", "cancelled", result))


async def cmd_retry(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk retry``: requeue one failed task, or every one matching a filter."""
    target = _target(args)
    if isinstance(target, str):
        task = await ledger.operator.retry(target, actor=args.actor, reason=args.reason)
        out.emit(
            task.to_dict(),
            f"requeued task={task.task_id} attempt={task.attempt} status={task.status}",
        )
        return
    result = await ledger.operator.bulk_retry(
        target,
        actor=args.actor,
        reason=args.reason,
        dry_run=args.dry_run,
        on_batch=_BulkProgress(out, "requeueing"),
    )
    out.emit(result.to_dict(), _bulk_lines("requeue", "requeued", result))


def run_errors(args: argparse.Namespace, out: Output) -> int:
    """``ingestdesk errors``: the error codes, what they mean and what to do. Needs
    no ledger."""
    value = [
        {
            "error_code": i.code.value,
            "meaning": i.meaning,
            "advice": i.advice,
            "transient": i.transient,
        }
        for i in ERRORS.values()
    ]
    out.emit(value, [f"{i.code.value:<22} {i.meaning}; {i.advice}" for i in ERRORS.values()])
    return EXIT_OK


# ------------------------------------------------------------------ arguments


def _tasks(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--status", choices=[s.value for s in TaskStatus])
    parser.add_argument("--error-code", choices=[c.value for c in ErrorCode])
    parser.add_argument("--filter", help="filter expression, e.g. 'status:failed code:parse_error'")
    limit_argument(parser, DEFAULT_LIST_LIMIT, "tasks listed")


def _task_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task_id")


def _one_or_filtered(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task_id", nargs="?")
    parser.add_argument("--filter", help="act on every task matching this filter expression")
    parser.add_argument(
        "--all", action="store_true", help="act on every task (an empty filter never does)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="with --filter or --all: count, change nothing"
    )
    parser.add_argument("--reason", help="why, for the audit log")


# Listing and acting on tasks needs a ledger that holds them: a missing one is refused,
# not created (create=False), so a mistyped --db leaves nothing behind.
TASKS = Command(
    "tasks",
    "list ingestion tasks, newest first",
    on_ledger(cmd_tasks, create=False),
    _tasks,
)
TASK = Command(
    "task", "one task with its event history", on_ledger(cmd_task, create=False), _task_id
)
# A bulk action is one transaction per task: a Ctrl-C stops it between two.
INTERRUPTED_BULK = (
    "interrupted: tasks already changed stay changed (each change is in its history; "
    "`ingestdesk tasks` shows where it stopped)"
)
CANCEL = Command(
    "cancel",
    "cancel a queued, running or retry_wait task",
    on_ledger(cmd_cancel, create=False),
    _one_or_filtered,
    interrupted=INTERRUPTED_BULK,
)
RETRY = Command(
    "retry",
    "requeue a failed task",
    on_ledger(cmd_retry, create=False),
    _one_or_filtered,
    interrupted=INTERRUPTED_BULK,
)
ERROR_CODES = Command("errors", "the error codes, what they mean and what to do", run_errors)
