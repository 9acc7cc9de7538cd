"""One parser process, seen from the worker: start it, hand it a parse, kill it, reap it.

:class:`core.ingest.parse_pool.ParserPool` schedules parses over a few of these; this
module is the one place that talks to a child over its socket.

Children are fresh interpreters started with :mod:`subprocess` (fork + exec: a plain
fork of a process running an asyncio loop and SQLAlchemy pools is not safe). Not
multiprocessing's ``spawn``: that re-runs the parent's ``__main__`` script in every
child, and for the installed ``ingestdesk`` command that means importing the whole CLI,
SQLAlchemy included (measured: 0.4 s of CPU per child instead of 0.15 s, and 25 MB more
RSS). A child imports only :mod:`core.ingest.parse_child`, :mod:`core.ingest.parsing`
(and its standard-library-only neighbours) and pypdf, and talks to the parent over a
socket pair with :mod:`multiprocessing.connection`'s framing.

Every child is started from one long-lived thread (:func:`_launcher`): on Linux a child
asks the kernel to kill it when the thread that started it exits
(``PR_SET_PDEATHSIG``, see :func:`core.ingest.parse_child.die_with_parent`), and that
must mean "the worker process died", not "a pool thread or a caller's short-lived
thread ended".
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection

from core.ingest.parse_child import READY, Reply, UnitsDone
from core.ingest.parsing import ParseRequest

# --- tunables ---------------------------------------------------------------------------

CHILD_START_TIMEOUT_S = 60.0  # seconds for a fresh child to import and report ready
CHILD_STOP_GRACE_S = 2.0  # seconds a child gets to exit before it is killed

# What a child runs: the parent's import path first (as multiprocessing's spawn does,
# so a pool works from a source checkout and under pytest), then the serve loop.
# argv: socket fd, memory limit, parse quota, parent pid, then the sys.path entries.
# (bench/common.py recognises parser children by "core.ingest.parse_child" here.)
_CHILD_PROGRAM = (
    "import sys; sys.path[:] = sys.argv[5:]; "
    "from core.ingest.parse_child import serve; "
    "serve(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))"
)

# glibc gives every thread that calls malloc an arena of its own, reserving 64 MiB of
# address space each: the child's two helper threads (its parent watch and its
# progress sender, which allocate a few bytes) took 128 MiB of the memory cap
# (RLIMIT_AS) from the parse. One arena: the parse is the only real allocator.
# Other C libraries ignore the variable.
_CHILD_ENVIRONMENT = {"MALLOC_ARENA_MAX": "1"}

_launcher_lock = threading.Lock()
_launcher_threads: ThreadPoolExecutor | None = None


def _launcher() -> ThreadPoolExecutor:
    """The process's one thread that starts parser processes.

    Its thread never exits before the interpreter does (an executor's threads wait for
    work until shutdown, and nothing shuts this one down), so a child's parent-death
    signal fires exactly when the worker process ends. Starting a child costs ~2 ms
    there; the caller waits for it, as it would for its own Popen.
    """
    global _launcher_threads
    with _launcher_lock:
        if _launcher_threads is None:
            _launcher_threads = ThreadPoolExecutor(1, thread_name_prefix="parser-launcher")
        return _launcher_threads


def _forget_launcher() -> None:
    # A forked copy of this process has the executor but not its thread: submitting
    # to it would wait forever. (The worker itself never forks; a library might.)
    global _launcher_threads, _launcher_lock
    _launcher_threads = None
    _launcher_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_launcher)


class ParserStartFailed(RuntimeError):
    """A parser process could not be started or did not become ready (no memory or
    processes left for a new one, a broken installation): this worker's fault, never
    the document's."""


class KilledWhileStarting(ParserStartFailed):
    """A starting parser process was ended by a signal from outside (an operator's
    ``kill -9``, the OOM killer) before it was ready: not a sign that this worker
    cannot start one, so the pool treats it as a death during the parse (retried)."""

    def __init__(self, pid: int | None, exitcode: int) -> None:
        super().__init__(f"parser process killed while starting (exit code {exitcode})")
        self.pid = pid
        self.exitcode = exitcode


# Signals a process gets from its own code going wrong (a native parser's bad pointer,
# an abort on a broken invariant): a child ended by one crashed. Any other signal this
# process did not send came from outside (kill, the OOM killer).
CRASH_SIGNALS = frozenset(
    {signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGFPE, signal.SIGILL, signal.SIGSYS}
)


def killed_from_outside(exitcode: int | None, *, killed_here: bool) -> bool:
    """Whether a child's exit status says a signal ended it that neither it (a crash,
    see CRASH_SIGNALS) nor this process (``killed_here``) caused."""
    if exitcode is None or exitcode >= 0 or killed_here:
        return False
    try:
        return signal.Signals(-exitcode) not in CRASH_SIGNALS
    except ValueError:  # a real-time signal: sent by someone, not raised by a crash
        return True


