"""Who may do what over HTTP: 401 without a valid token, 403 for a role that may not,
for every endpoint; the token's name in the history; a public bind without tokens is
refused; SIGTERM stops the server gracefully."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx

from core import Ledger, Settings
from tests.api.conftest import Api, cli, start_server, stop_server, stopped_gracefully
from tests.api.test_checklist import REPORT, added, is_problem, upload

# (method, path template, the least role that may) for every endpoint but /healthz.
ENDPOINTS = (
    ("POST", "/api/documents", "operator"),
    ("POST", "/api/documents/{doc}/submit", "operator"),
    ("POST", "/api/documents/{doc}/publish", "publisher"),
    ("POST", "/api/documents/{doc}/reject", "publisher"),
    ("POST", "/api/documents/{doc}/withdraw", "publisher"),
    # Deleting takes a document out of search, as withdrawing does.
    ("DELETE", "/api/documents/{doc}", "publisher"),
    ("GET", "/api/documents/{doc}/versions", "viewer"),
    ("GET", "/api/documents/{doc}/history", "viewer"),
    ("GET", "/api/documents/{doc}/review", "viewer"),
    ("GET", "/api/review-queue", "viewer"),
    ("GET", "/api/documents/{doc}", "viewer"),
    ("GET", "/api/documents/{doc}/chunks", "viewer"),
    ("GET", "/api/ingestion-tasks", "viewer"),
    ("GET", "/api/ingestion-tasks/{task}", "viewer"),
    ("DELETE", "/api/ingestion-tasks/{task}", "operator"),
    ("POST", "/api/ingestion-tasks/{task}/retry", "operator"),
    ("GET", "/api/search?q=report", "viewer"),
    ("GET", "/metrics", "viewer"),
)
ROLES = ("viewer", "operator", "publisher")


def test_every_endpoint_wants_a_token_and_the_right_role(api: Api) -> None:
    with api.client() as client:
        task = added(client)
    for method, template, least in ENDPOINTS:
        path = template.format(doc=task["document_id"], task=task["task_id"])
        anonymous = httpx.request(method, api.base + path)
        is_problem(anonymous, 401, "Unauthorized")
        assert anonymous.headers["www-authenticate"].startswith("Bearer")
        forged = httpx.request(
            method, api.base + path, headers={"Authorization": "Bearer idk_0000.nope"}
        )
        is_problem(forged, 401, "Unauthorized")
        for role in ROLES[: ROLES.index(least)]:
            with api.client(role) as weak:
                is_problem(weak.request(method, path), 403, "Forbidden")


def test_the_tokens_name_is_the_actor_and_a_revoked_token_stops_working(api: Api) -> None:
    with api.client() as client:
        task = added(client)
        history = client.get(f"/api/ingestion-tasks/{task['task_id']}?history=1").json()
        assert history["history"][0]["actor"] == "operator-token"
    revoked = cli(api.settings, "tokens", "revoke", "operator-token", "--json")
    assert revoked.returncode == 0, revoked.stderr
    import time

    time.sleep(2.2)  # the server trusts a checked token for 2 s
    with api.client() as client:
        is_problem(client.get("/api/ingestion-tasks"), 401, "Unauthorized")


def test_tokens_are_created_once_listed_without_secrets(settings: Settings) -> None:
    import json

    made = cli(settings, "tokens", "create", "ci-bot", "--role", "viewer", "--json")
    assert made.returncode == 0, made.stderr
    value = json.loads(made.stdout)
    assert set(value) == {"name", "role", "token"} and value["role"] == "viewer"
    listed = cli(settings, "tokens", "list", "--json")
    assert value["token"].split(".", 1)[1] not in listed.stdout
    assert json.loads(listed.stdout)[0]["name"] == "ci-bot"
    again = cli(settings, "tokens", "create", "ci-bot", "--role", "viewer", "--json")
    assert again.returncode == 3
    bad_role = cli(settings, "tokens", "create", "x", "--role", "admin")
    assert bad_role.returncode == 2


def test_without_tokens_only_local_clients_are_served(open_api: Api) -> None:
    answer = httpx.get(f"{open_api.base}/api/ingestion-tasks")
    assert answer.status_code == 200
    with httpx.Client(base_url=open_api.base) as client:
        doc = upload(client, REPORT, "local.md")
        task = client.post(f"/api/documents/{doc['document_id']}/submit").json()
        history = client.get(f"/api/ingestion-tasks/{task['task_id']}?history=1").json()
        assert history["history"][0]["actor"] == "local"
        # A token that is presented is still checked.
        bad = client.get("/api/ingestion-tasks", headers={"Authorization": "Bearer idk_1.x"})
        is_problem(bad, 401, "Unauthorized")


def test_a_public_address_without_any_token_is_refused_at_start(settings: Settings) -> None:
    refused = cli(settings, "serve", "--host", "0.0.0.0", "--port", "0", timeout=30)
    assert refused.returncode == 2
    assert "no API token" in refused.stderr and "Traceback" not in refused.stderr
    as_json = cli(settings, "serve", "--host", "0.0.0.0", "--port", "0", "--json", timeout=30)
    assert as_json.returncode == 2
    import json

    assert json.loads(as_json.stdout)["error"]["kind"] == "BadInput"


def test_sigterm_stops_the_server_gracefully(settings: Settings) -> None:
    async def token() -> str:
        async with await Ledger.open(settings) as ledger:
            return (await ledger.tokens.create("t", "operator")).token

    asyncio.run(token())
    server = start_server(settings)
    code, out = stop_server(server)
    assert stopped_gracefully(code, out), out


def test_an_upload_over_the_cap_is_413_before_it_is_read(settings: Settings) -> None:
    import os

    env = dict(os.environ, INGESTDESK_MAX_UPLOAD_MB="1")
    server = start_server(settings, env=env)
    try:
        big = b"x" * (3 * 1024 * 1024)
        with httpx.Client(base_url=server.base, timeout=30) as client:
            answer = client.post("/api/documents", files={"file": ("big.txt", big)})
            is_problem(answer, 413, "BadInput")

            # No Content-Length (chunked): the cap is checked while the body streams in.
            boundary = "b0undary"
            head = (
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                f'filename="big.txt"\r\nContent-Type: text/plain\r\n\r\n'
            ).encode()

            def body() -> Iterator[bytes]:
                yield head
                for _ in range(48):  # 3 MiB in 64 KiB pieces
                    yield b"y" * 65536
                yield f"\r\n--{boundary}--\r\n".encode()

            try:
                streamed = client.post(
                    "/api/documents",
                    content=body(),
                    headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
                )
                is_problem(streamed, 413, "BadInput")
            except httpx.TransportError:
                pass  # the server answered and closed before the client finished sending
        with httpx.Client(base_url=server.base, timeout=30) as client:
            assert client.get("/api/ingestion-tasks").json()["tasks"] == []
    finally:
        stop_server(server)


def test_a_form_of_endless_small_fields_is_refused_not_buffered(api: Api) -> None:
    """No Content-Length, no file part: thousands of tiny fields, streamed."""
    boundary = "edge"

    def body() -> Iterator[bytes]:
        for i in range(5000):
            yield (
                f'--{boundary}\r\nContent-Disposition: form-data; name="f{i}"\r\n\r\nx\r\n'
            ).encode()
        yield f"--{boundary}--\r\n".encode()

    with api.client() as client:
        try:
            answer = client.post(
                "/api/documents",
                content=body(),
                headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
            )
            is_problem(answer, 400, "BadInput")
        except httpx.TransportError:
            pass  # answered and closed before the client finished sending
        assert client.get("/api/ingestion-tasks").json()["tasks"] == []


def test_a_port_in_use_or_an_unknown_host_is_one_line_and_exit_1(settings: Settings) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        busy = cli(settings, "serve", "--port", port, timeout=30)
    assert busy.returncode == 1, busy
    assert busy.stderr.strip().startswith(f"ingestdesk: cannot listen on 127.0.0.1:{port}")
    assert "serving" not in busy.stdout and "Traceback" not in busy.stderr
    # With a token, a public address is allowed: a name that does not resolve is then
    # the one thing wrong.
    assert cli(settings, "tokens", "create", "ops", "--role", "operator").returncode == 0
    unknown = cli(settings, "serve", "--host", "no-such-host.invalid", "--json", timeout=30)
    assert unknown.returncode == 1, unknown
    import json

    assert json.loads(unknown.stdout)["error"]["kind"] == "ServeFailed"
