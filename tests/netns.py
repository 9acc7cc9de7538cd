"""Separate hosts on one machine, for multi-host drills: each :class:`Host` is a Linux
network namespace joined to this one by a veth pair, so a process run in it
(:meth:`Host.command`) has its own loopback and reaches this machine only at the
gateway address, as a worker on another host reaches a shared server. Services that
listen on this machine's loopback (a PostgreSQL started for the tests) are offered at
a gateway address by a :class:`Forward`.

Needs root and ``ip`` (iproute2): :func:`hosts` skips the test, with the reason,
where either is missing or the kernel refuses namespaces.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import socket
import socketserver
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

SUBNET_OCTET = 200 + os.getpid() % 50  # 10.X.n.0/30 per host: parallel test processes differ
RELAY_BLOCK_BYTES = 64 * 1024


@dataclass(frozen=True)
class Host:
    name: str  # the namespace
    address: str  # this host's address, inside its namespace
    gateway: str  # this machine's address on the pair, as the host sees it

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside this host's namespace (same files, own network)."""
        return ["ip", "netns", "exec", self.name, *argv]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "network namespaces need iproute2's ip"
    return None


@contextlib.contextmanager
def hosts(count: int) -> Iterator[list[Host]]:
    """``count`` namespaces, each with its veth pair up, removed afterwards."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    tag = f"idk{os.getpid() % 100_000}"
    made: list[Host] = []
    try:
        for n in range(count):
            name, outer, inner = f"{tag}-{n}", f"{tag}{n}o", f"{tag}{n}i"
            gateway, address = f"10.{SUBNET_OCTET}.{n}.1", f"10.{SUBNET_OCTET}.{n}.2"
            try:
                _ip("netns", "add", name)
            except subprocess.CalledProcessError as exc:
                pytest.skip(f"the kernel refuses network namespaces: {exc.stderr.strip()}")
            made.append(Host(name, address, gateway))
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            _ip("link", "set", inner, "netns", name)
            _ip("addr", "add", f"{gateway}/30", "dev", outer)
            _ip("link", "set", outer, "up")
            _ip("-n", name, "addr", "add", f"{address}/30", "dev", inner)
            _ip("-n", name, "link", "set", inner, "up")
            _ip("-n", name, "link", "set", "lo", "up")
        yield made
    finally:
        for host in made:
            # Deleting the namespace deletes its end of the pair, and so the pair.
            subprocess.run(["ip", "netns", "del", host.name], capture_output=True)


class _Relay(socketserver.BaseRequestHandler):
    server: _RelayServer

    def handle(self) -> None:
        upstream = socket.create_connection(self.server.target, timeout=30)
        with upstream, selectors.DefaultSelector() as sel:
            sel.register(self.request, selectors.EVENT_READ, upstream)
            sel.register(upstream, selectors.EVENT_READ, self.request)
            while True:
                for key, _ in sel.select():
                    try:
                        data = key.fileobj.recv(RELAY_BLOCK_BYTES)  # type: ignore[union-attr]
                    except OSError:
                        return
                    if not data:
                        return
                    key.data.sendall(data)


class _RelayServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.target = target
        super().__init__(listen, _Relay)


@contextlib.contextmanager
def forward(listen_host: str, target_port: int, target_host: str = "127.0.0.1") -> Iterator[int]:
    """Offer ``target_host:target_port`` at ``listen_host`` (a gateway address): the
    port it listens on."""
    server = _RelayServer((listen_host, 0), (target_host, target_port))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
