"""A deployment runs the app by import path under its own ASGI server, configured by
the same environment as the CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx

from core import Settings
from tests.api.conftest import REPO_ROOT, START_TIMEOUT_S, free_port


def test_uvicorn_runs_the_app_by_import_path(settings: Settings) -> None:
    port = free_port()
    env = dict(
        os.environ,
        INGESTDESK_DB=settings.db_url,
        INGESTDESK_STORE=str(settings.store_root),
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "core.api:app_from_environment",
         "--port", str(port)],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert server.poll() is None, server.communicate()[0]
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1.0)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "uvicorn never answered"
                time.sleep(0.1)
        assert health.status_code == 200
        assert health.json()["backend"] == (
            "postgresql" if "postgres" in settings.db_url else "sqlite"
        )
    finally:
        server.send_signal(signal.SIGTERM)
        out, _ = server.communicate(timeout=15)
    assert "Application shutdown complete" in out and "Traceback" not in out
