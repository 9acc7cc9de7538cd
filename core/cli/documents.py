"""Document commands: ``submit``, ``documents``, ``document``, ``publish``, ``chunks``
and ``search`` (``upload`` and ``add`` are :mod:`core.cli.uploads`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from core.cli.command import Command, on_ledger
from core.cli.options import limit_argument
from core.cli.output import Output, document_line, task_line
from core.cli.uploads import idempotency_argument
from core.states import DocumentStatus

if TYPE_CHECKING:
    from core.ledger import Ledger

DEFAULT_LIST_LIMIT = 1000  # documents listed at most
DEFAULT_SEARCH_LIMIT = 20  # search hits shown at most
CHUNK_PREVIEW_CHARS = 100  # characters of each chunk that `chunks` shows
HIT_PREVIEW_CHARS = 80  # characters of each hit that `search` shows


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
    """``ingestdesk document DOC_ID``: one document, its row version and its tasks."""
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


async def cmd_publish(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk publish DOC_ID``: approve a reviewed document."""
    doc = await ledger.versions.publish(args.document_id, actor=args.actor)
    out.emit(doc.to_dict(), f"published document={doc.document_id} name={doc.filename}")


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
    """``ingestdesk search QUERY``: full-text search over chunks."""
    hits = await ledger.reads.search(args.query, limit=args.limit, include_unpublished=args.all)
    lines = [
        f"{h.document_id[:8]}  page={h.page if h.page is not None else '-':<4} "
        f"{h.filename}: {h.text[:HIT_PREVIEW_CHARS]!r}"
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
    "one document, its row version and its tasks",
    on_ledger(cmd_document, create=False),
    _document_id,
)
PUBLISH = Command(
    "publish",
    "publish a document waiting for review",
    on_ledger(cmd_publish, create=False),
    _document_id,
)
CHUNKS = Command(
    "chunks", "print a document's chunks", on_ledger(cmd_chunks, create=False), _document_id
)
SEARCH = Command(
    "search",
    "full-text search over published documents' chunks",
    on_ledger(cmd_search, create=False),
    _search,
)
