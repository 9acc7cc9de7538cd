"""``ingestdesk prune``: forget what the ledger only keeps for a while."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from core.cli.command import Command, on_ledger
from core.cli.options import whole_number
from core.cli.output import Output

if TYPE_CHECKING:
    from core.ledger import Ledger

RETENTION_DAYS = 7  # days an idempotency key is kept (core.ledger.idempotency)
DAY_S = 24 * 3600.0
DAYS_MAX = 36_500


async def cmd_prune(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk prune [--older-than DAYS]``: forget old idempotency keys."""
    removed = await ledger.idempotency.prune(args.older_than * DAY_S)
    out.emit(
        {"idempotency_keys_removed": removed, "older_than_days": args.older_than},
        f"removed {removed} idempotency keys older than {args.older_than} days",
    )


def _prune(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--older-than",
        metavar="DAYS",
        type=whole_number(0, DAYS_MAX),
        default=RETENTION_DAYS,
        help=f"forget idempotency keys older than this (default {RETENTION_DAYS} days)",
    )


PRUNE = Command(
    "prune",
    "forget idempotency keys past their retention (7 days)",
    on_ledger(cmd_prune, create=False),
    _prune,
)
