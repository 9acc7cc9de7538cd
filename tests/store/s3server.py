"""A real S3-compatible server on loopback for the tests: moto's server (Apache-2.0),
run as its own process, which keeps its objects across a restart.

moto holds everything in memory: stopped, it would lose what the drill uploaded.
This wrapper gives it what a real S3 has, durability: SIGTERM stops serving, writes
every object to ``--data`` (written aside, then renamed into place), and exits;
the next start loads them before its port opens, so no client ever sees a server
that is up but empty.

    python -m tests.store.s3server --port 0 --data DIR   # prints "listening PORT"
"""

from __future__ import annotations

import argparse
import base64
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import Any

ACCOUNT = "123456789012"  # moto's default account
REGION = "us-east-1"


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
    args = parser.parse_args()
    from moto.server import ThreadedMotoServer

    restored = restore(args.data)
    server = ThreadedMotoServer(ip_address=args.host, port=args.port, verbose=False)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server.start()
    port = server.get_host_and_port()[1]
    print(f"listening {port} restored {restored}", flush=True)
    stop.wait()
    server.stop()
    print(f"saved {save(args.data)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
