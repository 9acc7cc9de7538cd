"""A real S3-compatible server on loopback for the tests: moto's server (Apache-2.0),
run as its own process, which keeps its objects across a restart.

moto holds everything in memory: stopped, it would lose what the drill uploaded.
This wrapper gives it what a real S3 has, durability: SIGTERM stops serving, lets
the requests already inside moto finish (a new one is refused with 503, as S3's
SlowDown), writes every object to ``--data`` (written aside, then renamed into
place), and exits; the next start loads them before its port opens, so no client
ever sees a server that is up but empty. It does not wait for werkzeug's request
threads themselves (``ThreadedMotoServer.stop`` does): one still reading a request
line holds no object, and a loaded machine once kept such a stop past a minute.
SIGUSR1 prints every thread's stack to ``--stacks``, for a stop that hangs anyway.

    python -m tests.store.s3server --port 0 --data DIR   # prints "listening PORT"
"""

from __future__ import annotations

import argparse
import base64
import faulthandler
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ACCOUNT = "123456789012"  # moto's default account
REGION = "us-east-1"
DRAIN_TIMEOUT_S = 30.0  # seconds the requests inside moto get to finish at a stop


class Gate:
    """WSGI middleware counting the requests inside moto; closed, it refuses new ones,
    so that the save sees every write a client was told succeeded."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.changed = threading.Condition()
        self.inside = 0
        self.closed = False

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with self.changed:
            if self.closed:
                start_response("503 Service Unavailable", [("Content-Length", "0")])
                return []
            self.inside += 1
        try:
            body = self.app(environ, start_response)
            try:
                return list(body)
            finally:
                if hasattr(body, "close"):
                    body.close()
        finally:
            with self.changed:
                self.inside -= 1
                self.changed.notify_all()

    def close(self, timeout: float) -> bool:
        """Refuse new requests and wait for those inside; False if they did not finish."""
        with self.changed:
            self.closed = True
            return self.changed.wait_for(lambda: self.inside == 0, timeout)


def _backend() -> Any:
    from moto.s3.models import s3_backends

    return s3_backends[ACCOUNT]["aws"]


def _name(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode()


def restore(data: Path) -> int:
    backend, count = _backend(), 0
    if not data.is_dir():
        return 0
    for bucket_dir in sorted(p for p in data.iterdir() if p.is_dir()):
        backend.create_bucket(bucket_dir.name, REGION)
        for file in bucket_dir.iterdir():
            key = base64.urlsafe_b64decode(file.name.encode()).decode()
            backend.put_object(bucket_dir.name, key, file.read_bytes())
            count += 1
    return count


def save(data: Path) -> int:
    backend, count = _backend(), 0
    aside = data.with_name(data.name + ".new")
    shutil.rmtree(aside, ignore_errors=True)
    aside.mkdir(parents=True)
    for name, bucket in list(backend.buckets.items()):
        (aside / name).mkdir()
        for key in list(bucket.keys.keys()):
            obj = bucket.keys.get(key)
            if obj is None or getattr(obj, "is_delete_marker", False):
                continue
            (aside / name / _name(key)).write_bytes(obj.value)
            count += 1
    shutil.rmtree(data, ignore_errors=True)
    aside.rename(data)
    return count


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--stacks", type=Path, help="file SIGUSR1 writes the stacks to")
    args = parser.parse_args()
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    if args.stacks is not None:
        stacks = args.stacks.open("w")
        faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    restored = restore(args.data)
    gate = Gate(DomainDispatcherApplication(create_backend_app))
    server = make_server(
        args.host, args.port, gate, threaded=True, request_handler=MotoRequestHandler
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"listening {server.server_port} restored {restored}", flush=True)
    stop.wait()
    server.shutdown()  # returns once no connection is accepted any more
    drained = gate.close(DRAIN_TIMEOUT_S)
    print(f"saved {save(args.data)}" + ("" if drained else " undrained"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
