"""The multi-host drill's hosts are separate: a process in a namespace cannot reach
this machine's loopback, reaches a service only where :func:`netns.hosts` offers it
(its own gateway address), and has no route to another host's pair."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest

from tests.store import netns

PROBE = (
    "import socket, sys\n"
    "try:\n"
    "    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)\n"
    "    print(s.recv(16).decode())\n"
    "except OSError as exc:\n"
    "    print(type(exc).__name__)\n"
)


def probe(address: str, port: int, prefix: list[str]) -> str:
    argv = [*prefix, sys.executable, "-c", PROBE, address, str(port)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_host_reaches_this_machine_only_where_it_is_offered() -> None:
    if reason := netns.why_not():
        pytest.skip(reason)
    with socket.create_server(("127.0.0.1", 0)) as service:
        port = service.getsockname()[1]

        def greet() -> None:
            while True:
                try:
                    conn, _ = service.accept()
                except OSError:
                    return
                with conn:
                    conn.sendall(b"hello")

        threading.Thread(target=greet, daemon=True).start()
        with netns.hosts(2, [port]) as (one, two):
            assert probe("127.0.0.1", port, one.command([])) == "ConnectionRefusedError"
            assert probe(one.address, port, one.command([])) == "hello"
            assert probe(two.address, port, two.command([])) == "hello"
            assert probe(one.address, port, two.command([])) != "hello"  # no route
