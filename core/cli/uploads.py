"""``upload`` and ``add``: a batch of files into the ledger, all or nothing; and
``upload --replaces DOC_ID FILE``: one file as a document's next version.

Every input is read (each with the upload cap enforced while reading) and judged
before anything is written; then :meth:`~core.ledger.Operator.add_many` stores the
originals and records the whole batch in one transaction. A Ctrl-C at any point
therefore leaves either the whole batch or no document at all, and the one line it
prints says which.

With ``--skip-refused`` (a bulk load) the inputs whose content is refused are left
out and reported (:mod:`core.cli.batch_inputs`); the rest is still one batch, all
or nothing, as above.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from core.cli.batch_inputs import (
    Inputs,
    Skipped,
    check_skip_refused,
    judge_inputs,
    read_inputs,
    read_stdin_first,
    skips_refused,
)
from core.cli.command import Command, Runner
from core.cli.options import settings_from_args
from core.cli.output import EXIT_OK, Interrupted, Output, write_line
from core.config import Settings
from core.errors import BadInput, IngestDeskError, NotFound
from core.safe_text import visible

if TYPE_CHECKING:
    from core.ledger import DocumentView, Ledger, TaskView

NOTHING_ADDED = "interrupted: no document was added"
UNSURE = (
    "interrupted while the batch was being recorded: it was added whole or not at all, "
    "and `ingestdesk documents` shows which"
)


class IssuedIds:
    """The ledger's id source for one batch, remembering what it hands out.

    :meth:`~core.ledger.Operator.add_many` asks for ids only once every original is
    stored, just before the one transaction that records the batch: while none has
    been issued, nothing can have been recorded; once one has, the transaction that
    holds its row either committed or did not, which one lookup answers.
    """

    def __init__(self, source: Callable[[], str]) -> None:
        self.source = source
        self.issued: list[str] = []

    def __call__(self) -> str:
        value = self.source()
        self.issued.append(value)
        return value


def batch_runner(*, submit: bool) -> Runner:
    """The runner of ``upload`` (``submit=False``) or ``add`` (``submit=True``)."""

    def run(args: argparse.Namespace, out: Output) -> int:
        # asyncio and the store are imported once a batch runs, here and below: every
        # command builds this command's parser, and --help must not pay for them.
        import asyncio

        check_replaces(args)
        check_skip_refused(args)
        settings = settings_from_args(args)
        stdin = read_stdin_first(args, settings.max_upload_bytes)
        ids = IssuedIds(_new_id)
        try:
            return asyncio.run(_add_batch(settings, args, out, ids, stdin, submit=submit))
        except KeyboardInterrupt:
            # A second Ctrl-C (the first is a cancellation, answered in _add_batch).
            raise Interrupted(UNSURE if ids.issued else NOTHING_ADDED) from None

    return run


def check_replaces(args: argparse.Namespace) -> None:
    """``--replaces`` names one document's next version: exactly one FILE, and no
    ``--idempotency-key``.

    A key is refused, not ignored: the ledger keeps keys only for uploads and adds
    (fingerprinted by content, not by the document replaced) and
    :meth:`~core.ledger.Versions.replace` takes none, so an ignored key would let a
    retried command make a new version (superseding the last) on every retry, which
    is what the caller gave the key to prevent. Refused before anything is read.
    """
    if getattr(args, "replaces", None) is None:
        return
    if len(args.files) != 1:
        raise BadInput("--replaces takes exactly one FILE: the document's next version")
    if args.idempotency_key is not None:
        raise BadInput(
            "--replaces cannot be combined with --idempotency-key (a replacement is not "
            "recorded under a key); check `ingestdesk document DOC_ID` before repeating it"
        )


def _new_id() -> str:
    from core.ledger import new_id

    return new_id()


async def _add_batch(
    settings: Settings,
    args: argparse.Namespace,
    out: Output,
    ids: IssuedIds,
    stdin: bytes | None,
    *,
    submit: bool,
) -> int:
    from core.store import track_created

    # The originals this batch stores new: the only ones it may take back.
    with track_created() as stored_new:
        return await _add_tracked(settings, args, out, ids, stdin, stored_new, submit=submit)


async def _add_tracked(
    settings: Settings,
    args: argparse.Namespace,
    out: Output,
    ids: IssuedIds,
    stdin: bytes | None,
    stored_new: list[str],
    *,
    submit: bool,
) -> int:
    import asyncio

    from core.ledger import Ledger

    stop = threading.Event()
    ledger: Ledger | None = None
    inputs = Inputs([])
    try:
        replaces: str | None = getattr(args, "replaces", None)
        if replaces is None:
            # Every input is read and judged before the ledger is opened: a refused
            # batch (a missing file, /dev/zero, an empty or unsupported file, a bad
            # key) creates no ledger, and no folder, where there was none.
            inputs = await asyncio.to_thread(
                read_inputs, args, settings.max_upload_bytes, stop, stdin
            )
            judge_inputs(inputs.batch, settings.max_upload_bytes, args.idempotency_key)
            if not inputs.batch:
                # Only --skip-refused leaves an empty batch (FILE is required): every
                # input was refused, and, as for a refused batch, no ledger is opened.
                return _answer_all_skipped(out, inputs.skipped)
            ledger = await Ledger.open(settings, ids=ids)
        else:
            # A new version needs its document in an existing ledger: a mistyped --db
            # is refused, not created; and its id is checked before the file is read
            # (stdin excepted: see read_stdin_first), so a mistyped id does not cost
            # reading, and storing, up to the cap first.
            ledger = await Ledger.open(settings, ids=ids, create=False)
            await ledger.reads.get_document(replaces)
            inputs = await asyncio.to_thread(
                read_inputs, args, ledger.settings.max_upload_bytes, stop, stdin
            )
        replayed = False
        added: list[tuple[DocumentView, TaskView | None]]
        if replaces is not None:
            [(data, name)] = inputs.batch
            version = await ledger.versions.replace(replaces, data, name, actor=args.actor)
            added = [(version, None)]
        elif args.idempotency_key is not None:
            if len(inputs.batch) != 1:
                raise BadInput("--idempotency-key names one request: give exactly one file")
            [(data, name)] = inputs.batch
            once = await ledger.operator.add_once(
                data, name, key=args.idempotency_key, submit=submit, actor=args.actor
            )
            added, replayed = [once.value], once.replayed
        else:
            added = await ledger.operator.add_many(inputs.batch, submit=submit, actor=args.actor)
    except asyncio.CancelledError:
        # Ctrl-C: asyncio.run turns the first SIGINT into this cancellation.
        stop.set()
        created = list(stored_new)
        if ledger is not None:
            # Closing waits for a transaction already handed to the database.
            await ledger.close()
            ledger = None
        left = await _what_was_left(settings, ids, args, created, len(inputs.batch))
        raise Interrupted(left) from None
    except IngestDeskError:
        # Refused after the originals were stored (an idempotency key used for other
        # content, a version refused while another is processing): take back what
        # this batch stored and nothing references.
        if ledger is not None:
            await ledger.take_back(stored_new)
        raise
    finally:
        if ledger is not None:
            await ledger.close()
    _answer(out, added, submit=submit, replayed=replayed, skipped=_skipped_of(args, inputs))
    return EXIT_OK


async def _what_was_left(
    settings: Settings,
    ids: IssuedIds,
    args: argparse.Namespace,
    created: list[str],
    batch_size: int,
) -> str:
    """What an interrupted batch left: nothing, or (interrupted during its commit)
    the whole batch of ``batch_size`` documents (for ``--replaces``, the new
    version). The originals it stored that nothing references are removed (see
    :meth:`core.ledger.Ledger.take_back`)."""
    if not ids.issued and not created:
        return NOTHING_ADDED
    from core.ledger import Ledger

    try:
        async with await Ledger.open(settings, create=False) as ledger:
            await ledger.take_back(created)
            if not ids.issued:
                return NOTHING_ADDED
            first = ids.issued[0]  # a document's or a task's: both commit together
            if not await _exists(ledger, first):
                return NOTHING_ADDED
    except IngestDeskError:
        return UNSURE if ids.issued else NOTHING_ADDED
    if getattr(args, "replaces", None) is not None:
        return (
            "interrupted too late: the new version was already recorded "
            f"(`ingestdesk document {args.replaces}` lists it)"
        )
    return (
        f"interrupted too late: the whole batch was already recorded ({batch_size} "
        "documents added; `ingestdesk documents` lists them)"
    )


async def _exists(ledger: Ledger, record_id: str) -> bool:
    for lookup in (ledger.reads.get_document, ledger.reads.get_task):
        try:
            await lookup(record_id)
            return True
        except NotFound:
            continue
    return False


def _skipped_of(args: argparse.Namespace, inputs: Inputs) -> list[Skipped] | None:
    return inputs.skipped if skips_refused(args) else None


def _answer(
    out: Output,
    added: list[tuple[DocumentView, TaskView | None]],
    *,
    submit: bool,
    replayed: bool = False,
    skipped: list[Skipped] | None = None,
) -> None:
    """Print what the batch added: under ``--json`` the list of documents (``upload``)
    or tasks (``add``), as it always was; with ``--skip-refused`` (``skipped`` not
    None) that list is ``added`` in an object beside ``skipped``, and each skipped
    input is also one ``skipped FILE: reason`` line on stderr in text mode."""
    # A repeated request (same idempotency key) answers what the first one did.
    again = " (already done under this idempotency key; nothing new)" if replayed else ""
    if not submit:
        _emit(
            out,
            skipped,
            [d.to_dict() for d, _ in added],
            [
                f"uploaded document={d.document_id} kind={d.kind.value} name={d.filename}{again}"
                + (
                    # A new version names the document it belongs to, and which it is.
                    f" family={d.family_id} version=v{d.version_no} (a draft: submit it, "
                    "then publish it to replace what search finds)"
                    if d.version_no > 1
                    else ""
                )
                for d, _ in added
            ],
        )
        return
    tasks = [(d, t) for d, t in added if t is not None]
    _emit(
        out,
        skipped,
        [t.to_dict() for _, t in tasks],
        [
            f"submitted task={t.task_id} document={t.document_id} name={d.filename}{again}"
            for d, t in tasks
        ],
    )


def _emit(
    out: Output, skipped: list[Skipped] | None, added: list[dict[str, object]], lines: list[str]
) -> None:
    # Without --skip-refused the JSON stays the bare list existing scripts read; the
    # flag is what asks for the object, so no consumer sees its shape change.
    if skipped is None:
        out.emit(added, lines)
        return
    out.emit({"added": added, "skipped": [s.to_dict() for s in skipped]}, lines)
    _report_skipped(out, skipped)


def _answer_all_skipped(out: Output, skipped: list[Skipped]) -> int:
    """Every input was refused under ``--skip-refused``: bad input (exit 2), as a
    refused batch is, with the skipped inputs reported as when some were added and,
    under ``--json``, the ``error`` every refusal carries beside them."""
    refused = BadInput(f"nothing was added: every input was refused ({len(skipped)} skipped)")
    if out.as_json:
        error = {"kind": type(refused).__name__, "message": refused.message}
        out.emit({"added": [], "skipped": [s.to_dict() for s in skipped], "error": error}, [])
        return refused.exit_code
    _report_skipped(out, skipped)
    return out.error(refused)


def _report_skipped(out: Output, skipped: list[Skipped]) -> None:
    """One ``skipped FILE: reason`` line on stderr per skipped input (text mode: the
    JSON answer holds them), so stdout keeps only what was added."""
    if out.as_json:
        return
    for s in skipped:
        write_line(visible(f"skipped {s.file}: {s.reason}"), sys.stderr)


def _files(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="a path, or - for stdin")
    parser.add_argument("--name", help="display name (required with -)")
    idempotency_argument(parser)
    parser.add_argument(
        "--skip-refused",
        action="store_true",
        help="for a bulk load: leave out each file whose content is refused (empty, over "
        "the upload limit, of no accepted type), add the rest, and report each one left "
        "out (`skipped FILE: reason` on stderr; under --json the answer becomes "
        '{"added": [...], "skipped": [{"file", "name", "reason"}, ...]}); a missing or '
        "unreadable path still refuses the whole batch. Exit 0 when anything was added, "
        "2 when every file was skipped (nothing is written). Not with --idempotency-key",
    )


def idempotency_argument(parser: argparse.ArgumentParser) -> None:
    """``--idempotency-key K``: a repeat with the same key does nothing new."""
    parser.add_argument(
        "--idempotency-key",
        metavar="K",
        help="repeating the request with the same key returns the first answer and does "
        "nothing again; the same key with other content is a conflict (keys are kept 7 days)",
    )


def _upload(parser: argparse.ArgumentParser) -> None:
    _files(parser)
    parser.add_argument(
        "--replaces",
        metavar="DOC_ID",
        help="store the one FILE as the next version of this document (any of its "
        "versions' ids): a draft; search keeps finding the published version until "
        "this one is published",
    )


UPLOAD = Command(
    "upload",
    "store files as draft documents (--replaces: a document's next version)",
    batch_runner(submit=False),
    _upload,
    interrupted=NOTHING_ADDED,
)
ADD = Command(
    "add",
    "upload files and submit each for ingestion",
    batch_runner(submit=True),
    _files,
    interrupted=NOTHING_ADDED,
)
