"""Who is calling, and may they: bearer tokens and roles.

Every endpoint but ``/healthz`` names the role it needs (viewer reads; operator also
uploads, submits, cancels, retries; publisher also publishes). A request without a
valid token is 401, a token whose role may not is 403. The token's name is the actor
in the history, as ``--actor`` is on the CLI.

**Open mode** (no token needed) is decided once, when the server starts: a ledger
with no active token then serves clients on the same machine only, as the actor
``local`` with every role, which is what a developer on one machine expects
(``ingestdesk serve`` refuses to bind anywhere but loopback in that state). It can
only end: the first token created turns it off within OPEN_MODE_CACHE_S, and nothing
turns it on again while the server runs. Revoking the last token leaves a server
that refuses everyone (401) until it is restarted: revoking must never open a server
that may sit behind a proxy on the same machine, where every client is "local".

Only what verified is remembered: a presented string longer than TOKEN_MAX_CHARS is
refused before any lookup, and the cache holds at most TOKEN_CACHE_MAX tokens that
the ledger accepted. Junk costs one bounded lookup and nothing that stays.

The caller is settled before a request body is read (see :mod:`core.api.routing`), so
a client without a valid token cannot make the server hold its body.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from core.api.problems import ApiProblem
from core.ledger import Ledger, TokenView
from core.ledger.tokens import LOCAL_ACTOR, TOKEN_MAX_CHARS
from core.states import Role

TOKEN_CACHE_S = 2.0  # seconds an authenticated token is trusted before it is checked again
TOKEN_CACHE_MAX = 256  # verified tokens remembered at most (the least recently used go first)
OPEN_MODE_CACHE_S = 2.0  # seconds between checks, while open, for a token that ends open mode
# Read-only: every 401 starts from it, and ApiProblem copies it (see ApiProblem).
CHALLENGE = MappingProxyType({"WWW-Authenticate": 'Bearer realm="ingestdesk"'})
log = logging.getLogger("ingestdesk.api")
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
    """Checks bearer tokens against the ledger, with a short, bounded cache.

    The cache keeps a GET from costing two ledger reads; a revoked token stops
    working within TOKEN_CACHE_S. Build it with :meth:`start`, which decides open
    mode once.
    """

    def __init__(
        self, ledger: Ledger, *, open_mode: bool, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self._verified: OrderedDict[str, tuple[float, TokenView]] = OrderedDict()
        self._open = open_mode
        self._open_checked = clock()

    @classmethod
    async def start(cls, ledger: Ledger, clock: Callable[[], float] = time.monotonic) -> Gate:
        """The gate for a server starting now: open mode if, and only if, the ledger
        has no active token at this moment."""
        open_mode = not await ledger.tokens.any_active()
        if open_mode:
            log.warning(
                "no API token exists: serving clients on this machine only, as %r, without "
                "a token until one is created (ingestdesk tokens create NAME --role R)",
                LOCAL_ACTOR,
            )
        return cls(ledger, open_mode=open_mode, clock=clock)

    async def open_mode(self) -> bool:
        """True while this server is in open mode: it started with no active token
        and none has been created since. Never True again once False."""
        if not self._open:
            return False
        now = self.clock()
        if now - self._open_checked > OPEN_MODE_CACHE_S:
            self._open_checked = now
            if await self.ledger.tokens.any_active():
                self._open = False
                log.warning("an API token exists now: every request needs a token from here on")
        return self._open

    async def token(self, presented: str) -> TokenView | None:
        """The active token ``presented`` is, or None; only tokens that verified are
        remembered (for TOKEN_CACHE_S, at most TOKEN_CACHE_MAX of them)."""
        if len(presented) > TOKEN_MAX_CHARS:
            return None  # longer than any token ingestdesk makes: no lookup, nothing kept
        now = self.clock()
        cached = self._verified.get(presented)
        if cached is not None and now - cached[0] <= TOKEN_CACHE_S:
            self._verified.move_to_end(presented)
            return cached[1]
        self._verified.pop(presented, None)
        found = await self.ledger.tokens.authenticate(presented)
        if found is not None:
            self._verified[presented] = (now, found)
            while len(self._verified) > TOKEN_CACHE_MAX:
                self._verified.popitem(last=False)
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
