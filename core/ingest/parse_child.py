"""The parser process's side of :class:`core.ingest.parse_pool.ParserPool`.

A child runs :func:`serve` (started by the pool as ``python -c``) and imports only this
module, :mod:`core.ingest.parsing` (with its standard-library-only neighbours) and the PDF
parser: no asyncio, no SQLAlchemy, so a fresh child is ready in about 0.1 s of CPU.

Each parse arrives as a :class:`~core.ingest.parsing.ParseRequest` the pool built, and
so checked, in the parent; the child does not check it again (see ParseRequest).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import NoReturn

from core.ingest.parsing import (
    OUT_OF_MEMORY_REASON,
    ParsedDocument,
    ParseFailure,
    ParseRequest,
    run_parse,
)
from core.states import ErrorCode

# --- tunables ---------------------------------------------------------------------------

# A child whose resident memory is above this after a parse retires, giving the memory
# back to the OS; CPython rarely returns freed arenas on its own.
CHILD_RSS_RECYCLE_BYTES = 256 << 20  # bytes
PARSER_NICENESS = 5  # added to a parser child's nice value

READY = "ready"  # a fresh child's first message: imports done, serving


@dataclass(frozen=True)
class Reply:
    """A child's answer: a document or failure, or an unexpected caller-side error."""

    outcome: ParsedDocument | ParseFailure | None
    warning_lines: list[str]
    warning_count: int
    error: BaseException | None = None
    retiring: bool = False


def serve(fd: int, memory_limit_bytes: int, max_parses: int) -> NoReturn:
    """A child's ``main``: serve parses on the socket the parent passed as ``fd``, then
    exit at once. The process holds nothing to flush or close, and skipping the
    interpreter's teardown (~30 ms with pypdf loaded) matters because the parent waits
    for its parser to exit when a worker stops."""
    with Connection(fd) as conn:
        _child_main(conn, memory_limit_bytes, max_parses)
    os._exit(0)


def _child_main(conn: Connection, memory_limit_bytes: int, max_parses: int) -> None:
    """Serve parse requests on ``conn`` until told to stop, the parent goes, or retiring."""
    # Ctrl-C in the terminal reaches the whole process group. The parent decides when
    # children stop; a child dying of KeyboardInterrupt would fail a good document.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Nothing here may log to the terminal (the TUI owns it): the warnings travel back
    # in the reply and the parent logs them.
    logging.getLogger().addHandler(logging.NullHandler())
    import pypdf  # noqa: F401  # import before the memory cap and outside the budget

    _limit_resources(memory_limit_bytes)
    conn.send(READY)
    for served in range(1, max_parses + 1):
        try:
            request = conn.recv()
            if request is None:
                return
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return  # the parent is gone
        except MemoryError:
            # The document alone does not fit under the cap. The pipe is mid-message now,
            # so answer and leave; the parent reads the answer when its send breaks.
            conn.send(Reply(_memory_failure(), [], 0, retiring=True))
            return
        reply = _serve(request, data)
        del data
        retiring = reply.retiring or served >= max_parses or _rss_bytes() > CHILD_RSS_RECYCLE_BYTES
        try:
            conn.send(dataclasses.replace(reply, retiring=retiring))
        except MemoryError:
            conn.send(Reply(_memory_failure(), [], 0, retiring=True))
            return
        if retiring:
            return


def _serve(request: ParseRequest, data: bytes) -> Reply:
    try:
        outcome, lines, count = run_parse(data, request)
    except MemoryError:
        return Reply(_memory_failure(), [], 0, retiring=True)
    except Exception as exc:
        # The pool checked the request, so this is a bug or a broken installation
        # (ParserUnavailable): hand it back to be raised in the parent.
        return Reply(None, [], 0, error=_picklable(exc))
    # After running out of memory the interpreter may be in a fragile state (half-built
    # caches, a fragmented heap at the cap): the next document gets a fresh process.
    fragile = isinstance(outcome, ParseFailure) and outcome.reason == OUT_OF_MEMORY_REASON
    return Reply(outcome, lines, count, retiring=fragile)


def _memory_failure() -> ParseFailure:
    return ParseFailure(ErrorCode.PARSE_ERROR, OUT_OF_MEMORY_REASON)


def _picklable(exc: Exception) -> BaseException:
    import pickle

    try:
        pickle.dumps(exc)
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


def _limit_resources(memory_limit_bytes: int) -> None:
    try:
        import resource
    except ImportError:  # not POSIX: run without the cap rather than not at all
        return
    # No core dumps: a crashing parser on a big PDF would otherwise write gigabytes.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = memory_limit_bytes if hard == resource.RLIM_INFINITY else min(hard, memory_limit_bytes)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    # Parsing is batch work: the dashboard's event loop and the ledger should win
    # the CPU when both want it (measured: keys waited behind parsers on 2 cores).
    with contextlib.suppress(OSError):
        os.nice(PARSER_NICENESS)


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
