"""Parse untrusted documents in child processes that can be killed.

A hostile PDF can make a parser spin for minutes, allocate gigabytes, recurse until the
C stack breaks or crash in native code. None of that may take the worker down, block
its event loop or starve other documents, so :class:`ParserPool` runs
:func:`core.ingest.parsing.run_parse` in a few long-lived children and enforces, per parse:

* a wall-clock budget: ``min(max_timeout_s, base_timeout_s + per_page_timeout_s * pages)``
  where ``pages`` is estimated in the parent without parsing (see
  :func:`estimate_pages`; the pipeline passes in the estimate it already made for its
  progress bar). A child over budget is killed with SIGKILL and replaced.
* an address-space cap (``RLIMIT_AS``) set inside each child; the parse then fails with
  ``MemoryError`` rather than the machine swapping.
* crash isolation: a child that dies (segfault, OOM kill) fails only its own parse.

Children are fresh interpreters started with :mod:`subprocess` (fork + exec: a plain
fork of a process running an asyncio loop and SQLAlchemy pools is not safe), on the
first parse or ahead of it with :meth:`ParserPool.prestart`, and are reused across
parses because a start costs a fresh interpreter plus imports. Not multiprocessing's
``spawn``: that re-runs the parent's ``__main__`` script in every child, and for the
installed ``ingestdesk`` command that means importing the whole CLI, SQLAlchemy
included (measured: 0.4 s of CPU per child instead of 0.15 s, and 25 MB more RSS). A
child imports only :mod:`core.ingest.parsing` (and its standard-library-only neighbours)
and pypdf, and talks to the parent over a socket pair with
:mod:`multiprocessing.connection`'s framing. A child retires itself
after ``max_parses_per_child`` parses, after a memory or recursion failure, or when its
resident memory stays high after a parse, so one monster file cannot leave a bloated
process behind for the ordinary ones.

Every blocking pipe operation runs on a small thread pool owned by the pool, so the
event loop only ever awaits futures.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from types import TracebackType

from core.ingest.parse_child import READY, Reply
from core.ingest.parsing import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_PARSER,
    ParsedDocument,
    ParseFailure,
    ParseRequest,
    log_parser_warnings,
)
from core.states import DocumentKind, ErrorCode

logger = logging.getLogger(__name__)

# --- tunables ---------------------------------------------------------------------------

DEFAULT_BASE_TIMEOUT_S = 10.0  # seconds every parse gets
DEFAULT_PER_PAGE_TIMEOUT_S = 0.5  # seconds added per estimated page
DEFAULT_MAX_TIMEOUT_S = 300.0  # seconds; no document gets longer than this
DEFAULT_MEMORY_LIMIT_BYTES = 1 << 30  # bytes of address space per child (RLIMIT_AS)
DEFAULT_MAX_PARSES_PER_CHILD = 500  # parses before a child is replaced
CHILD_START_TIMEOUT_S = 60.0  # seconds for a fresh child to import and report ready
CHILD_STOP_GRACE_S = 2.0  # seconds a child gets to exit before it is killed
# Page estimates for documents whose page objects cannot be counted from raw bytes:
# PDF 1.5+ files may hide page dictionaries inside compressed object streams.
PDF_BYTES_PER_PAGE_ESTIMATE = 100 * 1024  # bytes
TEXT_BYTES_PER_PAGE_ESTIMATE = 64 * 1024  # bytes
# Documents up to this size have their pages estimated on the event loop (< 2 ms);
# larger ones on a thread: the page scan reads every byte, ~0.1 s for 50 MB.
ESTIMATE_ON_LOOP_MAX_BYTES = 1 << 20  # bytes

# "/Type /Page" but not "/Type /Pages"; whitespace between the tokens is optional.
_PAGE_OBJECT = re.compile(rb"/Type\s*/Page(?![A-Za-z0-9])")
# What a child runs: the parent's import path first (as multiprocessing's spawn does,
# so a pool works from a source checkout and under pytest), then the serve loop.
# argv: socket fd, memory limit, parse quota, then the sys.path entries.
_CHILD_PROGRAM = (
    "import sys; sys.path[:] = sys.argv[4:]; "
    "from core.ingest.parse_child import serve; "
    "serve(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))"
)


class _Timeout:
    pass


@dataclass(frozen=True)
class _Died:
    pid: int | None
    exitcode: int | None


def estimate_pages(data: bytes, kind: DocumentKind | str) -> int:
    """Cheap page estimate, without parsing: the parse's time budget and the first
    total of the pipeline's progress bar.

    PDFs: the larger of the number of ``/Type /Page`` objects visible in the raw bytes
    and one page per ``PDF_BYTES_PER_PAGE_ESTIMATE`` bytes (page objects inside
    compressed object streams are invisible to the byte scan). Text: one page per
    ``TEXT_BYTES_PER_PAGE_ESTIMATE`` bytes. Never less than 1.

    Args:
        data: The document's bytes.
        kind: Its kind.

    Returns:
        Estimated page count.
    """
    by_size = (
        PDF_BYTES_PER_PAGE_ESTIMATE if kind == DocumentKind.PDF else TEXT_BYTES_PER_PAGE_ESTIMATE
    )
    pages = math.ceil(len(data) / by_size)
    if kind == DocumentKind.PDF:
        pages = max(pages, sum(1 for _ in _PAGE_OBJECT.finditer(data)))
    return max(1, pages)


async def estimate_pages_async(data: bytes, kind: DocumentKind | str) -> int:
    """:func:`estimate_pages` without holding up the event loop: small documents are
    scanned on it, larger than ``ESTIMATE_ON_LOOP_MAX_BYTES`` on a thread."""
    if len(data) > ESTIMATE_ON_LOOP_MAX_BYTES:
        return await asyncio.to_thread(estimate_pages, data, kind)
    return estimate_pages(data, kind)


class ParserPool:
    """A small pool of killable parser processes.

    Use as ``async with ParserPool(workers=2) as pool: doc = await pool.parse(...)``.
    Not thread-safe: use one pool from one event loop.
    """

    def __init__(
        self,
        workers: int = 1,
        *,
        base_timeout_s: float = DEFAULT_BASE_TIMEOUT_S,
        per_page_timeout_s: float = DEFAULT_PER_PAGE_TIMEOUT_S,
        max_timeout_s: float = DEFAULT_MAX_TIMEOUT_S,
        memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES,
        max_parses_per_child: int = DEFAULT_MAX_PARSES_PER_CHILD,
    ) -> None:
        """Configure the pool; no process starts until the first parse.

        Args:
            workers: Most parses running at once, i.e. most child processes.
            base_timeout_s: Seconds every parse gets.
            per_page_timeout_s: Seconds added per estimated page.
            max_timeout_s: Upper bound on any parse's budget, in seconds.
            memory_limit_bytes: Address-space limit of each child, in bytes.
            max_parses_per_child: Parses after which a child is replaced.

        Raises:
            ValueError: A limit is not positive.
        """
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        if min(base_timeout_s, max_timeout_s) <= 0 or per_page_timeout_s < 0:
            raise ValueError("timeouts must be positive")
        if memory_limit_bytes <= 0 or max_parses_per_child < 1:
            raise ValueError("memory_limit_bytes and max_parses_per_child must be positive")
        self.workers = workers
        self.base_timeout_s = base_timeout_s
        self.per_page_timeout_s = per_page_timeout_s
        self.max_timeout_s = max_timeout_s
        self.memory_limit_bytes = memory_limit_bytes
        self.max_parses_per_child = max_parses_per_child
        self._slots = asyncio.Semaphore(workers)
        self._idle: list[_Child] = []
        self._busy: set[_Child] = set()
        # One thread per slot for its blocking pipe calls, plus one for shutdown work.
        self._threads = ThreadPoolExecutor(workers + 1, thread_name_prefix="parser-pool")
        self._closed = False
        self._children_started = 0

    @property
    def children_started(self) -> int:
        """How many child processes this pool has started so far."""
        return self._children_started

    @property
    def child_pids(self) -> tuple[int, ...]:
        """Process ids of the live children, busy ones first (for dashboards and tests)."""
        children = [*self._busy, *self._idle]
        return tuple(child.pid for child in children if child.pid is not None)

    def prestart(self) -> None:
        """Start one child now, without waiting for it, so its interpreter start and
        imports (~0.1 s of CPU) overlap whatever the caller does before its first
        parse. Safe to call before an event loop runs; a no-op if a child exists or
        the pool is closed. A child that fails to start fails the first parse, as a
        lazily started one would.
        """
        if self._closed or self._idle or self._busy:
            return
        child = self._new_child()
        child.launch()
        self._idle.append(child)

    def timeout_for(self, pages: int) -> float:
        """The wall-clock budget, in seconds, a parse of ``pages`` estimated pages gets."""
        return min(self.max_timeout_s, self.base_timeout_s + self.per_page_timeout_s * pages)

    async def parse(
        self,
        data: bytes,
        kind: DocumentKind | str,
        *,
        parser: str = DEFAULT_PARSER,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
        estimated_pages: int | None = None,
    ) -> ParsedDocument:
        """Parse one document in a child process; see :func:`core.ingest.parsing.parse_document`.

        Args:
            data: The document's bytes.
            kind: What the bytes are.
            parser: PDF parser, ``"pypdf"`` or ``"pdfium"``.
            chunk_size: Largest chunk, in characters.
            chunk_overlap: Characters shared by consecutive chunks.
            estimated_pages: The document's :func:`estimate_pages`, when the caller
                has already made it; else the pool makes it (for the time budget).

        Returns:
            The parsed document.

        Raises:
            ParseFailure: The document is bad, empty, over its time budget
                ("parse timed out after Xs"), over the memory limit, or crashed its
                parser ("parser process died").
            ValueError, ParserUnavailable: Bad arguments or a missing parser library,
                checked before any child is involved.
            RuntimeError: The pool is closed, or was closed during this parse.
        """
        # The one check of these options (see ParseRequest): here in the parent, so a
        # caller's mistake raises before a child is started or spent.
        request = ParseRequest(DocumentKind(kind), parser, chunk_size, chunk_overlap)
        self._check_open()
        loop = asyncio.get_running_loop()
        if estimated_pages is None:
            estimated_pages = await estimate_pages_async(data, request.kind)
        budget = self.timeout_for(estimated_pages)
        async with self._slots:
            self._check_open()
            child = await self._take_child(loop)
            if self._closed:  # closed while the child started
                child.kill()
                self._reap_soon(child)
                self._check_open()
            # The exchange thread owns the child's pipe from here on: on a timeout or a
            # death it also kills and reaps the child. This coroutine only ever signals
            # the child, so no two threads touch one pipe.
            exchange = self._threads.submit(child.exchange, request, data, budget)
            self._busy.add(child)
            try:
                reply = await asyncio.shield(asyncio.wrap_future(exchange))
            except asyncio.CancelledError:
                child.kill()  # the exchange thread sees EOF at once and cleans up
                if exchange.cancel():  # it never ran, so nobody else will
                    self._reap_soon(child)
                raise
            finally:
                self._busy.discard(child)
            if isinstance(reply, Reply) and not reply.retiring:
                if self._closed:  # closed while we parsed: aclose has killed it
                    self._reap_soon(child)
                else:
                    self._idle.append(child)
        return self._outcome(reply, budget)

    async def aclose(self) -> None:
        """Stop every child and release the pool's threads.

        Parses still running are cut short and raise RuntimeError; cancel them first
        for an orderly shutdown. Safe to call more than once.
        """
        if self._closed:
            return
        self._closed = True
        busy = list(self._busy)
        for child in busy:
            child.kill()
        idle, self._idle = self._idle, []
        for child in idle:
            if not child.ready:
                # Prestarted and never used: it may still be importing, and would
                # only read the stop request after that. It holds no work.
                child.kill()
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(self._threads, child.stop) for child in idle))
        # Waits for in-flight exchanges too; the kills above make them return at once,
        # and each reaps its own child.
        await loop.run_in_executor(None, self._threads.shutdown, True)

    async def __aenter__(self) -> ParserPool:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- internals ------------------------------------------------------------------

    def _reap_soon(self, child: _Child) -> None:
        """Join a finished or killed child on a pool thread, without waiting for it."""
        if self._closed:
            # The pool's threads may be gone; a throwaway thread does the join instead.
            threading.Thread(target=child.reap, name="parser-reaper", daemon=True).start()
            return
        self._threads.submit(child.reap)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("parser pool is closed")

    async def _take_child(self, loop: asyncio.AbstractEventLoop) -> _Child:
        while self._idle:
            child = self._idle.pop()
            if child.alive:
                if not child.ready:  # started by prestart(): may still be importing
                    await self._until_ready(loop, child, child.wait_ready)
                return child
            self._reap_soon(child)  # died while idle (OOM killer, an operator's kill)
        child = self._new_child()
        await self._until_ready(loop, child, child.start)
        return child

    def _new_child(self) -> _Child:
        self._children_started += 1
        return _Child(self.memory_limit_bytes, self.max_parses_per_child)

    async def _until_ready(
        self, loop: asyncio.AbstractEventLoop, child: _Child, start: Callable[[], None]
    ) -> None:
        started = loop.run_in_executor(self._threads, start)
        try:
            await asyncio.shield(started)
        except asyncio.CancelledError:
            # The start finishes on its thread regardless; don't leak the process.
            def dispose(_: object) -> None:
                child.kill()
                self._reap_soon(child)

            started.add_done_callback(dispose)
            raise
        except BaseException:
            child.kill()
            self._reap_soon(child)
            raise

    def _outcome(self, reply: Reply | _Timeout | _Died, budget: float) -> ParsedDocument:
        if isinstance(reply, _Timeout):
            raise ParseFailure(ErrorCode.PARSE_ERROR, f"parse timed out after {budget:.1f}s")
        if isinstance(reply, _Died):
            if self._closed:
                raise RuntimeError("parser pool closed during the parse")
            logger.warning("parser process %s died (exit code %s)", reply.pid, reply.exitcode)
            raise ParseFailure(ErrorCode.PARSE_ERROR, "parser process died")
        log_parser_warnings(reply.warning_lines, reply.warning_count)
        if reply.error is not None:
            raise reply.error
        if isinstance(reply.outcome, ParseFailure):
            raise reply.outcome
        assert reply.outcome is not None
        return reply.outcome


class _Child:
    """One parser process and the parent's end of its socket.

    ``launch`` only starts the process; ``wait_ready``, ``exchange``, ``stop`` and
    ``reap`` block and run on the pool's threads, one at a time per child; ``kill``
    only sends a signal and may be called from the event loop at any moment.
    """

    def __init__(self, memory_limit_bytes: int, max_parses: int) -> None:
        self._memory_limit_bytes = memory_limit_bytes
        self._max_parses = max_parses
        self._process: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self.ready = False
        # Serialises kill() with reap(): signalling a reaped process could hit a
        # recycled pid.
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        process = self._process
        return None if process is None else process.pid

    @property
    def alive(self) -> bool:
        process = self._process
        return process is not None and process.poll() is None

    def launch(self) -> None:
        """Start the process without waiting for it to import anything (~2 ms)."""
        parent_end, child_end = socket.socketpair()
        try:
            child_fd = child_end.fileno()
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _CHILD_PROGRAM,
                    str(child_fd),
                    str(self._memory_limit_bytes),
                    str(self._max_parses),
                    *sys.path,
                ],
                # Nothing a parser (or a native library under it) prints may land on
                # the terminal a dashboard draws on; failures come back as replies.
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(child_fd,),
            )
        except BaseException:
            parent_end.close()
            raise
        finally:
            # Our copy of the child's end must go, or a dead child would never read
            # as EOF.
            child_end.close()
        self._conn = Connection(parent_end.detach())

    def wait_ready(self) -> None:
        """Wait until the child has imported its parser and is serving."""
        assert self._conn is not None
        try:
            ready = self._conn.poll(CHILD_START_TIMEOUT_S) and self._conn.recv() == READY
        except (EOFError, OSError):
            ready = False
        if not ready:
            self.kill()
            exitcode = self.reap()
            raise RuntimeError(f"parser process failed to start (exit code {exitcode})")
        self.ready = True

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def exchange(
        self, request: ParseRequest, data: bytes, budget_s: float
    ) -> Reply | _Timeout | _Died:
        """Send one parse and wait at most ``budget_s`` seconds for its reply.

        A child that times out, dies or retires is reaped before this returns.
        """
        assert self._conn is not None
        reply: Reply | _Timeout | _Died
        try:
            try:
                self._conn.send(request)
                # Separately, so the document is not copied into a pickle on the way.
                self._conn.send_bytes(data)
            except OSError:
                # The child may have refused the document (too big for its memory
                # cap) and said so before leaving; an answer beats "died".
                if not self._conn.poll(CHILD_STOP_GRACE_S):
                    raise
            if self._conn.poll(budget_s):
                received = self._conn.recv()
                if isinstance(received, Reply):
                    reply = received
                else:
                    raise EOFError("unexpected message from the parser process")
            else:
                reply = _Timeout()
        except (EOFError, OSError):
            pid = self.pid
            reply = _Died(pid, self.reap())
        if isinstance(reply, _Timeout):
            self.kill()
            self.reap()
        elif isinstance(reply, Reply) and reply.retiring:
            self.reap()  # it exits by itself right after replying
        return reply

    def kill(self) -> None:
        with self._lock:
            process = self._process
            if process is not None:
                # Popen.kill() signals only while the exit status is uncollected.
                process.kill()

    def reap(self) -> int | None:
        """Wait for the child to exit (killing it after a grace period), release it.

        Returns:
            Its exit code (negative: the signal that ended it), or None if already reaped.
        """
        process = self._process
        if process is None:
            return None
        try:
            process.wait(CHILD_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.kill()
            process.wait()
        with self._lock:
            self._process = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        return process.returncode

    def stop(self) -> None:
        """Ask an idle child to exit, killing it if it does not within the grace."""
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.send(None)
        self.reap()


__all__ = ["ParserPool", "estimate_pages", "estimate_pages_async"]
