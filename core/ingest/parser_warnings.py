"""Counting one parse's warnings, and keeping a flood of them out of the application's log.

A hostile PDF can make pypdf log tens of thousands of lines. While a PDF is parsed,
:func:`capture_parser_warnings` routes pypdf's log records and its ``PdfReadWarning``
warnings into that parse's :class:`WarningCollector`, which counts them all and keeps only the
first few lines; :func:`core.ingest.parsing.log_parser_warnings` logs those afterwards
(in the parent process, when the parse ran in a parser child). Standard library only
at import time, so a parser child can import this without paying for anything else.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from collections.abc import Iterator
from contextvars import ContextVar

# --- tunables ---------------------------------------------------------------------------

# Parser warnings logged per parse, the summary line included; the rest are only counted.
# A hostile PDF can make pypdf log tens of thousands of lines.
MAX_LOGGED_WARNINGS = 20  # lines
# Longest warning line kept, so one absurd message cannot bloat a log.
MAX_WARNING_LINE_CHARS = 300  # characters


class WarningCollector:
    """Counts one parse's warnings and keeps the first few lines for the log."""

    def __init__(self) -> None:
        self.count = 0
        self._lines: list[str] = []

    def add(self, line: str) -> None:
        """Count one warning, keeping its (truncated) line while under the cap."""
        self.count += 1
        if len(self._lines) < MAX_LOGGED_WARNINGS:
            self._lines.append(line[:MAX_WARNING_LINE_CHARS])

    def lines_to_log(self) -> list[str]:
        """The lines to log, leaving room for an "N more" summary so a parse never
        logs more than ``MAX_LOGGED_WARNINGS`` lines in all."""
        if self.count > MAX_LOGGED_WARNINGS:
            return self._lines[: MAX_LOGGED_WARNINGS - 1]
        return list(self._lines)


_active_collector: ContextVar[WarningCollector | None] = ContextVar(
    "ingestdesk_parse_warnings", default=None
)


class _PypdfLogRouter(logging.Handler):
    """Sends pypdf's log records to the running parse's collector.

    Installed on the ``pypdf`` logger (with propagation off) only while some parse is
    running, so a flood of warnings never reaches the application's handlers. Records
    emitted outside a parse (another thread using pypdf meanwhile) are passed on to the
    root logger as if the router were not there.
    """

    def emit(self, record: logging.LogRecord) -> None:
        collector = _active_collector.get()
        if collector is None or record.levelno < logging.WARNING:
            root = logging.getLogger()
            if record.levelno >= root.getEffectiveLevel():
                root.handle(record)
            return
        collector.add(f"{record.name}: {record.getMessage()}")


_router = _PypdfLogRouter()
_router_lock = threading.Lock()
_router_users = 0
_saved_logger_state: tuple[bool, int] = (True, logging.NOTSET)


@contextlib.contextmanager
def capture_parser_warnings(collector: WarningCollector) -> Iterator[None]:
    """Count pypdf's log warnings and ``PdfReadWarning`` warnings into ``collector``.

    Other Python warnings (a ``DeprecationWarning`` about how *we* call pypdf) are
    re-issued untouched afterwards, so test suites that turn warnings into errors still
    see them. The ``warnings`` module's capture is process-global: do not run two
    captures on different threads at once (the parser pool runs one parse per process).
    """
    global _router_users, _saved_logger_state
    from pypdf.errors import PdfReadWarning  # on first use: only PDF parses need pypdf

    pypdf_logger = logging.getLogger("pypdf")
    token = _active_collector.set(collector)
    with _router_lock:
        if _router_users == 0:
            _saved_logger_state = (pypdf_logger.propagate, pypdf_logger.level)
            pypdf_logger.addHandler(_router)
            pypdf_logger.propagate = False
            # The app may run its root logger at ERROR; warnings must still be counted.
            pypdf_logger.setLevel(logging.WARNING)
        _router_users += 1
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as recorded:
            warnings.simplefilter("always", PdfReadWarning)
            try:
                yield
            finally:
                caught = list(recorded)
    finally:
        with _router_lock:
            _router_users -= 1
            if _router_users == 0:
                pypdf_logger.removeHandler(_router)
                pypdf_logger.propagate, level = _saved_logger_state
                pypdf_logger.setLevel(level)
        _active_collector.reset(token)
        for item in caught:
            if issubclass(item.category, PdfReadWarning):
                collector.add(f"{item.category.__name__}: {item.message}")
            else:
                warnings.warn_explicit(
                    item.message, item.category, item.filename, item.lineno, source=item.source
                )