@dataclass(frozen=True)
class Budget:
    """How long one parse may run (the rule is :mod:`core.ingest.parse_pool`'s).

    It may run ``first_s`` from its start, and after each progress report at least
    ``unit_s`` more (the time its next page, slide or sheet may take); never more than
    ``max_s`` in all.
    """

    first_s: float
    unit_s: float
    max_s: float

    def deadline(self, started: float, reported_at: float | None) -> float:
        """The monotonic time the parse is cut off, given when it started and when
        its latest progress report arrived (None: none yet)."""
        end = started + self.first_s
        if reported_at is not None:
            end = max(end, reported_at + self.unit_s)
        return min(end, started + self.max_s)


@dataclass(frozen=True)
class TimedOut:
    """A parse that used up its time budget (the child has been killed and reaped).

    Attributes:
        after_s: Seconds it was given, from its start to the deadline it missed.
        done: Units its parser had reported finished (None: it reported none).
        total: The units it reported the document to have.
    """

    after_s: float
    done: int | None = None
    total: int | None = None


@dataclass(frozen=True)
class Died:
    """A child that went away before answering (it has been reaped).

    Attributes:
        pid: Its process id.
        exitcode: Its exit status (negative: the signal that ended it).
        killed_here: Whether this process had signalled it (a time-out, a
            cancellation, a child that would not exit): its death is then ours, not
            an outsider's.
    """

    pid: int | None
    exitcode: int | None
    killed_here: bool = False


class ParserProcess:
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
        self.killed_here = False  # kill() was called: a death by SIGKILL is ours
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
            argv = [
                sys.executable,
                "-c",
                _CHILD_PROGRAM,
                str(child_fd),
                str(self._memory_limit_bytes),
                str(self._max_parses),
                str(os.getpid()),
                *sys.path,
            ]
            try:
                self._process = _launcher().submit(_popen, argv, child_fd).result()
            except OSError as exc:  # fork or exec refused: EAGAIN, ENOMEM, ENOENT
                raise ParserStartFailed(
                    f"cannot start a parser process: {exc.strerror or type(exc).__name__}"
                ) from exc
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
            pid = self.pid
            # Not killed first: a child that went away (its socket at EOF) is waited
            # for, so its own exit status says whether something else ended it; one
            # that is merely stuck is killed by reap() after the grace, as ours.
            exitcode = self.reap()
            if exitcode is not None and killed_from_outside(exitcode, killed_here=self.killed_here):
                raise KilledWhileStarting(pid, exitcode)
            raise ParserStartFailed(f"parser process failed to start (exit code {exitcode})")
        self.ready = True

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def exchange(
        self,
        request: ParseRequest,
        data: bytes,
        budget: Budget,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> Reply | TimedOut | Died:
        """Send one parse and wait for its reply until ``budget`` runs out.

        The child's progress reports (:class:`~core.ingest.parse_child.UnitsDone`)
        move the deadline on and go to ``on_progress(done, total)``, called on this
        thread. A child that times out, dies or retires is reaped before this returns.
        A child that is already gone when the request is written (a broken pipe) or
        goes before answering reads as :class:`Died`, never as an exception.
        """
        assert self._conn is not None
        reply: Reply | TimedOut | Died
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
            reply = self._await_reply(budget, on_progress)
        except (EOFError, OSError):
            pid = self.pid
            exitcode = self.reap()
            reply = Died(pid, exitcode, killed_here=self.killed_here)
        if isinstance(reply, TimedOut):
            self.kill()
            self.reap()
        elif isinstance(reply, Reply) and reply.retiring:
            self.reap()  # it exits by itself right after replying
        return reply

    def _await_reply(
        self, budget: Budget, on_progress: Callable[[int, int], None] | None
    ) -> Reply | TimedOut:
        assert self._conn is not None
        started = time.monotonic()
        reported_at: float | None = None
        last: UnitsDone | None = None
        while True:
            deadline = budget.deadline(started, reported_at)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._conn.poll(remaining):
                return TimedOut(
                    deadline - started,
                    None if last is None else last.done,
                    None if last is None else last.total,
                )
            received = self._conn.recv()
            if isinstance(received, Reply):
                return received
            if not isinstance(received, UnitsDone):
                raise EOFError("unexpected message from the parser process")
            reported_at, last = time.monotonic(), received
            if on_progress is not None:
                on_progress(received.done, received.total)

    def kill(self) -> None:
        with self._lock:
            process = self._process
            if process is not None:
                self.killed_here = True
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


def _popen(argv: list[str], child_fd: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        # Nothing a parser (or a native library under it) prints may land on the
        # terminal a dashboard draws on; failures come back as replies.
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=(child_fd,),
        env=os.environ | _CHILD_ENVIRONMENT,
    )


__all__ = [
    "CHILD_STOP_GRACE_S",
    "CRASH_SIGNALS",
    "Budget",
    "Died",
    "KilledWhileStarting",
    "ParserProcess",
    "ParserStartFailed",
    "TimedOut",
    "killed_from_outside",
]
