"""Uploads over HTTP: streamed to the store (memory flat in their size), a few at a
time, every malformed form a one-line 400, and nothing left in the store by a refused
upload. A real ``ingestdesk serve`` process, real sockets, the real store."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from core import Settings
from core.api.uploads import UPLOAD_SLOT_WAIT_S, UPLOADS_AT_ONCE
from core.store import ObjectStore, track_created
from tests.api.conftest import Api, start_server, stop_server, stopped_gracefully
from tests.api.test_checklist import is_problem

MIB = 1024 * 1024
LARGE_BYTES = 40 * MIB  # each of the large uploads
LARGE_AT_ONCE = 3
# Peak memory the server may gain while LARGE_AT_ONCE large uploads run: less than
# one upload's size (it held twice each, all at once: 240 MiB here).
PEAK_GROWTH_MAX_BYTES = 32 * MIB
ANSWER_WITHIN_S = 30.0  # seconds; generous, for a loaded machine


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident memory (VmHWM) so far."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc")


def stored_files(settings: Settings) -> list[Path]:
    return sorted(p for p in settings.store_root.rglob("*") if p.is_file())


@pytest.fixture
def server(settings: Settings) -> Iterator[Api]:
    api = start_server(settings)
    try:
        yield api
    finally:
        if api.process.poll() is None:
            code, out = stop_server(api)
            assert stopped_gracefully(code, out), out


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite"])
def test_large_uploads_at_once_keep_the_servers_memory_flat(server: Api) -> None:
    before = peak_rss_bytes(server.process.pid)
    answers: list[int] = []

    def send(i: int) -> None:
        line = b"line %d of a long plain text document\n" % i
        body = line * (LARGE_BYTES // len(line))
        with httpx.Client(base_url=server.base, timeout=300.0) as client:
            answers.append(
                client.post("/api/documents", files={"file": (f"big{i}.txt", body)}).status_code
            )

    threads = [threading.Thread(target=send, args=(i,)) for i in range(LARGE_AT_ONCE)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [201] * LARGE_AT_ONCE
    growth = peak_rss_bytes(server.process.pid) - before
    assert growth < PEAK_GROWTH_MAX_BYTES, f"peak memory grew by {growth / MIB:.0f} MiB"
    # Each is stored whole, under its sha256, and nothing half-written is left.
    objects = [p for p in stored_files(server.settings) if p.parent.parent.name == "sha256"]
    assert len(objects) == LARGE_AT_ONCE
    assert all(p.stat().st_size >= LARGE_BYTES - MIB for p in objects)
    assert not [p for p in stored_files(server.settings) if p.name.startswith(".incoming-")]


def _stalled(api: Api) -> socket.socket:
    url = urlsplit(api.base)
    conn = socket.create_connection((url.hostname, url.port), timeout=ANSWER_WITHIN_S)
    conn.sendall(
        b"POST /api/documents HTTP/1.1\r\nHost: test\r\nContent-Length: 1000000\r\n"
        b"Content-Type: multipart/form-data; boundary=edge\r\n\r\n"
        b'--edge\r\nContent-Disposition: form-data; name="file"; filename="a.md"\r\n\r\nhalf'
    )
    return conn


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite"])
def test_uploads_beyond_the_slots_are_503_with_retry_after(server: Api) -> None:
    stalled = [_stalled(server) for _ in range(UPLOADS_AT_ONCE)]
    try:
        # Each holds its slot once its file is arriving in the store.
        deadline = time.monotonic() + ANSWER_WITHIN_S
        while len(stored_files(server.settings)) < UPLOADS_AT_ONCE:
            assert time.monotonic() < deadline, stored_files(server.settings)
            time.sleep(0.05)
        began = time.monotonic()
        with httpx.Client(base_url=server.base, timeout=ANSWER_WITHIN_S) as client:
            answer = client.post("/api/documents", files={"file": ("one-more.md", b"# more\n")})
        is_problem(answer, 503, "ServerBusy")
        assert answer.headers["retry-after"].isdigit()
        assert answer.headers["connection"] == "close"
        assert time.monotonic() - began >= UPLOAD_SLOT_WAIT_S * 0.9
    finally:
        for conn in stalled:
            conn.close()
    # The slots come back when their clients go: an upload is served again.
    deadline = time.monotonic() + ANSWER_WITHIN_S
    with httpx.Client(base_url=server.base, timeout=ANSWER_WITHIN_S) as client:
        while (
            status := client.post(
                "/api/documents", files={"file": ("again.md", b"# again\n")}
            ).status_code
        ) == 503:
            assert time.monotonic() < deadline
        assert status == 201


def _form(boundary: str, parts: bytes) -> bytes:
    return (
        "POST /api/documents HTTP/1.1\r\nHost: test\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
        f"Content-Length: {len(parts)}\r\n\r\n"
    ).encode() + parts


FILE = b'Content-Disposition: form-data; name="file"; filename="a.md"\r\n\r\n# a\r\n'
MALFORMED = {
    "a boundary of 300 characters": _form("b" * 300, b"--" + b"b" * 300 + b"\r\n" + FILE),
    "a boundary of 71 characters": _form("b" * 71, b"--" + b"b" * 71 + b"\r\n" + FILE),
    "a header line without a name": _form(
        "edge", b"--edge\r\n: value\r\n" + FILE + b"--edge--\r\n"
    ),
    "a part without Content-Disposition": _form(
        "edge", b"--edge\r\nContent-Type: text/plain\r\n\r\nx\r\n--edge--\r\n"
    ),
    "a Content-Disposition without a name": _form(
        "edge", b"--edge\r\nContent-Disposition: form-data\r\n\r\nx\r\n--edge--\r\n"
    ),
    "a part's headers of 20 KiB": _form(
        "edge", b"--edge\r\nX-Pad: " + b"p" * 20_000 + b"\r\n" + FILE + b"--edge--\r\n"
    ),
    "a part with 50 header lines": _form(
        "edge", b"--edge\r\n" + b"X-A: b\r\n" * 50 + FILE + b"--edge--\r\n"
    ),
    "a body that is not multipart at all": _form("edge", b"\x00\xff garbage with no boundary"),
}


def _exchange(api: Api, request: bytes) -> tuple[int, bytes]:
    url = urlsplit(api.base)
    with socket.create_connection((url.hostname, url.port), timeout=ANSWER_WITHIN_S) as conn:
        conn.sendall(request)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
            if b"\r\n\r\n" in data and data.endswith(b"}"):
                break
    return int(data.split(b" ", 2)[1]), data


@pytest.mark.parametrize("backend", ["sqlite"])
def test_every_malformed_form_is_a_one_line_400(server: Api) -> None:
    for case, request in MALFORMED.items():
        status, data = _exchange(server, request)
        assert status in (400, 422), (case, data)
        assert b"Traceback" not in data, case
    code, out = stop_server(server)
    assert stopped_gracefully(code, out), out
    assert "Traceback" not in out and "Exception" not in out, out
    assert " 500 " not in out, out
    assert stored_files(server.settings) == []


def test_an_upload_refused_after_it_was_stored_leaves_no_object(server: Api) -> None:
    """A reused idempotency key (other content) and a version refused: 422/404 after
    the original was stored; it is taken back, and the first one stays."""
    with httpx.Client(base_url=server.base, timeout=ANSWER_WITHIN_S) as client:
        first = client.post(
            "/api/documents",
            files={"file": ("first.md", b"# first\n")},
            headers={"Idempotency-Key": "k-1"},
        )
        assert first.status_code == 201, first.text
        kept = stored_files(server.settings)
        reused = client.post(
            "/api/documents",
            files={"file": ("other.md", b"# other content\n")},
            headers={"Idempotency-Key": "k-1"},
        )
        is_problem(reused, 422, "KeyReused")
        with_key = client.post(
            "/api/documents",
            files={"file": ("third.md", b"# third\n")},
            data={"replaces": first.json()["document_id"]},
            headers={"Idempotency-Key": "k-2"},
        )
        is_problem(with_key, 422, "BadInput")
    assert stored_files(server.settings) == kept


def test_the_store_keeps_no_record_of_uploads_outside_a_request(tmp_path: Path) -> None:
    """Only a request (or a CLI batch) that asks collects the keys it stored; the
    store itself does not grow with every upload for a server's lifetime."""
    store = ObjectStore(tmp_path / "store")
    before = dict(vars(store))
    for i in range(200):
        store.put(b"object %d" % i)
    assert vars(store) == before
    with track_created() as created:
        key, _ = store.put(b"new in this request")
        store.put(b"object 1")  # already there: not this request's to take back
        with track_created() as inner:
            receiving = store.receive()
            receiving.write(b"streamed in")
            streamed = receiving.store()
    assert created == [key]
    assert inner == [streamed.key]
