"""How ``ingestdesk document`` shows a version's pages: the review flag's reason,
then one line per page, runs of alike pages collapsed (``pages 1-480 text``) so a
long document stays readable (:func:`core.ledger.pages.page_runs`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from core.safe_text import visible

if TYPE_CHECKING:
    from core.ledger.pages import PageRun, PageSummary, PageView


def summary_lines(summary: PageSummary) -> list[str]:
    """The ``pages`` and ``flagged`` header lines (none for a version without pages)."""
    if not summary.pages:
        return []
    counts = summary.by_decision
    confidence = (
        f"; OCR confidence lowest {summary.ocr_min_confidence:.1f}, "
        f"mean {summary.ocr_mean_confidence:.1f}, {summary.ocr_seconds:.1f}s of OCR"
        if summary.ocr_min_confidence is not None and summary.ocr_mean_confidence is not None
        else ""
    )
    lines = [f"pages     {summary.pages}: {counts}{confidence}"]
    if summary.reason is not None:
        lines.append(f"flagged   {summary.reason} (publish needs --accept-low-confidence)")
    return lines


def run_line(run: PageRun) -> str:
    """``  page 481      ocr           700 chars  confidence 42.5  ocr 2.2s``."""
    line = f"  {run.pages:<13} {run.decision.value:<10} {run.chars:>8} chars"
    if run.confidence is not None:
        line += f"  confidence {run.confidence:.1f}"
    if run.ocr_seconds:
        line += f"  ocr {run.ocr_seconds:.1f}s"
    if run.reason:
        line += f"  {visible(run.reason)}"
    return line


def page_lines(summary: PageSummary, pages: Sequence[PageView]) -> list[str]:
    """Everything ``document`` prints about pages; nothing for a version without."""
    from core.ledger.pages import page_runs

    if not pages:
        return []
    return [*summary_lines(summary), "page by page:", *(run_line(r) for r in page_runs(pages))]
