"""Document commands: ``submit``, ``documents``, ``document`` (with its versions and
history), the review desk's decisions ``publish``, ``reject``, ``withdraw`` and
``delete``, ``chunks`` and ``search`` (``upload`` and ``add`` are
:mod:`core.cli.uploads`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from core.cli.command import Command, on_ledger
from core.cli.options import limit_argument, whole_number
from core.cli.output import Output, document_line, task_line, when
from core.cli.uploads import idempotency_argument
from core.errors import NotFound
from core.states import DocumentStatus

if TYPE_CHECKING:
    from core.ledger import DocumentView, Ledger
    from core.ledger.views import DocumentEventView

DEFAULT_LIST_LIMIT = 1000  # documents listed at most
DEFAULT_SEARCH_LIMIT = 20  # search hits shown at most
CHUNK_PREVIEW_CHARS = 100  # characters of each chunk that `chunks` shows
# Row versions are PostgreSQL integers: a larger --expect-version can only be a typo,
# and binding it would be a driver error instead of an answer.
ROW_VERSION_MAX = 2**31 - 1


async def cmd_submit(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk submit DOC_ID``: a queued task for a draft document."""
    again = ""
    if args.idempotency_key is not None:
        once = await ledger.operator.submit_once(
            args.document_id, key=args.idempotency_key, actor=args.actor
        )
        task = once.value
        again = " (already done under this idempotency key; nothing new)" if once.replayed else ""
    else:
        task = await ledger.operator.submit(args.document_id, actor=args.actor)
    out.emit(
        task.to_dict(),
        f"submitted task={task.task_id} document={task.document_id} status={task.status}{again}",
    )


