"""The installed ``ingestdesk`` command: core's command line plus the commands that
open a screen (``dashboard``, which also runs when no command is given, ``demo`` and
``race``). Core's CLI knows nothing of them; they are added here, on top.

Textual is imported only when a screen is asked for, so ``ingestdesk tasks`` starts as
fast as the headless CLI (``python -m core.cli``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from core.cli import Command, CommandLine, Output, settings_from_args
from core.cli import build_command_line as core_command_line
from core.cli.options import whole_number
from core.cli.output import flush, write_line
from core.config import Settings
from core.errors import BadInput, LedgerUnavailable
from core.safe_text import visible

DESCRIPTION = "Document ingestion control room. Without a command, opens the dashboard."
DASHBOARD = "dashboard"
DEFAULT_WORKERS = 2  # in-process worker coroutines of the dashboard
WORKERS_MAX = 64  # more would only contend for the one event loop and parser pool
DEMO_DIR = "ingestdesk-demo"  # where `ingestdesk demo` builds its ledger, by default


def _dashboard_options(parser: argparse.ArgumentParser, *, top_level: bool) -> None:
    """``--workers`` and ``--read-only``. The root parser holds the defaults (plain
    ``ingestdesk`` opens the dashboard); a sub-command suppresses them so it does not
    overwrite a value given before the command."""

    def default(value: object) -> object:
        return value if top_level else argparse.SUPPRESS

    parser.add_argument(
        "--workers",
        type=whole_number(0, WORKERS_MAX),
        default=default(DEFAULT_WORKERS),
        help=f"in-process worker coroutines (default 2; 0 = watch only; at most {WORKERS_MAX})",
    )
    parser.add_argument(
        "--read-only",
        action="store_true",
        default=default(False),
        help="hide and refuse every action that changes the ledger",
    )


def _no_json(out: Output, what: str) -> None:
    """A screen has no JSON form: under ``--json`` it is refused with one JSON value
    (exit 2) before anything is drawn, built or opened, instead of taking over the
    terminal of a program that waits for JSON."""
    if out.as_json:
        raise BadInput(f"{what} has no JSON form; name a command (see `ingestdesk --help`)")


def _check_dashboard_ledger(args: argparse.Namespace, settings: Settings) -> None:
    """Refuse to open the dashboard where it would make a ledger nobody asked for.

    A read-only dashboard can only watch a ledger that exists. A first start on the
    default ``./.ingestdesk/`` creates it (that is what a first ``ingestdesk`` is
    for), and so does a ``--db`` (or ``INGESTDESK_DB``) file in an existing folder; a
    ``--db`` whose folder does not exist is a typo, refused rather than created with
    its folders.

    Raises:
        LedgerUnavailable: No ledger where one is needed ("no ledger at …", exit 1).
    """
    from core.ledger.transactions import no_ledger, sqlite_ledger_path

    path = sqlite_ledger_path(settings.db_url)
    if path is None or path.is_file():
        return  # PostgreSQL, or a ledger that exists
    if args.read_only:
        raise no_ledger(path)
    named = getattr(args, "db", None) or os.environ.get("INGESTDESK_DB")
    if named and not path.parent.is_dir():
        raise LedgerUnavailable(
            f"no ledger at {path}, and no folder {path.parent} to make one in: check --db "
            "(a new ledger is made only in an existing folder)"
        )


def _run_dashboard(args: argparse.Namespace, out: Output) -> int:
    """``ingestdesk [dashboard]``: the dashboard on the ledger the options name."""
    _no_json(out, "the dashboard")
    settings = settings_from_args(args)
    _check_dashboard_ledger(args, settings)
    from tui.app import run_dashboard

    return run_dashboard(settings, workers=args.workers, read_only=args.read_only)


def _run_demo(args: argparse.Namespace, out: Output) -> int:
    """``ingestdesk demo [DIR] [--faults]``: build the demo ledger (or reopen it) and
    open the dashboard on it; with ``--faults`` the workers embed through a faulty
    demo provider (see :mod:`tui.provider_process`)."""
    _no_json(out, "the demo (it opens the dashboard)")
    from core.demo import DEMO_DB_FILE, build_demo, demo_settings, make_demo_directory

    directory = Path(args.directory)
    if (directory / DEMO_DB_FILE).exists():
        write_line(
            f"reopening the demo ledger in {visible(str(directory))} (delete it for a fresh one)"
        )
        settings = demo_settings(directory)
    else:
        # Before the line below: a folder that cannot be made is one line of refusal,
        # not a promise of a build followed by it.
        make_demo_directory(directory)
        write_line(f"building a demo ledger in {visible(str(directory))} ...")
        flush()
        settings = build_demo(directory)
    faults_dir: Path | None = None
    if args.faults and args.read_only:
        # No workers, so nothing would ever call the provider.
        write_line("--faults ignored: a read-only dashboard runs no workers")
    elif args.faults:
        from tui.provider_process import PROVIDER_LOG_FILE

        write_line(
            "starting the demo provider with faults (lost requests and replies, cut-short "
            "replies); "
            f"its log: {visible(str(directory / PROVIDER_LOG_FILE))}"
        )
        flush()
        faults_dir = directory.resolve()  # where the ledger is, whatever the cwd becomes
    from tui.app import run_dashboard

    return run_dashboard(
        settings, workers=args.workers, read_only=args.read_only, faults_dir=faults_dir
    )


def _run_race(args: argparse.Namespace, out: Output) -> int:
    """``ingestdesk race``: the claim race, two workers side by side."""
    _no_json(out, "the claim race (a screen)")
    settings = settings_from_args(args)
    from tui.app import run_race

    return run_race(settings)


def _dashboard_arguments(parser: argparse.ArgumentParser) -> None:
    _dashboard_options(parser, top_level=False)


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "directory", nargs="?", default=DEMO_DIR, help=f"where (default ./{DEMO_DIR})"
    )
    parser.add_argument(
        "--faults",
        action="store_true",
        help="embed through the demo provider run as a child process that loses and "
        "cuts short some replies (provider serve --lose-reply 0.3 --truncate 0.1)",
    )
    _dashboard_options(parser, top_level=False)


SCREEN_COMMANDS: tuple[Command, ...] = (
    Command(
        DASHBOARD,
        "open the dashboard on the ledger",
        _run_dashboard,
        _dashboard_arguments,
    ),
    Command(
        "demo",
        "build a demo ledger with a generated corpus and open the dashboard on it",
        _run_demo,
        _demo_arguments,
    ),
    Command("race", "two workers race for one task, side by side", _run_race),
)


def build_command_line() -> CommandLine:
    """Core's commands and the screens; no command opens the dashboard."""
    line = core_command_line(SCREEN_COMMANDS, description=DESCRIPTION, default_command=DASHBOARD)
    _dashboard_options(line.parser, top_level=True)
    return line


def build_parser() -> argparse.ArgumentParser:
    """The parser of the installed ``ingestdesk`` command, every command's built."""
    return build_command_line().complete()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``ingestdesk`` command; the exit code."""
    return build_command_line().run(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
