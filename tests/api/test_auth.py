"""Who may do what over HTTP: 401 without a valid token, 403 for a role that may not,
for every endpoint; the token's name in the history; a public bind without tokens is
refused; SIGTERM stops the server gracefully."""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from core import Ledger, Settings
from core.api.auth import OPEN_MODE_CACHE_S, TOKEN_CACHE_MAX, TOKEN_CACHE_S, Gate
from core.ledger.tokens import TOKEN_MAX_CHARS
from tests.api.conftest import (
    REPO_ROOT,
    START_TIMEOUT_S,
    Api,
    cli,
    cli_command,
    free_port,
    start_server,
    stop_server,
    stopped_gracefully,
)
from tests.api.test_checklist import REPORT, added, is_problem, upload

DEADLINE_S = 60.0  # seconds to wait for a condition on a loaded machine


def wait_for(condition: Callable[[], bool], what: str, deadline_s: float = DEADLINE_S) -> None:
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"not within {deadline_s:.0f} s: {what}")
        time.sleep(0.05)


def busy_server(settings: Settings, log: Path) -> Iterator[Api]:
    """A server for thousands of requests: its log goes to a file (a pipe nobody reads
    until the end fills after a few hundred access lines and stalls the server)."""
    port = free_port()
    with log.open("w") as out:
        process = subprocess.Popen(
            cli_command(settings, "serve", "--port", str(port)),
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    server = Api(f"http://127.0.0.1:{port}", settings, process)
    try:
        wait_for(
            lambda: _answers(f"{server.base}/healthz"),
            f"the server answers /healthz ({log.read_text()[-2000:]})",
            deadline_s=START_TIMEOUT_S,
        )
        yield server
    finally:
        process.terminate()
        process.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.TransportError:
        return False


def rss_mb(pid: int) -> float:
    """The resident memory of a process, in MiB, as the kernel counts it."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


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
    with api.client() as client:
        # The server trusts a checked token for TOKEN_CACHE_S: refused once that ran out.
        wait_for(
            lambda: client.get("/api/ingestion-tasks").status_code == 401,
            "the revoked token is refused",
            deadline_s=DEADLINE_S + TOKEN_CACHE_S,
        )
        is_problem(client.get("/api/ingestion-tasks"), 401, "Unauthorized")


def test_tokens_are_created_once_listed_without_secrets(settings: Settings) -> None:

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

    assert json.loads(unknown.stdout)["error"]["kind"] == "ServeFailed"


# ------------------------------------------- what a caller without a token may cost


def test_a_401_for_a_body_closes_its_connection_and_no_other(api: Api) -> None:
    """A refusal sent before its body was read closes the connection; that must not
    leak into every later 401 (a shared header dict was once changed in place)."""
    for _ in range(2):  # the second round is what the shared dict broke
        with_body = httpx.post(
            f"{api.base}/api/documents", files={"file": ("a.md", REPORT)}, timeout=30
        )
        is_problem(with_body, 401, "Unauthorized")
        assert with_body.headers.get("connection") == "close"
        without = httpx.get(f"{api.base}/api/ingestion-tasks", timeout=30)
        is_problem(without, 401, "Unauthorized")
        assert "connection" not in without.headers, without.headers
        assert without.headers["www-authenticate"].startswith("Bearer")
    # And on one kept-alive connection: every 401 without a body leaves it open.
    with httpx.Client(base_url=api.base, timeout=30) as client:
        for _ in range(3):
            answer = client.get("/api/ingestion-tasks")
            assert answer.status_code == 401 and "connection" not in answer.headers


JUNK_REQUESTS = 2500  # distinct junk tokens sent to one server
JUNK_TOKEN_CHARS = 12_000  # characters each (uvicorn's h11 takes headers up to 16 KiB)
JUNK_GROWTH_MAX_MB = 15.0  # MiB the server may grow by meanwhile (the old cache: ~30 more)


def test_junk_tokens_cost_the_server_no_memory(settings: Settings, tmp_path: Path) -> None:
    """A client without any valid token, sending a new long string each time, once
    grew the server by every string it sent (the cache kept rejected ones too)."""
    made = cli(settings, "tokens", "create", "reader", "--role", "viewer", "--json")
    assert made.returncode == 0, made.stderr
    servers = busy_server(settings, tmp_path / "server.log")
    api = next(servers)
    api.tokens["viewer"] = json.loads(made.stdout)["token"]
    pid = api.process.pid
    with httpx.Client(base_url=api.base, timeout=30) as client:
        warm = client.get("/api/ingestion-tasks", headers={"Authorization": "Bearer warm-up"})
        is_problem(warm, 401, "Unauthorized")
        before = rss_mb(pid)
        for i in range(JUNK_REQUESTS):
            # Shaped like a token (prefix, id, dot) so that it is looked up, not only parsed.
            junk = f"idk_{i:032x}." + secrets.token_urlsafe(JUNK_TOKEN_CHARS)[:JUNK_TOKEN_CHARS]
            answer = client.get("/api/ingestion-tasks", headers={"Authorization": f"Bearer {junk}"})
            assert answer.status_code == 401, answer.text
        grown = rss_mb(pid) - before
    assert grown < JUNK_GROWTH_MAX_MB, f"the server grew by {grown:.1f} MiB"
    # Valid tokens still work after all that.
    with api.client("viewer") as viewer:
        assert viewer.get("/api/ingestion-tasks").status_code == 200
    servers.close()


async def test_only_tokens_that_verified_are_remembered_and_only_so_many(
    ledger: Ledger,
) -> None:
    gate = await Gate.start(ledger)
    good = [(await ledger.tokens.create(f"bot-{i}", "viewer")).token for i in range(3)]
    for i in range(50):
        assert await gate.token(f"idk_{i:032x}.nope") is None
    assert await gate.token("x" * (TOKEN_MAX_CHARS + 1)) is None
    assert await gate.token(good[0] + "x" * TOKEN_MAX_CHARS) is None
    assert len(gate._verified) == 0
    for token in good:
        assert await gate.token(token) is not None
    assert len(gate._verified) == len(good)
    # Bounded however many distinct tokens verify (the least recently used go first).
    many = [(await ledger.tokens.create(f"fleet-{i}", "viewer")).token for i in range(20)]
    import core.api.auth as auth

    auth_max = auth.TOKEN_CACHE_MAX
    auth.TOKEN_CACHE_MAX = 8
    try:
        for token in many:
            assert await gate.token(token) is not None
        assert len(gate._verified) == 8 and many[-1] in gate._verified
    finally:
        auth.TOKEN_CACHE_MAX = auth_max
    assert TOKEN_CACHE_MAX >= 8


# --------------------------------------------------------------- open mode


def _no_token_answers(api: Api, status: int) -> bool:
    return httpx.get(f"{api.base}/api/ingestion-tasks", timeout=30).status_code == status


def _stays_refused(api: Api) -> None:
    """No request without a token is served for well past the window in which the
    server re-reads the ledger's tokens (OPEN_MODE_CACHE_S), so a server that would
    open again has had every chance to."""
    end = time.monotonic() + 3 * max(OPEN_MODE_CACHE_S, TOKEN_CACHE_S)
    while time.monotonic() < end:
        is_problem(httpx.get(f"{api.base}/api/ingestion-tasks", timeout=30), 401, "Unauthorized")
        time.sleep(0.1)


def test_revoking_every_token_does_not_open_the_server(api: Api) -> None:
    with api.client("viewer") as viewer:
        assert viewer.get("/api/ingestion-tasks").status_code == 200
        for role in ("viewer", "operator", "publisher"):
            revoked = cli(api.settings, "tokens", "revoke", f"{role}-token")
            assert revoked.returncode == 0, revoked.stderr
        # The last revoke says what follows for a running server.
        assert "a running server now refuses every request" in revoked.stdout
        wait_for(
            lambda: viewer.get("/api/ingestion-tasks").status_code == 401,
            "the revoked token is refused",
        )
    _stays_refused(api)
    assert _no_token_answers(api, 401)


def test_open_mode_ends_with_the_first_token_and_never_comes_back(open_api: Api) -> None:
    assert _no_token_answers(open_api, 200)
    made = cli(open_api.settings, "tokens", "create", "first", "--role", "viewer")
    assert made.returncode == 0, made.stderr
    wait_for(lambda: _no_token_answers(open_api, 401), "open mode ends once a token exists")
    revoked = cli(open_api.settings, "tokens", "revoke", "first")
    assert revoked.returncode == 0, revoked.stderr
    _stays_refused(open_api)
    _code, out = stop_server(open_api)
    assert "no API token exists" in out and "every request needs a token" in out, out