async def cmd_documents(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk documents``: documents, optionally of one status."""
    docs = await ledger.reads.list_documents(status=args.status, limit=args.limit)
    out.emit([d.to_dict() for d in docs], [document_line(d) for d in docs] or ["no documents"])


async def cmd_document(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk document DOC_ID``: one version of a document, its row version and
    tasks, then every version of the document and the document's history."""
    doc = await ledger.reads.get_document(args.document_id)
    tasks = await ledger.reads.list_tasks(document_id=doc.document_id, limit=None)
    versions = await ledger.reads.versions(doc.document_id)
    history = await _history(ledger, doc)
    value = doc.to_dict() | {
        "tasks": [t.to_dict() for t in tasks],
        "versions": [v.to_dict() for v in versions],
        "history": [e.to_dict() for e in history],
    }
    lines = [
        f"document  {doc.document_id}",
        f"version   v{doc.version_no} of document {doc.family_id}",
        f"name      {doc.filename}",
        f"status    {doc.status.value} (row version {doc.version})",
        f"kind      {doc.kind.value}, {doc.size} bytes, sha256 {doc.sha256}",
        "tasks:",
        *(f"  {task_line(t)}" for t in tasks),
        "versions:",
        *(_version_line(v, shown=v.document_id == doc.document_id) for v in versions),
        "history:",
        *(_event_line(e) for e in history),
    ]
    out.emit(value, lines)


async def _history(ledger: Ledger, doc: DocumentView) -> list[DocumentEventView]:
    """The document's history; empty for one recorded before ingestdesk kept histories
    (a ledger upgraded from before versions), for which the ledger answers NotFound."""
    try:
        return await ledger.reads.document_history(doc.document_id)
    except NotFound:
        return []


def _version_line(v: DocumentView, *, shown: bool) -> str:
    # Any version's id names the document: the version this answer is about is marked.
    mark = "*" if shown else " "
    return (
        f"  {mark} v{v.version_no:<3} {v.document_id[:8]}  {v.status.value:<14} "
        f"row version {v.version:<4} created {when(v.created_at)}"
    )


def _event_line(e: DocumentEventView) -> str:
    return (
        f"  {when(e.at)}  {e.actor}  {e.action:<8} v{e.version_no:<3} "
        f"{e.from_status or '-'} -> {e.to_status or '-'}"
        + (f"  reason={e.reason!r}" if e.reason else "")
    )


async def cmd_publish(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk publish DOC_ID``: approve a version waiting for review (or a
    withdrawn one); the document's previously published version is retired in the
    same transaction."""
    doc = await ledger.versions.publish(
        args.document_id,
        actor=args.actor,
        expected_version=args.expect_version,
        reason=args.reason,
    )
    out.emit(
        doc.to_dict(),
        f"published document={doc.family_id} version=v{doc.version_no} ({doc.document_id}) "
        f"name={doc.filename}: search finds this version now",
    )


async def cmd_reject(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk reject DOC_ID --reason R``: turn a version down (a draft again)."""
    doc = await ledger.versions.reject(args.document_id, actor=args.actor, reason=args.reason)
    out.emit(
        doc.to_dict(),
        f"rejected document={doc.family_id} version=v{doc.version_no} ({doc.document_id}): "
        "a draft again, its chunks dropped",
    )


async def cmd_withdraw(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk withdraw DOC_ID --reason R``: take a published version out of search."""
    doc = await ledger.versions.withdraw(args.document_id, actor=args.actor, reason=args.reason)
    out.emit(
        doc.to_dict(),
        f"withdrew document={doc.family_id} version=v{doc.version_no} ({doc.document_id}): "
        "out of search; `ingestdesk publish` puts it back",
    )


async def cmd_delete(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk delete DOC_ID``: remove a document, every version of it."""
    removed = await ledger.versions.delete(args.document_id, actor=args.actor, reason=args.reason)
    family = removed[0].family_id
    out.emit(
        {"family_id": family, "deleted": [v.to_dict() for v in removed]},
        f"deleted document={family}: "
        + ", ".join(f"v{v.version_no} ({v.status.value})" for v in removed),
    )


async def cmd_chunks(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk chunks DOC_ID``: a document's chunks."""
    chunks = await ledger.reads.chunks(args.document_id)
    out.emit(
        [c.to_dict() for c in chunks],
        [
            f"{c.ordinal:>4}  page={c.page if c.page is not None else '-':<4} "
            f"{c.text[:CHUNK_PREVIEW_CHARS]!r}"
            for c in chunks
        ]
        or ["no chunks"],
    )


async def cmd_search(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk search QUERY``: ranked full-text search over published versions'
    chunks, one line per hit with the matched words marked ``**like this**``."""
    hits = await ledger.reads.search(args.query, limit=args.limit, include_unpublished=args.all)
    lines = [
        f"{h.family_id[:8]}  v{h.version_no:<3} page={h.page if h.page is not None else '-':<4} "
        f"score={h.score:<9.4g} {h.filename}: {h.snippet}"
        for h in hits
    ]
    out.emit(
        [h.to_dict() for h in hits],
        lines or ["no matches (only published documents are searchable; --all includes the rest)"],
    )


# ------------------------------------------------------------------ arguments


def _document_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("document_id")


def _documents(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--status", choices=[s.value for s in DocumentStatus])
    limit_argument(parser, DEFAULT_LIST_LIMIT, "documents listed")


def _publish(parser: argparse.ArgumentParser) -> None:
    _document_id(parser)
    parser.add_argument(
        "--expect-version",
        metavar="N",
        type=whole_number(1, ROW_VERSION_MAX),
        help="the row version `ingestdesk document` showed: refused (exit 3) if the "
        "version changed since",
    )
    parser.add_argument("--reason", help="why, for the document's history")


def _reason_required(parser: argparse.ArgumentParser) -> None:
    # A decision against a version is explained: the history keeps the reason.
    _document_id(parser)
    parser.add_argument("--reason", required=True, help="why (required; kept in the history)")


def _delete(parser: argparse.ArgumentParser) -> None:
    _document_id(parser)
    parser.add_argument("--reason", help="why, for the document's history")


def _search(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("query")
    parser.add_argument("--all", action="store_true", help="include documents not yet published")
    limit_argument(parser, DEFAULT_SEARCH_LIMIT, "hits shown")


# None of these can do anything in a ledger that does not exist yet: a missing one is
# refused, not created (create=False), so a mistyped --db leaves nothing behind.
def _submit(parser: argparse.ArgumentParser) -> None:
    _document_id(parser)
    idempotency_argument(parser)


SUBMIT = Command(
    "submit",
    "submit a draft document for ingestion",
    on_ledger(cmd_submit, create=False),
    _submit,
)
DOCUMENTS = Command(
    "documents", "list documents", on_ledger(cmd_documents, create=False), _documents
)
DOCUMENT = Command(
    "document",
    "one document: its row version, tasks, versions and history",
    on_ledger(cmd_document, create=False),
    _document_id,
)
PUBLISH = Command(
    "publish",
    "publish a version waiting for review (the published one is retired)",
    on_ledger(cmd_publish, create=False),
    _publish,
)
REJECT = Command(
    "reject",
    "turn down a version waiting for review: a draft again, its chunks dropped",
    on_ledger(cmd_reject, create=False),
    _reason_required,
)
WITHDRAW = Command(
    "withdraw",
    "take a published version out of search (it may be published again)",
    on_ledger(cmd_withdraw, create=False),
    _reason_required,
)
DELETE = Command(
    "delete",
    "remove a document: every version and its chunks (not while one of its tasks runs)",
    on_ledger(cmd_delete, create=False),
    _delete,
)
CHUNKS = Command(
    "chunks", "print a document's chunks", on_ledger(cmd_chunks, create=False), _document_id
)
SEARCH = Command(
    "search",
    "ranked full-text search over published versions' chunks",
    on_ledger(cmd_search, create=False),
    _search,
)
