"""``ingestdesk provider openai``: the demo OpenAI-compatible embeddings endpoint
(:mod:`core.demo_provider.openai_compat`) as its own process, with faults to switch on
from the command line or, while it runs, over ``POST /v1/faults``.

Its API key, if it wants one, comes from an environment variable the command names
(``--api-key-env NAME``): never from the command line, which ``ps`` shows to anyone."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from core.cli.options import whole_number
from core.cli.output import EXIT_OK, Output, flush, write_line
from core.cli.serve import PORT_MAX, _listen
from core.errors import BadInput

DEFAULT_PORT = 8101  # next to the demo provider's 8100
MAX_DIMENSIONS = 8_192  # floats per vector
MAX_TOKENS = 1_000_000  # tokens per input
MAX_INPUTS = 100_000  # inputs per request
MAX_SLOW_S = 3_600.0  # seconds


def add_openai_arguments(
    actions: Any,
    probability: Callable[[str], float],
    pause: Callable[[float], Callable[[str], float]],
) -> None:
    """The ``provider openai`` action, beside ``provider serve`` (their types shared).
    Defaults the endpoint's module owns are left unset here and filled when it runs:
    importing it while the parser is built would load the demo provider's server."""
    serve = actions.add_parser(
        "openai", help="run a demo OpenAI-compatible /v1/embeddings endpoint until SIGTERM"
    )
    serve.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="errors as one JSON value"
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument(
        "--port",
        type=whole_number(0, PORT_MAX),
        default=DEFAULT_PORT,
        help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    serve.add_argument("--model", help="model name (default demo-hashed-embedding-1)")
    serve.add_argument(
        "--dimensions",
        type=whole_number(1, MAX_DIMENSIONS),
        default=256,
        help="floats per vector (default 256)",
    )
    serve.add_argument(
        "--max-tokens",
        type=whole_number(1, MAX_TOKENS),
        help="tokens per input, words and punctuation (default 512): "
        "a longer input is refused as OpenAI refuses it",
    )
    serve.add_argument(
        "--max-inputs",
        type=whole_number(1, MAX_INPUTS),
        help="inputs per request (default 2048)",
    )
    serve.add_argument(
        "--api-key-env",
        metavar="NAME",
        help="require the bearer key held by environment variable NAME (default: no key)",
    )
    serve.add_argument(
        "--rate-limit",
        type=whole_number(0, 1_000_000),
        default=0,
        metavar="N",
        help="the first N embedding requests answer 429",
    )
    serve.add_argument(
        "--retry-after",
        default="1",
        metavar="VALUE",
        help='the Retry-After of those 429s: seconds or an HTTP date ("" for none; default 1)',
    )
    serve.add_argument(
        "--lose-reply",
        type=probability,
        default=0.0,
        metavar="P",
        help="probability that a request is embedded, then its connection closed unanswered",
    )
    serve.add_argument(
        "--server-error",
        type=probability,
        default=0.0,
        metavar="P",
        help="probability that a request is embedded, then answered 500",
    )
    serve.add_argument(
        "--slow",
        type=pause(MAX_SLOW_S),
        default=0.0,
        metavar="S",
        help="seconds each request waits, its work done, before it is answered",
    )
    serve.add_argument(
        "--seed", type=whole_number(0, 2**63 - 1), default=None, help="seed of the fault draws"
    )
    serve.add_argument(
        "--parent-pid",
        type=whole_number(1, 2**22),
        default=None,
        metavar="PID",
        help="stop when process PID, which started this one, ends",
    )


def run_openai(
    args: argparse.Namespace, out: Output, stop_with_parent: Callable[[Any, int], None]
) -> int:
    """Bind, print the base URL, serve until SIGTERM/SIGINT (``stop_with_parent``:
    ``provider serve``'s watch on its starter, shared)."""
    from core.demo_provider import openai_compat as endpoint
    from core.demo_provider.openai_compat import FaultError, OpenAIFaults, OpenAIServer

    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env, "").strip()
        if not key:
            raise BadInput(f"--api-key-env {args.api_key_env[:64]}: that variable is not set")
    try:
        faults = OpenAIFaults().changed(
            {
                "rate_limit": args.rate_limit,
                "retry_after": args.retry_after,
                "lose_reply": args.lose_reply,
                "server_error": args.server_error,
                "slow_s": args.slow,
                "seed": args.seed,
            }
        )
    except FaultError as exc:
        raise BadInput(str(exc)) from None
    model = endpoint.DEFAULT_MODEL if args.model is None else args.model
    if not model.strip() or len(model) > 256:
        raise BadInput("--model must be a name of 1 to 256 characters")
    listener = _listen(args.host, args.port)
    server = OpenAIServer(
        listener,
        model=model,
        dimensions=args.dimensions,
        max_tokens=args.max_tokens or endpoint.DEFAULT_MAX_TOKENS,
        max_inputs=args.max_inputs or endpoint.DEFAULT_MAX_INPUTS,
        api_key=key,
        faults=faults,
    )
    host, port = listener.getsockname()[:2]
    where = f"[{host}]" if ":" in host else host
    # The first line, exactly: scripts and tests read the base URL from its end.
    write_line(f"openai-compatible endpoint listening on http://{where}:{port}/v1")
    flush()
    if args.parent_pid is not None:
        stop_with_parent(server, args.parent_pid)
    server.serve_until_stopped()
    return EXIT_OK
