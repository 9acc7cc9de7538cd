"""API tokens in the ledger: shown once, kept as a hash, checked in constant time."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from core import BadInput, Conflict, Ledger, NotFound
from core.states import Role


async def test_a_token_is_shown_once_and_kept_only_as_a_hash(ledger: Ledger) -> None:
    new = await ledger.tokens.create("ci-bot", "operator")
    assert new.role is Role.OPERATOR and new.token.startswith("idk_")
    stored = await ledger.transactions.read(
        lambda conn: [tuple(r) for r in conn.execute(text("SELECT * FROM api_tokens"))]
    )
    assert new.token.split(".", 1)[1] not in repr(stored)
    found = await ledger.tokens.authenticate(new.token)
    assert found is not None and (found.name, found.role) == ("ci-bot", Role.OPERATOR)


@pytest.mark.parametrize(
    "guess",
    ["", "idk_", "idk_x.y", "Bearer idk_abc.def", "idk_" + "a" * 40 + ".x", "not a token"],
)
async def test_malformed_and_unknown_tokens_authenticate_nobody(ledger: Ledger, guess: str) -> None:
    await ledger.tokens.create("someone", "viewer")
    assert await ledger.tokens.authenticate(guess) is None


async def test_a_wrong_secret_or_a_revoked_token_is_refused(ledger: Ledger) -> None:
    new = await ledger.tokens.create("alice", "publisher")
    token_id = new.token.split(".", 1)[0]
    assert await ledger.tokens.authenticate(token_id + ".wrong-secret") is None
    assert await ledger.tokens.any_active()
    revoked = await ledger.tokens.revoke("alice")
    assert not revoked.active
    assert await ledger.tokens.authenticate(new.token) is None
    assert not await ledger.tokens.any_active()
    assert (await ledger.tokens.revoke("alice")).revoked_at == revoked.revoked_at


async def test_token_names_and_roles_are_checked(ledger: Ledger) -> None:
    await ledger.tokens.create("alice", "viewer")
    with pytest.raises(Conflict, match="exists already"):
        await ledger.tokens.create("alice", "operator")
    with pytest.raises(BadInput, match="role must be one of viewer, operator, publisher"):
        await ledger.tokens.create("bob", "admin")
    with pytest.raises(BadInput, match="control or invisible"):
        await ledger.tokens.create("bob\x1b[2J", "viewer")
    with pytest.raises(NotFound):
        await ledger.tokens.revoke("nobody")
    assert [t.name for t in await ledger.tokens.list()] == ["alice"]


def test_roles_include_the_ones_before_them() -> None:
    assert Role.PUBLISHER.may(Role.OPERATOR) and Role.PUBLISHER.may(Role.VIEWER)
    assert Role.OPERATOR.may(Role.VIEWER) and not Role.OPERATOR.may(Role.PUBLISHER)
    assert not Role.VIEWER.may(Role.OPERATOR)


# Names that look alike are one name to a reader of the history: the API's actor is
# the token's name, so a second token that reads as the first would forge its lines.
CYRILLIC_O = "\u043e"
CYRILLIC_A, CYRILLIC_ES, CYRILLIC_IE = "\u0430", "\u0441", "\u0435"


async def test_a_token_name_is_kept_normalised(ledger: Ledger) -> None:
    made = await ledger.tokens.create("  alice ", "viewer")
    assert made.name == "alice"
    wide = await ledger.tokens.create("\uff22\uff2f\uff22", "viewer")  # full-width BOB
    assert wide.name == "BOB"
    assert [t.name for t in await ledger.tokens.list()] == ["BOB", "alice"]
    # Revoked by the name as typed, normalised the same way.
    assert not (await ledger.tokens.revoke("alice ")).active


@pytest.mark.parametrize(
    "twin",
    [
        "alice",
        "alice ",
        "Alice",
        "ALICE",
        "\uff41\uff4c\uff49\uff43\uff45",  # full-width alice
        "aIice",  # a capital I for the l
        f"{CYRILLIC_A}l{CYRILLIC_ES}{CYRILLIC_IE}",  # mixes scripts
    ],
)
async def test_a_name_that_looks_like_a_taken_one_is_refused(ledger: Ledger, twin: str) -> None:
    await ledger.tokens.create("alice", "operator")
    with pytest.raises((Conflict, BadInput), match=r"exists already|looks like|mixes scripts"):
        await ledger.tokens.create(twin, "publisher")
    assert [t.name for t in await ledger.tokens.list()] == ["alice"]


async def test_a_whole_script_look_alike_is_one_name_too(ledger: Ledger) -> None:
    # All Cyrillic, so not mixed, and it reads as Latin "pape".
    lookalike = "\u0440\u0430\u0440\u0435"
    await ledger.tokens.create(lookalike, "viewer")
    with pytest.raises(Conflict, match="looks like"):
        await ledger.tokens.create("pape", "viewer")
    # Other scripts are names like any other.
    await ledger.tokens.create("\u0438\u0432\u0430\u043d", "viewer")  # Ivan in Cyrillic
    await ledger.tokens.create("\u5c71\u7530", "viewer")  # Yamada in kanji


@pytest.mark.parametrize(
    "name",
    ["local", "Local", " local", "\uff2c\uff2f\uff23\uff21\uff2c", f"l{CYRILLIC_O}cal", "REAPER"],
)
async def test_reserved_names_are_refused_after_normalising(ledger: Ledger, name: str) -> None:
    with pytest.raises(BadInput, match=r"reserved|mixes scripts"):
        await ledger.tokens.create(name, "viewer")
    assert await ledger.tokens.list() == []
