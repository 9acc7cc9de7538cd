"""The options every command accepts (``--json``, ``--db``, ``--store``, ``--actor``,
``--max-upload-mb``, ``--synchronous``), the Settings they make, and an argparse that
reports usage errors as :class:`~core.errors.BadInput`."""

from __future__ import annotations

import argparse
import getpass
from typing import NoReturn

from core.config import Settings, settings_from
from core.errors import BadInput

BYTES_PER_MB = 1024 * 1024


class UsageError(BadInput):
    """The command line was not understood."""


class CliParser(argparse.ArgumentParser):
    """argparse that reports usage errors as BadInput, so ``--json`` callers get
    one JSON value (and exit code 2) instead of text on stderr."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def common_options(*, top_level: bool) -> CliParser:
    """Global options, accepted before or after the command. Sub-commands suppress
    their defaults so they do not overwrite a value given before the command.

    Args:
        top_level: True for the root parser (which holds the defaults), False for
            the parent parser every sub-command is built on.
    """
    common = CliParser(add_help=False)

    def default(value: object) -> object:
        return value if top_level else argparse.SUPPRESS

    common.add_argument(
        "--json", action="store_true", default=default(False), help="print exactly one JSON value"
    )
    common.add_argument(
        "--db",
        default=default(None),
        help="ledger URL or SQLite path (env INGESTDESK_DB; default .ingestdesk/ledger.db)",
    )
    common.add_argument(
        "--store", default=default(None), help="object store folder (env INGESTDESK_STORE)"
    )
    common.add_argument(
        "--actor", default=default(getpass.getuser()), help="who is acting, for the audit log"
    )
    common.add_argument(
        "--max-upload-mb",
        type=float,
        default=default(None),
        help="refuse uploads larger than this (env INGESTDESK_MAX_UPLOAD_MB; default 100)",
    )
    common.add_argument(
        "--synchronous",
        choices=["normal", "full"],
        default=default(None),
        help="SQLite durability: full survives power loss, normal (default) is faster",
    )
    return common


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The ledger the global options point at (environment and defaults fill the rest).

    Raises:
        BadInput: ``--max-upload-mb`` is not positive.
    """
    settings = settings_from(args.db, args.store)
    if getattr(args, "max_upload_mb", None) is not None:
        if args.max_upload_mb <= 0:
            raise BadInput("--max-upload-mb must be positive")
        settings = settings.with_(max_upload_bytes=int(args.max_upload_mb * BYTES_PER_MB))
    if getattr(args, "synchronous", None):
        settings = settings.with_(sqlite_synchronous=args.synchronous.upper())
    return settings
