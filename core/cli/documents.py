"""Document commands: ``submit``, ``documents``, ``document`` (with its versions and
history), the review desk's decisions ``publish``, ``reject``, ``withdraw`` and
``delete``, ``chunks`` and ``search`` (``upload`` and ``add`` are
:mod:`core.cli.uploads`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from core.cli.command import Command, on_ledger
from core.cli.options import limit_argument, whole_number
from core.cli.output import Output, document_line, task_line, when, write_line
from core.cli.pages import page_lines
from core.cli.uploads import idempotency_argument
from core.errors import NotFound
from core.safe_text import visible
from core.states import ROW_VERSION_MAX, DocumentStatus

if TYPE_CHECKING:
    from core.ledger import DocumentView, Ledger, SearchHit
    from core.ledger.views import DocumentEventView

DEFAULT_LIST_LIMIT = 1000  # documents listed at most
DEFAULT_SEARCH_LIMIT = 20  # search hits shown at most
CHUNK_PREVIEW_CHARS = 100  # characters of each chunk that `chunks` shows


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
    ident = args.document_id.strip().lower()
    named = (
        ""
        if task.document_id.startswith(ident)
        else f" ({ident} names the document; its draft {task.document_id[:8]} is the one submitted)"
    )
    out.emit(
        task.to_dict(),
        f"submitted task={task.task_id} document={task.document_id} status={task.status}"
        f"{again}{named}",
    )


async def cmd_documents(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk documents``: documents, optionally of one status; a version flagged
    for review (core.ledger.pages) says why on its line."""
    docs = await ledger.reads.list_documents(status=args.status, limit=args.limit)
    # Why a version is flagged for review, beside it (two grouped reads for the list).
    summaries = await ledger.reads.page_summaries([d.document_id for d in docs])
    flags = {d: p.reason for d, p in summaries.items() if p.flagged}
    out.emit(
        [d.to_dict() | {"review_flag": flags.get(d.document_id)} for d in docs],
        [
            document_line(d)
            + (f"  flagged: {flags[d.document_id]}" if d.document_id in flags else "")
            for d in docs
        ]
        or ["no documents"],
    )


