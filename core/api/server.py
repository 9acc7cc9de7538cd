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
"""

from __future__ import annotations

import asyncio
import copy
import logging
import socket
from typing import Any

import uvicorn
from fastapi import FastAPI
from uvicorn.config import LOGGING_CONFIG

STOP_GRACE_S = 8.0  # seconds requests in flight get after SIGTERM before their connections drop
STOP_CANCEL_S = 1  # seconds after that before uvicorn cancels what still runs (whole seconds)

log = logging.getLogger("ingestdesk.api")


def log_config() -> dict[str, Any]:
    """uvicorn's logging, with the API's own lines (an unavailable ledger's message, a
    client gone mid-body) printed the same way."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"][log.name] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    return config


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


def server(app: FastAPI) -> ApiServer:
    """The server for ``app``, as ``ingestdesk serve`` runs it."""
    config = uvicorn.Config(
        app,
        log_level="info",
        log_config=log_config(),
        # A proxy's X-Forwarded-For must not make a remote client look local.
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=int(STOP_GRACE_S) + STOP_CANCEL_S,
    )
    return ApiServer(config)
