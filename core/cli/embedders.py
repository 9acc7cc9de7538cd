"""``ingestdesk embedders``: the kinds of embedder an index can use, what each needs
installed, whether it is available here, its dimensions, and the default."""

from __future__ import annotations

import argparse

from core.cli.command import Command
from core.cli.output import EXIT_OK, Output


def run_embedders(args: argparse.Namespace, out: Output) -> int:
    """List the embedder kinds. Needs no ledger, and loads no model."""
    from core.ingest.embedders import KINDS, default_spec, installed_version, unavailable_reason

    default = default_spec()
    value = []
    lines = []
    for kind in KINDS:
        needs = {name: installed_version(name) for name in kind.needs}
        missing = unavailable_reason(kind.name)
        value.append(
            {
                "kind": kind.name,
                "summary": kind.summary,
                "model": kind.model or None,
                "dimensions": kind.dimensions,
                "default_dimensions": kind.default_dimensions,
                "needs": needs,
                "available": missing is None,
                "unavailable_reason": missing,
                "example": kind.example,
                "default": kind.name == default.embedder,
            }
        )
        installed = ", ".join(
            f"{name} {version}" if version else f"{name} MISSING" for name, version in needs.items()
        )
        state = "available" if missing is None else f"NOT AVAILABLE: {missing}"
        lines.append(
            f"{kind.name:<10} {kind.summary}; dimensions {kind.dimensions}; "
            f"needs {installed or 'nothing beyond Python'}; {state}; e.g. {kind.example}"
        )
    lines.append(f"{'default':<10} {default.text()}")
    out.emit(value, lines)
    return EXIT_OK


EMBEDDERS_COMMAND = Command(
    "embedders",
    "the embedders an index can use, what each needs, whether it is available here",
    run_embedders,
)
