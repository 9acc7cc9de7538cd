"""``ingestdesk worker``: its arguments and the command that runs a
:class:`core.ingest.worker.Worker`.

Light on purpose: the command line imports this module to build its parser, and a
looping worker starts its parser process (:func:`start_parser_early`) before the
ledger's modules (SQLAlchemy: ~0.3 s of imports) load, so the two start-ups overlap
on two cores instead of the first document waiting for the parser.

For the same reason ``--parser``, ``--chunk-size`` and ``--chunk-overlap`` are left
unset by argparse and filled from :class:`~core.ingest.pipeline.PipelineOptions`, their
one home, when the worker runs (:func:`pipeline_options`): reading its defaults while
the parser is built would import the pipeline, SQLAlchemy with it (~0.2 s), before the
parser process starts.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import signal
import sys
from typing import TYPE_CHECKING, Any

from core.cli.command import Command
from core.cli.options import settings_from_args
from core.cli.output import EXIT_OK, Output
from core.config import Settings
from core.errors import BadInput
from core.gc_tuning import freeze_startup_objects
from core.ingest.parse_pool import ParserPool
from core.ingest.parsing import PARSERS

if TYPE_CHECKING:
    from core.ingest.pipeline import PipelineOptions

DEFAULT_STOP_GRACE_S = 10.0  # seconds running tasks get to finish on SIGTERM


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``worker`` command's own arguments."""
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
    # Unset (None) means PipelineOptions' default; see the module docstring.
    parser.add_argument("--parser", choices=PARSERS)
    parser.add_argument("--chunk-size", type=int, help="characters per chunk")
    parser.add_argument("--chunk-overlap", type=int, help="characters of overlap")


def pipeline_options(args: argparse.Namespace) -> PipelineOptions:
    """The pipeline options the worker was given; :class:`PipelineOptions`' own
    defaults for those it was not (the one place they are written down)."""
    from core.ingest.pipeline import PipelineOptions

    given = {
        field.name: value
        for field in dataclasses.fields(PipelineOptions)
        if (value := getattr(args, field.name, None)) is not None
    }
    return PipelineOptions(**given)


def start_parser_early(args: argparse.Namespace) -> ParserPool | None:
    """The parser pool of a ``--loop`` or ``--until-idle`` worker, its first process
    already starting; None for a single-task run (it may miss its claim and then
    needs no parser). Called before the ledger's modules are imported."""
    if not (args.loop or args.until_idle) or args.concurrency < 1 or args.parsers < 1:
        return None
    pool = ParserPool(workers=min(args.parsers, args.concurrency))
    pool.prestart()
    return pool


def run_worker(args: argparse.Namespace, out: Output) -> int:
    """``ingestdesk worker``: start the parser early, then run the worker."""
    settings = settings_from_args(args)
    pool = start_parser_early(args)
    asyncio.run(run_worker_command(settings, args, out, pool))
    return EXIT_OK


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
    from core.ingest.worker import Worker, WorkerEvent
    from core.ledger import Ledger

    if args.concurrency < 1:
        raise BadInput("--concurrency must be at least 1")
    if args.parsers < 1:
        raise BadInput("--parsers must be at least 1")
    if args.lease is not None and args.lease <= 0:
        raise BadInput("--lease must be positive")
    options = pipeline_options(args)
    if options.parser == "pdfium":
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
    # Start-up is done: what is loaded now lives as long as the process (why and what
    # it saves: core/gc_tuning.py).
    freeze_startup_objects()
    worker = Worker(
        ledger,
        args.worker_id,
        pool=pool,
        concurrency=args.concurrency,
        lease_s=args.lease,
        options=options,
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


WORKER = Command("worker", "claim and run ingestion tasks", run_worker, add_worker_arguments)
