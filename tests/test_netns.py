"""The multi-host drills' hosts are separate: a process in a namespace cannot reach
this machine's loopback, and reaches a forwarded service only at its gateway."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

from tests.netns import forward, hosts

PROBE = (
    "import socket, sys\n"
    "try:\n"
    "    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)\n"
    "    print(s.recv(16).decode())\n"
    "except OSError as exc:\n"
    "    print(type(exc).__name__)\n"
)


def test_a_host_reaches_this_machine_only_through_a_forward() -> None:
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
        with hosts(2) as (one, two), forward(one.gateway, port) as offered:

            def probe(host_: str, port_: int, on: list[str]) -> str:
                argv = [sys.executable, "-c", PROBE, host_, str(port_)]
                done = subprocess.run(on + argv, capture_output=True, text=True, timeout=60)
                assert done.returncode == 0, done.stderr
                return done.stdout.strip()

            assert probe("127.0.0.1", port, one.command([])) == "ConnectionRefusedError"
            assert probe(one.gateway, offered, one.command([])) == "hello"
            # The other host has no route to the first one's pair.
            assert probe(one.gateway, offered, two.command([])) != "hello"
            assert probe(one.gateway, offered, []) == "hello"  # this machine itself
