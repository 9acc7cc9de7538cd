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

Every option is checked before anything is claimed, before the ledger is even opened
(:func:`check_worker_arguments` and the argument types): a chunk size of 0 once let a
worker claim every queued task and fail each with ``internal_error``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import signal
import sys
from typing import TYPE_CHECKING, Any

from core.cli.command import Command
from core.cli.options import identifier, seconds, settings_from_args, whole_number
from core.cli.output import EXIT_INTERRUPTED, EXIT_OK, LOG_FORMATS, Output
from core.cli.review import provider_url
from core.errors import BadInput, ProviderUnreachable, WorkerStopped
from core.ingest.failures import PARSERS, ParserUnavailable, parser_info
from core.safe_text import check_identifier

# The rest is imported where the worker runs, not here: the command line imports this
# module to build its parser for every command, and --help, --version or `tasks` must
# not load the parser pool (multiprocessing, every format module), asyncio or logging.
if TYPE_CHECKING:
    from core.config import Settings
    from core.ingest.embedder import Embedder
    from core.ingest.parse_pool import ParserPool
    from core.ingest.pipeline import PipelineOptions
    from core.ingest.providers import RemoteProvider

DEFAULT_STOP_GRACE_S = 10.0  # seconds running tasks get to finish on SIGTERM
# Upper bounds: beyond them a value is a typo, not a setting (and some, as a SQL LIMIT
# or a lease timestamp, would overflow or never expire).
MAX_CONCURRENCY = 256  # tasks in flight in one worker process
MAX_PARSERS = 64  # parser processes (~45 MB each)
MAX_LEASE_S = 86_400.0  # seconds: a day
# Below this a lease cannot be kept: the heartbeat that renews it runs every third of
# the lease, and one ledger write (on a busy SQLite file) can take longer than a
# fraction of a second, so a task would be reaped while its worker was alive and
# working, and retried until its attempts ran out (`--lease 1e-300` was accepted).
MIN_LEASE_S = 1.0  # seconds
MAX_CHUNK_SIZE = 1_000_000  # characters
MAX_DIMENSIONS = 8_192  # floats per vector: beyond it a typo
OPENAI_ONLY = ("--model", "--dimensions", "--declare-resend-safe", "--provider-option")


