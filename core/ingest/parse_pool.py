"""Parse untrusted documents in child processes that can be killed.

A hostile PDF can make a parser spin for minutes, allocate gigabytes, recurse until the
C stack breaks or crash in native code. None of that may take the worker down, block
its event loop or starve other documents, so :class:`ParserPool` runs
:func:`core.ingest.parsing.run_parse` in a few long-lived children and enforces, per parse:

* a wall-clock budget that follows the parse's progress. Up front a parse gets
  ``min(max_timeout_s, base_timeout_s + per_page_timeout_s * pages)`` where ``pages``
  is estimated in the parent without parsing (see :func:`estimate_pages`; the pipeline
  passes in the estimate it already made for its progress bar). Each time its parser
  reports a page, slide or sheet finished (:mod:`core.ingest.parse_progress`), the
  deadline moves to at least ``unit_timeout_s`` after that report: a parse that keeps
  moving (a scan OCRed at seconds a page) outlives its estimate, while one stuck on a
  page is cut off ``unit_timeout_s`` after its last report, or at its up-front budget
  if that is later. No parse runs longer than ``max_timeout_s`` in all. A child past
  its deadline is killed with SIGKILL and replaced; the parse fails with
  ``parse_error`` "parse timed out after Ns", N the seconds it was given, followed by
  how far it got when it had reported any ("(37 of 200 done)").
* an address-space cap (``RLIMIT_AS``) set inside each child; the parse then fails with
  ``MemoryError`` rather than the machine swapping.
* crash isolation: a child that dies (segfault, OOM kill) fails only its own parse.
  A death is not always the document's doing (an operator's ``kill``, the OOM killer
  picking the largest process, a child gone between being picked and being written
  to), so the parse runs once more on a fresh child. If that one dies too, what ended
  it decides: a crash (SIGSEGV, SIGABRT and the like, or an exit of its own) is the
  document's, ``parse_error`` "parser process died", for good; a signal this pool did
  not send (``kill -9`` by a person, the OOM killer's SIGKILL) is nobody's known
  fault, :class:`~core.ingest.parsing.ParserKilled` (``parser_killed``), which the
  task retries with backoff until its attempts run out. Our own kills are not
  outsiders': a parse over its time budget is ``parse_error`` "parse timed out".
* cancellation: cancelling :meth:`ParserPool.parse` kills its child at once (the
  pipeline does so when its task is cancelled or taken away); the next parse starts
  a fresh one.

A parse's progress reports also reach the caller's ``on_progress(done, total)`` on the
event loop, as they arrive (the child sends at most five a second).

The children (one process each, started as ``python -c`` programs) are
:class:`core.ingest.parser_process.ParserProcess`; they are started on the first parse
or ahead of it with :meth:`ParserPool.prestart`, and are reused across parses because
a start costs a fresh interpreter plus imports. A child retires itself after
``max_parses_per_child`` parses, after a memory or recursion failure, or when its
resident memory stays high after a parse, so one monster file cannot leave a bloated
process behind for the ordinary ones. No child outlives its worker, even one killed
with ``kill -9`` (see :func:`core.ingest.parse_child.die_with_parent`).

Every blocking pipe operation runs on a small thread pool owned by the pool, so the
event loop only ever awaits futures.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType

from core.ingest.parse_child import Reply
from core.ingest.parser_process import (
    Budget,
    Died,
    KilledWhileStarting,
    ParserProcess,
    TimedOut,
    killed_from_outside,
)
from core.ingest.parsing import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_PARSER,
    ParsedDocument,
    ParseFailure,
    ParseRequest,
    ParserKilled,
    log_parser_warnings,
)
from core.states import DocumentKind, ErrorCode

logger = logging.getLogger(__name__)

# --- tunables ---------------------------------------------------------------------------

DEFAULT_BASE_TIMEOUT_S = 10.0  # seconds every parse gets
DEFAULT_PER_PAGE_TIMEOUT_S = 0.5  # seconds added per estimated page
# After each page (slide, sheet) its parser reports, a parse may run at least this much
# longer: an OCR page takes 2-3 s on an idle 2-core machine, a text page milliseconds;
# a parse silent for this long is stuck, not slow. The OCR reader reports a page as
# started before it reads it, and may give it OCR_PAGE_TIMEOUT_S (60 s) in the engine
# before it skips the page: this allowance is longer, so a slow page on a loaded
# machine is the OCR rules' to skip, not the pool's to fail the document for (at 30 s,
# three scans at once under load 12 failed "parse timed out after 30.5s (0 of 1 done)").
DEFAULT_UNIT_TIMEOUT_S = 90.0  # seconds
# No parse runs longer than this, however it moves: a 500-page scan at 3 s a page fits.
DEFAULT_MAX_TIMEOUT_S = 1800.0  # seconds
DEFAULT_MEMORY_LIMIT_BYTES = 1 << 30  # bytes of address space per child (RLIMIT_AS)
DEFAULT_MAX_PARSES_PER_CHILD = 500  # parses before a child is replaced
# Page estimates for documents whose page objects cannot be counted from raw bytes:
# PDF 1.5+ files may hide page dictionaries inside compressed object streams.
PDF_BYTES_PER_PAGE_ESTIMATE = 100 * 1024  # bytes
TEXT_BYTES_PER_PAGE_ESTIMATE = 64 * 1024  # bytes
# Documents up to this size have their pages estimated on the event loop (< 2 ms);
# larger ones on a thread: the page scan reads every byte, ~0.1 s for 50 MB.
ESTIMATE_ON_LOOP_MAX_BYTES = 1 << 20  # bytes

# "/Type /Page" but not "/Type /Pages"; whitespace between the tokens is optional.
_PAGE_OBJECT = re.compile(rb"/Type\s*/Page(?![A-Za-z0-9])")


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


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def default_parsers(concurrency: int) -> int:
    """Parser processes a worker with ``concurrency`` tasks in flight gets unless told:
    one per usable CPU, never more than the tasks that could use them.

    A worker process embeds and indexes on one core while its parsers parse. With one
    parser on a two-core machine the parser was the bottleneck for every format whose
    parse costs more than its indexing, and 37-39 % of the machine sat idle
    (bench.formats, XLSX and HTML); with two, XLSX went from 0.70x to 0.99x the bare
    library. Children start on demand, so a worker that never has two parses at once
    runs one.
    """
    return max(1, min(concurrency, usable_cpus()))


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
        unit_timeout_s: float = DEFAULT_UNIT_TIMEOUT_S,
        max_timeout_s: float = DEFAULT_MAX_TIMEOUT_S,
        memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES,
        max_parses_per_child: int = DEFAULT_MAX_PARSES_PER_CHILD,
    ) -> None:
        """Configure the pool; no process starts until the first parse.

        Args:
            workers: Most parses running at once, i.e. most child processes.
            base_timeout_s: Seconds every parse gets.
            per_page_timeout_s: Seconds added per estimated page.
            unit_timeout_s: Seconds a parse may run on after each unit its parser
                reports finished (see the module docstring).
            max_timeout_s: Upper bound on any parse's time, in seconds.
            memory_limit_bytes: Address-space limit of each child, in bytes.
            max_parses_per_child: Parses after which a child is replaced.

        Raises:
            ValueError: A limit is not positive.
        """
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        if min(base_timeout_s, unit_timeout_s, max_timeout_s) <= 0 or per_page_timeout_s < 0:
            raise ValueError("timeouts must be positive")
        if memory_limit_bytes <= 0 or max_parses_per_child < 1:
            raise ValueError("memory_limit_bytes and max_parses_per_child must be positive")
        self.workers = workers
        self.base_timeout_s = base_timeout_s
        self.per_page_timeout_s = per_page_timeout_s
        self.unit_timeout_s = unit_timeout_s
        self.max_timeout_s = max_timeout_s
        self.memory_limit_bytes = memory_limit_bytes
        self.max_parses_per_child = max_parses_per_child
        self._slots = asyncio.Semaphore(workers)
        self._idle: list[ParserProcess] = []
        self._busy: set[ParserProcess] = set()
        # One thread per slot for its blocking pipe calls, plus one for shutdown work.
        self._threads = ThreadPoolExecutor(workers + 1, thread_name_prefix="parser-pool")
        self._closed = False
        self._children_started = 0
        self._parses_started = 0

    @property
    def parses_started(self) -> int:
        """How many parses this pool has been asked for so far."""
        return self._parses_started

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
        lazily started one would. Any thread may call it: the process itself is
        started on the long-lived launcher thread (see
        :mod:`core.ingest.parser_process`), so the caller's thread ending does not end
        the child.
        """
        if self._closed or self._idle or self._busy:
            return
        child = self._new_child()
        child.launch()
        self._idle.append(child)

    def timeout_for(self, pages: int) -> float:
        """The wall-clock budget, in seconds, a parse of ``pages`` estimated pages gets
        up front (progress reports may extend it: see :meth:`budget_for`)."""
        return min(self.max_timeout_s, self.base_timeout_s + self.per_page_timeout_s * pages)

    def budget_for(self, pages: int) -> Budget:
        """The whole time rule for a parse of ``pages`` estimated pages."""
        return Budget(self.timeout_for(pages), self.unit_timeout_s, self.max_timeout_s)

    async def parse(
        self,
        data: bytes,
        kind: DocumentKind | str,
        *,
        parser: str = DEFAULT_PARSER,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
        estimated_pages: int | None = None,
        on_progress: Callable[[int, int], None] | None = None,
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
            on_progress: Called on the event loop with ``(done, total)`` as the parser
                reports pages (slides, sheets) finished, until this returns; a parse
                run again after a death starts again from its first page.

        Returns:
            The parsed document.

        Raises:
            ParseFailure: The document is bad, empty, over its time budget
                ("parse timed out after Xs", see the module docstring), over the
                memory limit, or crashed its parser twice ("parser process died";
                one death is retried).
            ParserKilled: A signal from outside (not a crash) ended the parser both
                times (a ParseFailure with the transient code ``parser_killed``).
            ValueError, ParserUnavailable: Bad arguments or a missing parser library,
                checked before any child is involved.
            ParserStartFailed: No parser process could be started (this worker's
                fault, not the document's).
            RuntimeError: The pool is closed, or was closed during this parse.
        """
        # The one check of these options (see ParseRequest): here in the parent, so a
        # caller's mistake raises before a child is started or spent.
        request = ParseRequest(DocumentKind(kind), parser, chunk_size, chunk_overlap)
        self._check_open()
        self._parses_started += 1
        loop = asyncio.get_running_loop()
        if estimated_pages is None:
            estimated_pages = await estimate_pages_async(data, request.kind)
        budget = self.budget_for(estimated_pages)
        forward = _Forwarder(loop, on_progress)
        first_death_from_outside = False
        try:
            async with self._slots:
                reply = await self._parse_on_a_child(
                    loop, request, data, budget, forward, fresh=False
                )
                if isinstance(reply, Died) and not self._closed:
                    # Not necessarily the document's doing (see the module docstring):
                    # one more go, on a new process rather than an idle one that the
                    # same outside cause may have hit too.
                    first_death_from_outside = _killed_from_outside(reply)
                    logger.warning(
                        "parser process %s died (%s); parsing again on a fresh one",
                        reply.pid,
                        _death(reply),
                    )
                    reply = await self._parse_on_a_child(
                        loop, request, data, budget, forward, fresh=True
                    )
        finally:
            forward.close()
        return self._outcome(reply, killed_before=first_death_from_outside)

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

    async def _parse_on_a_child(
        self,
        loop: asyncio.AbstractEventLoop,
        request: ParseRequest,
        data: bytes,
        budget: Budget,
        forward: _Forwarder,
        *,
        fresh: bool,
    ) -> Reply | TimedOut | Died:
        """One exchange with one child, holding a slot; a living child goes back idle."""
        self._check_open()
        try:
            child = await self._take_child(loop, fresh=fresh)
        except KilledWhileStarting as exc:
            # Killed from outside before it was ready: a death like one mid-parse (the
            # caller retries it once, then reports it), not a worker that cannot start
            # parsers, which stops (ParserStartFailed).
            return Died(exc.pid, exc.exitcode)
        if self._closed:  # closed while the child started
            child.kill()
            self._reap_soon(child)
            self._check_open()
        # The exchange thread owns the child's pipe from here on: on a timeout or a
        # death it also kills and reaps the child. This coroutine only ever signals
        # the child, so no two threads touch one pipe.
        exchange = self._threads.submit(child.exchange, request, data, budget, forward.for_thread)
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
        return reply

    def _reap_soon(self, child: ParserProcess) -> None:
        """Join a finished or killed child on a pool thread, without waiting for it."""
        if self._closed:
            # The pool's threads may be gone; a throwaway thread does the join instead.
            threading.Thread(target=child.reap, name="parser-reaper", daemon=True).start()
            return
        self._threads.submit(child.reap)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("parser pool is closed")

    async def _take_child(
        self, loop: asyncio.AbstractEventLoop, *, fresh: bool = False
    ) -> ParserProcess:
        """An idle child that is still alive, else (or with ``fresh``) a new one."""
        while self._idle and not fresh:
            child = self._idle.pop()
            if child.alive:
                if not child.ready:  # started by prestart(): may still be importing
                    await self._until_ready(loop, child, child.wait_ready)
                return child
            self._reap_soon(child)  # died while idle (OOM killer, an operator's kill)
        child = self._new_child()
        await self._until_ready(loop, child, child.start)
        return child

    def _new_child(self) -> ParserProcess:
        self._children_started += 1
        return ParserProcess(self.memory_limit_bytes, self.max_parses_per_child)

    async def _until_ready(
        self, loop: asyncio.AbstractEventLoop, child: ParserProcess, start: Callable[[], None]
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

    def _outcome(
        self, reply: Reply | TimedOut | Died, *, killed_before: bool = False
    ) -> ParsedDocument:
        if isinstance(reply, TimedOut):
            raise ParseFailure(ErrorCode.PARSE_ERROR, _timed_out(reply))
        if isinstance(reply, Died):
            if self._closed:
                raise RuntimeError("parser pool closed during the parse")
            logger.warning("parser process %s died (%s)", reply.pid, _death(reply))
            if killed_before or _killed_from_outside(reply):
                # Either death may have been an outsider's: the document is not known
                # to be at fault, and a retry later (its attempts are bounded) tells.
                raise ParserKilled(f"parser process killed from outside ({_death(reply)})")
            raise ParseFailure(ErrorCode.PARSE_ERROR, "parser process died")
        log_parser_warnings(reply.warning_lines, reply.warning_count)
        if reply.error is not None:
            raise reply.error
        if isinstance(reply.outcome, ParseFailure):
            raise reply.outcome
        assert reply.outcome is not None
        return reply.outcome


class _Forwarder:
    """Hands a parse's progress reports from its exchange thread to the caller's
    callback on the event loop, until :meth:`close`: a report still in flight when the
    parse ends is dropped, so it cannot land after what the caller does next."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, callback: Callable[[int, int], None] | None
    ) -> None:
        self._loop = loop
        self._callback = callback
        self._open = callback is not None

    @property
    def for_thread(self) -> Callable[[int, int], None] | None:
        """What the exchange thread calls per report; None when nobody listens."""
        return self._from_thread if self._callback is not None else None

    def close(self) -> None:
        self._open = False

    def _from_thread(self, done: int, total: int) -> None:
        if not self._open:
            return
        try:
            self._loop.call_soon_threadsafe(self._deliver, done, total)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            self._open = False

    def _deliver(self, done: int, total: int) -> None:
        if self._open and self._callback is not None:
            self._callback(done, total)


def _timed_out(reply: TimedOut) -> str:
    """A time-out's one-line detail: the seconds the parse was given, and how far its
    parser got when it reported that."""
    detail = f"parse timed out after {reply.after_s:.1f}s"
    if reply.done is not None:
        detail += f" ({reply.done} of {reply.total} done)"
    return detail


def _killed_from_outside(died: Died) -> bool:
    """Whether a child was ended by a signal neither it (a crash) nor this pool
    caused (see :func:`core.ingest.parser_process.killed_from_outside`)."""
    return killed_from_outside(died.exitcode, killed_here=died.killed_here)


def _death(died: Died) -> str:
    """How a child ended, for the log and a task's error detail: ``SIGKILL``,
    ``exit code 1``; never more than the status."""
    code = died.exitcode
    if code is not None and code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


__all__ = ["ParserPool", "estimate_pages", "estimate_pages_async"]
