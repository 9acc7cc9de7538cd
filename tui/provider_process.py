"""The demo's faulty embedding provider: ``ingestdesk provider serve`` run as a child
process for ``ingestdesk demo --faults``, and an :class:`HttpProvider` connected to it.

The child is core's own command line (``python -m core.cli``, the headless CLI), so
what the demo shows is the provider and the wire protocol the workers meet in real
use, faults included. It prints exactly one line first, the URL it listens on, which
is read here; after that its stdout is drained (so it can never block on a full
pipe) and its stderr goes to a log file in the demo's folder: a child writing to the
terminal would scribble over the dashboard.

No Textual here: this is plain process management, usable from any event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from core import visible

if TYPE_CHECKING:
    from core.ingest.http_provider import HttpProvider

PROVIDER_DB_FILE = "provider.db"  # the provider's own database, in the demo folder
PROVIDER_LOG_FILE = "provider.log"  # the provider's stderr, in the demo folder
LISTENING = "provider listening on "  # the start of the child's first stdout line
# What ``demo --faults`` switches on: lost replies (the request was done, the reply
# never came) and cut-short replies, from a fixed seed so two runs fail alike.
# Rare enough that a 20-page PDF (a few dozen requests) usually gets through in its
# three attempts, common enough that unknown -> recovered and needs review show up
# within a minute of the demo's corpus.
DEMO_FAULTS: tuple[str, ...] = (
    "--lose-request",
    "0.02",
    "--lose-reply",
    "0.05",
    "--truncate",
    "0.05",
    "--seed",
    "1",
)
START_TIMEOUT_S = 20.0  # seconds for the child to print its URL (imports, binding)
STOP_TIMEOUT_S = 5.0  # seconds SIGTERM gets before the child is killed
LOG_TAIL_CHARS = 300  # characters of the child's log quoted when it fails to start


class ProviderStartFailed(Exception):
    """The provider process did not start, or does not answer as a provider; the
    message says why in one line."""


def serve_command(directory: Path, faults: Sequence[str] = DEMO_FAULTS) -> list[str]:
    """The child's command line: a free port, the faults, its database in ``directory``."""
    return [
        sys.executable,
        "-m",
        "core.cli",
        "provider",
        "serve",
        "--port",
        "0",
        # A dashboard killed with kill -9 leaves no provider behind.
        "--parent-pid",
        str(os.getpid()),
        *faults,
        "--db",
        str(directory / PROVIDER_DB_FILE),
    ]


class ProviderProcess:
    """A running ``provider serve`` child and the URL it listens on.

    Start it with :meth:`start`; :meth:`stop` ends it (safe to call twice).
    """

    def __init__(
        self, process: asyncio.subprocess.Process, url: str, drain: asyncio.Task[None]
    ) -> None:
        self.process = process
        self.url = url
        self._drain = drain

    @classmethod
    async def start(
        cls,
        directory: Path,
        *,
        faults: Sequence[str] = DEMO_FAULTS,
        timeout_s: float = START_TIMEOUT_S,
        command: Sequence[str] | None = None,
    ) -> ProviderProcess:
        """Start the child and wait for its first line.

        Args:
            directory: Where its database and log go (the demo's folder).
            faults: ``provider serve`` options that switch faults on.
            timeout_s: Seconds to wait for the first line.
            command: The command to run instead of :func:`serve_command` (tests).

        Raises:
            ProviderStartFailed: It exited, said something else first, or said
                nothing in time; it is not left running.
        """
        log_path = directory / PROVIDER_LOG_FILE
        argv = list(command) if command is not None else serve_command(directory, faults)
        try:
            log, log_from = _open_log(log_path)
            with log:
                # The child holds its own descriptor of the log; this one can close.
                process = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=log,
                )
        except OSError as exc:
            raise ProviderStartFailed(
                f"cannot start the demo provider: {exc.strerror or type(exc).__name__}"
            ) from None
        assert process.stdout is not None
        try:
            first = await asyncio.wait_for(process.stdout.readline(), timeout_s)
        except BaseException as exc:  # a timeout, or the user giving up (Ctrl-C)
            await _end(process)
            if isinstance(exc, TimeoutError):
                raise ProviderStartFailed(
                    f"the demo provider said nothing for {timeout_s:g} s"
                    + _log_tail(log_path, log_from)
                ) from None
            raise
        line = first.decode("utf-8", "replace").strip()
        if not line.startswith(LISTENING):
            await _end(process)
            said = f"said {visible(line)!r}" if line else "exited"
            raise ProviderStartFailed(
                f"the demo provider {said} instead of its URL" + _log_tail(log_path, log_from)
            )
        drain = asyncio.create_task(_drain(process.stdout), name="provider-stdout")
        return cls(process, line.removeprefix(LISTENING), drain)

    @property
    def running(self) -> bool:
        return self.process.returncode is None

    async def stop(self) -> None:
        """End the child: SIGTERM (it stops serving cleanly), then SIGKILL if it
        lingers. Safe to call twice, and after it exited on its own."""
        await _end(self.process)
        # Its stdout reaches EOF once it is gone; a grandchild holding the pipe
        # must not keep this waiting.
        if not self._drain.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drain, STOP_TIMEOUT_S)


async def _end(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            await asyncio.wait_for(process.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
    else:
        await process.wait()  # reaps it, if that has not happened yet


async def _drain(stream: asyncio.StreamReader) -> None:
    # Nothing after the first line is needed; reading it keeps the pipe from filling.
    while await stream.read(65536):
        pass


def _open_log(path: Path) -> tuple[BinaryIO, int]:
    """The log opened for appending, and its size now (where this run's lines start)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    log = path.open("ab")
    return log, os.fstat(log.fileno()).st_size


def _log_tail(path: Path, start: int) -> str:
    """``: <the last line the child logged>`` since ``start``, or nothing."""
    try:
        with path.open("rb") as log:
            log.seek(start)
            text = log.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f": {visible(lines[-1])[-LOG_TAIL_CHARS:]}" if lines else ""


@asynccontextmanager
async def faulty_provider(
    directory: Path, *, faults: Sequence[str] = DEMO_FAULTS
) -> AsyncIterator[HttpProvider]:
    """A demo provider process with ``faults``, and a client connected to it, for as
    long as the ``async with`` lasts; both are closed after it, however it ends.

    Raises:
        ProviderStartFailed: The process did not start or does not answer.
    """
    from core.ingest.http_provider import HttpProvider
    from core.ingest.providers import NotSent

    process = await ProviderProcess.start(directory, faults=faults)
    try:
        try:
            provider = await HttpProvider.connect(process.url)
        except NotSent as exc:
            raise ProviderStartFailed(visible(str(exc))) from None
        try:
            yield provider
        finally:
            await provider.aclose()
    finally:
        await process.stop()
