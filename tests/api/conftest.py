"""A real API server process on a free port, real worker processes on the same ledger,
and a real HTTP client (httpx) talking to it."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from core import Ledger, Settings

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0  # seconds for the server to answer /healthz
STOP_TIMEOUT_S = 15.0  # seconds for a graceful stop after SIGTERM
WORKER_TIMEOUT_S = 120.0  # seconds for a worker to drain the queue


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli_command(settings: Settings, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tui.cli",
        "--db",
        settings.db_url,
        "--store",
        str(settings.store_root),
        *args,
    ]


def cli(settings: Settings, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_command(settings, *args),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@dataclass
class Api:
    """A running server and the tokens made for it."""

    base: str
    settings: Settings
    process: subprocess.Popen[str]
    tokens: dict[str, str] = field(default_factory=dict)

    def client(self, role: str | None = "operator") -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[role]}"} if role else {}
        return httpx.Client(base_url=self.base, headers=headers, timeout=30.0)

    def worker(self, *args: str) -> subprocess.CompletedProcess[str]:
        return cli(self.settings, "worker", *args, timeout=WORKER_TIMEOUT_S)


def start_server(settings: Settings, *extra: str, env: dict[str, str] | None = None) -> Api:
    port = free_port()
    process = subprocess.Popen(
        cli_command(settings, "serve", "--port", str(port), *extra),
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            out = process.stdout.read() if process.stdout else ""
            raise AssertionError(f"server exited with {process.returncode}: {out}")
        try:
            if httpx.get(f"{base}/healthz", timeout=1.0).status_code == 200:
                return Api(base, settings, process)
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError("server did not answer /healthz in time")
        time.sleep(0.1)


def stop_server(api: Api) -> tuple[int, str]:
    """SIGTERM, as a service manager stops it; the exit code and everything it printed."""
    api.process.send_signal(signal.SIGTERM)
    out, _ = api.process.communicate(timeout=STOP_TIMEOUT_S)
    return api.process.returncode, out


def stopped_gracefully(code: int, out: str) -> bool:
    """uvicorn finishes the requests in flight, runs the app's shutdown (the ledger
    closes), then ends by the signal it caught, so a supervisor sees why it ended."""
    return (
        code in (0, -signal.SIGTERM)
        and "Application shutdown complete" in out
        and "Traceback" not in out
    )


async def _make_tokens(settings: Settings) -> dict[str, str]:
    async with await Ledger.open(settings) as ledger:
        return {
            role: (await ledger.tokens.create(f"{role}-token", role)).token
            for role in ("viewer", "operator", "publisher")
        }


@pytest.fixture
def api(settings: Settings) -> Iterator[Api]:
    """A server on the test's ledger (SQLite, and PostgreSQL in CI) with one token
    per role."""
    tokens = asyncio.run(_make_tokens(settings))
    server = start_server(settings)
    server.tokens = tokens
    try:
        yield server
    finally:
        if server.process.poll() is None:
            code, out = stop_server(server)
            assert stopped_gracefully(code, out), out


@pytest.fixture
def open_api(settings: Settings) -> Iterator[Api]:
    """A server on a ledger with no tokens: open to local clients only."""
    server = start_server(settings)
    try:
        yield server
    finally:
        if server.process.poll() is None:
            stop_server(server)


@pytest.fixture
def no_proxy_env() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env.pop(key, None)
    return env
