"""``ingestdesk worker``: arguments and the command that runs a :class:`core.ingest.worker.Worker`.

Light on purpose: the CLI imports this module to build its parser, and a looping
worker starts its parser process (:func:`start_parser_early`) before the ledger's
modules (SQLAlchemy: ~0.3 s of imports) load, so the two start-ups overlap on two
cores instead of the first document waiting for the parser.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import signal
import sys
from typing import TYPE_CHECKING, Any

from core.config import Settings
from core.errors import BadInput
from core.ingest.parse_pool import ParserPool

if TYPE_CHECKING:
    from core.cli import Output

DEFAULT_STOP_GRACE_S = 10.0  # seconds running tasks get to finish on SIGTERM


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "task_id", nargs="?", help="claim this task (default: the oldest claimable)"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--loop", action="store_true", help="keep claiming until interrupted")
    mode.add_argument(
        "--until-idle", action="store_true", help="drain everything claimable, then exit"
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=2,
        help="tasks in flight at once (default 2: the next is parsed while the last is "
        "indexed; doubled while tasks take under 20 ms)",
    )
    parser.add_argument(
        "--parsers", type=int, default=1, help="parser processes (default 1, one core's worth)"
    )
    parser.add_argument("--worker-id", help="name shown in the ledger (default host-pid)")
    parser.add_argument("--lease", type=float, help="lease in seconds (default 30)")
    parser.add_argument("--parser", choices=["pypdf", "pdfium"], default="pypdf")
    parser.add_argument("--chunk-size", type=int, default=1000, help="characters per chunk")
    parser.add_argument("--chunk-overlap", type=int, default=150, help="characters of overlap")


def start_parser_early(args: argparse.Namespace) -> ParserPool | None:
    """The parser pool of a ``--loop`` or ``--until-idle`` worker, its first process
    already starting; None for a single-task run (it may miss its claim and then
    needs no parser). Called before the ledger's modules are imported."""
    if not (args.loop or args.until_idle) or args.concurrency < 1 or args.parsers < 1:
        return None
    pool = ParserPool(workers=min(args.parsers, args.concurrency))
    pool.prestart()
    return pool


async def run_worker_command(
    settings: Settings,
    args: argparse.Namespace,
    out: Output,
    pool: ParserPool | None = None,
) -> None:
    """``ingestdesk worker``: validate the arguments, open the ledger, run a worker.

    Args:
        settings: The ledger to work on.
        args: Parsed ``worker`` arguments.
        out: Where the summary goes.
        pool: A pool from :func:`start_parser_early`; closed here. Default: a new one.
    """
    if pool is None:
        pool = ParserPool(workers=max(1, min(args.parsers, args.concurrency)))
    try:
        await _run(settings, args, out, pool)
    finally:
        await pool.aclose()


async def _run(settings: Settings, args: argparse.Namespace, out: Output, pool: ParserPool) -> None:
    from core.ingest.pipeline import PipelineOptions
    from core.ingest.worker import Worker, WorkerEvent
    from core.ledger import Ledger

    if args.concurrency < 1:
        raise BadInput("--concurrency must be at least 1")
    if args.parsers < 1:
        raise BadInput("--parsers must be at least 1")
    if args.lease is not None and args.lease <= 0:
        raise BadInput("--lease must be positive")
    if args.parser == "pdfium":
        try:
            import pypdfium2  # noqa: F401
        except ImportError as exc:
            raise BadInput(
                "--parser pdfium needs the extra: pip install 'ingestdesk[pdfium]'"
            ) from exc
    log_stream = sys.stderr if out.as_json else sys.stdout

    def log(event: WorkerEvent) -> None:
        print(event.line, file=log_stream, flush=True)

    ledger = await Ledger.open(settings)
    # Everything loaded so far (SQLAlchemy's and the ledger's objects) lives as long
    # as the process: out of the collector's sight, full collections during the run
    # do not walk it, and exit does not collect it (~50 ms of teardown per process).
    gc.freeze()
    worker = Worker(
        ledger,
        args.worker_id,
        pool=pool,
        concurrency=args.concurrency,
        lease_s=args.lease,
        options=PipelineOptions(args.parser, args.chunk_size, args.chunk_overlap),
        on_event=log,
        register=bool(args.loop or args.until_idle),
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, worker.stop)
    try:
        if args.loop or args.until_idle:
            await worker.run(until_idle=args.until_idle, stop_grace_s=DEFAULT_STOP_GRACE_S)
        else:
            try:
                if args.task_id:
                    task_id = (await ledger.reads.get_task(args.task_id)).task_id
                    await worker.run_task(task_id, stop_grace_s=DEFAULT_STOP_GRACE_S)
                else:
                    await worker.run_one(stop_grace_s=DEFAULT_STOP_GRACE_S)
            finally:
                await worker.close()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await ledger.close()
    stats = worker.stats
    summary: dict[str, Any] = {
        "worker_id": worker.worker_id,
        "claimed": stats.claimed,
        "missed": stats.missed,
        "outcomes": stats.outcomes,
    }
    if out.as_json:
        print(json.dumps(summary, sort_keys=True))
    elif args.loop or args.until_idle:
        print(
            f"worker={worker.worker_id} stopped: claimed={len(stats.claimed)} "
            + " ".join(
                f"{r}={list(stats.outcomes.values()).count(r)}"
                for r in sorted(set(stats.outcomes.values()))
            ),
            flush=True,
        )
