"""The ``ingestdesk`` command line, without the screens. It is a thin shell over
:class:`core.Ledger`: the dashboard and the tests use the same API.

One module per idea: :mod:`~core.cli.app` puts the command line together and runs it,
:mod:`~core.cli.options` holds the global options and the argument types that refuse
bad values while parsing, :mod:`~core.cli.command` says what a command is,
:mod:`~core.cli.output` prints answers and errors, :mod:`~core.cli.logs` is a worker's
log, and the command groups are :mod:`~core.cli.uploads`, :mod:`~core.cli.documents`,
:mod:`~core.cli.tasks` and :mod:`~core.cli.worker`. ``python -m core.cli`` is core's
command line; the installed ``ingestdesk`` script (:mod:`tui.cli`) adds the dashboard's
commands through :func:`build_command_line`.

Exit codes: 0 ok, 2 bad input, 3 conflict, 4 not found, 1 anything else (for
example a ledger that cannot be opened), 130 interrupted, 141 the reader of stdout
went away. With ``--json`` every command prints exactly one JSON value on stdout,
errors included; otherwise a failure is one ``ingestdesk: …`` line on stderr, never
a traceback.
"""

from __future__ import annotations

from core.cli.app import CommandLine, build_command_line, build_parser, main
from core.cli.command import Command, LedgerHandler, Runner, on_ledger
from core.cli.options import UsageError, settings_from_args
from core.cli.output import EXIT_OK, EXIT_UNEXPECTED, Output

__all__ = [
    "EXIT_OK",
    "EXIT_UNEXPECTED",
    "Command",
    "CommandLine",
    "LedgerHandler",
    "Output",
    "Runner",
    "UsageError",
    "build_command_line",
    "build_parser",
    "main",
    "on_ledger",
    "settings_from_args",
]
