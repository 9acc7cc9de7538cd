"""A slow or hostile client costs the server bounded time and descriptors, and a body
the server refuses is never read to the end: a real ``ingestdesk serve`` process with
short deadlines, and raw sockets."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from core import Settings
from tests.api.conftest import Api, start_server, stop_server, stopped_gracefully

HEADER_S = 1.0  # the server's deadlines in these tests (seconds)
BODY_IDLE_S = 1.0
BODY_TOTAL_S = 3.0
CLOSE_WITHIN_S = 20.0  # seconds: generous, for a loaded machine; a bound, not a wait
# A Content-Length the client never means to send in full (under the upload cap,
# so the headers alone are not refused).
HUGE = 50_000_000


@pytest.fixture
def quick_api(settings: Settings) -> Iterator[Api]:
    """An open server (local clients) with short deadlines."""
    server = start_server(
        settings,
        "--header-timeout",
        str(HEADER_S),
        "--body-idle-timeout",
        str(BODY_IDLE_S),
        "--body-timeout",
        str(BODY_TOTAL_S),
    )
    try:
        yield server
    finally:
        if server.process.poll() is None:
            code, out = stop_server(server)
            assert stopped_gracefully(code, out), out


def connect(api: Api) -> socket.socket:
    url = urlsplit(api.base)
    conn = socket.create_connection((url.hostname, url.port), timeout=CLOSE_WITHIN_S)
    return conn


def read_until_closed(conn: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection; a socket.timeout
    (the test's failure) if it keeps it open past CLOSE_WITHIN_S."""
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    return data


def status_of(data: bytes) -> int:
    return int(data.split(b" ", 2)[1])


def test_a_connection_that_never_sends_is_closed(quick_api: Api) -> None:
    with connect(quick_api) as conn:
        began = time.monotonic()
        assert read_until_closed(conn) == b""
    assert time.monotonic() - began < CLOSE_WITHIN_S


def test_headers_trickled_in_are_cut_off_and_others_are_served(quick_api: Api) -> None:
    """Slowloris: many connections each sending a header byte now and then."""
    conns = [connect(quick_api) for _ in range(40)]
    try:
        for conn in conns:
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: test\r\n")
        # A client that asks properly is answered meanwhile.
        assert httpx.get(f"{quick_api.base}/healthz", timeout=CLOSE_WITHIN_S).status_code == 200
        deadline = time.monotonic() + CLOSE_WITHIN_S
        open_ = list(conns)
        while open_ and time.monotonic() < deadline:
            for conn in list(open_):
                try:
                    conn.sendall(b"X")  # one byte: it must not reset a deadline
                    conn.settimeout(0.05)
                    if conn.recv(1) == b"":
                        open_.remove(conn)
                except TimeoutError:
                    pass
                except OSError:  # reset: the server closed it
                    open_.remove(conn)
        assert open_ == [], f"{len(open_)} slow connections still open"
    finally:
        for conn in conns:
            conn.close()


def test_an_idle_kept_alive_connection_is_closed(quick_api: Api) -> None:
    with connect(quick_api) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
        data = read_until_closed(conn)
    assert status_of(data) == 200


def _upload_head(length: str = f"Content-Length: {HUGE}") -> bytes:
    return (
        "POST /api/documents HTTP/1.1\r\nHost: test\r\n"
        f"Content-Type: multipart/form-data; boundary=edge\r\n{length}\r\n\r\n"
    ).encode()


FILE_PART = b'--edge\r\nContent-Disposition: form-data; name="file"; filename="a.md"\r\n\r\nhalf'


def test_a_chunked_body_that_never_ends_is_408_and_closed(quick_api: Api) -> None:
    with connect(quick_api) as conn:
        conn.sendall(_upload_head("Transfer-Encoding: chunked"))
        conn.sendall(b"%x\r\n%s\r\n" % (len(FILE_PART), FILE_PART))
        data = read_until_closed(conn)
    assert status_of(data) == 408
    assert b"connection: close" in data.lower()
    assert not [p for p in quick_api.settings.store_root.rglob("*") if p.is_file()]


def test_a_body_trickled_in_is_cut_off_at_the_total_deadline(quick_api: Api) -> None:
    with connect(quick_api) as conn:
        conn.sendall(_upload_head() + FILE_PART)
        began = time.monotonic()
        conn.settimeout(BODY_IDLE_S / 4)
        data = b""
        while time.monotonic() - began < CLOSE_WITHIN_S:
            try:
                conn.sendall(b"x")  # within the idle deadline every time
                chunk = conn.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not chunk:
                break
            data += chunk
    assert status_of(data) == 408, data


def _many_parts() -> bytes:
    return b"".join(
        b'--edge\r\nContent-Disposition: form-data; name="f%d"\r\n\r\nx\r\n' % i for i in range(20)
    )


REFUSED_BODIES = {
    # what follows the headers: the refusal comes before the body has ended
    "too many parts": (_upload_head(), _many_parts(), 400),
    "an over-long field": (
        _upload_head(),
        b'--edge\r\nContent-Disposition: form-data; name="name"\r\n\r\n' + b"n" * 10_000,
        400,
    ),
    "not multipart": (
        f"POST /api/documents HTTP/1.1\r\nHost: test\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {HUGE}\r\n\r\n".encode(),
        b"x" * 1000,
        415,
    ),
    "a body to a route that takes none": (
        f"GET /healthz HTTP/1.1\r\nHost: test\r\nContent-Length: {HUGE}\r\n\r\n".encode(),
        b"x" * 1000,
        200,
    ),
    "a second file": (_upload_head(), FILE_PART + b"\r\n" + FILE_PART, 422),
}


@pytest.mark.parametrize("case", list(REFUSED_BODIES))
def test_an_answer_before_the_body_ends_closes_the_connection(quick_api: Api, case: str) -> None:
    """The server answers, closes, and reads no further (it would otherwise drain
    the gigabyte the headers announce to keep the connection)."""
    head, start, status = REFUSED_BODIES[case]
    with connect(quick_api) as conn:
        conn.sendall(head + start)
        data = read_until_closed(conn)
    assert status_of(data) == status, data
    assert b"connection: close" in data.lower()


def test_connections_over_the_cap_are_closed_at_once(settings: Settings) -> None:
    server = start_server(settings, "--max-connections", "4", "--header-timeout", "600")
    conns: list[socket.socket] = []
    try:
        conns = [connect(server) for _ in range(4)]
        with connect(server) as over:
            assert read_until_closed(over) == b""
        # The four within the cap are served.
        for conn in conns:
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
            assert status_of(conn.recv(65536)) == 200
    finally:
        for conn in conns:
            conn.close()
        code, out = stop_server(server)
        assert stopped_gracefully(code, out), out
