"""The parser process's side of :class:`core.ingest.parse_pool.ParserPool`.

A child runs :func:`serve` (started by the pool as ``python -c``) and imports only this
module, :mod:`core.ingest.parsing` (with its standard-library-only neighbours) and the PDF
parser: no asyncio, no SQLAlchemy, so a fresh child is ready in about 0.1 s of CPU.

Each parse arrives as a :class:`~core.ingest.parsing.ParseRequest` the pool built, and
so checked, in the parent; the child does not check it again (see ParseRequest). While
it parses, the child sends :class:`UnitsDone` messages as the format's parser reports
pages (slides, sheets) finished (:mod:`core.ingest.parse_progress`), then the
:class:`Reply`: at most one per ``PROGRESS_EVERY_S``, so a 10 000-page text PDF sends a
handful, not 10 000; none for a parse shorter than that; and for a longer one, always
the last one before the reply.

A child never outlives the worker that started it, even one ended by ``kill -9``
(which leaves no chance to stop its children): on Linux the kernel sends it SIGKILL
when its parent goes (``PR_SET_PDEATHSIG``), and everywhere a small watch thread ends
it when the parent's end of the socket closes or it is handed to a new parent. An
orphaned parser would otherwise spend minutes of CPU on a document nobody waits for,
next to the worker that took the task over.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import select
import signal
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import NoReturn

from core.ingest.parse_progress import reporting
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
# How often the watch thread checks, besides waiting for the socket to close, that the
# parent is still the one that started this child (the portable fallback for
# PR_SET_PDEATHSIG; one wake-up costs microseconds).
PARENT_CHECK_EVERY_S = 0.5  # seconds
# The watch thread only waits in poll(): a small stack keeps it from taking the default
# 8 MiB of the address space the memory cap counts.
WATCH_THREAD_STACK_BYTES = 256 * 1024  # bytes
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
# Progress messages a parse sends at most this often: the parent's progress bar is
# written to the ledger every 0.5 s anyway, and its idle deadline counts in tens of
# seconds, so more would only cost pickling.
PROGRESS_EVERY_S = 0.2  # seconds

READY = "ready"  # a fresh child's first message: imports done, serving


@dataclass(frozen=True)
class UnitsDone:
    """Sent while a parse runs: ``done`` of ``total`` units (pages, slides, sheets) are
    parsed. Any number of these come before a parse's :class:`Reply`."""

    done: int
    total: int


@dataclass(frozen=True)
class Reply:
    """A child's answer: a document or failure, or an unexpected caller-side error."""

    outcome: ParsedDocument | ParseFailure | None
    warning_lines: list[str]
    warning_count: int
    error: BaseException | None = None
    retiring: bool = False


def serve(fd: int, memory_limit_bytes: int, max_parses: int, parent_pid: int) -> NoReturn:
    """A child's ``main``: serve parses on the socket the parent passed as ``fd``, then
    exit at once. The process holds nothing to flush or close, and skipping the
    interpreter's teardown (~30 ms with pypdf loaded) matters because the parent waits
    for its parser to exit when a worker stops.

    ``parent_pid`` is the worker's pid: the child ends as soon as that process does.
    """
    die_with_parent(parent_pid, fd)
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

    progress = _ProgressSender(conn)  # its thread starts before the memory cap
    _refuse_network()
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
            _send_quietly(conn, Reply(_memory_failure(), [], 0, retiring=True))
            return
        reply = _serve(request, data, progress)
        del data
        retiring = reply.retiring or served >= max_parses or _rss_bytes() > CHILD_RSS_RECYCLE_BYTES
        try:
            sent = _send_quietly(conn, dataclasses.replace(reply, retiring=retiring))
        except MemoryError:
            _send_quietly(conn, Reply(_memory_failure(), [], 0, retiring=True))
            return
        if retiring or not sent:
            return


def _send_quietly(conn: Connection, reply: Reply) -> bool:
    """Send ``reply``; False if the parent is gone (nobody is left to tell)."""
    try:
        conn.send(reply)
    except OSError:  # BrokenPipeError, ConnectionResetError: the parent closed or died
        return False
    return True


