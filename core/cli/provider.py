"""``ingestdesk provider serve``: the demo embedding provider
(:mod:`core.demo_provider`) as its own process, with faults to switch on from the
command line or, while it runs, over ``POST /v1/faults``."""

from __future__ import annotations

import argparse
import math
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from core.cli.command import Command
from core.cli.options import whole_number
from core.cli.output import EXIT_OK, Output, flush, write_line
from core.cli.provider_openai import add_openai_arguments, run_openai
from core.cli.serve import PORT_MAX, ServeFailed, _listen
from core.config import DEFAULT_HOME
from core.errors import BadInput
from core.ingest.embedder import DEFAULT_DIMENSIONS

if TYPE_CHECKING:
    from core.demo_provider.openai_compat import OpenAIServer
    from core.demo_provider.server import ProviderServer

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8100
DEFAULT_DB_FILE = "provider.sqlite3"  # in the data directory, next to the ledger's default
MAX_DIMENSIONS = 8_192  # floats per vector: beyond it a typo, and megabytes per text
MAX_SLOW_S = 3_600.0  # seconds
MAX_SEED = 2**63 - 1
PARENT_CHECK_EVERY_S = 0.5  # seconds between checks that the starter still lives
MAX_PID = 2**22  # Linux's pid_max ceiling


def _probability(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and 0.0 <= number <= 1.0):
        raise argparse.ArgumentTypeError(f"must be a probability from 0 to 1 (got {value!r})")
    return number


def _pause(highest: float) -> Callable[[str], float]:
    """An argparse type for seconds from 0 (no pause) to ``highest``."""

    def check(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and 0.0 <= number <= highest):
            raise argparse.ArgumentTypeError(
                f"must be a number of seconds from 0 to {highest:g} (got {value!r})"
            )
        return number

    return check


def _provider_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="provider_action", metavar="ACTION", required=True)
    # Not built on the global options: this --db is the provider's own database (a
    # file), not the ledger's. It shares their dest, so it wins wherever it is given.
    serve = actions.add_parser("serve", help="run the demo provider until SIGTERM or Ctrl-C")
    serve.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="errors as one JSON value"
    )
    serve.add_argument(
        "--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})"
    )
    serve.add_argument(
        "--port",
        type=whole_number(0, PORT_MAX),
        default=DEFAULT_PORT,
        help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    serve.add_argument(
        "--db",
        default=argparse.SUPPRESS,
        metavar="PATH",
        help=f"the provider's SQLite file (default {DEFAULT_HOME}/{DEFAULT_DB_FILE})",
    )
    serve.add_argument(
        "--dimensions",
        type=whole_number(1, MAX_DIMENSIONS),
        default=DEFAULT_DIMENSIONS,
        help=f"floats per vector (default {DEFAULT_DIMENSIONS})",
    )
    serve.add_argument(
        "--lose-request",
        type=_probability,
        default=0.0,
        metavar="P",
        help="probability that a submit is dropped before it is recorded (no reply either)",
    )
    serve.add_argument(
        "--lose-reply",
        type=_probability,
        default=0.0,
        metavar="P",
        help="probability that a submit is done, then its connection closed with no reply",
    )
    serve.add_argument(
        "--fail-lookups",
        action="store_true",
        help="look-ups and result fetches answer 503",
    )
    serve.add_argument(
        "--unavailable",
        action="store_true",
        help="every submit answers 503 before anything is recorded",
    )
    serve.add_argument(
        "--slow",
        type=_pause(MAX_SLOW_S),
        default=0.0,
        metavar="S",
        help="seconds a new request stays running before it is done",
    )
    serve.add_argument(
        "--truncate",
        type=_probability,
        default=0.0,
        metavar="P",
        help="probability that a submit's reply has its last vector cut short",
    )
    serve.add_argument(
        "--seed",
        type=whole_number(0, MAX_SEED),
        default=None,
        help="seed of the fault draws, for runs that repeat exactly",
    )
    serve.add_argument(
        "--parent-pid",
        type=whole_number(1, MAX_PID),
        default=None,
        metavar="PID",
        help="stop when process PID, which started this one, ends, even by kill -9 (the "
        "dashboard's demo passes its own)",
    )
    serve.add_argument(
        "--declare-resend-safe",
        action="store_true",
        help="tell clients a repeated submit is safe (off: an unknown outcome the "
        "provider never saw waits for a person)",
    )
    add_openai_arguments(actions, _probability, _pause)


def provider_db_path(db: str | None) -> Path:
    """The provider's database file: ``--db``, or the data directory's default (the
    folder :func:`core.config.settings_from` puts the ledger in, created if missing).

    Raises:
        BadInput: ``--db`` is a URL (the provider keeps a SQLite file only).
        ServeFailed: The data directory cannot be created.
    """
    if db is None:
        home = Path.cwd() / DEFAULT_HOME
        try:
            home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ServeFailed(
                f"cannot create {home}: {exc.strerror or type(exc).__name__}"
            ) from exc
        return home / DEFAULT_DB_FILE
    if "://" in db:
        raise BadInput("the provider's --db is a file path, not a URL")
    return Path(db)


def run_provider(args: argparse.Namespace, out: Output) -> int:
    """Bind, open the provider's database, print the URL, serve until SIGTERM/SIGINT."""
    if args.provider_action == "openai":
        return run_openai(args, out, _stop_with_parent)
    from core.demo_provider import Faults, ProviderServer, ProviderStore, StoreError

    faults = Faults(
        lose_request=args.lose_request,
        lose_reply=args.lose_reply,
        fail_lookups=args.fail_lookups,
        unavailable=args.unavailable,
        slow_s=args.slow,
        truncate=args.truncate,
        seed=args.seed,
    )
    path = provider_db_path(getattr(args, "db", None))
    # Bound before anything else: a busy port or an unknown host is one line and
    # exit 1, and port 0 is printed as the port it became.
    listener = _listen(args.host, args.port)
    try:
        store = ProviderStore.open(path)
    except StoreError as exc:
        listener.close()
        raise ServeFailed(str(exc)) from exc
    server = ProviderServer(
        listener,
        store,
        dimensions=args.dimensions,
        resend_safe=args.declare_resend_safe,
        faults=faults,
    )
    host, port = listener.getsockname()[:2]
    where = f"[{host}]" if ":" in host else host
    # The first line, exactly: scripts and tests read the URL from it.
    write_line(f"provider listening on http://{where}:{port}")
    flush()
    if getattr(args, "parent_pid", None) is not None:
        _stop_with_parent(server, args.parent_pid)
    server.serve_until_stopped()
    return EXIT_OK


def _stop_with_parent(server: ProviderServer | OpenAIServer, parent: int) -> None:
    """Stop ``server`` cleanly once ``parent`` is no longer this process's parent: an
    orphan is handed to another parent, so that means the starter died (a dashboard
    killed with ``kill -9`` gets no chance to stop its provider). The starter names
    itself: a pid read here could already be the new parent's."""

    def watch() -> None:
        while os.getppid() == parent:
            if server.stopping.wait(PARENT_CHECK_EVERY_S):
                return
        server.stop()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


PROVIDER = Command(
    "provider",
    "the demo embedding providers: serve [--port N] [--lose-reply P] [--truncate P] …; "
    "openai [--port N] [--rate-limit N] [--lose-reply P] … (an OpenAI-compatible endpoint)",
    run_provider,
    _provider_arguments,
    interrupted="provider stopped",
)
