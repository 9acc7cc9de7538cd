"""The demo embedding provider: an HTTP process with its own SQLite database, which
answers the wire protocol :mod:`core.ingest.http_provider` speaks and can be made to
fail the ways a real provider fails (:mod:`core.demo_provider.faults`).

Standard library on purpose: a lost reply must be a real connection closed without
a single response byte after the work was committed, which an ASGI server (it always
answers something) cannot produce. Every submit is counted, repeats included, so a
test can prove that nothing was sent twice.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import signal
import socket
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any

from core.demo_provider.faults import FaultError, Faults, FaultSwitch
from core.ingest.embedder import DEFAULT_DIMENSIONS, HashingEmbedder
from core.ingest.providers import vectors_checksum

NAME = "demo-provider"
MODEL = "hashed-bag-of-words-1"
MAX_BODY_BYTES = 64 * 1024 * 1024  # bytes a request body may have
MAX_TEXTS = 100_000  # texts in one request
REQUEST_TIMEOUT_S = 30.0  # seconds a client gets to send its request before it is dropped
STOP_GRACE_S = 10.0  # seconds requests in flight get to finish on SIGTERM/SIGINT
POLL_INTERVAL_S = 0.1  # seconds between serve_forever's looks at the stop flag
SQLITE_BUSY_TIMEOUT_S = 10.0  # seconds: another process holding the database's lock
COUNTERS = (
    "submits",
    "executions",
    "lookups",
    "fetches",
    "lost_requests",
    "lost_replies",
    "truncated_replies",
)
_KEY = re.compile(r"[0-9a-f]{64}")
_KEY_PATH = re.compile(r"/v1/embeddings/([^/]*)(/result)?")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    request_key TEXT PRIMARY KEY,
    request_id TEXT NOT NULL,
    status TEXT NOT NULL,
    count INTEGER,
    dimensions INTEGER,
    checksum TEXT,
    result BLOB,
    characters INTEGER,
    submits INTEGER NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""
_TABLES = {"requests", "counters"}
_COLUMNS = "request_key, request_id, status, count, dimensions, checksum, result, characters"


class StoreError(Exception):
    """The provider's database cannot be used; the message is one line."""


@dataclass(frozen=True)
class Row:
    """One request key as the provider recorded it."""

    request_key: str
    request_id: str
    status: str  # running | done | failed
    count: int | None
    dimensions: int | None
    checksum: str | None
    result: bytes | None
    characters: int | None

    def reply(self, *, cut: int = 0) -> dict[str, object]:
        """The body of a finished request's reply; ``cut`` bytes short when truncated."""
        blob = self.result or b""
        return {
            "request_id": self.request_id,
            "request_key": self.request_key,
            "status": "done",
            "count": self.count,
            "dimensions": self.dimensions,
            "checksum": self.checksum,
            "vectors": base64.b64encode(blob[: len(blob) - cut]).decode("ascii"),
            "usage": {"texts": self.count, "characters": self.characters},
        }


