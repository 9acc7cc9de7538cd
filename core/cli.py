"""The ``ingestdesk`` command. It is a thin shell over :class:`core.Ledger`: the
dashboard and the tests use the same API.

Exit codes: 0 ok, 2 bad input, 3 conflict, 4 not found, 1 anything else (for
example a ledger that cannot be opened). With ``--json`` every command prints
exactly one JSON value on stdout, errors included.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

from core.config import Settings, settings_from
from core.errors import BadInput, IngestDeskError
from core.filters import parse_filter
from core.states import ERRORS, DocumentStatus, ErrorCode, TaskStatus

if TYPE_CHECKING:
    # Imported where used: a worker process starts its parser process before the
    # ledger's modules (SQLAlchemy) load; see core.worker_command.
    from core.ingest.parse_pool import ParserPool
    from core.ledger import BulkResult, DocumentView, Ledger, TaskView

EXIT_OK = 0
EXIT_UNEXPECTED = 1
DEMO_DIR = "ingestdesk-demo"


class CliExit(Exception):
    """A command finished with a non-zero exit code after printing its answer."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class Output:
    """Collects a command's answer: one JSON value, or lines for a person."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    def emit(self, value: Any, text: str | Sequence[str]) -> None:
        if self.as_json:
            print(json.dumps(value, default=_json_default, sort_keys=True))
        else:
            lines = [text] if isinstance(text, str) else list(text)
            for line in lines:
                print(line)

    def log(self, line: str) -> None:
        """A progress line for a person; silent under --json (stdout stays one value)."""
        if not self.as_json:
            print(line, flush=True)


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot serialise {type(value).__name__}")


def when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def task_line(t: TaskView) -> str:
    code = t.error_code.value if t.error_code else "-"
    name = t.document_name or t.document_id[:8]
    return (
        f"{t.short_id}  {t.status.value:<10} {t.stage.value:<10} {t.completed:>4}/{t.total:<4} "
        f"attempt={t.attempt}  {code:<20} {name}"
    )


def document_line(d: DocumentView) -> str:
    return f"{d.document_id[:8]}  {d.status.value:<14} {d.kind.value:<8} {d.size:>10}  {d.filename}"


# ------------------------------------------------------------------- commands


def _read_inputs(args: argparse.Namespace, max_bytes: int) -> list[tuple[bytes, str]]:
    """Read and check every input before anything is written, so a bad file in a
    batch leaves the ledger untouched."""
    files: list[str] = args.files
    if args.name and len(files) != 1:
        raise BadInput("--name applies to exactly one file")
    from core.intake import read_upload

    inputs: list[tuple[bytes, str]] = []
    problems: list[str] = []
    for f in files:
        try:
            if f == "-":
                if not args.name:
                    raise BadInput("reading from stdin ('-') needs --name NAME")
                inputs.append((sys.stdin.buffer.read(), args.name))
            else:
                inputs.append((read_upload(Path(f), max_bytes), args.name or Path(f).name))
        except BadInput as exc:
            problems.append(exc.message)
    if problems:
        raise BadInput("; ".join(problems))
    return inputs


async def cmd_upload(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    from core.intake import check_upload

    inputs = await asyncio.to_thread(_read_inputs, args, ledger.settings.max_upload_bytes)
    problems = []
    for data, name in inputs:
        try:
            check_upload(data, name, ledger.settings.max_upload_bytes)
        except BadInput as exc:
            problems.append(exc.message)
    if problems:
        raise BadInput("; ".join(problems))
    docs = [await ledger.operator.upload(data, name) for data, name in inputs]
    submitted: list[TaskView] = []
    if args.command == "add":
        submitted = [await ledger.operator.submit(d.document_id, actor=args.actor) for d in docs]
        out.emit(
            [t.to_dict() for t in submitted],
            [
                f"submitted task={t.task_id} document={t.document_id} name={d.filename}"
                for t, d in zip(submitted, docs, strict=True)
            ],
        )
    else:
        out.emit(
            [d.to_dict() for d in docs],
            [
                f"uploaded document={d.document_id} kind={d.kind.value} name={d.filename}"
                for d in docs
            ],
        )


async def cmd_submit(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    task = await ledger.operator.submit(args.document_id, actor=args.actor)
    out.emit(
        task.to_dict(),
        f"submitted task={task.task_id} document={task.document_id} status={task.status}",
    )


async def cmd_tasks(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    tasks = await ledger.reads.list_tasks(
        status=args.status, error_code=args.error_code, limit=args.limit
    )
    out.emit([t.to_dict() for t in tasks], [task_line(t) for t in tasks] or ["no tasks"])


async def cmd_task(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    task = await ledger.reads.get_task(args.task_id)
    history = await ledger.reads.task_history(task.task_id)
    stalled = task.is_stalled(time.time(), ledger.settings.stall_after_s)
    value = task.to_dict() | {"stalled": stalled, "history": [e.to_dict() for e in history]}
    lines = [
        f"task      {task.task_id}",
        f"document  {task.document_id}  {task.document_name or '(gone)'}",
        f"status    {task.status.value}{'  (stalled)' if stalled else ''}",
        f"stage     {task.stage.value} {task.completed}/{task.total}",
        f"attempt   {task.attempt} of {task.max_attempts}",
        f"worker    {task.worker_id or '-'}",
        f"error     {task.error_code.value if task.error_code else '-'}"
        + (f" ({task.error_detail})" if task.error_detail else ""),
        "history:",
    ]
    for e in history:
        lines.append(
            f"  {when(e.at)}  {e.from_status or '-':>10} -> {e.to_status:<10} stage={e.stage} "
            f"attempt={e.attempt} actor={e.actor}"
            + (f" code={e.error_code}" if e.error_code else "")
            + (f" reason={e.reason!r}" if e.reason else "")
        )
    out.emit(value, lines)


async def cmd_documents(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    docs = await ledger.reads.list_documents(status=args.status, limit=args.limit)
    out.emit([d.to_dict() for d in docs], [document_line(d) for d in docs] or ["no documents"])


async def cmd_document(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    doc = await ledger.reads.get_document(args.document_id)
    tasks = await ledger.reads.list_tasks(document_id=doc.document_id, limit=None)
    value = doc.to_dict() | {"tasks": [t.to_dict() for t in tasks]}
    lines = [
        f"document  {doc.document_id}",
        f"name      {doc.filename}",
        f"status    {doc.status.value} (row version {doc.version})",
        f"kind      {doc.kind.value}, {doc.size} bytes, sha256 {doc.sha256}",
        "tasks:",
        *(f"  {task_line(t)}" for t in tasks),
    ]
    out.emit(value, lines)


def _bulk_lines(verb: str, past: str, result: BulkResult) -> list[str]:
    head = "would " + verb if result.dry_run else past
    count = result.eligible if result.dry_run else result.done
    lines = [f"{head} {count} of {result.matched} matching tasks"]
    lines += [f"  not eligible: {n} x {why}" for why, n in sorted(result.ineligible.items())]
    if result.refused:
        lines.append(f"  refused at execution (changed meanwhile): {result.refused}")
    return lines


def _target(args: argparse.Namespace) -> str | None:
    if bool(args.task_id) == bool(args.filter):
        raise BadInput("give a TASK_ID or --filter EXPR (not both)")
    if args.dry_run and not args.filter:
        raise BadInput("--dry-run goes with --filter")
    return cast(str | None, args.task_id)


async def cmd_cancel(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    if task_id := _target(args):
        task = await ledger.operator.cancel(task_id, actor=args.actor, reason=args.reason)
        line = f"cancelled task={task.task_id} document={task.document_id} (a draft again)"
        out.emit(task.to_dict(), line)
        return
    result = await ledger.operator.bulk_cancel(
        parse_filter(args.filter), actor=args.actor, reason=args.reason, dry_run=args.dry_run
    )
    out.emit(result.to_dict(), _bulk_lines("cancel", "cancelled", result))


async def cmd_retry(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    if task_id := _target(args):
        task = await ledger.operator.retry(task_id, actor=args.actor, reason=args.reason)
        out.emit(
            task.to_dict(),
            f"requeued task={task.task_id} attempt={task.attempt} status={task.status}",
        )
        return
    result = await ledger.operator.bulk_retry(
        parse_filter(args.filter), actor=args.actor, reason=args.reason, dry_run=args.dry_run
    )
    out.emit(result.to_dict(), _bulk_lines("requeue", "requeued", result))


async def cmd_search(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    hits = await ledger.reads.search(args.query, limit=args.limit, include_unpublished=args.all)
    lines = [
        f"{h.document_id[:8]}  page={h.page if h.page is not None else '-':<4} "
        f"{h.filename}: {h.text[:80]!r}"
        for h in hits
    ]
    out.emit(
        [h.to_dict() for h in hits],
        lines or ["no matches (only published documents are searchable; --all includes the rest)"],
    )


async def cmd_publish(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    doc = await ledger.operator.publish(args.document_id, actor=args.actor)
    out.emit(doc.to_dict(), f"published document={doc.document_id} name={doc.filename}")


async def cmd_chunks(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    chunks = await ledger.reads.chunks(args.document_id)
    out.emit(
        [c.to_dict() for c in chunks],
        [
            f"{c.ordinal:>4}  page={c.page if c.page is not None else '-':<4} {c.text[:100]!r}"
            for c in chunks
        ]
        or ["no chunks"],
    )


async def cmd_errors(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    value = [
        {
            "error_code": i.code.value,
            "meaning": i.meaning,
            "advice": i.advice,
            "transient": i.transient,
        }
        for i in ERRORS.values()
    ]
    out.emit(value, [f"{i.code.value:<22} {i.meaning}; {i.advice}" for i in ERRORS.values()])


Command = Callable[["Ledger", argparse.Namespace, Output], Awaitable[None]]

COMMANDS: dict[str, Command] = {
    "upload": cmd_upload,
    "add": cmd_upload,
    "submit": cmd_submit,
    "tasks": cmd_tasks,
    "task": cmd_task,
    "documents": cmd_documents,
    "document": cmd_document,
    "cancel": cmd_cancel,
    "retry": cmd_retry,
    "publish": cmd_publish,
    "chunks": cmd_chunks,
    "search": cmd_search,
    "errors": cmd_errors,
}


# --------------------------------------------------------------------- parser


class UsageError(BadInput):
    """The command line was not understood."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as BadInput, so ``--json`` callers get
    one JSON value (and exit code 2) instead of text on stderr."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def _common_options(*, top_level: bool) -> argparse.ArgumentParser:
    """Global options, accepted before or after the command. Sub-commands suppress
    their defaults so they do not overwrite a value given before the command."""
    common = _Parser(add_help=False)

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


