"""Parse progress, page by page: a format's parser says how far it got, and whoever
runs the parse (a parser process, the worker's in-process text path) passes it on.

Parsers call :func:`report_units` after each page, slide, sheet or frame; outside a
:func:`reporting` block the call costs a context-variable read and does nothing, so a
parser never needs to know whether anyone listens. Standard library only: a parser
child imports this.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

ProgressCallback = Callable[[int, int], None]

_reporter: ContextVar[ProgressCallback | None] = ContextVar("parse_progress", default=None)


def report_units(done: int, total: int) -> None:
    """``done`` of ``total`` units (pages, slides, sheets, frames) are parsed."""
    callback = _reporter.get()
    if callback is not None:
        callback(done, total)


@contextlib.contextmanager
def reporting(callback: ProgressCallback) -> Iterator[None]:
    """Within the block, :func:`report_units` calls ``callback(done, total)``."""
    token = _reporter.set(callback)
    try:
        yield
    finally:
        _reporter.reset(token)
