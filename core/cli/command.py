"""What a sub-command is: a name, a help line, its arguments and what runs it. The
command groups (:mod:`core.cli.documents`, :mod:`core.cli.tasks`,
:mod:`core.cli.worker`) declare theirs; so can a program that adds its own, as the
installed ``ingestdesk`` (:mod:`tui.cli`) does with the dashboard's."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.cli.options import settings_from_args
from core.cli.output import EXIT_OK, Output

if TYPE_CHECKING:
    # Imported where used: a worker process starts its parser process before the
    # ledger's modules (SQLAlchemy) load; see core.cli.worker.
    from core.ledger import Ledger

# Runs a parsed command and answers its exit code. A refusal is raised as an
# IngestDeskError; the command line prints it (as JSON under --json) and exits with
# its code.
Runner = Callable[[argparse.Namespace, Output], int]
# A command that works on an open ledger; it prints its answer through Output.
LedgerHandler = Callable[["Ledger", argparse.Namespace, Output], Awaitable[None]]


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """For a command that takes only the global options."""


@dataclass(frozen=True)
class Command:
    """One sub-command of ``ingestdesk``.

    Attributes:
        name: What is typed: ``ingestdesk NAME``.
        help: One line for ``--help``; also the sub-command's description.
        run: Runs the parsed command; answers the exit code.
        arguments: Adds the command's own arguments to its parser.
        interrupted: The one line a Ctrl-C that ends the command prints (exit 130):
            what it left behind, where there is something to say.
    """

    name: str
    help: str
    run: Runner
    arguments: Callable[[argparse.ArgumentParser], None] = no_arguments
    interrupted: str = "interrupted"


def on_ledger(
    handler: LedgerHandler, *, create: bool | Callable[[argparse.Namespace], bool] = True
) -> Runner:
    """A runner that opens the ledger the global options name, runs ``handler`` on it
    and closes the ledger, whatever happens.

    Args:
        handler: The command's work on the open ledger.
        create: False for a command that can only read or act on what is already
            there: a SQLite ledger that does not exist is refused ("no ledger at …",
            exit 1) instead of created, so a mistyped ``--db`` leaves nothing behind.
            A function of the parsed arguments for a command whose actions differ
            (``tokens create`` may start a ledger, ``tokens list`` may not).
    """

    def run(args: argparse.Namespace, out: Output) -> int:
        # Imported here: asyncio's import is ~10 ms that --help, --version and errors
        # (which build every command's parser) must not pay.
        import asyncio

        creates = create(args) if callable(create) else create
        asyncio.run(_with_ledger(handler, args, out, creates))
        return EXIT_OK

    return run


async def _with_ledger(
    handler: LedgerHandler, args: argparse.Namespace, out: Output, create: bool
) -> None:
    settings = settings_from_args(args)
    from core.ledger import Ledger

    ledger = await Ledger.open(settings, create=create)
    try:
        await handler(ledger, args, out)
    finally:
        await ledger.close()
