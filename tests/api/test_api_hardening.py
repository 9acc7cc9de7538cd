"""The API under hostile or careless clients, on a real server process with a real
HTTP client (and raw sockets where a client must misbehave in ways httpx will not):
bodies refused before they are read, no path or SQL in a 503, numbers the database
cannot hold, a bounded stop, the OpenAPI document's security and errors, HEAD, the
task's full detail, reserved token names, tampered cursors and blank filters."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import socket
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from core import Ledger, Settings
from core.api.auth import LOCAL_ACTOR
from core.api.server import STOP_CANCEL_S, STOP_GRACE_S
from core.api.versions import ROW_VERSION_MAX
from core.cli.documents import ROW_VERSION_MAX as CLI_ROW_VERSION_MAX
from core.demo import DEMO_ACTOR
from core.ledger.queue import REAPER_ACTOR
from core.ledger.tokens import RESERVED_NAMES
from tests.api.conftest import Api, cli, start_server, stop_server, stopped_gracefully
from tests.api.test_checklist import PROBLEM_JSON, REPORT, added, is_problem, upload

NO_SUCH_DOC = "0123456789abcdef"
ANSWER_WITHIN_S = 5.0  # seconds: a refusal that does not wait for the body comes at once


def raw_exchange(base: str, request: bytes, *, timeout: float = 15.0) -> tuple[int, bytes, bytes]:
    """Send ``request`` as is on a new connection; the status, the head (lowercase)
    and the body of the answer.

    For requests httpx will not send: a Content-Length far beyond what follows."""
    url = urlsplit(base)
    with socket.create_connection((url.hostname, url.port), timeout=timeout) as conn:
        conn.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data or len(data) < _response_length(data):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head.lower(), body


def _response_length(data: bytes) -> int:
    head, _, _ = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(head) + 4 + int(value)
    return len(data) + 1  # no length: read until the server closes


def truncated_post(path: str, *, claimed: int, sent: bytes, token: str | None) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        f"Content-Length: {claimed}\r\n{auth}\r\n"
    ).encode() + sent


# --------------------------------------------------- 1: the body comes after the token


def test_a_decision_body_is_refused_before_it_is_read(api: Api) -> None:
    """A 1 GB Content-Length and a few bytes: the answer comes at once, without the
    server waiting for (or holding) the rest."""
    path = f"/api/documents/{NO_SUCH_DOC}/reject"
    start = b'{"reason": "xxxxxxxx'
    for token, status in (
        (None, 401),
        (api.tokens["viewer"], 403),
        (api.tokens["publisher"], 413),
    ):
        began = time.monotonic()
        code, head, body = raw_exchange(
            api.base, truncated_post(path, claimed=1_000_000_000, sent=start, token=token)
        )
        assert time.monotonic() - began < ANSWER_WITHIN_S
        assert code == status, body
        assert json.loads(body)["status"] == status
        # The server hangs up rather than drain the rest of what it refused.
        assert b"\r\nconnection: close" in head
    with api.client("publisher") as publisher:
        # A body over the cap with an honest Content-Length, and one streamed without.
        big = {"reason": "x" * (100 * 1024)}
        is_problem(publisher.post(path, json=big), 413, "BadInput")

        def chunks() -> Iterator[bytes]:
            yield b'{"reason": "'
            for _ in range(64):
                yield b"y" * 4096
            yield b'"}'

        try:
            streamed = publisher.post(
                path, content=chunks(), headers={"Content-Type": "application/json"}
            )
            is_problem(streamed, 413, "BadInput")
        except httpx.TransportError:
            pass  # the server answered and closed before the client finished sending
        # A small body is still read as before: the document does not exist.
        is_problem(publisher.post(path, json={"reason": "fine"}), 404, "NotFound")


# ------------------------------------------------------ 2: a 503 says nothing private


@pytest.mark.parametrize("backend", ["sqlite"])
def test_an_unavailable_ledger_is_a_neutral_503_and_the_log_says_why(
    api: Api, tmp_path: Path
) -> None:
    with api.client("viewer") as viewer:
        assert viewer.get("/api/ingestion-tasks").status_code == 200
        database = str(api.settings.db_url).removeprefix("sqlite:///")
        with sqlite3.connect(database) as conn:
            conn.execute("ALTER TABLE ingestion_tasks RENAME TO tasks_gone")
        answer = viewer.get("/api/ingestion-tasks")
    is_problem(answer, 503, "LedgerUnavailable")
    assert answer.json()["detail"] == "the ledger is unavailable; try again later"
    for private in (str(tmp_path), "ledger.db", "OperationalError", "no such table", "sqlite"):
        assert private not in answer.text
    code, out = stop_server(api)
    assert stopped_gracefully(code, out), out
    # The operator still learns what went wrong: the real message is in the log.
    assert "no such table: ingestion_tasks" in out


# --------------------------------------- 3: a version number the database cannot hold


def test_an_expect_version_beyond_the_cli_limit_is_422(api: Api) -> None:
    assert ROW_VERSION_MAX == CLI_ROW_VERSION_MAX
    with api.client("publisher") as publisher:
        doc = upload(publisher, REPORT, "big-numbers.md")
        path = f"/api/documents/{doc['document_id']}/publish"
        for huge in (ROW_VERSION_MAX + 1, 2**63, 10**26):
            in_query = publisher.post(path, params={"expect_version": str(huge)})
            is_problem(in_query, 422, "BadInput")
            assert str(ROW_VERSION_MAX) in in_query.json()["detail"]
            is_problem(publisher.post(path, json={"expect_version": huge}), 422, "BadInput")
        # The limit itself is a number like any other: the ledger answers (a draft).
        at_limit = publisher.post(path, json={"expect_version": ROW_VERSION_MAX})
        is_problem(at_limit, 409, "Conflict")


# ------------------------------------------------------- 4: a stop that ends in time


def _stalled_upload(base: str) -> socket.socket:
    """A chunked multipart upload that sends its first bytes and then nothing."""
    url = urlsplit(base)
    conn = socket.create_connection((url.hostname, url.port), timeout=30)
    conn.sendall(
        b"POST /api/documents HTTP/1.1\r\nHost: test\r\n"
        b"Content-Type: multipart/form-data; boundary=edge\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    part = b'--edge\r\nContent-Disposition: form-data; name="file"; filename="a.md"\r\n\r\nhalf'
    conn.sendall(b"%x\r\n%s\r\n" % (len(part), part))
    return conn


def _nothing_stored(settings: Settings) -> None:
    listed = cli(settings, "documents", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []
    assert not [p for p in settings.store_root.rglob("*") if p.is_file()]


@pytest.mark.slow
def test_sigterm_with_a_stalled_upload_stops_within_the_bound(settings: Settings) -> None:
    server = start_server(settings)
    conn = _stalled_upload(server.base)
    try:
        time.sleep(0.5)  # the request is in the app, waiting for the rest of its body
        began = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        out, _ = server.process.communicate(timeout=STOP_GRACE_S + STOP_CANCEL_S + 10)
        took = time.monotonic() - began
    finally:
        conn.close()
        if server.process.poll() is None:
            server.process.kill()
            server.process.communicate()
    assert took < STOP_GRACE_S + STOP_CANCEL_S + 2, (took, out)
    assert stopped_gracefully(server.process.returncode, out), out
    assert "Exception in ASGI application" not in out
    _nothing_stored(settings)


def test_a_client_that_hangs_up_mid_upload_is_one_quiet_line(open_api: Api) -> None:
    conn = _stalled_upload(open_api.base)
    time.sleep(0.5)
    conn.close()
    time.sleep(0.5)
    assert httpx.get(f"{open_api.base}/healthz").status_code == 200
    code, out = stop_server(open_api)
    assert stopped_gracefully(code, out), out
    assert "Exception" not in out and "unexpected" not in out
    assert sum("went away" in line for line in out.splitlines()) <= 1
    _nothing_stored(open_api.settings)


# ------------------------------------------ 6: the OpenAPI document's security, errors


def test_the_openapi_document_declares_bearer_auth_and_problem_answers(api: Api) -> None:
    with api.client("viewer") as viewer:
        spec = viewer.get("/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    [(name, scheme)] = schemes.items()
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    assert "HTTPValidationError" not in json.dumps(spec)
    operations = {
        (method, path): op for path, item in spec["paths"].items() for method, op in item.items()
    }
    for (method, path), op in operations.items():
        for status, answer in op["responses"].items():
            if status[0] in "45":
                assert list(answer["content"]) == [PROBLEM_JSON], (method, path, status)
        if path == "/healthz":
            assert "security" not in op and "401" not in op["responses"]
            continue
        assert op["security"] == [{name: []}], (method, path)
        assert {"401", "403", "503"} <= set(op["responses"]), (method, path)
        if op.get("parameters") or op.get("requestBody"):
            assert "422" in op["responses"], (method, path)
    tasks = "/api/ingestion-tasks/{task_id}"
    for method, path, expected in (
        ("post", "/api/documents/{document_id}/submit", {"404", "409"}),
        ("get", tasks, {"404"}),
        ("delete", tasks, {"404", "409"}),
        ("post", tasks + "/retry", {"404", "409"}),
        ("get", "/api/documents/{document_id}", {"404"}),
        ("post", "/api/documents/{document_id}/publish", {"400", "409", "413", "415"}),
    ):
        assert expected <= set(operations[(method, path)]["responses"]), (method, path)


# ---------------------------------------------- 7: unreadable and non-JSON bodies


def test_a_malformed_body_is_400_and_a_non_json_one_415(api: Api) -> None:
    path = f"/api/documents/{NO_SUCH_DOC}/reject"
    with api.client("publisher") as publisher:
        bad = publisher.post(path, content=b"{bad", headers={"Content-Type": "application/json"})
        is_problem(bad, 400, "BadInput")
        assert "JSON" in bad.json()["detail"]
        text = publisher.post(path, content=b"reason=x", headers={"Content-Type": "text/plain"})
        is_problem(text, 415, "BadInput")
        bare = publisher.post(path, content=b'{"reason": "x"}', headers={"Content-Type": ""})
        is_problem(bare, 415, "BadInput")
        # Well-formed JSON of the wrong shape is still refused by value: 422.
        is_problem(publisher.post(path, json={"reason": 5}), 422, "BadInput")


# ------------------------------------------------------------------------ 8: HEAD


def test_head_answers_wherever_get_does(api: Api) -> None:
    with api.client() as client:
        task = added(client)
    paths = (
        "/api/ingestion-tasks",
        f"/api/ingestion-tasks/{task['task_id']}",
        f"/api/documents/{task['document_id']}",
        f"/api/documents/{task['document_id']}/versions",
        "/api/review-queue",
        "/api/search?q=report",
        "/metrics",
        "/docs",
        "/openapi.json",
    )
    with api.client("viewer") as viewer:
        for path in ("/healthz", *paths):
            get, head = viewer.get(path), viewer.head(path)
            assert (head.status_code, head.content) == (get.status_code, b""), path
            assert head.headers["content-type"] == get.headers["content-type"], path
            if path != "/metrics":  # its figures (ages) move between the two requests
                assert head.headers["content-length"] == get.headers["content-length"], path
        is_missing = viewer.head(f"/api/documents/{NO_SUCH_DOC}")
        assert (is_missing.status_code, is_missing.content) == (404, b"")
    for path in paths[:-2]:
        anonymous = httpx.head(api.base + path)
        assert anonymous.status_code == 401, path
        assert anonymous.headers["www-authenticate"].startswith("Bearer")


# ------------------------------------------------ 9: the task as the CLI shows it


async def _claim_long_ago(settings: Settings, task_id: str) -> None:
    """Claimed two minutes ago with a long lease: running, alive, and stalled."""
    claimed_at = time.time() - 120
    long_lease = settings.with_(lease_s=3600.0)
    async with await Ledger.open(long_lease, clock=lambda: claimed_at) as ledger:
        assert await ledger.queue.claim(task_id, "slow-worker") is not None


def test_a_task_reads_as_the_cli_shows_it(api: Api) -> None:
    with api.client("viewer") as viewer, api.client() as client:
        task = added(client)
        asyncio.run(_claim_long_ago(api.settings, task["task_id"]))
        over_http = viewer.get(f"/api/ingestion-tasks/{task['task_id']}?history=1").json()
        brief = viewer.get(f"/api/ingestion-tasks/{task['task_id']}").json()
    shown = cli(api.settings, "task", task["task_id"], "--json")
    assert shown.returncode == 0, shown.stderr
    on_cli: dict[str, Any] = json.loads(shown.stdout)
    assert set(over_http) == set(on_cli)
    assert over_http["stalled"] is True and on_cli["stalled"] is True
    assert over_http["provider_requests"] == on_cli["provider_requests"] == []
    assert set(brief) == set(on_cli) - {"history"}


# ------------------------------------------------------- 10: reserved token names


def test_a_token_cannot_take_a_name_ingestdesk_records_by_itself(settings: Settings) -> None:
    for name in ("local", "Local", "reaper", "system"):
        made = cli(settings, "tokens", "create", name, "--role", "viewer")
        assert made.returncode == 2, made
        [line] = made.stderr.strip().splitlines()
        assert "reserved" in line and "Traceback" not in line
    listed = cli(settings, "tokens", "list", "--json")
    assert json.loads(listed.stdout) == []
    # Every actor ingestdesk writes by itself, wherever it is defined.
    assert {LOCAL_ACTOR, DEMO_ACTOR, REAPER_ACTOR, "system"} <= RESERVED_NAMES


# -------------------------------------------------------------- 11: smaller things


def _cursor(value: str) -> str:
    return base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")


def test_redoc_is_gone_and_the_docs_stay_offline(api: Api) -> None:
    with api.client("viewer") as viewer:
        is_problem(viewer.get("/redoc"), 404, "NotFound")
        docs = viewer.get("/docs")
        assert docs.status_code == 200 and "cdn" not in docs.text.lower()


def test_a_tampered_cursor_is_422(api: Api) -> None:
    with api.client() as client:
        added(client)
        for tampered in ('["nan", "a"]', '[NaN, "a"]', '[Infinity, "a"]', "[1.0, 5]", "[1.0]"):
            answer = client.get("/api/ingestion-tasks", params={"cursor": _cursor(tampered)})
            is_problem(answer, 422, "BadInput")
        honest = client.get("/api/ingestion-tasks", params={"cursor": _cursor('[1e18, "z"]')})
        assert honest.status_code == 200 and len(honest.json()["tasks"]) == 1


def test_an_empty_query_value_narrows_nothing(api: Api) -> None:
    with api.client() as client:
        task = added(client)
        everything = client.get("/api/ingestion-tasks").json()
        assert [t["task_id"] for t in everything["tasks"]] == [task["task_id"]]
        for name in ("status", "error_code", "filter"):
            answer = client.get("/api/ingestion-tasks", params={name: ""})
            assert answer.status_code == 200, answer.text
            assert answer.json() == everything, name
        is_problem(client.get("/api/ingestion-tasks", params={"status": "bogus"}), 422, "BadInput")


def test_a_refusal_by_role_reads_as_english(api: Api) -> None:
    with api.client("operator") as operator, api.client("viewer") as viewer:
        doc = upload(operator, REPORT, "grammar.md")
        refused = operator.post(f"/api/documents/{doc['document_id']}/publish")
        is_problem(refused, 403, "Forbidden")
        assert "is an operator; this needs publisher" in refused.json()["detail"]
        refused = viewer.post(f"/api/documents/{doc['document_id']}/submit")
        assert "is a viewer; this needs operator" in refused.json()["detail"]
