"""The server's log reaches an operator's terminal: whatever a client puts in a
request's path arrives there escaped, never as control sequences. A real
``ingestdesk serve`` process."""

from __future__ import annotations

import socket
import sqlite3
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from core import Settings
from core.ledger.tokens import TOKEN_PREFIX
from tests.api.conftest import cli, free_port, start_server, stop_server, stopped_gracefully

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


@pytest.mark.parametrize(
    ("ledger", "code", "says"),
    [
        ("postgresql+asyncpg://nobody@127.0.0.1:{port}/none", 75, "unreachable"),
        ("sqlite:///{tmp}/not-a-ledger.db", 1, "file is not a database"),
    ],
)
def test_a_ledger_that_cannot_be_opened_stops_serve_with_one_line(
    tmp_path: Path, ledger: str, code: int, says: str
) -> None:
    """On 127.0.0.1 serve first opened the ledger in the app's start-up: a database
    down, or a file that is not a ledger, was uvicorn's whole traceback and exit 3
    (which this CLI's scripts read as a conflict). It is one line and the ledger's
    own exit code (75: try again; 1: cannot be used), before the port opens."""
    (tmp_path / "not-a-ledger.db").write_bytes(b"not a database, " * 64)
    settings = Settings(
        db_url=ledger.format(port=free_port(), tmp=tmp_path), store_root=tmp_path / "objects"
    )
    done = cli(settings, "serve", "--port", str(free_port()))
    assert done.returncode == code, done
    assert says in done.stderr and "cannot open ledger" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "serving" not in done.stdout
