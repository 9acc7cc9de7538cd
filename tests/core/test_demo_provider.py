"""The demo provider as a real process (``ingestdesk provider serve``) and the HTTP
client against it: every fault ends in the exception the never-twice path expects,
and the provider's own counters prove what reached it."""

from __future__ import annotations

import asyncio
import hashlib
import select
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.ingest.embedder import HashingEmbedder
from core.ingest.http_provider import HttpProvider
from core.ingest.providers import (
    LookupState,
    LookupUnavailable,
    NotSent,
    OutcomeUnknown,
    ProviderRejected,
    verify,
)

START_TIMEOUT_S = 15.0  # seconds for the provider to print its URL
STOP_TIMEOUT_S = 15.0  # seconds for it to exit after a signal
CLI_TIMEOUT_S = 30.0  # seconds a refused command may take
TEXTS = ["The parser pool landed.", "Throughput rose by a third.", "naïve café"]


@dataclass
class Provider:
    process: subprocess.Popen[str]
    url: str


def key(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def command(*flags: str) -> list[str]:
    """``ingestdesk provider serve FLAGS`` as a shell would run it (core's command line)."""
    return [sys.executable, "-m", "core.cli", "provider", "serve", *flags]


def start(tmp_path: Path, *flags: str, db: Path | None = None) -> Provider:
    db = db or tmp_path / "provider.sqlite3"
    process = subprocess.Popen(
        command("--port", "0", "--db", str(db), *flags),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_S)
    line = process.stdout.readline() if ready else ""
    if not line.startswith("provider listening on http://"):
        process.kill()
        pytest.fail(f"the provider did not start: {line!r}")
    return Provider(process, line.split()[-1])


def stop(provider: Provider, sig: int = signal.SIGTERM) -> int:
    if provider.process.poll() is None:
        provider.process.send_signal(sig)
    try:
        return provider.process.wait(STOP_TIMEOUT_S)
    finally:
        if provider.process.poll() is None:
            provider.process.kill()
        assert provider.process.stdout is not None
        provider.process.stdout.close()


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[Provider]:
    running = start(tmp_path, "--seed", "1")
    yield running
    assert stop(running) == 0


@pytest.fixture
async def client(provider: Provider) -> AsyncIterator[HttpProvider]:
    connected = await HttpProvider.connect(provider.url, timeout_s=5.0)
    yield connected
    await connected.aclose()


async def faults(provider: Provider, **changes: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=provider.url) as http:
        reply = await http.post("/v1/faults", json=changes)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


async def stats(provider: Provider) -> dict[str, int]:
    async with httpx.AsyncClient(base_url=provider.url) as http:
        answer: dict[str, int] = (await http.get("/v1/stats")).json()
    return answer


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


# ------------------------------------------------------------------- the protocol


async def test_info_describes_the_provider(client: HttpProvider, provider: Provider) -> None:
    assert (client.name, client.version, client.dimensions) == (
        "demo-provider",
        "hashed-bag-of-words-1",
        256,
    )
    assert client.resend_safe is False
    assert client.endpoint == provider.url
    async with httpx.AsyncClient(base_url=provider.url) as http:
        assert (await http.get("/healthz")).json() == {"ok": True}


async def test_a_reply_verifies_and_can_be_looked_up_and_fetched(client: HttpProvider) -> None:
    reply = await client.submit(key("one"), TEXTS)
    assert verify(reply, len(TEXTS), 256) is None
    assert reply.vectors == HashingEmbedder(256).embed_now(TEXTS)
    assert reply.request_id.startswith("req_")
    assert reply.usage == {"texts": 3, "characters": sum(map(len, TEXTS))}
    found = await client.lookup(key("one"))
    assert (found.state, found.request_id) == (LookupState.DONE, reply.request_id)
    assert await client.fetch(key("one")) == reply
    assert (await client.lookup(key("never sent"))).state is LookupState.NOT_FOUND


async def test_a_repeated_key_is_answered_from_the_first_and_counted(
    client: HttpProvider, provider: Provider
) -> None:
    first = await client.submit(key("twice"), TEXTS)
    second = await client.submit(key("twice"), TEXTS)
    assert second == first
    counts = await stats(provider)
    assert (counts["submits"], counts["executions"], counts["distinct_keys"]) == (2, 1, 1)
    async with httpx.AsyncClient(base_url=provider.url) as http:
        assert (await http.get(f"/v1/embeddings/{key('twice')}")).json()["submits"] == 2


async def test_a_request_the_provider_refuses_is_rejected(
    client: HttpProvider, provider: Provider
) -> None:
    with pytest.raises(ProviderRejected, match="texts must be"):
        await client.submit(key("empty"), [])
    assert (await stats(provider))["submits"] == 0


# ---------------------------------------------------------------------- the faults


async def test_a_lost_reply_is_unknown_and_the_lookup_finds_it_done(
    client: HttpProvider, provider: Provider
) -> None:
    await faults(provider, lose_reply=1)
    with pytest.raises(OutcomeUnknown):
        await client.submit(key("lost"), TEXTS)
    assert (await client.lookup(key("lost"))).state is LookupState.DONE
    assert verify(await client.fetch(key("lost")), len(TEXTS), 256) is None
    counts = await stats(provider)
    assert (counts["submits"], counts["lost_replies"]) == (1, 1)


async def test_an_unavailable_provider_records_nothing(
    client: HttpProvider, provider: Provider
) -> None:
    await faults(provider, unavailable=True)
    with pytest.raises(NotSent, match="unavailable"):
        await client.submit(key("refused"), TEXTS)
    assert (await client.lookup(key("refused"))).state is LookupState.NOT_FOUND
    assert (await stats(provider))["submits"] == 0


async def test_failing_lookups_are_unavailable_not_not_found(
    client: HttpProvider, provider: Provider
) -> None:
    await client.submit(key("done"), TEXTS)
    await faults(provider, fail_lookups=True)
    for name in ("done", "never sent"):
        with pytest.raises(LookupUnavailable):
            await client.lookup(key(name))
        with pytest.raises(LookupUnavailable):
            await client.fetch(key(name))
    await faults(provider, fail_lookups=False)
    assert (await client.lookup(key("done"))).state is LookupState.DONE


async def test_a_truncated_reply_fails_verification_and_the_fetch_verifies(
    client: HttpProvider, provider: Provider
) -> None:
    await faults(provider, truncate=1)
    reply = await client.submit(key("cut"), TEXTS)
    assert reply.count == len(TEXTS)
    assert verify(reply, len(TEXTS), 256) is not None
    assert verify(await client.fetch(key("cut")), len(TEXTS), 256) is None
    assert (await stats(provider))["truncated_replies"] == 1


async def test_a_slow_request_is_running_until_it_is_done(
    client: HttpProvider, provider: Provider
) -> None:
    await faults(provider, slow_s=1.0)
    pending = asyncio.create_task(client.submit(key("slow"), TEXTS))
    for _ in range(50):
        found = await client.lookup(key("slow"))
        if found.state is not LookupState.NOT_FOUND:
            break
        await asyncio.sleep(0.02)
    assert found.state is LookupState.RUNNING
    with pytest.raises(OutcomeUnknown, match="running"):
        await client.submit(key("slow"), TEXTS)  # a repeat while it runs: 202
    with pytest.raises(LookupUnavailable):
        await client.fetch(key("slow"))  # 409 running
    reply = await pending
    assert verify(reply, len(TEXTS), 256) is None
    assert (await client.lookup(key("slow"))).state is LookupState.DONE
    counts = await stats(provider)
    assert (counts["submits"], counts["executions"]) == (2, 1)


async def test_a_seed_replays_the_same_draws(client: HttpProvider, provider: Provider) -> None:
    async def pattern(run: str) -> list[bool]:
        lost = []
        for n in range(12):
            try:
                await client.submit(key(f"{run}-{n}"), TEXTS[:1])
                lost.append(False)
            except OutcomeUnknown:
                lost.append(True)
        return lost

    await faults(provider, lose_reply=0.5, seed=7)
    first = await pattern("a")
    await faults(provider, seed=7)
    assert await pattern("b") == first
    assert any(first) and not all(first)


async def test_fault_changes_are_checked(provider: Provider) -> None:
    async with httpx.AsyncClient(base_url=provider.url) as http:
        for bad in ({"lose_reply": 2}, {"unavailable": "yes"}, {"nonsense": 1}, {"seed": -1}):
            reply = await http.post("/v1/faults", json=bad)
            assert reply.status_code == 400
            assert reply.json()["error"] == "bad_request"
        assert (await http.get("/v1/faults")).json()["lose_reply"] == 0


async def test_command_line_faults_and_declarations(tmp_path: Path) -> None:
    running = start(
        tmp_path, "--dimensions", "8", "--declare-resend-safe", "--lose-reply", "1", "--seed", "3"
    )
    try:
        connected = await HttpProvider.connect(running.url)
        assert (connected.dimensions, connected.resend_safe) == (8, True)
        with pytest.raises(OutcomeUnknown):
            await connected.submit(key("flags"), TEXTS)
        assert verify(await connected.fetch(key("flags")), len(TEXTS), 8) is None
        await connected.aclose()
    finally:
        assert stop(running) == 0


# ------------------------------------------------------------- the wire and the URL


async def test_a_closed_port_is_not_sent() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(NotSent, match=r"127\.0\.0\.1"):
        await HttpProvider.connect(url, timeout_s=2.0)
    offline = HttpProvider(url, name="p", version="m", dimensions=4, timeout_s=2.0)
    with pytest.raises(NotSent):
        await offline.submit(key("x"), TEXTS)
    with pytest.raises(LookupUnavailable):
        await offline.lookup(key("x"))
    await offline.aclose()


async def test_a_wrong_path_is_never_read_as_not_found(provider: Provider) -> None:
    with pytest.raises(NotSent, match="not an embedding provider"):
        await HttpProvider.connect(provider.url + "/elsewhere")
    wrong = HttpProvider(provider.url + "/elsewhere", name="p", version="m", dimensions=256)
    with pytest.raises(LookupUnavailable):
        await wrong.lookup(key("x"))  # a 404, but not the provider's "not_found"
    with pytest.raises(OutcomeUnknown):
        await wrong.submit(key("x"), TEXTS)
    await wrong.aclose()


async def test_sigterm_stops_it_cleanly_and_then_nothing_is_sent(tmp_path: Path) -> None:
    running = start(tmp_path)
    connected = await HttpProvider.connect(running.url)
    await connected.submit(key("before"), TEXTS)
    assert stop(running, signal.SIGTERM) == 0
    with pytest.raises(NotSent):
        await connected.submit(key("after"), TEXTS)
    await connected.aclose()
    again = start(tmp_path)  # the same database: what was done is still known
    try:
        reconnected = await HttpProvider.connect(again.url)
        assert (await reconnected.lookup(key("before"))).state is LookupState.DONE
        await reconnected.aclose()
    finally:
        assert stop(again, signal.SIGINT) == 0


async def test_a_request_running_when_the_provider_died_is_failed(tmp_path: Path) -> None:
    running = start(tmp_path, "--slow", "30")
    connected = await HttpProvider.connect(running.url, timeout_s=30.0)
    pending = asyncio.create_task(connected.submit(key("orphan"), TEXTS))
    for _ in range(100):
        if (await connected.lookup(key("orphan"))).state is LookupState.RUNNING:
            break
        await asyncio.sleep(0.02)
    running.process.kill()
    stop(running)
    with pytest.raises((OutcomeUnknown, NotSent)):
        await pending
    await connected.aclose()
    again = start(tmp_path)
    try:
        reconnected = await HttpProvider.connect(again.url)
        assert (await reconnected.lookup(key("orphan"))).state is LookupState.FAILED
        with pytest.raises(ProviderRejected):
            await reconnected.submit(key("orphan"), TEXTS)
        await reconnected.aclose()
    finally:
        assert stop(again) == 0


# ------------------------------------------------------------------ refused starts


def refused(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(*flags),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=CLI_TIMEOUT_S,
    )


def test_a_busy_port_is_one_line_and_exit_1(provider: Provider, tmp_path: Path) -> None:
    port = provider.url.rsplit(":", 1)[1]
    result = refused(tmp_path, "--port", port, "--db", str(tmp_path / "other.sqlite3"))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"ingestdesk: cannot listen on 127.0.0.1:{port}")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "flags",
    [
        ["--port", "70000"],
        ["--dimensions", "0"],
        ["--lose-reply", "1.5"],
        ["--truncate", "nan"],
        ["--slow", "-1"],
        ["--seed", "x"],
        ["--db", "postgresql://localhost/x"],
    ],
)
def test_an_out_of_range_option_is_one_line_and_exit_2(tmp_path: Path, flags: list[str]) -> None:
    result = refused(tmp_path, *flags)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("ingestdesk: ")
    assert result.stderr.count("\n") == 1


def test_the_default_database_is_in_the_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.cli.provider import provider_db_path

    monkeypatch.chdir(tmp_path)
    assert provider_db_path(None) == tmp_path / ".ingestdesk" / "provider.sqlite3"
    assert (tmp_path / ".ingestdesk").is_dir()
    assert provider_db_path("elsewhere.db") == Path("elsewhere.db")


def test_another_programs_database_is_refused(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.db"
    with sqlite3.connect(ledger) as conn:
        conn.execute("CREATE TABLE tasks (id TEXT)")
    conn.close()
    result = refused(tmp_path, "--port", "0", "--db", str(ledger))
    assert result.returncode == 1
    assert "another program's database" in result.stderr
    assert result.stderr.count("\n") == 1
