"""The options every command accepts (``--json``, ``--db``, ``--store``, ``--actor``,
``--max-upload-mb``, ``--synchronous``), the Settings they make, an argparse that
reports usage errors as :class:`~core.errors.BadInput`, and the argument types that
refuse out-of-range numbers and unsafe identifiers while the command line is parsed,
before anything is opened, claimed or written."""

from __future__ import annotations

import argparse
import getpass
import math
import os
from collections.abc import Callable
from typing import NoReturn

from core.config import Settings, settings_from, upload_cap_bytes
from core.errors import BadInput
from core.safe_text import normal_name

# A list longer than this is a typo, and beyond what SQLite's integers hold it was a
# traceback (OverflowError) instead of an answer.
LIMIT_MAX = 1_000_000  # rows listed at most
UPLOAD_CAP_ENV = "INGESTDESK_MAX_UPLOAD_MB"
# The commands that take uploads, and so judge the upload cap: ``serve`` (the API's
# uploads) and the dashboard (its submit screen; None is the dashboard too, run when
# no command is named). Any other command never uses the cap, and a bad
# INGESTDESK_MAX_UPLOAD_MB in the environment must not refuse `ingestdesk tasks`.
UPLOADING_COMMANDS = frozenset({"upload", "add", "serve", "dashboard", None})


class UsageError(BadInput):
    """The command line was not understood."""


class CliParser(argparse.ArgumentParser):
    """argparse that reports usage errors as BadInput, so ``--json`` callers get
    one JSON value (and exit code 2) instead of text on stderr. The message is one
    line and says where the usage is (``--help``), not the whole usage."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def default_actor() -> str:
    """Who is acting when ``--actor`` is not given: the login name, or ``uid-N``.

    Asked only when a command needs it: ``getpass.getuser()`` fails (KeyError before
    Python 3.13, OSError after) for a uid with no passwd entry and no LOGNAME/USER in
    the environment, as in many containers, and must not break ``--help``. A login
    name that is not a safe identifier (LOGNAME is just an environment variable) is
    not used either.
    """
    try:
        return actor_name(getpass.getuser(), "login name")
    except (KeyError, OSError, ImportError, BadInput):
        return f"uid-{os.getuid()}" if hasattr(os, "getuid") else "unknown"


def actor_name(value: str, what: str = "actor") -> str:
    """``--actor`` as the history keeps it (:func:`core.safe_text.normal_name`), refused
    when it is or looks like a name ingestdesk records by itself (``local``,
    ``system``, ``reaper``, ``demo``): a person is never the lease reaper."""
    # Imported here: the ledger (and SQLAlchemy) loads only for commands that use it.
    from core.ledger.tokens import check_not_reserved

    name = normal_name(value, what)
    check_not_reserved(name, what)
    return name


def identifier(
    what: str, check_name: Callable[[str, str], str] = normal_name
) -> Callable[[str], str]:
    """An argparse type for an id a person types (``--actor``, ``--worker-id``):
    kept as NFKC, trimmed; refused when empty, too long, holding control or invisible
    characters, or mixing scripts (a Cyrillic letter among Latin ones)."""

    def check(value: str) -> str:
        try:
            return check_name(value, what)
        except BadInput as exc:
            raise argparse.ArgumentTypeError(exc.message) from exc

    check.__name__ = what
    return check


def whole_number(lowest: int, highest: int) -> Callable[[str], int]:
    """An argparse type for an integer from ``lowest`` to ``highest``."""

    def check(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is None or not lowest <= number <= highest:
            raise argparse.ArgumentTypeError(
                f"must be a whole number from {lowest} to {highest} (got {value!r})"
            )
        return number

    return check


def seconds(highest: float, *, lowest: float | None = None) -> Callable[[str], float]:
    """An argparse type for a duration: more than 0 (or at least ``lowest``) and at
    most ``highest`` seconds (nan and infinity are refused: a nan lease never expires
    and never renews)."""

    def check(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        in_range = number >= lowest if lowest is not None else number > 0
        if not (math.isfinite(number) and in_range and number <= highest):
            floor = f"at least {lowest:g}" if lowest is not None else "more than 0"
            raise argparse.ArgumentTypeError(
                f"must be a number of seconds, {floor} and at most {highest:g} (got {value!r})"
            )
        return number

    return check


def limit_argument(parser: argparse.ArgumentParser, default: int, what: str) -> None:
    """``--limit N`` for a list command: at least 1, at most :data:`LIMIT_MAX`."""
    parser.add_argument(
        "--limit",
        type=whole_number(1, LIMIT_MAX),
        default=default,
        help=f"{what} at most (default {default})",
    )


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
        "--store",
        default=default(None),
        help="object store: a folder, or s3://BUCKET/PREFIX (env INGESTDESK_STORE)",
    )
    common.add_argument(
        "--s3-endpoint",
        metavar="URL",
        default=default(None),
        help="S3-compatible server for an s3:// store, e.g. MinIO "
        "(env INGESTDESK_S3_ENDPOINT or AWS_ENDPOINT_URL; default AWS)",
    )
    # None: filled by default_actor() when a command opens the ledger (fill_actor).
    common.add_argument(
        "--actor",
        type=identifier("actor", actor_name),
        default=default(None),
        help="who is acting, for the audit log (default: your login name)",
    )
    common.add_argument(
        "--max-upload-mb",
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
        BadInput: ``--max-upload-mb`` is not a usable cap (not a number, nan,
            infinite, zero or less, absurdly large), or the environment's is not
            (judged only for a command that uploads, see UPLOADING_COMMANDS).
    """
    cap = getattr(args, "max_upload_mb", None)
    sync = getattr(args, "synchronous", None)
    # Passed as overrides, so a flag wins over the environment before the
    # environment's value is even judged (a bad INGESTDESK_MAX_UPLOAD_MB does not
    # refuse a command that gives --max-upload-mb).
    overrides: dict[str, object] = {}
    if cap is not None:
        overrides["max_upload_bytes"] = upload_cap_bytes(cap, "--max-upload-mb")
    if sync:
        overrides["sqlite_synchronous"] = sync.upper()
    if getattr(args, "s3_endpoint", None):
        overrides["s3_endpoint"] = args.s3_endpoint
    environ: dict[str, str] | None = None
    if cap is None and getattr(args, "command", None) not in UPLOADING_COMMANDS:
        # Not judged where it is not used (see UPLOADING_COMMANDS).
        environ = {k: v for k, v in os.environ.items() if k != UPLOAD_CAP_ENV}
    return settings_from(args.db, args.store, environ=environ, home=None, **overrides)
