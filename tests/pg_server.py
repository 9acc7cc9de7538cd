"""A throwaway PostgreSQL server a test may stop and start (``.ci/start-postgres``'s
recipe, on a free port, in its own folder), for outage drills: the shared server the
suite runs on must never be stopped, other tests use it.

As root, ``initdb`` and ``pg_ctl`` run as the ``postgres`` user (initdb refuses root);
otherwise as the current user. :func:`pg_binaries` is None when no server is
installed (a test skips, with the reason, unless ``CI=true``, where it must run).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

PG_CTL_TIMEOUT_S = 120  # seconds pg_ctl may take to start or stop on a loaded machine


def pg_binaries() -> Path | None:
    """The newest installed PostgreSQL's bin folder, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    if found:
        return Path(found[-1])
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def require_pg_binaries() -> Path:
    """The bin folder, or skip (fail under CI=true: CI has the Debian PostgreSQL)."""
    found = pg_binaries()
    if found is None:
        reason = "PostgreSQL server binaries (initdb, pg_ctl) are not installed"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """One PostgreSQL server in a temporary folder; :meth:`stop` and :meth:`start`
    at will, :meth:`destroy` at the end."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="ingestdesk-drill-pg."))
        self.data = self.dir / "data"
        self._as_root = os.geteuid() == 0
        if self._as_root:
            shutil.chown(self.dir, "postgres")
        self._run(f"{self.bin_dir}/initdb -D {self.data} -U postgres -A trust >/dev/null")

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, command: str) -> None:
        argv = (
            ["su", "postgres", "-s", "/bin/sh", "-c", command]
            if self._as_root
            else [
                "sh",
                "-c",
                command,
            ]
        )
        subprocess.run(argv, check=True, timeout=PG_CTL_TIMEOUT_S, capture_output=True)

    def start(self) -> None:
        options = shlex.quote(
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        )
        self._run(
            f"{self.bin_dir}/pg_ctl -D {self.data} -o {options} -l {self.dir}/log -w "
            f"-t {PG_CTL_TIMEOUT_S} start"
        )

    def stop(self, mode: str = "immediate", *, wait: bool = True) -> None:
        """``pg_ctl stop -m MODE``; with ``wait=False`` it returns at once (a smart
        shutdown then waits for the sessions still open)."""
        flag = "-w" if wait else "-W"
        self._run(f"{self.bin_dir}/pg_ctl -D {self.data} -m {mode} {flag} stop")

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # not running
            self._run(f"{self.bin_dir}/pg_ctl -D {self.data} -m immediate -w stop")
        shutil.rmtree(self.dir, ignore_errors=True)
