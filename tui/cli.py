"""The installed ``ingestdesk`` command: core's CLI, plus the screens only tui/ can
open. Textual is imported only when a screen is asked for, so ``ingestdesk tasks``
starts as fast as the headless CLI."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from core import Settings
from core.cli import main as core_main


def launch(command: str, settings: Settings, args: argparse.Namespace) -> int:
    """Open the dashboard (or the claim race) on ``settings``; the exit code."""
    from tui.app import run_dashboard, run_race

    if command == "race":
        return run_race(settings)
    return run_dashboard(settings, workers=args.workers, read_only=args.read_only)


def main(argv: Sequence[str] | None = None) -> int:
    return core_main(argv, launch=launch)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
