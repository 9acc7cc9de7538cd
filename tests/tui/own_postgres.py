"""A throwaway PostgreSQL server of a test's own, on a free loopback port, that the
test may stop and start (the shared test server must never be stopped).

The recipe of ``.ci/start-postgres``: as root, initdb and pg_ctl run as the postgres
user. Skipped with a reason where PostgreSQL is not installed or cannot run so.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

START_TIMEOUT_S = 60  # seconds pg_ctl waits for the server to accept connections


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class OwnPostgres:
    """One PostgreSQL server in a temporary folder: :meth:`start`, :meth:`stop`."""

    def __init__(self) -> None:
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
        if not bins:
            pytest.skip("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin)")
        self.bin = bins[-1]
        self.root = os.geteuid() == 0
        self.dir = Path(tempfile.mkdtemp(prefix="ingestdesk-own-pg."))
        if self.root:
            shutil.chown(self.dir, "postgres")
        self.port = _free_port()
        self.url = f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"
        self._as_postgres(f"{self.bin}/initdb -D {self.dir}/data -U postgres -A trust")

    def _as_postgres(self, command: str) -> None:
        argv = ["sh", "-c", command]
        if self.root:  # initdb refuses to run as root
            argv = ["su", "postgres", "-s", "/bin/sh", "-c", command]
        subprocess.run(argv, check=True, capture_output=True, timeout=START_TIMEOUT_S + 30)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._as_postgres(
            f"{self.bin}/pg_ctl -D {self.dir}/data -o '{options}' -l {self.dir}/log "
            f"-w -t {START_TIMEOUT_S} start"
        )

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server the way a failover does (``immediate``: no goodbye to
        clients)."""
        self._as_postgres(f"{self.bin}/pg_ctl -D {self.dir}/data -m {mode} -w stop")

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)