class _ProgressSender:
    """The parses' :func:`~core.ingest.parse_progress.reporting` callback, one per child.

    A report goes out at once if none went out in the last ``PROGRESS_EVERY_S`` (the
    parse's start counts as one); else it is held, and a small thread sends the latest
    held one when that window ends: pages read in a flash followed by one that takes
    seconds (a scanned page in a text PDF) show as read while it is, not only after
    it. :meth:`finish` runs before the reply goes: it sends what is held if the parse
    has reported before (the last report before the reply), and stops sending, so no
    report of a parse follows its reply. A parse over within the first window sends
    none: its reply says the same, one message sooner (a light 10-page PDF parses in
    about 0.1 s here: bench.ingest's light corpus).
    Sends hold a lock: the thread and the parse never interleave bytes.
    """

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self._held = threading.Event()
        self._sent_at = 0.0
        self._sent_any = False
        self._pending: UnitsDone | None = None
        self._open = False
        previous = threading.stack_size(WATCH_THREAD_STACK_BYTES)
        try:
            threading.Thread(target=self._flush_held, name="progress", daemon=True).start()
        finally:
            threading.stack_size(previous)

    def begin(self) -> None:
        with self._lock:
            self._open, self._pending = True, None
            self._sent_at, self._sent_any = time.monotonic(), False

    def finish(self) -> None:
        """Send the held report if the parse has reported before, and send nothing
        more until :meth:`begin`."""
        with self._lock:
            if self._sent_any:
                self._send_pending()
            self._open = False

    def __call__(self, done: int, total: int) -> None:
        with self._lock:
            self._pending = UnitsDone(done, total)
            if time.monotonic() - self._sent_at >= PROGRESS_EVERY_S:
                self._send_pending()
            else:
                self._held.set()

    def _flush_held(self) -> None:
        while True:
            self._held.wait()
            with self._lock:
                # Measured again after each sleep: the parse may have sent a report
                # itself meanwhile (its window had ended), which opens a new window.
                wait_s = self._sent_at + PROGRESS_EVERY_S - time.monotonic()
                if wait_s <= 0:
                    self._held.clear()
                    self._send_pending()
                    continue
            time.sleep(wait_s)

    def _send_pending(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None or not self._open:
            return
        self._sent_at, self._sent_any = time.monotonic(), True
        try:
            self._conn.send(pending)
        except OSError:
            # The parent is gone (the watch thread ends this process); a format's
            # parser must not see the error as the document's.
            self._open = False
        except MemoryError:
            pass  # at the memory cap: a report is not the work, the parse decides


def _serve(request: ParseRequest, data: bytes, progress: _ProgressSender) -> Reply:
    progress.begin()
    try:
        with reporting(progress):
            outcome, lines, count = run_parse(data, request)
    except MemoryError:
        return Reply(_memory_failure(), [], 0, retiring=True)
    except Exception as exc:
        # The pool checked the request, so this is a bug or a broken installation
        # (ParserUnavailable): hand it back to be raised in the parent.
        return Reply(None, [], 0, error=_picklable(exc))
    finally:
        progress.finish()  # before the reply: no report of this parse may follow it
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


def die_with_parent(parent_pid: int, fd: int) -> None:
    """End this process when ``parent_pid`` ends or closes its end of socket ``fd``.

    Called first thing in a child, before the slow imports. Two mechanisms, because
    neither covers everything alone:

    * Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, the kernel's own and instant. It
      fires when the *thread* that started the child exits, not the process; the pool
      starts every child from one thread that lives as long as the worker process
      (see ``core.ingest.parser_process._launcher``), so it means "the worker died".
    * anywhere: a watch thread that waits for the parent's end of the socket to close
      (a dead process's sockets close with it) and checks every
      ``PARENT_CHECK_EVERY_S`` that the parent pid is unchanged (an orphan is handed
      to another parent). The parent closes its end only after this child has exited,
      so a close can only mean that the parent is gone.

    A parent that died before the request took effect is caught by the pid check
    right after it.
    """
    _request_death_signal()
    if os.getppid() != parent_pid:
        os._exit(0)
    previous = threading.stack_size(WATCH_THREAD_STACK_BYTES)
    try:
        threading.Thread(
            target=_watch_parent, args=(parent_pid, fd), name="parent-watch", daemon=True
        ).start()
    finally:
        threading.stack_size(previous)


def _request_death_signal() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes  # ~2 ms of imports, once per child

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl (an unusual libc): the watch thread covers it
        pass


def _watch_parent(parent_pid: int, fd: int) -> None:
    poll = getattr(select, "poll", None)
    if poll is None:  # no poll(2): the pid check alone, as often
        while os.getppid() == parent_pid:
            time.sleep(PARENT_CHECK_EVERY_S)
        os._exit(0)
    poller = poll()
    # Ask for the peer-closed event only: reading is the serve loop's job, so waiting
    # for POLLIN would spin while a request sits unread. Hang-ups and errors are
    # reported whatever is asked for.
    poller.register(fd, getattr(select, "POLLRDHUP", 0))
    while True:
        if poller.poll(PARENT_CHECK_EVERY_S * 1000) or os.getppid() != parent_pid:
            os._exit(0)


# Audit events (PEP 578) of a Python-level attempt to reach the network.
_NETWORK_EVENTS = frozenset(
    {"socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "urllib.Request"}
)


def _refuse_network() -> None:
    """A parser has no reason to open a connection: a document's external entity or
    reference (XXE, a remote stylesheet) must never be fetched, whatever a library's
    defaults. The parent talks to this child over an inherited socket, which needs
    no connect; an audit hook cannot be removed once added."""

    def hook(event: str, args: tuple[object, ...]) -> None:
        if event in _NETWORK_EVENTS:
            raise PermissionError("a parser process opens no network connection")

    sys.addaudithook(hook)


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
