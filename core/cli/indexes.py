"""``ingestdesk index``: the ledger's vector indexes — which embedder each is, its
state, how many vectors it holds, and which one search answers from."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from core.cli.command import Command, on_ledger
from core.cli.options import common_options
from core.cli.output import Output

if TYPE_CHECKING:
    from core.ledger import IndexView, Ledger


def _when(at: float | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


def _line(index: IndexView) -> str:
    model = f" {index.model}" if index.model else ""
    return (
        f"{index.id:>3}  {index.name:<28} {index.state.value:<8} "
        f"{index.embedder}{model} {index.dimensions}d  {index.vectors} vectors  "
        f"activated {_when(index.activated_at)}"
    )


async def _list(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    indexes = await ledger.indexes.list()
    lines = [_line(i) for i in indexes] or [
        "no index yet: the first worker to embed a document makes one (and makes it active)"
    ]
    out.emit([i.to_dict() for i in indexes], lines)


async def _show(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    index = await ledger.indexes.get(args.index)
    out.emit(index.to_dict(), [_line(index), f"version {index.version}"])


def _arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="index_action", metavar="ACTION", required=True)
    # The global options (--json, --db …) are accepted after the action too.
    common = [common_options(top_level=False)]
    listing = actions.add_parser("list", help="every index, oldest first", parents=common)
    listing.set_defaults(index_run=_list)
    show = actions.add_parser("show", help="one index, by name or id", parents=common)
    show.add_argument("index", metavar="INDEX", help="its name or id")
    show.set_defaults(index_run=_show)


async def _dispatch(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    await args.index_run(ledger, args, out)


INDEX = Command(
    "index",
    "vector indexes: which embedder each is, its state and vectors, the active one",
    on_ledger(_dispatch, create=False),
    _arguments,
)
