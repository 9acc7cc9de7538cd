"""API tokens: who may use the HTTP API, and as which role.

A token reads ``idk_<id>.<secret>``. The ledger keeps the id, the token's name and
role, and the sha256 of the secret, never the secret: a leaked ledger leaks no
token. The id finds the row; the secret's hash is compared with
:func:`hmac.compare_digest`, in constant time, so response timing says nothing
about how much of a guessed secret was right.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection

from core.errors import BadInput, Conflict, NotFound
from core.ledger.queue import REAPER_ACTOR
from core.ledger.schema import API_TOKENS
from core.ledger.transactions import Transactions
from core.ledger.views import _View
from core.safe_text import looks_like, normal_name, visible
from core.states import Role

TOKEN_PREFIX = "idk_"
SECRET_BYTES = 32  # bytes of randomness in a token's secret
# Characters of a presented token at most: ours are 80 (idk_, a 32-character id, a dot,
# 43 characters of secret). Anything longer is refused before it is looked up or kept.
TOKEN_MAX_CHARS = 128
LOCAL_ACTOR = "local"  # the API's actor for a token-less local client (no token exists)
# Actors ingestdesk records by itself: the API's token-less local client, the ledger's
# default, the lease reaper, the demo (core.demo.DEMO_ACTOR; not imported, as core.demo
# imports the ledger). A token named like one would make its actions in the history
# indistinguishable from theirs.
RESERVED_NAMES = frozenset({LOCAL_ACTOR, "system", REAPER_ACTOR, "demo"})


@dataclass(frozen=True)
class TokenView(_View):
    name: str
    role: Role
    created_at: float
    revoked_at: float | None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


@dataclass(frozen=True)
class NewToken(_View):
    """A token as it is created: the only time its secret is shown."""

    name: str
    role: Role
    token: str


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class TokenRegistry:
    """Create, list, revoke and check API tokens."""

    def __init__(
        self,
        transactions: Transactions,
        clock: Callable[[], float],
        ids: Callable[[], str],
    ) -> None:
        self._tx = transactions
        self.clock = clock
        self._ids = ids

    async def create(self, name: str, role: Role | str) -> NewToken:
        """A new token for ``name``; a name already taken (even revoked) is a conflict,
        so the history's actor names stay unambiguous, and so is a name that only
        looks like a taken one (``Alice``, ``alice ``, ``alice`` with a Cyrillic a: see
        :func:`core.safe_text.looks_like`). For the same reason a name ingestdesk
        records as an actor by itself (RESERVED_NAMES), or one like it, is refused.
        The name is kept as :func:`core.safe_text.normal_name` has it (NFKC, trimmed)."""
        name = normal_name(name, "token name")
        check_not_reserved(name, "token name")
        try:
            role = Role(role)
        except ValueError as exc:
            choices = ", ".join(r.value for r in Role)
            raise BadInput(f"role must be one of {choices}") from exc
        token_id = self._ids()
        secret = secrets.token_urlsafe(SECRET_BYTES)
        row = {
            "id": token_id,
            "name": name,
            "role": role.value,
            "secret_sha256": _digest(secret),
            "created_at": self.clock(),
            "revoked_at": None,
        }

        def tx(conn: Connection) -> None:
            # Every name, to compare by look: a team has tens of tokens, not millions.
            for (taken,) in conn.execute(select(API_TOKENS.c.name)):
                if taken == name:
                    raise Conflict(f"a token named {name!r} exists already; pick another name")
                if looks_like(taken, name):
                    raise Conflict(
                        f"token name {visible(name)!r} looks like the existing "
                        f"{visible(taken)!r}; pick a name that reads differently"
                    )
            conn.execute(insert(API_TOKENS), row)

        await self._tx.write(tx)
        return NewToken(name, role, f"{TOKEN_PREFIX}{token_id}.{secret}")

    async def list(self) -> list[TokenView]:
        """Every token, active or revoked, by name (no secrets: none are kept)."""

        def tx(conn: Connection) -> list[TokenView]:
            query = select(API_TOKENS).order_by(API_TOKENS.c.name)
            return [_view(r) for r in conn.execute(query)]

        return await self._tx.read(tx)

    async def revoke(self, name: str) -> TokenView:
        """Revoke a token by name (as created: ``tokens revoke 'alice '`` finds
        ``alice``); revoking a revoked token changes nothing."""
        now = self.clock()
        name = unicodedata.normalize("NFKC", name).strip()

        def tx(conn: Connection) -> TokenView:
            conn.execute(
                update(API_TOKENS)
                .where(API_TOKENS.c.name == name)
                .where(API_TOKENS.c.revoked_at.is_(None))
                .values(revoked_at=now)
            )
            row = conn.execute(select(API_TOKENS).where(API_TOKENS.c.name == name)).first()
            if row is None:
                raise NotFound(f"no token named {name!r}")
            return _view(row)

        return await self._tx.write(tx)

    async def authenticate(self, token: str) -> TokenView | None:
        """The active token ``token`` is, or None (unknown, malformed or revoked)."""
        if len(token) > TOKEN_MAX_CHARS or not token.startswith(TOKEN_PREFIX) or "." not in token:
            return None
        token_id, _, secret = token[len(TOKEN_PREFIX) :].partition(".")
        if not token_id.isalnum() or len(token_id) > 32:
            return None

        def tx(conn: Connection) -> tuple[TokenView, str] | None:
            row = conn.execute(select(API_TOKENS).where(API_TOKENS.c.id == token_id)).first()
            return None if row is None else (_view(row), row.secret_sha256)

        found = await self._tx.read(tx)
        if found is None:
            # Compare anyway, so an unknown id costs what a wrong secret costs.
            hmac.compare_digest(_digest(secret), "0" * 64)
            return None
        view, expected = found
        if not hmac.compare_digest(_digest(secret), expected) or not view.active:
            return None
        return view

    async def any_active(self) -> bool:
        """Whether at least one token can be used."""

        def tx(conn: Connection) -> bool:
            query = select(API_TOKENS.c.id).where(API_TOKENS.c.revoked_at.is_(None)).limit(1)
            return conn.execute(query).first() is not None

        return await self._tx.read(tx)


def check_not_reserved(name: str, what: str) -> None:
    """Refuse a name that is, or looks like, one ingestdesk records as an actor by
    itself (``local``, ``Local``, full-width ``LOCAL``, ``local`` with a Cyrillic o)."""
    for reserved in sorted(RESERVED_NAMES):
        if looks_like(name, reserved):
            listed = ", ".join(sorted(RESERVED_NAMES))
            raise BadInput(
                f"{what} {visible(name)!r} is reserved: ingestdesk records {reserved!r} as an "
                f"actor by itself (reserved: {listed}); pick another name"
            )


def _view(row: object) -> TokenView:
    m = row._mapping  # type: ignore[attr-defined]
    return TokenView(m["name"], Role(m["role"]), m["created_at"], m["revoked_at"])
