"""How long a request's body may take, and that a body is never drained.

uvicorn bounds the headers (:mod:`core.api.server`) but not the body: a client that
sends a chunked body that never ends, or one byte a minute, holds a connection and a
request for ever. :class:`BodyGuard` gives every receive of the body an idle
deadline (BodyLimits.idle_s between two pieces) and the whole body a total one
(BodyLimits.total_s from the request's start); past either, the request is answered
408 and the connection closed.

And a body is never read just to be thrown away: when an answer starts before the
request's body has ended (a refusal by role, size, shape; a route that takes no
body), the answer carries ``Connection: close``, and uvicorn closes the connection
after sending it instead of reading the rest to keep the connection alive (a client
could make it swallow gigabytes it had already refused).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.api.problems import ApiProblem
from core.api.routing import hang_up

BODY_IDLE_S = 30.0  # seconds a body may go without a byte arriving
# seconds a whole body may take: 100 MB at ~3 Mbit/s; a slower client goes through
# a proxy that buffers (see the README's "Slow clients and proxies")
BODY_TOTAL_S = 300.0


@dataclass(frozen=True)
class BodyLimits:
    """How long a request body may take (``ingestdesk serve --body-timeout`` …)."""

    idle_s: float = BODY_IDLE_S
    total_s: float = BODY_TOTAL_S


def _announces_body(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding":
            return True
        if name == b"content-length" and value.strip() not in (b"", b"0"):
            return True
    return False


class BodyGuard:
    """ASGI middleware: deadlines on reading a body; ``Connection: close`` on any
    answer that starts before the body has ended."""

    def __init__(self, app: ASGIApp, limits: BodyLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _announces_body(scope):
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        total_deadline = loop.time() + self.limits.total_s
        ended = False

        async def timed_receive() -> Message:
            nonlocal ended
            if ended:
                return await receive()
            wait = min(self.limits.idle_s, total_deadline - loop.time())
            try:
                message = await asyncio.wait_for(receive(), max(wait, 0.0))
            except TimeoutError:
                ended = True  # nothing more is read: the connection closes
                raise hang_up(
                    ApiProblem(
                        408,
                        "BadInput",
                        f"the request body did not arrive in time (a pause over "
                        f"{self.limits.idle_s:g} s, or over {self.limits.total_s:g} s "
                        "in all)",
                    )
                ) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                ended = True
            return message

        async def closing_send(message: Message) -> None:
            if message["type"] == "http.response.start" and not ended:
                headers = [
                    (name, value)
                    for name, value in message.get("headers", ())
                    if name.lower() != b"connection"
                ]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, timed_receive, closing_send)
