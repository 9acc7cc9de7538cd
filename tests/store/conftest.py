"""A real S3-compatible server on loopback (moto's, as its own process, see
:mod:`tests.store.s3server`) and settings whose store is a fresh bucket in it.

Without moto or obstore installed the tests here skip, except under CI=true, where
they must run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from core import Settings, sqlite_url

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0  # seconds for the server to say it listens (imports moto: slow when loaded)
STOP_TIMEOUT_S = 60.0  # seconds for it to save its objects and exit
# Credentials the tests' server accepts (moto checks none); distinctive, so a test
# can assert they never appear in what is printed or recorded.
ACCESS_KEY = "AKIDTESTINGDESK0001"
SECRET_KEY = "secret-never-shown-4c7f"


def _need_s3_packages() -> None:
    try:
        import moto.server  # noqa: F401
        import obstore  # noqa: F401
    except ImportError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but the S3 test packages are missing: {exc}")
        pytest.skip(f"S3 test packages missing ({exc}); pip install -e '.[test]'")


def aws_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment whose AWS credentials are the test server's, and nothing from
    this machine's own AWS configuration."""
    env = dict(os.environ if base is None else base)
    for name in list(env):
        if name.startswith("AWS_"):
            del env[name]
    env.update(
        AWS_ACCESS_KEY_ID=ACCESS_KEY,
        AWS_SECRET_ACCESS_KEY=SECRET_KEY,
        AWS_REGION="us-east-1",
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
    )
    return env


@dataclass
class S3Server:
    """One moto server process, stoppable and restartable on the same port with its
    objects kept."""

    data: Path
    host: str = "127.0.0.1"
    port: int = 0
    process: subprocess.Popen[str] | None = None
    log: list[str] = field(default_factory=list)

    @property
    def stacks(self) -> Path:
        return self.data.with_name(self.data.name + ".stacks")

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.store.s3server",
                "--host",
                self.host,
                "--port",
                str(self.port),
                "--data",
                str(self.data),
                "--stacks",
                str(self.stacks),
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=aws_env(),
        )
        assert self.process.stdout is not None
        # The first line is printed once the port is bound (and the saved objects
        # loaded): waiting for it is waiting for the port.
        line = self.process.stdout.readline()
        if not line.startswith("listening "):
            self.process.kill()
            raise AssertionError(f"S3 server did not start: {line!r}")
        self.port = int(line.split()[1])

    def stop(self) -> str:
        """SIGTERM: it stops serving, saves its objects and exits; what it printed."""
        assert self.process is not None
        process, self.process = self.process, None
        process.terminate()
        try:
            out, _ = process.communicate(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"S3 server still up {STOP_TIMEOUT_S} s after SIGTERM:\n" + self._stacks_of(process)
            ) from None
        assert "undrained" not in out, f"S3 server saved with requests still inside: {out}"
        return out

    def _stacks_of(self, process: subprocess.Popen[str]) -> str:
        """Every thread's stack of a server that hangs (SIGUSR1, see s3server), then kill it."""
        size = self.stacks.stat().st_size if self.stacks.exists() else 0
        process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline and self.stacks.stat().st_size == size:
            time.sleep(0.05)
        process.kill()
        process.communicate()
        return self.stacks.read_text()[size:]

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )

    def new_bucket(self) -> str:
        name = f"docs-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    _need_s3_packages()
    server = S3Server(tmp_path_factory.mktemp("s3") / "data")
    server.start()
    try:
        yield server
    finally:
        if server.process is not None:
            server.stop()


@pytest.fixture
def own_s3_server(tmp_path: Path) -> Iterator[S3Server]:
    """A server of this test's own, for a test that stops it."""
    _need_s3_packages()
    server = S3Server(tmp_path / "s3-data")
    server.start()
    try:
        yield server
    finally:
        if server.process is not None:
            server.stop()


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process reads the test server's credentials, as the CLI children do."""
    for name, value in aws_env().items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    for name in list(os.environ):
        if name.startswith("AWS_") and name not in aws_env({}):
            monkeypatch.delenv(name)


def s3_settings(server: S3Server, tmp_path: Path, bucket: str | None = None) -> Settings:
    return Settings(
        db_url=sqlite_url(tmp_path / "ledger.db"),
        store_root=tmp_path / "unused-local-store",
        store_url=f"s3://{bucket or server.new_bucket()}/originals",
        s3_endpoint=server.endpoint,
    )


def s3_cli(
    settings: Settings, *args: str, timeout: float = 120.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The real CLI against the settings' ledger and bucket."""
    command = [sys.executable, "-m", "tui.cli", "--db", settings.db_url]
    command += ["--store", settings.store_url or str(settings.store_root)]
    if settings.s3_endpoint:
        command += ["--s3-endpoint", settings.s3_endpoint]
    return subprocess.run(
        [*command, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=aws_env() if env is None else env,
    )
