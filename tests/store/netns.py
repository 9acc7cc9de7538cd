"""Hosts of their own for the drill: each a Linux network namespace reaching this one
over a veth pair (as root, with ``ip``), so a worker in it shares no directory, no
loopback and no socket with the others; it reaches PostgreSQL and the S3 server only
through the address of its pair's end here, where a relay forwards each port to the
service on 127.0.0.1 (the shared PostgreSQL listens on loopback alone)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import struct
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

SUBNET = "10.231"  # 10.231.N.0/30 per host: N.1 here, N.2 in the namespace
RELAY_BUFFER_BYTES = 64 * 1024  # bytes copied at a time


def why_not() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    return None


@dataclass(frozen=True)
class Host:
    namespace: str
    address: str  # this side of the pair: what the host reaches services at

    def command(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *argv]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _relay(client: socket.socket, upstream: socket.socket) -> None:
    """Copy both ways until both ends are done, then close both."""

    def pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(RELAY_BUFFER_BYTES):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    back = threading.Thread(target=pipe, args=(upstream, client), daemon=True)
    back.start()
    pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _serve(listener: socket.socket, port: int) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:  # closed: the relay is done
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            # The service is down: reset the client, as a refused connection would be.
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()
            continue
        upstream.settimeout(None)
        threading.Thread(target=_relay, args=(client, upstream), daemon=True).start()


@contextlib.contextmanager
def hosts(count: int, ports: list[int]) -> Iterator[list[Host]]:
    """``count`` namespaces, each reaching ``ports`` (on 127.0.0.1 here) at its
    host address; all removed at the end."""
    tag = uuid.uuid4().hex[:6]
    made: list[Host] = []
    listeners: list[socket.socket] = []
    try:
        for n in range(count):
            name, here, there = f"ingd-{tag}-{n}", f"vh{tag}{n}", f"vn{tag}{n}"
            base = f"{SUBNET}.{(int(tag, 16) + n) % 250 + 1}"
            _ip("netns", "add", name)
            made.append(Host(name, f"{base}.1"))
            _ip("link", "add", here, "type", "veth", "peer", "name", there)
            _ip("link", "set", there, "netns", name)
            _ip("addr", "add", f"{base}.1/30", "dev", here)
            _ip("link", "set", here, "up")
            _ip("-n", name, "addr", "add", f"{base}.2/30", "dev", there)
            _ip("-n", name, "link", "set", there, "up")
            _ip("-n", name, "link", "set", "lo", "up")
            for port in ports:
                listener = socket.create_server((f"{base}.1", port))
                listeners.append(listener)
                threading.Thread(target=_serve, args=(listener, port), daemon=True).start()
        yield made
    finally:
        for listener in listeners:
            listener.close()
        for host in made:
            # Removing the namespace removes its end of the pair, and so the pair.
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True)
