"""``ingestdesk index``: the ledger's vector indexes — which embedder each is, its
state, how many vectors it holds, which one search answers from — and the operator's
actions on them: create one (a re-embedding campaign over every published and
review-pending version), follow, cancel or resume its campaign, activate it (one
transaction), drop an old one."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from core.cli.command import Command, on_ledger
from core.cli.options import common_options
from core.cli.output import Output
from core.states import TaskStatus

if TYPE_CHECKING:
    from core.ledger import CampaignProgress, Ledger


def _when(at: float | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


def _campaign(progress: CampaignProgress) -> str:
    if not progress.total:
        return "no campaign"
    others = ", ".join(
        f"{n} {status}"
        for status, n in sorted(progress.by_status.items())
        if status != TaskStatus.SUCCEEDED.value
    )
    return f"campaign {progress.done}/{progress.total}" + (f" ({others})" if others else "")


def _line(progress: CampaignProgress) -> str:
    index = progress.index
    model = f" {index.model}" if index.model else ""
    return (
        f"{index.id:>3}  {index.name:<28} {index.state.value:<8} "
        f"{index.embedder}{model} {index.dimensions}d  {index.vectors} vectors  "
        f"{_campaign(progress)}  activated {_when(index.activated_at)}"
    )


async def _list(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    found = [await ledger.campaigns.progress(i.id) for i in await ledger.indexes.list()]
    lines = [_line(p) for p in found] or [
        "no index yet: the first worker to embed a document makes one (and makes it active)"
    ]
    out.emit([p.to_dict() for p in found], lines)


async def _show(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    from core.ledger.vector_search import default_path

    progress = await ledger.campaigns.progress(args.index)
    # Which structure a search process here holds its vectors in (numkong installed?).
    searched = f"searched here as {default_path()}"
    out.emit(progress.to_dict(), [_line(progress), f"version {progress.index.version}", searched])


async def _create(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    from core.ingest.embedding import index_key_for_spec, worker_options

    key = index_key_for_spec(args.spec)
    progress = await ledger.campaigns.create(key, name=args.name, actor=args.actor)
    unrecorded = worker_options(args.spec, key)
    lines = [
        _line(progress),
        f"{progress.total} re-embedding tasks queued: workers run them "
        f"(`ingestdesk worker --loop`); then `ingestdesk index activate "
        f"{progress.index.name}`",
    ]
    if unrecorded:
        # Said, never dropped in silence: a declared-resend-safe endpoint whose
        # workers were not told so would send every lost reply to review.
        lines.append(
            f"not recorded in the index: {', '.join(unrecorded)} (they do not change "
            f"the vectors): start workers with --embedder '{args.spec}' to use them"
        )
    out.emit(progress.to_dict() | {"worker_options": unrecorded}, lines)


async def _resume(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    progress = await ledger.campaigns.resume(args.index, actor=args.actor)
    out.emit(progress.to_dict(), [_line(progress)])


async def _cancel(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    progress = await ledger.campaigns.cancel(args.index, actor=args.actor, reason=args.reason)
    out.emit(progress.to_dict(), [_line(progress), "resume it to go on where it stopped"])


async def _activate(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    index = await ledger.campaigns.activate(args.index, force=args.force)
    out.emit(index.to_dict(), [f"index {index.name} is active: search answers from it"])


async def _drop(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    index = await ledger.campaigns.drop(args.index, actor=args.actor)
    out.emit(index.to_dict(), [f"index {index.name} dropped with its {index.vectors} vectors"])


def _arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="index_action", metavar="ACTION", required=True)
    # The global options (--json, --db …) are accepted after the action too.
    common = [common_options(top_level=False)]
    listing = actions.add_parser("list", help="every index, oldest first", parents=common)
    listing.set_defaults(index_run=_list)
    show = actions.add_parser("show", help="one index, by name or id", parents=common)
    show.add_argument("index", metavar="INDEX", help="its name or id")
    show.set_defaults(index_run=_show)
    create = actions.add_parser(
        "create",
        help="a new index for an embedder, and its re-embedding campaign",
        parents=common,
    )
    create.add_argument("spec", metavar="EMBEDDER", help="the embedder (see: ingestdesk embedders)")
    create.add_argument("--name", help="its name (default: from the embedder)")
    create.set_defaults(index_run=_create)
    for action, helps, run in (
        ("resume", "queue what the index still lacks and requeue its failures", _resume),
        ("cancel", "cancel its campaign's tasks still to run (resume goes on)", _cancel),
        ("activate", "make a ready index the one search answers from", _activate),
        ("drop", "remove an index that is not active, with its vectors", _drop),
    ):
        sub = actions.add_parser(action, help=helps, parents=common)
        sub.add_argument("index", metavar="INDEX", help="its name or id")
        sub.set_defaults(index_run=run)
        if action == "cancel":
            sub.add_argument("--reason", help="kept in each task's history")
        if action == "activate":
            sub.add_argument(
                "--force",
                action="store_true",
                help="activate a building or retired index (versions may lack vectors)",
            )


async def _dispatch(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    await args.index_run(ledger, args, out)


INDEX = Command(
    "index",
    "vector indexes: which embedder each is, its state and vectors, the active one",
    on_ledger(_dispatch, create=False),
    _arguments,
)
