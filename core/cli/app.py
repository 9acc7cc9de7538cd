"""The command line put together: the root parser with the global options, core's
commands in the order ``--help`` lists them, any commands a caller adds, and
:func:`main`, which parses, runs one command and turns a refusal into its exit code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from core.cli import documents, tasks, worker
from core.cli.command import Command
from core.cli.options import CliParser, UsageError, common_options
from core.cli.output import EXIT_INTERRUPTED, PROG, Output, usage_error
from core.errors import IngestDeskError

DESCRIPTION = "Document ingestion control room: the ledger's commands and its workers."

# Core's commands, in the order --help lists them.
CORE_COMMANDS: tuple[Command, ...] = (
    documents.UPLOAD,
    documents.ADD,
    documents.SUBMIT,
    tasks.TASKS,
    tasks.TASK,
    documents.DOCUMENTS,
    documents.DOCUMENT,
    tasks.CANCEL,
    tasks.RETRY,
    documents.PUBLISH,
    documents.CHUNKS,
    documents.SEARCH,
    tasks.ERROR_CODES,
    worker.WORKER,
)


class CommandLine:
    """The root parser, its sub-commands and what runs each.

    Args:
        description: The root ``--help``'s description.
        default_command: What runs when no command is given; None makes a command
            required (a usage error without one).
    """

    def __init__(
        self, *, description: str = DESCRIPTION, default_command: str | None = None
    ) -> None:
        self.parser = CliParser(
            prog=PROG, description=description, parents=[common_options(top_level=True)]
        )
        self.default_command = default_command
        self.commands: dict[str, Command] = {}
        self._common = common_options(top_level=False)
        self._sub = self.parser.add_subparsers(
            dest="command", metavar="COMMAND", parser_class=CliParser
        )
        self._sub.required = default_command is None

    def add(self, command: Command) -> argparse.ArgumentParser:
        """Add a sub-command (after those already added); its parser, for more options."""
        if command.name in self.commands:
            raise ValueError(f"command {command.name!r} is already defined")
        parser: argparse.ArgumentParser = self._sub.add_parser(
            command.name, help=command.help, description=command.help, parents=[self._common]
        )
        command.arguments(parser)
        self.commands[command.name] = command
        return parser

    def run(self, argv: Sequence[str] | None = None) -> int:
        """Parse ``argv`` (default: the process's arguments), run the command, and
        answer its exit code. Refusals are printed, as one JSON value under ``--json``."""
        argv = list(sys.argv[1:] if argv is None else argv)
        try:
            args = self.parser.parse_args(argv)
        except UsageError as exc:
            return usage_error(self.parser, exc, as_json="--json" in argv)
        out = Output(bool(getattr(args, "json", False)))
        if args.command is None:
            args.command = self.default_command
        try:
            return self.commands[args.command].run(args, out)
        except IngestDeskError as exc:
            return out.error(exc)
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED


def build_command_line(
    extra_commands: Sequence[Command] = (),
    *,
    description: str = DESCRIPTION,
    default_command: str | None = None,
) -> CommandLine:
    """Core's commands, then ``extra_commands``.

    Args:
        extra_commands: Commands a program adds after core's (tui/ adds the screens).
        description: The root ``--help``'s description.
        default_command: The command that runs when none is given; None: one is required.
    """
    line = CommandLine(description=description, default_command=default_command)
    for command in (*CORE_COMMANDS, *extra_commands):
        line.add(command)
    if default_command is not None and default_command not in line.commands:
        raise ValueError(f"default command {default_command!r} is not one of the commands")
    return line


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m core.cli``: core's commands only."""
    return build_command_line().parser


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m core.cli``: run one of core's commands; the exit code.

    The installed ``ingestdesk`` command (:mod:`tui.cli`) is this command line plus
    the screens.
    """
    return build_command_line().run(argv)