def worker_provider(value: str) -> str:
    """An argparse type for ``--provider``: an http(s) URL, or one of an
    OpenAI-compatible endpoint (``openai+http(s)://…``)."""
    from core.ingest.openai_provider import KIND_PREFIX, is_openai_url

    if is_openai_url(value):
        return KIND_PREFIX + provider_url(value.strip()[len(KIND_PREFIX) :])
    return provider_url(value)


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``worker`` command's own arguments; out-of-range numbers and unsafe worker
    ids are refused while they are parsed."""
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
        type=whole_number(1, MAX_CONCURRENCY),
        default=2,
        help="tasks in flight at once (default 2: two are parsed side by side, or the next "
        "while the last is indexed; doubled while tasks take under 20 ms)",
    )
    parser.add_argument(
        "--parsers",
        type=whole_number(1, MAX_PARSERS),
        help="parser processes (default: one per CPU, at most --concurrency; they start "
        "as tasks need them)",
    )
    parser.add_argument(
        "--worker-id",
        type=identifier("worker id"),
        help="name shown in the ledger (default host-pid)",
    )
    parser.add_argument(
        "--lease",
        type=seconds(MAX_LEASE_S, lowest=MIN_LEASE_S),
        help=f"lease in seconds (default 30, at least {MIN_LEASE_S:g})",
    )
    # Unset (None) means PipelineOptions' default; see the module docstring.
    parser.add_argument("--parser", choices=PARSERS)
    parser.add_argument(
        "--chunk-size", type=whole_number(1, MAX_CHUNK_SIZE), help="characters per chunk"
    )
    parser.add_argument(
        "--chunk-overlap",
        type=whole_number(0, MAX_CHUNK_SIZE - 1),
        help="characters of overlap (less than the chunk size)",
    )
    parser.add_argument(
        "--provider",
        type=worker_provider,
        metavar="URL",
        help="embed with the remote provider at URL (e.g. one `ingestdesk provider serve` "
        "runs), or, as openai+https://HOST/v1, with an OpenAI-compatible /v1/embeddings "
        "endpoint (its key from $INGESTDESK_EMBEDDINGS_API_KEY or $OPENAI_API_KEY); every "
        "call goes through the provider ledger (default: in-process)",
    )
    openai = parser.add_argument_group("an OpenAI-compatible endpoint (--provider openai+URL)")
    openai.add_argument("--model", help="the endpoint's embedding model (required with it)")
    openai.add_argument(
        "--dimensions",
        type=whole_number(1, MAX_DIMENSIONS),
        help="floats per vector (default: asked of the endpoint with one short probe)",
    )
    openai.add_argument(
        "--declare-resend-safe",
        action="store_true",
        help="a request whose reply was lost may be sent again (it is paid for again); "
        "off: it waits for a person (`ingestdesk review`)",
    )
    openai.add_argument(
        "--provider-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="max_inputs=N, send_dimensions=true, api_version=V (Azure), api_key_env=NAME, "
        "timeout_s=S, proxy_from_env=true, encoding_format=base64",
    )
    parser.add_argument(
        "--embedder",
        metavar="SPEC",
        help="embed in-process with this embedder (see `ingestdesk embedders`; default: "
        "the active index's, or wordllama on a ledger without one)",
    )
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="log lines as text (default) or one JSON object per line",
    )


def check_worker_arguments(args: argparse.Namespace) -> None:
    """Every option, checked before the ledger is opened or a parser started: the
    ranges again (for a caller that built ``args`` without the parser), the chunk
    overlap against the chunk size, and that ``--parser pdfium`` is installed.

    Raises:
        BadInput: An option, or a combination, that no task could run with.
    """
    ranges = (
        ("--concurrency", args.concurrency, 1, MAX_CONCURRENCY),
        ("--parsers", args.parsers, 1, MAX_PARSERS),
        ("--chunk-size", args.chunk_size, 1, MAX_CHUNK_SIZE),
        ("--chunk-overlap", args.chunk_overlap, 0, MAX_CHUNK_SIZE - 1),
    )
    for option, value, lowest, highest in ranges:
        if value is not None and not lowest <= value <= highest:
            raise BadInput(f"{option} must be a whole number from {lowest} to {highest}")
    if args.lease is not None and not (
        math.isfinite(args.lease) and MIN_LEASE_S <= args.lease <= MAX_LEASE_S
    ):
        raise BadInput(
            f"--lease must be at least {MIN_LEASE_S:g} and at most {MAX_LEASE_S:g} seconds"
        )
    if args.worker_id is not None:
        check_identifier(args.worker_id, "worker id")
    from core.ingest.chunker import validate_chunking
    from core.ingest.parsing import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE

    size = DEFAULT_CHUNK_SIZE if args.chunk_size is None else args.chunk_size
    overlap = DEFAULT_CHUNK_OVERLAP if args.chunk_overlap is None else args.chunk_overlap
    try:
        validate_chunking(size, overlap)  # the pipeline's own rule
    except ValueError as exc:
        raise BadInput(
            f"--chunk-overlap ({overlap}) must be less than the chunk size ({size})"
        ) from exc
    provider = getattr(args, "provider", None)
    if provider is not None and getattr(args, "embedder", None) is not None:
        raise BadInput("--provider and --embedder name two embedders: give one")
    if getattr(args, "embedder", None) is not None:
        from core.ingest.embedders import EmbedderSpec

        EmbedderSpec.parse(args.embedder)  # refused before the ledger is opened
    if provider is not None:
        try:
            args.provider = worker_provider(provider)
        except argparse.ArgumentTypeError as exc:
            raise BadInput(f"--provider: {exc}") from None
    check_openai_arguments(args)
    if args.parser == "pdfium":
        # Asked of the installed packages, not by importing pypdfium2 (~12 ms of a
        # worker's start-up): only the parser process loads it, and the pipeline
        # records the same version on every task.
        try:
            parser_info("pdfium")
        except ParserUnavailable as exc:
            raise BadInput(
                "--parser pdfium needs the extra: pip install 'ingestdesk[pdfium]'"
            ) from exc


def check_openai_arguments(args: argparse.Namespace) -> None:
    """``--model`` and its companions go with an OpenAI-compatible ``--provider``
    only, and it needs ``--model``; every ``--provider-option`` is one it knows.

    Raises:
        BadInput: A combination no worker could use (nothing is ignored).
    """
    given = [
        name
        for name, value in zip(
            OPENAI_ONLY,
            (
                getattr(args, "model", None),
                getattr(args, "dimensions", None),
                getattr(args, "declare_resend_safe", False),
                getattr(args, "provider_option", None),
            ),
            strict=True,
        )
        if value
    ]
    provider = getattr(args, "provider", None)
    if provider:  # only then: httpx and the provider modules stay out of a plain start-up
        from core.ingest.openai_provider import is_openai_url, parse_options
    if not (provider and is_openai_url(provider)):
        if given:
            raise BadInput(f"{given[0]} goes with --provider openai+URL only")
        return
    if not (args.model or "").strip():
        raise BadInput("--provider openai+URL needs --model NAME (the endpoint's model)")
    try:
        parse_options(args.provider_option or [])
    except ValueError as exc:
        raise BadInput(f"--provider-option: {exc}") from None


async def connect_worker_provider(args: argparse.Namespace) -> RemoteProvider:
    """The remote provider ``--provider`` names, connected.

    Raises:
        ProviderUnreachable: It cannot be used now (one line naming it; never its key).
    """
    from core.cli.review import connect_provider
    from core.ingest.openai_provider import OpenAIEmbeddings, is_openai_url, parse_options
    from core.ingest.providers import NotSent, OutcomeUnknown, ProviderRejected

    if not is_openai_url(args.provider):
        return await connect_provider(args.provider)
    try:
        return await OpenAIEmbeddings.connect(
            args.provider,
            args.model,
            args.dimensions,
            parse_options(args.provider_option or []),
            resend_safe=True if args.declare_resend_safe else None,
        )
    except ValueError as exc:
        raise BadInput(f"--provider: {exc}") from None
    except (NotSent, OutcomeUnknown, ProviderRejected) as exc:
        raise ProviderUnreachable(f"cannot use the endpoint: {exc}") from None


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


def parser_processes(args: argparse.Namespace) -> int:
    """How many parser processes the worker's pool may run: ``--parsers``, or one per
    CPU (:func:`core.ingest.parse_pool.default_parsers`); never more than the tasks in
    flight, which could not use them."""
    from core.ingest.parse_pool import default_parsers

    concurrency: int = args.concurrency
    if args.parsers is None:
        return default_parsers(concurrency)
    return max(1, min(int(args.parsers), concurrency))


def start_parser_early(args: argparse.Namespace) -> ParserPool | None:
    """The parser pool of a ``--loop`` or ``--until-idle`` worker, its first process
    already starting; None for a single-task run (it may miss its claim and then
    needs no parser). Called before the ledger's modules are imported."""
    if not (args.loop or args.until_idle):
        return None
    from core.ingest.parse_pool import ParserPool

    pool = ParserPool(workers=parser_processes(args))
    pool.prestart()
    return pool


