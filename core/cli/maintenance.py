"""``ingestdesk prune``: forget what the ledger only keeps for a while, and remove
what the object store holds that nothing needs.

Two kinds of leftovers reach the store without anyone deleting them: an
``.incoming-*`` file from a write that never finished (a server killed mid-upload,
a full disk), and an object no document and no provider result references (a
request refused after its original was stored while the ledger was unavailable,
so it could not take it back; a document deleted by hand). Both are removed only
once older than STALE_AFTER_S: an upload in flight has just written its file and
not yet committed the document that references it. An object found already stored
by a new upload is touched (:meth:`core.store.LocalStore._holds`; put again in a
bucket), so it is young again for as long as that upload needs.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.cli import progress
from core.cli.command import Command, on_ledger
from core.cli.options import whole_number
from core.cli.output import Output
from core.cli.progress import ProgressLines
from core.errors import BadInput

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from core.ledger import Ledger
    from core.store import StoreEntry

RETENTION_DAYS = 7  # days an idempotency key is kept (core.ledger.idempotency)
DAY_S = 24 * 3600.0
DAYS_MAX = 36_500
# seconds a store file must be left untouched before prune may remove it: far more
# than an upload may take (its body's deadline, 300 s by default, then its commit)
STALE_AFTER_S = 3600.0
OBJECTS_PER_TRANSACTION = 500  # orphans checked and removed under one write lock
# seconds between progress lines while prune removes tasks (a million take minutes)
PROGRESS_EVERY_S = progress.PROGRESS_EVERY_S


@dataclass
class Removed:
    """What prune removed (or, in a dry run, would remove)."""

    idempotency_keys: int = 0
    incoming: int = 0
    objects: int = 0
    bytes: int = 0


def _stale(entry: StoreEntry, now: float) -> bool:
    """Whether ``entry`` is untouched for STALE_AFTER_S (no upload in flight can be
    about to reference it)."""
    return now - entry.modified >= STALE_AFTER_S


async def _prune_store(
    ledger: Ledger, dry_run: bool, removed: Removed, *, now: float | None = None
) -> None:
    """Remove stale unfinished uploads and stale objects nothing references, from a
    folder or a bucket alike (the store lists them, with their age). Listing and
    removing block (a bucket answers over the network): they run in a thread."""
    import asyncio  # here, not at the top: building the command line must not load it

    from core.ledger.reads import unreferenced_objects

    store = ledger.operator.store
    # ``now`` for a test: an object's date in a bucket cannot be moved back.
    now = time.time() if now is None else now
    unfinished = await asyncio.to_thread(lambda: [e for e in store.unfinished() if _stale(e, now)])
    for entry in unfinished:
        removed.incoming += 1
        removed.bytes += entry.size
        if not dry_run:
            await asyncio.to_thread(store.remove_unfinished, entry.name)
    listed = await asyncio.to_thread(lambda: [e for e in store.entries() if _stale(e, now)])
    candidates = {entry.name: entry.size for entry in listed}
    keys = list(candidates)
    for start in range(0, len(keys), OBJECTS_PER_TRANSACTION):
        part = keys[start : start + OBJECTS_PER_TRANSACTION]

        def tx(conn: Connection, part: list[str] = part) -> list[str]:
            # Checked and removed under the write lock: no document referencing one
            # of them can commit in between (see core.ledger.Ledger.take_back).
            orphans = unreferenced_objects(conn, part)
            if not dry_run:
                for key in orphans:
                    store.remove(key)
            return orphans

        orphans = await (ledger.transactions.read(tx) if dry_run else ledger.transactions.write(tx))
        removed.objects += len(orphans)
        removed.bytes += sum(candidates[key] for key in orphans)


async def _old_keys(ledger: Ledger, older_than_s: float) -> int:
    from sqlalchemy import func, select

    from core.ledger.schema import IDEMPOTENCY_KEYS

    cutoff = ledger.idempotency.clock() - older_than_s
    query = select(func.count()).where(IDEMPOTENCY_KEYS.c.created_at < cutoff)
    return int(await ledger.transactions.read(lambda conn: conn.execute(query).scalar_one()))


class _PruneProgress:
    """Hears of each batch of the prune (tasks, history rows); see ProgressLines."""

    def __init__(self, out: Output, total: int) -> None:
        self.lines = ProgressLines(out, "pruning", total, every_s=PROGRESS_EVERY_S)
        self.events = 0

    def __call__(self, tasks: int, events: int) -> None:
        self.events += events
        self.lines.advance(tasks, f" and {self.events} history rows removed so far")


async def _prune_tasks(
    ledger: Ledger, args: argparse.Namespace, out: Output
) -> tuple[dict[str, object], str]:
    """Finished tasks and their history (core.ledger.retention), when asked."""
    from core.ledger.retention import count_prunable, prune_tasks

    days = args.tasks_older_than
    if days is None:
        if args.include_failed:
            raise BadInput("--include-failed needs --tasks-older-than DAYS")
        return {}, ""
    now = ledger.clock()
    progress = None
    if not args.dry_run:
        total = await count_prunable(
            ledger.transactions,
            older_than_s=days * DAY_S,
            now=now,
            include_failed=args.include_failed,
        )
        progress = _PruneProgress(out, total)
    pruned = await prune_tasks(
        ledger.transactions,
        older_than_s=days * DAY_S,
        now=now,
        include_failed=args.include_failed,
        dry_run=args.dry_run,
        on_batch=progress,
    )
    kinds = "succeeded, cancelled and failed" if args.include_failed else "succeeded and cancelled"
    verb = "would remove" if args.dry_run else "removed"
    line = (
        f"{verb} {pruned.tasks} {kinds} tasks finished over {days} days ago and "
        f"{pruned.events} history rows"
    )
    if not args.dry_run:
        batches = "1 batch" if pruned.batches == 1 else f"{pruned.batches} batches"
        line += f" ({batches}, longest {pruned.longest_batch_s * 1000:.0f} ms)"
    return {
        "tasks_removed": pruned.tasks,
        "task_events_removed": pruned.events,
        "tasks_older_than_days": days,
        "include_failed": args.include_failed,
        "batches": pruned.batches,
        "longest_batch_ms": round(pruned.longest_batch_s * 1000, 1),
    }, line


async def cmd_prune(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk prune [--older-than DAYS] [--tasks-older-than DAYS
    [--include-failed]] [--dry-run]``: forget old idempotency keys (and, when asked,
    finished tasks and their history); remove stale incoming files and objects
    nothing references."""
    tasks, tasks_line = await _prune_tasks(ledger, args, out)
    removed = Removed()
    older_than_s = args.older_than * DAY_S
    if args.dry_run:
        removed.idempotency_keys = await _old_keys(ledger, older_than_s)
    else:
        removed.idempotency_keys = await ledger.idempotency.prune(older_than_s)
    await _prune_store(ledger, args.dry_run, removed)
    verb = "would remove" if args.dry_run else "removed"
    out.emit(
        {
            "idempotency_keys_removed": removed.idempotency_keys,
            "older_than_days": args.older_than,
            "incoming_files_removed": removed.incoming,
            "objects_removed": removed.objects,
            "bytes_removed": removed.bytes,
            "dry_run": args.dry_run,
            **tasks,
        },
        [
            f"{verb} {removed.idempotency_keys} idempotency keys older than {args.older_than} days",
            f"{verb} {removed.incoming} unfinished incoming files and {removed.objects} "
            f"objects nothing references ({removed.bytes} bytes)",
            *([tasks_line] if tasks_line else []),
        ],
    )


def _prune(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--older-than",
        metavar="DAYS",
        type=whole_number(0, DAYS_MAX),
        default=RETENTION_DAYS,
        help=f"forget idempotency keys older than this (default {RETENTION_DAYS} days)",
    )
    parser.add_argument(
        "--tasks-older-than",
        metavar="DAYS",
        type=whole_number(0, DAYS_MAX),
        default=None,
        help="also delete the succeeded and cancelled tasks that finished longer ago than "
        "this, with their history, in short batches while workers run (default: keep "
        "every task)",
    )
    parser.add_argument(
        "--include-failed",
        action="store_true",
        help="with --tasks-older-than: failed tasks too (kept by default)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="count what would be removed (and its bytes); remove nothing",
    )


PRUNE = Command(
    "prune",
    "forget idempotency keys past their retention (7 days); remove unfinished "
    "incoming files and objects nothing references (untouched for an hour)",
    on_ledger(cmd_prune, create=False),
    _prune,
)
