"""The server's log reaches an operator's terminal: whatever a client puts in a
request's path arrives there escaped, never as control sequences. A real
``ingestdesk serve`` process."""

from __future__ import annotations

import socket
import sqlite3
from urllib.parse import urlsplit

import httpx
import pytest

from core import Settings
from core.ledger.tokens import TOKEN_PREFIX
from tests.api.conftest import cli, start_server, stop_server, stopped_gracefully

# An OSC sequence that retitles the terminal, a bell, and a clear-screen.
HOSTILE = "%1b%5d0%3bPWNED%07%1b%5b2J"
RAW = ("\x1b", "\x07")


def _hang_up_mid_body(base: str, path: str, token: str) -> None:
    url = urlsplit(base)
    with socket.create_connection((url.hostname, url.port), timeout=30) as conn:
        conn.sendall(
            f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {token}\r\n"
            'Content-Length: 1000\r\n\r\n{"reason": '.encode()
        )
    # Hung up with the body unfinished: whenever the app reads it, it finds the
    # client gone (uvicorn keeps the bytes that came before the hang-up).


@pytest.mark.parametrize("backend", ["sqlite"])
def test_client_text_in_log_lines_is_escaped(settings: Settings) -> None:
    made = cli(settings, "tokens", "create", "pub", "--role", "publisher")
    assert made.returncode == 0, made.stderr
    token = made.stdout.splitlines()[1]
    api = start_server(settings)
    auth = {"Authorization": f"Bearer {token}"}
    try:
        _hang_up_mid_body(api.base, f"/api/documents/{HOSTILE}/publish", token)
        answer = httpx.get(f"{api.base}/api/ingestion-tasks/{HOSTILE}", headers=auth)
        assert answer.status_code == 404
        # The ledger goes away under the token check, which runs before the route
        # looks at the id in the path.
        database = settings.db_url.removeprefix("sqlite:///")
        with sqlite3.connect(database) as conn:
            conn.execute("ALTER TABLE api_tokens RENAME TO tokens_gone")
        stranger = {"Authorization": f"Bearer {TOKEN_PREFIX}0badc0de.never-seen"}
        answer = httpx.get(f"{api.base}/api/documents/{HOSTILE}", headers=stranger)
        assert answer.status_code == 503
    finally:
        code, out = stop_server(api)
    assert stopped_gracefully(code, out), out
    for raw in RAW:
        assert raw not in out, repr(out)
    went_away = [line for line in out.splitlines() if "went away" in line]
    unavailable = [line for line in out.splitlines() if "no such table" in line]
    assert went_away and unavailable, out
    for line in went_away + unavailable:
        assert "\\x1b]0;PWNED\\x07\\x1b[2J" in line, line
