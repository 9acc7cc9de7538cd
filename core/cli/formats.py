"""``ingestdesk formats``: what ingestdesk accepts, how it recognises each format from
the content, and what each needs installed."""

from __future__ import annotations

import argparse

from core.cli.command import Command
from core.cli.output import EXIT_OK, Output


def run_formats(args: argparse.Namespace, out: Output) -> int:
    """List the accepted formats. Needs no ledger, and imports no format library."""
    from core.ingest.formats import FORMATS, OCR_KINDS, installed_version
    from core.ingest.formats.ocr import ENGINE_DISTRIBUTION, ocr_status, unavailable_reason

    # Looks for the engine and its data without loading them.
    ocr, ocr_missing = ocr_status(), unavailable_reason()
    value = []
    lines = []
    for fmt in FORMATS.values():
        needs = {name: installed_version(name) for name in fmt.needs}
        value.append(
            {
                "kind": fmt.kind.value,
                "name": fmt.name,
                "recognised_by": fmt.recognised_by,
                "needs": needs,
                # An image yields nothing without OCR; a PDF's text layers still read.
                "available": all(version is not None for version in needs.values())
                and not (ENGINE_DISTRIBUTION in fmt.needs and ocr_missing),
            }
            | ({"ocr": ocr} if fmt.kind in OCR_KINDS else {})
        )
        installed = ", ".join(
            f"{name} {version}" if version else f"{name} MISSING (pip install {name})"
            for name, version in needs.items()
        )
        lines.append(
            f"{fmt.kind.value:<9} {fmt.name}; {fmt.recognised_by}; "
            f"needs {installed or 'nothing beyond Python'}"
        )
    lines.append(f"{'ocr':<9} {ocr}")
    out.emit(value, lines)
    return EXIT_OK


FORMATS_COMMAND = Command(
    "formats", "the document formats accepted, how each is recognised, what each needs", run_formats
)