async def cmd_document(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk document DOC_ID``: one version of a document, its row version and
    tasks, then every version of the document and the document's history. A deleted
    document is shown from its history, which outlives it."""
    try:
        doc = await ledger.reads.get_document(args.document_id)
    except NotFound:
        # Not in the ledger: deleted, if its history names it (else NotFound again).
        history = await ledger.reads.document_history(args.document_id)
        await _deleted_document(ledger, args.document_id, history, out)
        return
    tasks = await ledger.reads.list_tasks(document_id=doc.document_id, limit=None)
    versions = await ledger.reads.versions(doc.document_id)
    history = await ledger.reads.document_history(doc.document_id)
    summary, pages = await ledger.reads.pages(doc.document_id)
    value = doc.to_dict() | {
        "deleted": False,
        "page_summary": summary.to_dict(),
        "pages": [p.to_dict() for p in pages],
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
        *page_lines(summary, pages),
        "tasks:",
        *(f"  {task_line(t)}" for t in tasks),
        "versions:",
        *(_version_line(v, shown=v.document_id == doc.document_id) for v in versions),
        "history:",
        *(_event_line(e) for e in history),
    ]
    out.emit(value, lines)


async def _deleted_document(
    ledger: Ledger, given: str, history: Sequence[DocumentEventView], out: Output
) -> None:
    """A deleted document as its history keeps it: which version the id named, what
    each version was when the document was deleted, who deleted it and why, its
    tasks (which outlive it) and the whole history."""
    ident = given.strip().lower()
    named = next(e for e in history if e.document_id.startswith(ident))
    # The last line of each version: its delete, which says what it was.
    last: dict[str, DocumentEventView] = {}
    for event in history:
        last[event.document_id] = event
    versions = sorted(last.values(), key=lambda e: e.version_no)
    gone = last[named.document_id]
    tasks = await ledger.reads.list_tasks(document_id=named.document_id, limit=None)
    value = {
        "document_id": named.document_id,
        "family_id": named.family_id,
        "version_no": named.version_no,
        "status": "deleted",
        "deleted": True,
        "deleted_at": gone.at,
        "deleted_by": gone.actor,
        "reason": gone.reason,
        "tasks": [t.to_dict() for t in tasks],
        "versions": [
            {
                "document_id": e.document_id,
                "version_no": e.version_no,
                "status": "deleted",
                "status_before": e.from_status,
            }
            for e in versions
        ],
        "history": [e.to_dict() for e in history],
    }
    why = f", reason {gone.reason!r}" if gone.reason else ""
    lines = [
        f"document  {named.document_id}  (deleted)",
        f"version   v{named.version_no} of document {named.family_id}",
        f"status    deleted {when(gone.at)} by {gone.actor}{why}; its history is kept",
        "tasks:",
        *(f"  {task_line(t)}" for t in tasks),
        "versions (deleted with the document; each as it was):",
        *(
            f"  {'*' if e.document_id == named.document_id else ' '} v{e.version_no:<3} "
            f"{e.document_id[:8]}  {e.from_status or '-'}"
            for e in versions
        ),
        "history:",
        *(_event_line(e) for e in history),
    ]
    out.emit(value, lines)


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


def _acted_on(given: str, doc: DocumentView, done: str = "acted on") -> str:
    """What an answer adds when the id given names the document and another of its
    versions is the one acted on (see core.ledger.version_reads.acting_version)."""
    ident = given.strip().lower()
    if doc.document_id.startswith(ident):
        return ""
    return f" ({ident} names the document; its version v{doc.version_no} is the one {done})"


async def cmd_publish(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk publish DOC_ID``: approve a version waiting for review (or a
    withdrawn one); the document's previously published version is retired in the
    same transaction."""
    doc = await ledger.versions.publish(
        args.document_id,
        actor=args.actor,
        expected_version=args.expect_version,
        reason=args.reason,
        accept_low_confidence=args.accept_low_confidence,
    )
    summary, _ = await ledger.reads.pages(doc.document_id)
    accepted = f"; accepted: {summary.reason}" if summary.flagged else ""
    out.emit(
        doc.to_dict() | {"page_summary": summary.to_dict()},
        f"published document={doc.family_id} version=v{doc.version_no} ({doc.document_id}) "
        f"name={doc.filename}: search finds this version now{_acted_on(args.document_id, doc)}"
        f"{accepted}",
    )


async def cmd_reject(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk reject DOC_ID --reason R``: turn a version down (a draft again)."""
    doc = await ledger.versions.reject(args.document_id, actor=args.actor, reason=args.reason)
    out.emit(
        doc.to_dict(),
        f"rejected document={doc.family_id} version=v{doc.version_no} ({doc.document_id}): "
        f"a draft again, its chunks dropped{_acted_on(args.document_id, doc)}",
    )


async def cmd_withdraw(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk withdraw DOC_ID --reason R``: take a published version out of search."""
    doc = await ledger.versions.withdraw(args.document_id, actor=args.actor, reason=args.reason)
    out.emit(
        doc.to_dict(),
        f"withdrew document={doc.family_id} version=v{doc.version_no} ({doc.document_id}): "
        f"out of search; `ingestdesk publish` puts it back{_acted_on(args.document_id, doc)}",
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
    """``ingestdesk chunks DOC_ID``: a document's chunks: those of the version the id
    names, or, for the document's name whose first version keeps none, those of the
    version search finds (core.ledger.version_reads.document_chunks)."""
    version, chunks = await ledger.reads.document_chunks(args.document_id)
    header = _acted_on(args.document_id, version, "shown")
    lines = [
        f"{c.ordinal:>4}  {_where(c.page, c.location, c.place)} {c.text[:CHUNK_PREVIEW_CHARS]!r}"
        for c in chunks
    ] or [
        f"no chunks (version v{version.version_no} {version.document_id[:8]} is "
        f"{version.status.value})"
    ]
    if header:
        lines.insert(
            0,
            f"document={version.family_id} version=v{version.version_no} "
            f"({version.document_id}) {version.status.value}{header}:",
        )
    out.emit([c.to_dict() for c in chunks], lines)


def _where(page: int | None, location: dict[str, object], place: str) -> str:
    """Where a chunk is, in the document's own terms: ``page=3`` for a page (``page=-``
    for a text file, which has none), ``[slide 3 notes]``, ``[sheet Q1 rows 2-41]``,
    ``[footnote in Setup > Linux]`` for everything else — a slide has no page to show."""
    if set(location) - {"page"}:
        return f"[{place}]"
    return f"page={page if page is not None else '-':<4}"


async def cmd_search(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk search QUERY [--mode M]``: ranked search over published versions'
    chunks, one line per hit with the matched words marked ``**like this**``. A vector
    or hybrid answer starts with a line naming its mode, the index that answered and
    the vector path; a notice (hybrid answered from keyword ranks alone) goes to
    stderr as well, so a script reading --json sees it too."""
    answer = await ledger.reads.find(
        args.query, limit=args.limit, include_unpublished=args.all, mode=args.mode
    )
    hits = answer.hits
    lines = [
        f"{h.family_id[:8]}  v{h.version_no:<3} {_where(h.page, h.location, h.place)} "
        f"score={h.score:<9.4g} {_legs(h)}{h.filename}: {h.snippet}"
        for h in hits
    ]
    if answer.notice:
        write_line(f"ingestdesk: {visible(answer.notice)}", sys.stderr)
    if answer.index and hits:
        lines.insert(0, f"mode={answer.mode} index={answer.index} vectors: {answer.path}")
    out.emit(
        [h.to_dict() for h in hits],
        lines if hits else [*lines, NO_MATCHES],
    )


NO_MATCHES = "no matches (only published documents are searchable; --all includes the rest)"


def _legs(hit: SearchHit) -> str:
    """Each leg's rank and score of a vector or hybrid hit ("" for keyword search)."""
    if hit.mode == "keyword":
        return ""
    kw = f"#{hit.keyword_rank} {hit.keyword_score:.4g}" if hit.keyword_rank else "-"
    vec = f"#{hit.vector_rank} {hit.vector_score:.3f}" if hit.vector_rank else "-"
    return f"keyword={kw} vector={vec} " if hit.mode == "hybrid" else f"vector={vec} "


def search_limit(value: str) -> int:
    """``search --limit``: from 1 to the most hits a search returns
    (:data:`core.ledger.search.SEARCH_LIMIT_MAX`, the one constant)."""
    # Imported when a limit is given, not when the parser is built: every command's
    # parser is built, and the ledger's modules (SQLAlchemy) would slow them all.
    from core.ledger.search import SEARCH_LIMIT_MAX

    return whole_number(1, SEARCH_LIMIT_MAX)(value)


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
    parser.add_argument(
        "--accept-low-confidence",
        action="store_true",
        help="publish a version flagged for review (pages read by OCR under the "
        "confidence threshold, or skipped) as read; without it such a version is "
        "refused (exit 3). The history records what was accepted",
    )


def _reason_required(parser: argparse.ArgumentParser) -> None:
    # A decision against a version is explained: the history keeps the reason.
    _document_id(parser)
    parser.add_argument("--reason", required=True, help="why (required; kept in the history)")


def _delete(parser: argparse.ArgumentParser) -> None:
    _document_id(parser)
    parser.add_argument("--reason", help="why, for the document's history")


def _search(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("query")
    parser.add_argument(
        "--mode",
        metavar="MODE",
        help="keyword, vector or hybrid (keyword and vector ranks fused); default: "
        "hybrid when the active index is a real model, else keyword",
    )
    parser.add_argument("--all", action="store_true", help="include documents not yet published")
    parser.add_argument(
        "--limit",
        type=search_limit,
        default=DEFAULT_SEARCH_LIMIT,
        help=f"hits shown at most (default {DEFAULT_SEARCH_LIMIT}; more than one search "
        "returns is refused)",
    )


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
    "one document: its row version, pages and their review flag, tasks, versions, history",
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
    "ranked search over published versions' chunks: keyword, vector or hybrid",
    on_ledger(cmd_search, create=False),
    _search,
)
