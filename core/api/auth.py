"""Who is calling, and may they: bearer tokens and roles.

Every endpoint but ``/healthz`` names the role it needs (viewer reads; operator also
uploads, submits, cancels, retries; publisher also publishes). A request without a
valid token is 401, a token whose role may not is 403. The token's name is the actor
in the history, as ``--actor`` is on the CLI.

A ledger with no active token at all serves local clients only, as the actor
``local`` with every role: that is what a developer on one machine expects, and
``ingestdesk serve`` refuses to bind anywhere but loopback in that state. Once a
token exists, every request needs one.

The caller is settled before a request body is read (see :mod:`core.api.routing`), so
a client without a valid token cannot make the server hold its body.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from core.api.problems import ApiProblem
from core.ledger import Ledger, TokenView
from core.ledger.tokens import LOCAL_ACTOR
from core.states import Role

TOKEN_CACHE_S = 2.0  # seconds an authenticated token is trusted before it is checked again
OPEN_MODE_CACHE_S = 2.0  # seconds the "no tokens at all" answer is trusted
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="ingestdesk"'}
# Declares the scheme in the OpenAPI document (the docs page's Authorize button) and
# nothing else: auto_error=False leaves every refusal to the Gate, which answers
# problem+json with our own wording instead of FastAPI's.
BEARER = HTTPBearer(
    auto_error=False,
    description="a token from `ingestdesk tokens create NAME --role viewer|operator|publisher`",
)


@dataclass(frozen=True)
class Caller:
    """The authenticated caller of one request."""

    name: str
    role: Role


def is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Gate:
    """Checks bearer tokens against the ledger, with a short cache.

    The cache keeps a GET from costing two ledger reads; a revoked token stops
    working within TOKEN_CACHE_S.
    """

    def __init__(self, ledger: Ledger, clock: Callable[[], float] = time.monotonic) -> None:
        self.ledger = ledger
        self.clock = clock
        self._tokens: dict[str, tuple[float, TokenView | None]] = {}
        self._open: tuple[float, bool] | None = None

    async def open_mode(self) -> bool:
        """True while the ledger has no active token."""
        now = self.clock()
        if self._open is None or now - self._open[0] > OPEN_MODE_CACHE_S:
            self._open = (now, not await self.ledger.tokens.any_active())
        return self._open[1]

    async def token(self, presented: str) -> TokenView | None:
        now = self.clock()
        cached = self._tokens.get(presented)
        if cached is not None and now - cached[0] <= TOKEN_CACHE_S:
            return cached[1]
        found = await self.ledger.tokens.authenticate(presented)
        if len(self._tokens) > 10_000:  # guessing must not grow memory without bound
            self._tokens.clear()
        self._tokens[presented] = (now, found)
        return found

    async def caller(self, request: Request) -> Caller:
        header = request.headers.get("authorization")
        if header is None:
            client = request.client.host if request.client else None
            if is_loopback(client) and await self.open_mode():
                return Caller(LOCAL_ACTOR, Role.PUBLISHER)
            raise ApiProblem(401, "Unauthorized", "a bearer token is required", CHALLENGE)
        scheme, _, presented = header.partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            raise ApiProblem(
                401, "Unauthorized", "use the header 'Authorization: Bearer TOKEN'", CHALLENGE
            )
        view = await self.token(presented.strip())
        if view is None:
            raise ApiProblem(401, "Unauthorized", "the token is unknown or revoked", CHALLENGE)
        return Caller(view.name, view.role)


def _with_article(word: str) -> str:
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


async def authorize(request: Request, role: Role) -> Caller:
    """The caller of ``request``, if their role includes ``role``; else 401 or 403.

    Checked once per request: the route checks it before reading the body, and the
    endpoint's dependency then finds the answer on the request."""
    caller = getattr(request.state, "caller", None)
    if not isinstance(caller, Caller):
        gate: Gate = request.app.state.gate
        caller = await gate.caller(request)
        request.state.caller = caller
    if not caller.role.may(role):
        raise ApiProblem(
            403,
            "Forbidden",
            f"token {caller.name!r} is {_with_article(caller.role.value)}; this needs {role.value}",
        )
    return caller


class Requires:
    """A FastAPI dependency: the caller, if their role includes ``role``.

    A class rather than a closure so that :class:`core.api.routing.GuardedRoute` can
    find the role a route needs and check it before the body is read."""

    def __init__(self, role: Role) -> None:
        self.role = role

    async def __call__(
        self,
        request: Request,
        _bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
    ) -> Caller:
        return await authorize(request, self.role)


# What an endpoint asks for, by the least role that may call it.
Viewer = Annotated[Caller, Depends(Requires(Role.VIEWER))]
Operator = Annotated[Caller, Depends(Requires(Role.OPERATOR))]
Publisher = Annotated[Caller, Depends(Requires(Role.PUBLISHER))]