class ProviderStore:
    """The provider's own SQLite database (WAL): one row per request key, and counters.
    One connection behind a lock: the demo's load is a handful of threads."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: Path) -> ProviderStore:
        """Open (creating) the database at ``path``.

        Raises:
            StoreError: Not a SQLite file, another program's database (a ledger), or
                not openable.
        """
        try:
            conn = sqlite3.connect(
                path, timeout=SQLITE_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the provider database {path}: {exc}") from exc
        try:
            tables = {
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            if tables - _TABLES:
                # Pointed at a ledger by mistake: adding tables to it would be a mess.
                raise StoreError(f"{path} is another program's database, not a demo provider's")
            conn.execute("PRAGMA journal_mode=WAL")
            # A commit survives the process being killed, which is what a lost reply
            # after a crash needs; surviving power loss is not the demo's job.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
            # Whatever was running when the last process stopped will never finish:
            # say so ("failed"), instead of "running" forever or "not found" (a lie
            # that would invite a resend).
            conn.execute("UPDATE requests SET status = 'failed' WHERE status = 'running'")
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(f"cannot use the provider database {path}: {exc}") from exc
        except StoreError:
            conn.close()
            raise
        return cls(conn)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    @staticmethod
    def _bump(conn: sqlite3.Connection, name: str) -> None:
        conn.execute(
            "INSERT INTO counters (name, value) VALUES (?, 1) "
            "ON CONFLICT (name) DO UPDATE SET value = value + 1",
            (name,),
        )

    def submit(self, key: str, *, retry_failed: bool = False) -> tuple[Row, bool]:
        """Record one submit of ``key`` (every one counts); the key's row and whether
        it is to be executed now (then it is ``running`` and the caller does the work).

        A key runs once: a repeat is answered from its execution, running or done. A
        failed execution is answered as failed too, unless the client asks for it to
        run again (``retry_failed``, what a resend after a failure means): then it runs
        once more, a new execution under a new request id. A key that succeeded or is
        running never runs twice, whatever the client asks.
        """
        now = time.time()
        with self._transaction() as conn:
            self._bump(conn, "submits")
            found = conn.execute(
                f"SELECT {_COLUMNS} FROM requests WHERE request_key = ?", (key,)
            ).fetchone()
            rerun = found is not None and retry_failed and Row(*found).status == "failed"
            if found is not None and not rerun:
                conn.execute(
                    "UPDATE requests SET submits = submits + 1, updated_at = ? "
                    "WHERE request_key = ?",
                    (now, key),
                )
                return Row(*found), False
            request_id = "req_" + secrets.token_hex(12)
            # The row of a failed execution is started over: its stale result columns
            # are cleared, and its submits keep counting.
            conn.execute(
                "INSERT INTO requests (request_key, request_id, status, submits, created_at, "
                "updated_at) VALUES (?, ?, 'running', 1, ?, ?) "
                "ON CONFLICT (request_key) DO UPDATE SET request_id = excluded.request_id, "
                "status = 'running', count = NULL, dimensions = NULL, checksum = NULL, "
                "result = NULL, characters = NULL, submits = submits + 1, "
                "updated_at = excluded.updated_at",
                (key, request_id, now, now),
            )
            self._bump(conn, "executions")
            return Row(key, request_id, "running", None, None, None, None, None), True

    def finish(self, key: str, vectors: Sequence[bytes], dimensions: int, characters: int) -> Row:
        """Commit ``key`` as done with its vectors; its row."""
        blob = b"".join(vectors)
        checksum = vectors_checksum(vectors)
        with self._transaction() as conn:
            conn.execute(
                "UPDATE requests SET status = 'done', count = ?, dimensions = ?, checksum = ?, "
                "result = ?, characters = ?, updated_at = ? WHERE request_key = ?",
                (len(vectors), dimensions, checksum, blob, characters, time.time(), key),
            )
            found = conn.execute(
                f"SELECT {_COLUMNS} FROM requests WHERE request_key = ?", (key,)
            ).fetchone()
        return Row(*found)

    def fail(self, key: str) -> None:
        with self._transaction() as conn:
            conn.execute(
                "UPDATE requests SET status = 'failed', updated_at = ? WHERE request_key = ?",
                (time.time(), key),
            )

    def read(self, key: str, counter: str) -> tuple[Row, int] | None:
        """``key``'s row and submits, counting the read under ``counter``; None if unknown."""
        with self._transaction() as conn:
            self._bump(conn, counter)
            found = conn.execute(
                f"SELECT {_COLUMNS}, submits FROM requests WHERE request_key = ?", (key,)
            ).fetchone()
        return None if found is None else (Row(*found[:-1]), int(found[-1]))

    def count(self, counter: str) -> None:
        with self._transaction() as conn:
            self._bump(conn, counter)

    def stats(self) -> dict[str, int]:
        with self._lock:
            values = dict(self._conn.execute("SELECT name, value FROM counters").fetchall())
            keys = self._conn.execute("SELECT COUNT(*) FROM requests").fetchone()[0]
        stats = {name: int(values.get(name, 0)) for name in COUNTERS}
        stats["distinct_keys"] = int(keys)
        return stats

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class BadRequest(Exception):
    """The request cannot be used; the message is the reply's ``detail``."""


