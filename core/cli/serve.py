"""``ingestdesk serve``: the HTTP API on the configured ledger and store, and
``ingestdesk tokens``: who may use it."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from core.cli.command import Command, on_ledger
from core.cli.options import common_options, seconds, settings_from_args, whole_number
from core.cli.output import EXIT_OK, Output, flush, write_line
from core.errors import BadInput, IngestDeskError
from core.safe_text import visible
from core.states import Role

if TYPE_CHECKING:
    import socket

    from core.ledger import Ledger

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
PORT_MAX = 65_535
LISTEN_BACKLOG = 2048  # pending connections the kernel may queue (uvicorn's default)
TIMEOUT_MAX_S = 86_400.0  # seconds: a longer deadline is a typo, not a policy
CONNECTIONS_LIMIT = 1_000_000  # --max-connections above this is a typo


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})"
    )
    parser.add_argument(
        "--port",
        type=whole_number(0, PORT_MAX),
        default=DEFAULT_PORT,
        help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    # The defaults live with what they bound (core.api.server, core.api.bodies: not
    # imported here, every command would pay for FastAPI); the README's "Slow
    # clients and proxies" lists them and says how to set them behind a proxy.
    parser.add_argument(
        "--header-timeout",
        metavar="S",
        type=seconds(TIMEOUT_MAX_S),
        help="seconds a connection has to send a request's headers (default 10)",
    )
    parser.add_argument(
        "--body-idle-timeout",
        metavar="S",
        type=seconds(TIMEOUT_MAX_S),
        help="seconds a request body may pause (default 30)",
    )
    parser.add_argument(
        "--body-timeout",
        metavar="S",
        type=seconds(TIMEOUT_MAX_S),
        help="seconds a whole request body may take (default 300)",
    )
    parser.add_argument(
        "--max-connections",
        metavar="N",
        type=whole_number(1, CONNECTIONS_LIMIT),
        help="open connections at most; more are closed at once (default 512)",
    )


def run_serve(args: argparse.Namespace, out: Output) -> int:
    """Open the ledger, refuse an open server on a public address, then serve until
    SIGINT/SIGTERM (the requests in flight get a few seconds to finish, see
    :mod:`core.api.server`, then the app closes the ledger)."""
    # Imported here, as the API's own modules are: the command line builds this
    # command's parser for every command, and asyncio's import is ~10 ms.
    import asyncio

    from core.api import create_app
    from core.api.auth import is_loopback
    from core.api.bodies import BodyLimits
    from core.api.server import ClientLimits, server
    from core.ledger import Ledger
    from core.ledger.transactions import shown_url

    settings = settings_from_args(args)

    async def tokens_exist() -> bool:
        async with await Ledger.open(settings) as ledger:
            return await ledger.tokens.any_active()

    # Opened here whatever the address: a ledger that cannot be opened (down, its
    # disk full, damaged) is one line and its exit code, not uvicorn's traceback
    # from the app's start-up and exit 3.
    has_tokens = asyncio.run(tokens_exist())
    if not is_loopback(args.host) and not has_tokens:
        raise BadInput(
            f"refusing to listen on {args.host} with no API token: anyone who can reach "
            "it could change the ledger. Create one (ingestdesk tokens create NAME --role "
            "operator) or listen on 127.0.0.1"
        )
    # The socket is bound here, before uvicorn starts: a port in use or a host that
    # does not resolve is one line and exit 1 (uvicorn would log it and exit 3, which
    # this CLI's scripts read as a state-machine conflict), and port 0 is reported as
    # the port it became.
    # A bucket missing or refusing access is one line and exit 1 here, before the
    # port opens, rather than a traceback from the app's start-up.
    from core.store import open_store

    open_store(settings).check()
    listener = _listen(args.host, args.port)
    host, port = listener.getsockname()[:2]
    bodies = BodyLimits(
        idle_s=args.body_idle_timeout or BodyLimits.idle_s,
        total_s=args.body_timeout or BodyLimits.total_s,
    )
    clients = ClientLimits(
        header_s=args.header_timeout or ClientLimits.header_s,
        connections_max=args.max_connections or ClientLimits.connections_max,
    )
    api = server(create_app(settings, bodies), clients)
    where = f"[{host}]" if ":" in host else host
    write_line(
        f"serving the ledger {shown_url(settings.db_url)} on http://{where}:{port} "
        "(API docs at /docs; Ctrl-C or SIGTERM stops)"
    )
    flush()
    api.run(sockets=[listener])
    return EXIT_OK


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port``, or one line saying why not."""
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise ServeFailed(f"cannot listen on {host}: {exc.strerror}") from exc
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(LISTEN_BACKLOG)
    except OSError as exc:
        listener.close()
        raise ServeFailed(
            f"cannot listen on {host}:{port}: {exc.strerror or type(exc).__name__}"
        ) from exc
    return listener


class ServeFailed(IngestDeskError):
    """The server could not start listening."""

    exit_code = 1


SERVE = Command(
    "serve",
    "the HTTP API on this ledger (uploads, 202 submits, reads, cancel, retry, publish)",
    run_serve,
    _serve_arguments,
    interrupted="stopped serving",
)


# ---------------------------------------------------------------------------- tokens


def _tokens_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="tokens_action", metavar="ACTION", required=True)
    # The global options (--json, --db …) are accepted after the action too.
    common = [common_options(top_level=False)]
    create = actions.add_parser(
        "create", help="a new token (printed once; keep it)", parents=common
    )
    create.add_argument("name", help="who uses it; the actor in the history")
    create.add_argument(
        "--role",
        required=True,
        choices=[r.value for r in Role],
        help="viewer reads; operator also uploads, submits, cancels, retries; "
        "publisher also publishes",
    )
    actions.add_parser(
        "list", help="every token's name, role and state (no secrets)", parents=common
    )
    revoke = actions.add_parser("revoke", help="stop a token from working", parents=common)
    revoke.add_argument("name")


async def cmd_tokens(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk tokens create|list|revoke``."""
    if args.tokens_action == "create":
        new = await ledger.tokens.create(args.name, args.role)
        out.emit(
            new.to_dict(),
            [
                f"token for {visible(new.name)} ({new.role.value}):",
                new.token,
                "It is shown only now; the ledger keeps only its hash.",
            ],
        )
    elif args.tokens_action == "list":
        tokens = await ledger.tokens.list()
        out.emit(
            [t.to_dict() for t in tokens],
            [
                f"{visible(t.name):<24} {t.role.value:<10} {'active' if t.active else 'revoked'}"
                for t in tokens
            ]
            or ["no tokens: a server started now serves local clients only"],
        )
    else:
        view = await ledger.tokens.revoke(args.name)
        lines = [f"revoked token {visible(view.name)}"]
        if not await ledger.tokens.any_active():
            # Open mode is decided at start-up only (core.api.auth): say what follows.
            lines.append(
                "no active token is left: a running server now refuses every request; "
                "one started now serves local clients only"
            )
        out.emit(view.to_dict(), lines)


TOKENS = Command(
    "tokens",
    "API tokens: create NAME --role R, list, revoke NAME",
    # Only creating a token may start a ledger: listing or revoking on a mistyped
    # --db must not leave an empty one behind.
    on_ledger(cmd_tokens, create=lambda args: args.tokens_action == "create"),
    _tokens_arguments,
)