def build_parser() -> argparse.ArgumentParser:
    common = _common_options(top_level=False)
    parser = _Parser(
        prog="ingestdesk",
        description="Document ingestion control room. Without a command, opens the dashboard.",
        parents=[_common_options(top_level=True)],
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def add(name: str, help_: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(
            name,
            help=help_,
            description=help_,
            parents=[common],  # type: ignore[list-item]
        )
        return p

    for name, help_ in (
        ("upload", "store files as draft documents"),
        ("add", "upload files and submit each for ingestion"),
    ):
        p = add(name, help_)
        p.add_argument("files", nargs="+", metavar="FILE", help="a path, or - for stdin")
        p.add_argument("--name", help="display name (required with -)")
    add("submit", "submit a draft document for ingestion").add_argument("document_id")
    p = add("tasks", "list ingestion tasks, newest first")
    p.add_argument("--status", choices=[s.value for s in TaskStatus])
    p.add_argument("--error-code", choices=[c.value for c in ErrorCode])
    p.add_argument("--filter", help="filter expression, e.g. 'status:failed code:parse_error'")
    p.add_argument("--limit", type=int, default=1000)
    add("task", "one task with its event history").add_argument("task_id")
    p = add("documents", "list documents")
    p.add_argument("--status", choices=[s.value for s in DocumentStatus])
    p.add_argument("--limit", type=int, default=1000)
    add("document", "one document, its row version and its tasks").add_argument("document_id")
    for name, help_ in (
        ("cancel", "cancel a queued, running or retry_wait task"),
        ("retry", "requeue a failed task"),
    ):
        p = add(name, help_)
        p.add_argument("task_id", nargs="?")
        p.add_argument("--filter", help="act on every task matching this filter expression")
        p.add_argument(
            "--dry-run", action="store_true", help="with --filter: count, change nothing"
        )
        p.add_argument("--reason", help="why, for the audit log")
    add("publish", "publish a document waiting for review").add_argument("document_id")
    add("chunks", "print a document's chunks").add_argument("document_id")
    p = add("search", "full-text search over published documents' chunks")
    p.add_argument("query")
    p.add_argument("--all", action="store_true", help="include documents not yet published")
    p.add_argument("--limit", type=int, default=20)
    add("errors", "the error codes, what they mean and what to do")
    _add_runtime_commands(add)
    for p in (parser, add("dashboard", "open the dashboard on the ledger")):
        _add_dashboard_options(p, top_level=p is parser)
    p = add("demo", "build a demo ledger with a generated corpus and open the dashboard on it")
    p.add_argument("directory", nargs="?", default=DEMO_DIR, help=f"where (default ./{DEMO_DIR})")
    _add_dashboard_options(p, top_level=False)
    add("race", "two workers race for one task, side by side")
    return parser


def _add_dashboard_options(parser: argparse.ArgumentParser, *, top_level: bool) -> None:
    suppress = {} if top_level else {"default": argparse.SUPPRESS}
    parser.add_argument(
        "--workers",
        type=int,
        help="in-process worker coroutines (default 2; 0 = watch only)",
        **({"default": 2} if top_level else suppress),  # type: ignore[arg-type]
    )
    parser.add_argument(
        "--read-only",
        action="store_true",
        help="hide and refuse every action that changes the ledger",
        **({"default": False} if top_level else suppress),  # type: ignore[arg-type]
    )


def _add_runtime_commands(add: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """Commands that run long (workers, the dashboard) and live in other modules."""
    try:
        from core.worker_command import add_worker_arguments
    except ImportError:  # pragma: no cover - the worker arrives with its own issue
        return
    add_worker_arguments(add("worker", "claim and run ingestion tasks"))


def _settings(args: argparse.Namespace) -> Settings:
    settings = settings_from(args.db, args.store)
    if getattr(args, "max_upload_mb", None) is not None:
        if args.max_upload_mb <= 0:
            raise BadInput("--max-upload-mb must be positive")
        settings = settings.with_(max_upload_bytes=int(args.max_upload_mb * 1024 * 1024))
    if getattr(args, "synchronous", None):
        settings = settings.with_(sqlite_synchronous=args.synchronous.upper())
    return settings


async def run(args: argparse.Namespace, out: Output, pool: ParserPool | None = None) -> None:
    settings = _settings(args)
    if args.command == "worker":
        from core.worker_command import run_worker_command

        await run_worker_command(settings, args, out, pool)
        return
    if args.command == "errors":
        await cmd_errors(None, args, out)  # type: ignore[arg-type]
        return
    from core.ledger import Ledger

    ledger = await Ledger.open(settings)
    try:
        await COMMANDS[args.command](ledger, args, out)
    finally:
        await ledger.close()


# Opens a screen ("dashboard", "demo" or "race") on a ledger; provided by tui/, which
# owns the UI, so core never imports it.
Launcher = Callable[[str, Settings, argparse.Namespace], int]


def _run_dashboard(args: argparse.Namespace, launch: Launcher) -> int:
    if args.workers < 0:
        raise BadInput("--workers must be 0 or more")
    if args.command == "demo":
        from core.demo import DEMO_DB_FILE, build_demo, demo_settings

        directory = Path(args.directory)
        if (directory / DEMO_DB_FILE).exists():
            print(f"reopening the demo ledger in {directory} (delete it for a fresh one)")
            settings = demo_settings(directory)
        else:
            print(f"building a demo ledger in {directory} ...", flush=True)
            settings = build_demo(directory)
    else:
        settings = _settings(args)
    return launch(args.command, settings, args)


def main(argv: Sequence[str] | None = None, *, launch: Launcher | None = None) -> int:
    """Run one command. ``launch`` opens the dashboard screens; the installed
    ``ingestdesk`` script (tui.cli) passes it, ``python -m core.cli`` runs headless."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        if "--json" in argv:
            print(json.dumps({"error": {"kind": "BadInput", "message": exc.message}}))
        else:
            parser.print_usage(sys.stderr)
            print(exc.message, file=sys.stderr)
        return exc.exit_code
    out = Output(bool(getattr(args, "json", False)))
    if args.command is None:
        args.command = "dashboard"
    if args.command in ("dashboard", "demo", "race"):
        if launch is None:
            print(
                f"ingestdesk: '{args.command}' needs the dashboard: run the installed "
                "'ingestdesk' command (python -m tui.cli)",
                file=sys.stderr,
            )
            return EXIT_UNEXPECTED
        try:
            return _run_dashboard(args, launch)
        except IngestDeskError as exc:
            print(f"ingestdesk: {exc.message}", file=sys.stderr)
            return exc.exit_code
    pool = None
    if args.command == "worker":
        from core.worker_command import start_parser_early

        pool = start_parser_early(args)
    try:
        asyncio.run(run(args, out, pool))
    except IngestDeskError as exc:
        kind = type(exc).__name__
        if out.as_json:
            print(json.dumps({"error": {"kind": kind, "message": exc.message}}))
        else:
            print(f"ingestdesk: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except CliExit as exc:
        return exc.code
    except KeyboardInterrupt:
        return 130
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