def run_worker(args: argparse.Namespace, out: Output) -> int:
    """``ingestdesk worker``: check every option, start the parser early, then run
    the worker; the exit code (130 when Ctrl-C stopped it)."""
    import asyncio

    from core.ingest.wordllama_embedder import tokenize_on_one_thread

    check_worker_arguments(args)
    settings = settings_from_args(args)
    # Before the parser's launcher and the ledger's threads exist (a change to the
    # environment is not safe beside threads reading it).
    tokenize_on_one_thread()
    pool = start_parser_early(args)
    return asyncio.run(run_worker_command(settings, args, out, pool))


async def run_worker_command(
    settings: Settings,
    args: argparse.Namespace,
    out: Output,
    pool: ParserPool | None = None,
) -> int:
    """``ingestdesk worker``: check the arguments, open the ledger, run a worker.

    Args:
        settings: The ledger to work on.
        args: Parsed ``worker`` arguments.
        out: Where the summary goes.
        pool: A pool from :func:`start_parser_early`; closed here. Default: a new one.

    Returns:
        The exit code: 0, or 130 when SIGINT (Ctrl-C) stopped the worker.
    """
    check_worker_arguments(args)
    if pool is None:
        from core.ingest.parse_pool import ParserPool

        pool = ParserPool(workers=parser_processes(args))
    try:
        return await _run(settings, args, out, pool)
    finally:
        await pool.aclose()


