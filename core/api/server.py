"""The uvicorn server ``ingestdesk serve`` runs: a stop that ends in bounded time.

On SIGINT/SIGTERM uvicorn stops accepting connections and waits for the requests in
flight. Left alone it waits for ever: one client that stalls halfway through an
upload keeps the process alive until the service manager kills it, and the ledger is
never closed. Here the requests in flight get STOP_GRACE_S; then the connections still
open are dropped, which a request reading its body sees as the client going away (one
line in the log, nothing stored: :mod:`core.api.problems`). uvicorn's own bound,
STOP_GRACE_S + STOP_CANCEL_S, cancels whatever is still running after that (a request
waiting on a locked ledger), so the app's shutdown (closing the ledger) always runs.

8 + 1 s stays inside the 10 s that ``docker stop`` (and many supervisors) allow before
SIGKILL: the ledger is closed by us, not by the kernel. A well-behaved request is done
long before: uploads stream at network speed and every other request is short.

A slow client costs bounded time and descriptors (:class:`ClientLimits`): a
connection must deliver a request's headers within ``header_s`` of opening (or of
its previous answer), else it is closed, which uvicorn alone never does (its
keep-alive timer stops at the first byte, and a connection that never sends one has
none); an idle kept-alive connection closes after ``keep_alive_s``; the headers of one
request are at most HEADERS_MAX_BYTES; beyond ``connections_max`` open connections a
new one is closed at once. The body's
deadlines are the app's (:mod:`core.api.bodies`).

Every log line goes through :class:`EscapeClientText`: a request's path, a header, a
client's address reach the operator's terminal escaped, never as control sequences.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import socket
from dataclasses import dataclass
from typing import Any

import h11
import uvicorn
from fastapi import FastAPI
from uvicorn.config import LOGGING_CONFIG
from uvicorn.protocols.http.h11_impl import H11Protocol

from core.safe_text import visible

STOP_GRACE_S = 8.0  # seconds requests in flight get after SIGTERM before their connections drop
STOP_CANCEL_S = 1  # seconds after that before uvicorn cancels what still runs (whole seconds)

HEADER_TIMEOUT_S = 10.0  # seconds to deliver a request's headers (nginx: 60; we need few)
KEEP_ALIVE_S = 5  # seconds an idle kept-alive connection stays open (whole seconds)
CONNECTIONS_MAX = 512  # open connections at most (a file descriptor each)
HEADERS_MAX_BYTES = 16 * 1024  # bytes of a request's line and headers (h11's default)

log = logging.getLogger("ingestdesk.api")


@dataclass(frozen=True)
class ClientLimits:
    """What a connection may cost before its request reaches the app
    (``ingestdesk serve --header-timeout`` …)."""

    header_s: float = HEADER_TIMEOUT_S
    keep_alive_s: int = KEEP_ALIVE_S
    connections_max: int = CONNECTIONS_MAX


class EscapeClientText(logging.Filter):
    """Escape the text a log record carries (its arguments, its message, its
    traceback) with :func:`core.safe_text.visible`: uvicorn's access line quotes the
    request's path unquoted, so ``%1b%5d0%3b…`` would reach the terminal as an escape
    sequence; our own lines quote the path too. The format string stays as it is
    (uvicorn's access formatter reads the arguments by position)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(visible(a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str):
            record.msg = visible(record.msg)
        if record.exc_info and not record.exc_text:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_text = "\n".join(visible(line) for line in text.splitlines())
        return True


def log_config() -> dict[str, Any]:
    """uvicorn's logging, with the API's own lines (an unavailable ledger's message, a
    client gone mid-body) printed the same way, and every line's client text escaped."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"][log.name] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    config["filters"] = {"escape": {"()": EscapeClientText}}
    for handler in config["handlers"].values():
        handler["filters"] = ["escape"]
    return config


def bounded_protocol(limits: ClientLimits) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a deadline on each request's headers and a cap on
    open connections."""

    class BoundedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.connections_max:
                # Refused at once: it costs the accept, not a descriptor held open.
                transport.abort()
                return
            self._arm_header_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm_header_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
            super().connection_lost(exc)

        def _arm_header_deadline(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
            self._header_timer = self.loop.call_later(
                limits.header_s, self._header_deadline_passed, self.cycle
            )

        def _header_deadline_passed(self, cycle: object) -> None:
            # Still waiting for the request line and headers of the same request (h11
            # is IDLE until they are complete): close. A request that arrived since
            # is the app's to bound.
            if (
                self.cycle is cycle
                and self.conn.their_state is h11.IDLE
                and not self.transport.is_closing()
            ):
                self.transport.close()

    return BoundedH11Protocol


class ApiServer(uvicorn.Server):
    """uvicorn's server, with the connections still open STOP_GRACE_S after a stop
    request dropped."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        timer = asyncio.get_running_loop().call_later(STOP_GRACE_S, self._drop_connections)
        try:
            await super().shutdown(sockets)
        finally:
            timer.cancel()

    def _drop_connections(self) -> None:
        connections = list(self.server_state.connections)
        if connections:
            log.warning(
                "stopping: dropping %d connection(s) still open after %.0f s",
                len(connections),
                STOP_GRACE_S,
            )
        for connection in connections:
            # abort, not close: close would wait to flush to a client that may not read.
            connection.transport.abort()


def server(app: FastAPI, limits: ClientLimits | None = None) -> ApiServer:
    """The server for ``app``, as ``ingestdesk serve`` runs it."""
    limits = limits or ClientLimits()
    config = uvicorn.Config(
        app,
        http=bounded_protocol(limits),
        timeout_keep_alive=limits.keep_alive_s,
        # No limit_concurrency: at its limit uvicorn answers every new request 503,
        # those of connections already open included; the cap on connections
        # bounds requests in flight as well (one per connection at a time).
        h11_max_incomplete_event_size=HEADERS_MAX_BYTES,
        log_level="info",
        log_config=log_config(),
        # A proxy's X-Forwarded-For must not make a remote client look local.
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=int(STOP_GRACE_S) + STOP_CANCEL_S,
    )
    return ApiServer(config)
