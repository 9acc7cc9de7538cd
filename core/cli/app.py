"""The command line put together: the root parser with the global options, core's
commands in the order ``--help`` lists them, any commands a caller adds, and
:func:`main`, which parses, runs one command and turns a refusal into its exit code."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from core.cli import (
    documents,
    embedders,
    formats,
    indexes,
    maintenance,
    provider,
    review,
    serve,
    tasks,
    uploads,
    worker,
)
from core.cli.command import Command
from core.cli.options import CliParser, UsageError, common_options, default_actor
from core.cli.output import (
    DEBUG_ENV,
    EXIT_BROKEN_PIPE,
    EXIT_OK,
    EXIT_UNEXPECTED,
    PROG,
    Interrupted,
    Output,
    OutputFailed,
    ReaderGone,
    flush,
    usage_error,
    write_line,
)
from core.errors import IngestDeskError, is_disk_full

DESCRIPTION = "Document ingestion control room: the ledger's commands and its workers."
DISTRIBUTION = "ingestdesk"  # the package whose metadata holds the version

# Core's commands, in the order --help lists them.
CORE_COMMANDS: tuple[Command, ...] = (
    uploads.UPLOAD,
    uploads.ADD,
    documents.SUBMIT,
    tasks.TASKS,
    tasks.TASK,
    documents.DOCUMENTS,
    documents.DOCUMENT,
    tasks.CANCEL,
    tasks.RETRY,
    documents.PUBLISH,
    documents.REJECT,
    documents.WITHDRAW,
    documents.DELETE,
    documents.CHUNKS,
    documents.SEARCH,
    indexes.INDEX,
    tasks.ERROR_CODES,
    formats.FORMATS_COMMAND,
    embedders.EMBEDDERS_COMMAND,
    worker.WORKER,
    review.RECONCILE,
    review.REVIEW,
    provider.PROVIDER,
    serve.SERVE,
    serve.TOKENS,
    maintenance.PRUNE,
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
        self.parser.add_argument(
            "--version", action=_VersionAction, help="print the version and exit"
        )
        self.default_command = default_command
        self.commands: dict[str, Command] = {}
        self._common = common_options(top_level=False)
        # Placeholders, not parsers (see add): argparse asks of them only what
        # _Unbuilt has, until command_parser puts the command's parser in its place.
        self._sub = self.parser.add_subparsers(
            dest="command",
            metavar="COMMAND",
            parser_class=cast("type[argparse.ArgumentParser]", _Unbuilt),
        )
        self._sub.required = default_command is None
        self._built: dict[str, argparse.ArgumentParser] = {}  # the parsers built so far

    def add(self, command: Command) -> None:
        """Add a sub-command (after those already added).

        Its parser is built when it is chosen (or by :meth:`complete`): until then a
        placeholder names and describes it for the root ``--help``. Building every
        command's ~180 arguments was most of what ``errors`` or ``--version`` spent
        after the imports (argparse makes a help formatter for each argument, which
        asks the terminal's size, and looks its own words up in gettext's catalogues
        for each parser). The placeholder is not a parser either (:class:`_Unbuilt`):
        29 empty parsers made ~60 of those look-ups, half of building the command
        line (3.1 → 1.7 ms, measured under load).
        """
        if command.name in self.commands:
            raise ValueError(f"command {command.name!r} is already defined")
        self._sub.add_parser(command.name, help=command.help)
        self.commands[command.name] = command

    def command_parser(self, name: str) -> argparse.ArgumentParser:
        """The parser of the command ``name``, built now if it was not yet."""
        built = self._built.get(name)
        if built is not None:
            return built
        command = self.commands[name]
        prog = self._sub.choices[name].prog  # type: ignore[index]
        parser = CliParser(prog=prog, description=command.help, parents=[self._common])
        command.arguments(parser)
        # Where the placeholder was: the second pass of parse() runs this one.
        self._sub.choices[name] = parser  # type: ignore[index]
        self._built[name] = parser
        return parser

    def complete(self) -> argparse.ArgumentParser:
        """The root parser with every command's parser built (for a caller that reads
        them all, such as the tests of the reference); :meth:`run` builds only one."""
        for name in self.commands:
            self.command_parser(name)
        return self.parser

    def parse(self, argv: Sequence[str]) -> argparse.Namespace:
        """``argv`` parsed: a first pass finds the command (the root's options and
        the command's name; the rest is left over), whose parser is then built, and
        the second pass parses everything as one parser with all of it would."""
        found, _ = self.parser.parse_known_args(argv, namespace=Arguments())
        if found.command is not None:
            self.command_parser(found.command)
        return self.parser.parse_args(argv, namespace=Arguments())

    def run(self, argv: Sequence[str] | None = None) -> int:
        """Parse ``argv`` (default: the process's arguments), run the command, and
        answer its exit code.

        Whatever happens, a person gets one line on stderr and a program one JSON
        value on stdout under ``--json``: a refusal, a Ctrl-C (exit 130), even an
        unexpected exception (exit 1; ``INGESTDESK_DEBUG=1`` shows its traceback).
        A reader that went away (``… | head``) ends the command quietly (exit 141).
        """
        argv = list(sys.argv[1:] if argv is None else argv)
        as_json = "--json" in argv
        try:
            try:
                args = self.parse(argv)
            except UsageError as exc:
                code = usage_error(exc, as_json=as_json)
            except _ShowVersion:
                Output(as_json).emit({"version": version()}, f"{PROG} {version()}")
                code = EXIT_OK
            else:
                code = self._run(args)
            # Flush here, not at interpreter exit, where a failure is only noise.
            flush()
            return code
        except KeyboardInterrupt:  # while parsing, before a command was chosen
            return Output(as_json).error(Interrupted())
        except ReaderGone:
            _quiet_stdout()
            return EXIT_BROKEN_PIPE
        except OutputFailed as exc:
            _quiet_stdout()
            write_line(f"{PROG}: cannot write the output: {exc}", sys.stderr)
            return EXIT_UNEXPECTED

    def _run(self, args: argparse.Namespace) -> int:
        out = Output(bool(getattr(args, "json", False)))
        if args.command is None:
            args.command = self.default_command
        command = self.commands[args.command]
        try:
            return command.run(args, out)
        except IngestDeskError as exc:
            return out.error(exc)
        except KeyboardInterrupt:
            return out.error(Interrupted(command.interrupted))
        except (ReaderGone, OutputFailed):
            raise
        except Exception as exc:
            if os.environ.get(DEBUG_ENV):
                raise
            if isinstance(exc, OSError):
                # The machine's refusal (a full disk, a permission, a dropped
                # connection) that reached here unclassified: its words, not "a bug".
                return out.error(IngestDeskError(_os_fault(exc)))
            # The contract is one line (one JSON value), never a traceback: name the
            # fault's type only (its message can carry SQL, a path or user data).
            return out.error(
                IngestDeskError(
                    f"unexpected {type(exc).__name__}: a bug in ingestdesk; "
                    f"rerun with {DEBUG_ENV}=1 for the traceback and report it"
                )
            )


def _os_fault(exc: OSError) -> str:
    """One line for an operating-system error: what the OS said, never its path."""
    if is_disk_full(exc):
        return "the disk is full; free space and try again"
    return f"the system refused: {exc.strerror or type(exc).__name__}"


def version() -> str:
    """The installed ingestdesk's version, from its package metadata."""
    # The Version field is read from the first dist-info's METADATA on the path, as
    # importlib.metadata finds it, but without importing it: it parses the file with
    # the email package, ~20 ms of the ~35 ms --version took. It remains the way for
    # any other layout (an egg, a zip).
    for entry in sys.path:
        try:
            found = sorted(Path(entry or ".").glob(f"{DISTRIBUTION}-*.dist-info/METADATA"))
        except OSError:
            continue
        for metadata_file in found:
            try:
                with metadata_file.open(encoding="utf-8") as lines:
                    for line in lines:
                        if line.startswith("Version:"):
                            return line.partition(":")[2].strip()
                        if not line.strip():
                            break  # the headers end at the first blank line
            except (OSError, UnicodeDecodeError):
                continue
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


class Arguments(argparse.Namespace):
    """The parsed command line, whose ``actor`` (``--actor`` not given) is
    :func:`~core.cli.options.default_actor`'s, looked up when a command first reads it.

    Checking the login name against the reserved names loads Unicode's confusables
    and the ledger's modules: a command that records no action (``errors``,
    ``tasks``, ``--help``) must not wait for it. Until argparse has stored the
    option's value (None when not given) the attribute is missing, as on a plain
    Namespace: argparse asks ``hasattr`` before it stores a default.
    """

    @property
    def actor(self) -> str:
        try:
            given: str | None = self.__dict__["_actor"]
        except KeyError:
            raise AttributeError("actor") from None
        if given is None:
            given = self.__dict__["_actor"] = default_actor()
        return given

    @actor.setter
    def actor(self, value: str | None) -> None:
        self.__dict__["_actor"] = value


class _Unbuilt:
    """A command's parser before it is built: all the first pass of
    :meth:`CommandLine.parse` asks of it is to leave the command's arguments over (as
    an empty parser without ``-h`` would), for the second pass on the real parser."""

    def __init__(self, *, prog: str, **_: Any) -> None:
        self.prog = prog

    def parse_known_args(
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        return (argparse.Namespace() if namespace is None else namespace), list(args or ())


class _ShowVersion(Exception):
    """--version was given: answered once parsing stops, so --json is honoured."""


class _VersionAction(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("nargs", 0)
        kwargs.setdefault("default", argparse.SUPPRESS)
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        raise _ShowVersion


def _quiet_stdout() -> None:
    """Point stdout's descriptor at /dev/null, so the interpreter's last flush at exit
    finds nowhere to fail (Python's documented way to exit after EPIPE)."""
    if sys.stdout is None:
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # ValueError: stdout has no descriptor (captured)
        pass


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
    """The parser of ``python -m core.cli``: core's commands only, every one built."""
    return build_command_line().complete()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m core.cli``: run one of core's commands; the exit code.

    The installed ``ingestdesk`` command (:mod:`tui.cli`) is this command line plus
    the screens.
    """
    return build_command_line().run(argv)