async def _run(settings: Settings, args: argparse.Namespace, out: Output, pool: ParserPool) -> int:
    import asyncio

    from core.cli.logs import worker_log
    from core.gc_tuning import freeze_startup_objects
    from core.ingest.providers import RemoteProvider
    from core.ingest.worker import Worker
    from core.ledger import Ledger

    options = pipeline_options(args)
    # Under --json stdout holds the one answer: the log goes to stderr.
    log_format = getattr(args, "log_format", "text")
    # The signal that stopped the worker, if one did (the first one counts).
    stopped_by: list[signal.Signals] = []
    with worker_log(sys.stderr if out.as_json else sys.stdout, log_format) as log:
        provider: Embedder | RemoteProvider | None = None
        if getattr(args, "provider", None):
            provider = await connect_worker_provider(args)
        try:
            # A one-off or draining worker has nothing to do on a ledger that does not
            # exist, and must not leave an empty one (or its folder) behind a mistyped
            # --db. A --loop worker is a service that waits for work: started beside
            # `ingestdesk serve` on a fresh folder (the README's two terminals) it may
            # come up first, and opens (creates) the ledger as serve would.
            ledger = await Ledger.open(settings, create=bool(args.loop))
        except BaseException:
            if isinstance(provider, RemoteProvider):
                await provider.aclose()
            raise
        if provider is None:
            from core.ingest.embedders import worker_embedder

            try:
                provider = await worker_embedder(ledger, getattr(args, "embedder", None))
            except BaseException:
                await ledger.close()
                raise
        # Start-up is done: what is loaded now lives as long as the process (why and
        # what it saves: core/gc_tuning.py).
        freeze_startup_objects()
        worker = Worker(
            ledger,
            args.worker_id,
            pool=pool,
            concurrency=args.concurrency,
            lease_s=args.lease,
            options=options,
            embedder=provider,
            on_event=log,
            register=bool(args.loop or args.until_idle),
        )
        loop = asyncio.get_running_loop()

        def on_signal(sig: signal.Signals) -> None:
            if not stopped_by:
                stopped_by.append(sig)
            worker.stop()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal, sig)
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
            if isinstance(provider, RemoteProvider):
                await provider.aclose()
    if worker.fault is not None:
        raise WorkerStopped(f"worker={worker.worker_id} stopped: {worker.fault}")
    stats = worker.stats
    # SIGTERM is how a service manager stops a worker: asked for, so exit 0. SIGINT
    # is a person's Ctrl-C: exit 130, as for every command (see the README).
    interrupted = signal.SIGINT in stopped_by
    summary: dict[str, Any] = {
        "worker_id": worker.worker_id,
        "claimed": stats.claimed,
        "missed": stats.missed,
        "outcomes": stats.outcomes,
        "interrupted": interrupted,
        "stopped_by": stopped_by[0].name if stopped_by else None,
        "handed_back": stats.handed_back,
    }
    lines: list[str] = []
    if args.loop or args.until_idle:
        lines.append(
            f"worker={worker.worker_id} stopped: claimed={len(stats.claimed)} "
            + " ".join(
                f"{r}={list(stats.outcomes.values()).count(r)}"
                for r in sorted(set(stats.outcomes.values()))
            )
        )
    if stopped_by:
        handed = " ".join(f"task={t}" for t in stats.handed_back) or "none"
        lines.append(
            f"worker={worker.worker_id} {'interrupted' if interrupted else 'stopped'} by "
            f"{stopped_by[0].name}; handed back to the queue: {handed}"
        )
    out.emit(summary, lines)
    return EXIT_INTERRUPTED if interrupted else EXIT_OK


WORKER = Command("worker", "claim and run ingestion tasks", run_worker, add_worker_arguments)