class ProviderServer(ThreadingHTTPServer):
    """The provider on an already bound, listening socket (bound by the caller, so a
    busy port is its one-line error, and port 0 is known before the first line)."""

    daemon_threads = True  # a stuck client must not keep the process alive after the grace

    def __init__(
        self,
        listener: socket.socket,
        store: ProviderStore,
        *,
        dimensions: int = DEFAULT_DIMENSIONS,
        resend_safe: bool = False,
        faults: Faults | None = None,
    ) -> None:
        super().__init__(listener.getsockname(), _Handler, bind_and_activate=False)
        self.socket.close()
        self.socket = listener
        self.server_address = listener.getsockname()
        self.store = store
        self.embedder = HashingEmbedder(dimensions)
        self.dimensions = dimensions
        self.resend_safe = resend_safe
        self.faults = FaultSwitch(faults)
        self.stopping = threading.Event()
        self._idle = threading.Condition()
        self._in_flight = 0

    def info(self) -> dict[str, object]:
        return {
            "name": NAME,
            "model": MODEL,
            "dimensions": self.dimensions,
            "resend_safe": self.resend_safe,
        }

    def process_request(self, request: Any, client_address: Any) -> None:
        # Counted here, before the thread starts, so a stop cannot miss a request
        # that was accepted but whose thread has not run yet.
        with self._idle:
            self._in_flight += 1
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            return  # the client went away: its problem, not the provider's
        sys.stderr.write(f"demo provider: request failed: {type(error).__name__}\n")

    def stop(self) -> None:
        """Ask :meth:`serve_until_stopped` to stop (safe from a signal handler)."""
        if not self.stopping.is_set():
            self.stopping.set()
            # shutdown() waits for serve_forever to return: never from its own thread.
            threading.Thread(target=self.shutdown, daemon=True).start()

    def serve_until_stopped(self) -> None:
        """Serve until SIGTERM/SIGINT (or :meth:`stop`), let the requests in flight
        finish (a slow one is woken), then close the socket and the database."""
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.stop()

        for sig in previous:
            signal.signal(sig, on_signal)
        try:
            self.serve_forever(poll_interval=POLL_INTERVAL_S)
        finally:
            self.stopping.set()
            deadline = time.monotonic() + STOP_GRACE_S
            with self._idle:
                while self._in_flight and (left := deadline - time.monotonic()) > 0:
                    self._idle.wait(left)
            self.server_close()
            self.store.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class _Handler(BaseHTTPRequestHandler):
    server: ProviderServer
    timeout = REQUEST_TIMEOUT_S
    server_version = "demo-provider"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: one line per request would drown the faults a person is watching."""

    def _send(self, status: int, body: Mapping[str, object]) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> object:
        """The request's JSON body (read whole, so an early answer is not a reset).

        Raises:
            BadRequest: No length, too long, or not JSON.
        """
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise BadRequest("a Content-Length is required") from None
        if not 0 <= length <= MAX_BODY_BYTES:
            raise BadRequest(f"the body must be at most {MAX_BODY_BYTES} bytes")
        raw = self.rfile.read(length)
        try:
            return json.loads(raw)
        except ValueError:
            raise BadRequest("the body is not JSON") from None

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            if path == "/healthz":
                self._send(200, {"ok": True})
            elif path == "/v1/info":
                self._send(200, self.server.info())
            elif path == "/v1/stats":
                self._send(200, self.server.store.stats())
            elif path == "/v1/faults":
                self._send(200, self.server.faults.now.to_dict())
            elif match := _KEY_PATH.fullmatch(path):
                self._look_up(match.group(1), result=match.group(2) is not None)
            else:
                self._send(404, {"error": "no_such_path"})
        except sqlite3.Error:
            self._send(500, {"error": "internal"})

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            body = self._body()
            if path == "/v1/embeddings":
                self._submit(body)
            elif path == "/v1/faults":
                if not isinstance(body, dict):
                    raise BadRequest("the body must be a JSON object")
                self._send(200, self.server.faults.update(body).to_dict())
            else:
                self._send(404, {"error": "no_such_path"})
        except (BadRequest, FaultError) as exc:
            self._send(400, {"error": "bad_request", "detail": str(exc)})
        except sqlite3.Error:
            self._send(500, {"error": "internal"})

    def _submit(self, body: object) -> None:
        server, store = self.server, self.server.store
        faults = server.faults.now
        if faults.unavailable:
            # Before anything is recorded: the client may safely send it again.
            self._send(503, {"error": "unavailable"})
            return
        key, texts, retry_failed = _submission(body)
        if server.faults.hits(faults.lose_request):
            store.count("lost_requests")
            # Nothing recorded, nothing counted as a submit: the request never
            # arrived, and the client sees a closed connection, as with a lost reply.
            self.close_connection = True
            return
        row, new = store.submit(key, retry_failed=retry_failed)
        if new:
            try:
                if faults.slow_s:
                    server.stopping.wait(faults.slow_s)  # a stop wakes it: finish, answer
                vectors = server.embedder.embed_now(texts)
                row = store.finish(key, vectors, server.dimensions, sum(map(len, texts)))
            except BaseException:
                store.fail(key)
                raise
        if row.status == "running":
            self._send(202, {"status": "running", "request_key": key, "request_id": row.request_id})
            return
        if row.status != "done":
            self._send(422, {"error": "failed", "request_key": key, "request_id": row.request_id})
            return
        if server.faults.hits(faults.lose_reply):
            store.count("lost_replies")
            # The work is committed; the client gets a closed connection and nothing
            # else, exactly as when a reply is lost on the way back.
            self.close_connection = True
            return
        cut = 0
        if row.count and server.faults.hits(faults.truncate):
            store.count("truncated_replies")
            cut = 2 * (row.dimensions or 0)  # half the last vector: 4 bytes per float32
        self._send(200, row.reply(cut=cut))

    def _look_up(self, key: str, *, result: bool) -> None:
        if not _KEY.fullmatch(key):
            self._send(400, {"error": "bad_request", "detail": "the key must be 64 hex digits"})
            return
        store = self.server.store
        counter = "fetches" if result else "lookups"
        if self.server.faults.now.fail_lookups:
            store.count(counter)
            self._send(503, {"error": "lookup_unavailable"})
            return
        found = store.read(key, counter)
        if found is None:
            self._send(404, {"error": "not_found"})
            return
        row, submits = found
        if not result:
            self._send(
                200,
                {
                    "request_key": key,
                    "request_id": row.request_id,
                    "status": row.status,
                    "submits": submits,
                },
            )
        elif row.status == "done":
            self._send(200, row.reply())  # never truncated: this is how a reply is recovered
        else:
            self._send(409, {"error": row.status})


def _submission(body: object) -> tuple[str, list[str], bool]:
    """The request key, texts and ``retry_failed`` flag of a submit's body.

    Raises:
        BadRequest: Anything else.
    """
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    key, texts = body.get("request_key"), body.get("texts")
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise BadRequest("request_key must be 64 lowercase hex digits")
    if not isinstance(texts, list) or not texts or len(texts) > MAX_TEXTS:
        raise BadRequest(f"texts must be a list of 1 to {MAX_TEXTS} strings")
    if not all(isinstance(t, str) for t in texts):
        raise BadRequest("every text must be a string")
    retry_failed = body.get("retry_failed", False)
    if not isinstance(retry_failed, bool):
        raise BadRequest("retry_failed must be true or false")
    return key, texts, retry_failed
