"""bench.store: originals in an S3-compatible bucket against a local folder.

Prints, in one run, against moto's S3 server on loopback (started here, as the tests
start it: :mod:`tests.store.s3server`):

* **worker reads**: pages/s of ``ingestdesk worker --until-idle`` (one process) over
  the same PDFs, stored in a local folder and in the bucket; runs alternate, twice
  each, and the faster of each counts. A worker started on an empty queue gives each
  store's start-up (imports, the bucket check), printed apart, and the rate past it.
* **upload**: MB/s of the ledger's own upload path (``add FILE...``: judge and store
  each file, then record and queue them all in one transaction; in-process, so
  interpreter start-up is not in it) into the bucket, against the bare client
  (obstore ``put``) putting the same files under another prefix.

Beside the wall times it prints the CPU seconds of our processes and of the S3
server's: on this 2-core machine the server shares the cores with the worker and its
parser, which a real bucket on another host does not.

Run: ``python -m bench.store [--quick]`` (needs the test extra: moto, reportlab).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import (
    REPO_ROOT,
    Target,
    fmt_num,
    print_header,
    print_ratio,
    print_table,
    print_targets,
    python_env,
    ratio,
)

SEED = 22
READ_RATIO_GOAL = 0.9  # S3 pages/s against local pages/s, from the issue
UPLOAD_RATIO_GOAL = 0.8  # add's MB/s against the bare client's, from the issue
WORDS_PER_LINE = 13
LINES_PER_PAGE = 50  # ~4.5 kB of text a page, as bench.ingest's corpus
BIG_FILE_BYTES = 4 * 1024 * 1024  # bytes per upload-corpus file: past one part
ACCESS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret"}


def _pdfs(folder: Path, docs: int, pages: int) -> list[Path]:
    from tests.hostile import make_pdf  # reportlab: a test dependency

    rng = random.Random(SEED)
    words = ["".join(rng.choices("etaoinshrdlu", k=rng.randint(2, 9))) for _ in range(2000)]
    folder.mkdir(parents=True)
    files = []
    for i in range(docs):
        text = [
            "\n".join(
                " ".join(rng.choice(words) for _ in range(WORDS_PER_LINE))
                for _ in range(LINES_PER_PAGE)
            )
            for _ in range(pages)
        ]
        path = folder / f"report-{i:03d}.pdf"
        path.write_bytes(make_pdf(text))
        files.append(path)
    return files


def _big_notes(folder: Path, count: int) -> list[Path]:
    rng = random.Random(SEED + 1)
    folder.mkdir(parents=True)
    files = []
    for i in range(count):
        line = " ".join(f"w{rng.randrange(100_000)}" for _ in range(12))
        body = (f"# Note {i}\n\n" + (line + "\n") * (BIG_FILE_BYTES // (len(line) + 1))).encode()
        path = folder / f"note-{i:02d}.md"
        path.write_bytes(body)
        files.append(path)
    return files


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _process_cpu_s(pid: int) -> float:
    """CPU seconds a running process has used (Linux /proc), its own threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    wall_s: float
    cpu_s: float  # the command's own processes (worker and its parser process)
    server_cpu_s: float = 0.0  # the S3 server's, meanwhile


def _cli(store: list[str], db: Path, *args: str, cwd: Path, server: int | None = None) -> Run:
    """Run the CLI; its wall time and CPU seconds, and the S3 server's meanwhile."""
    env = python_env() | ACCESS
    command = [sys.executable, "-m", "core.cli", "--db", str(db), *store, *args]
    cpu, served = _children_cpu_s(), _process_cpu_s(server) if server else 0.0
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args[:2])} failed: {done.stderr.strip()[-500:]}")
    return Run(
        elapsed,
        _children_cpu_s() - cpu,
        (_process_cpu_s(server) - served) if server else 0.0,
    )


def _worker_run(store: list[str], files: list[Path], run_dir: Path, server: int) -> Run:
    run_dir.mkdir()
    db = run_dir / "ledger.db"
    if not files:  # start-up alone: a ledger whose queue is already drained
        note = run_dir / "note.md"
        note.write_text("# a note\n")
        _cli(store, db, "add", str(note), cwd=run_dir)
        _cli(store, db, "worker", "--until-idle", "--embedder", "hashed", cwd=run_dir)
    else:
        _cli(store, db, "add", *map(str, files), cwd=run_dir)
    worker = ("worker", "--until-idle", "--embedder", "hashed")
    return _cli(store, db, *worker, cwd=run_dir, server=server)


@dataclass
class Upload:
    mb_s: float
    cpu_s: float  # this process's, while the files went up
    server_cpu_s: float  # the S3 server's, meanwhile


async def _upload(
    bucket: str, endpoint: str, files: list[Path], workdir: Path, server: int
) -> Upload:
    """What ``ingestdesk add FILE...`` does in-process (interpreter start-up is not in
    it): every file judged, stored, then one transaction records and queues them."""
    from core import Ledger, Settings, sqlite_url

    settings = Settings(
        db_url=sqlite_url(workdir / "upload.db"),
        store_root=workdir / "unused",
        store_url=f"s3://{bucket}/add",
        s3_endpoint=endpoint,
    )
    async with await Ledger.open(settings) as ledger:
        # The first request opens the connection: warm it, as the bare client's is.
        await asyncio.to_thread(ledger.operator.store.put, b"warm-up")
        cpu, served = time.process_time(), _process_cpu_s(server)
        started = time.perf_counter()
        inputs = [(path.read_bytes(), path.name) for path in files]
        await ledger.operator.add_many(inputs, submit=True)
        elapsed = time.perf_counter() - started
        used, server_used = time.process_time() - cpu, _process_cpu_s(server) - served
    return Upload(sum(p.stat().st_size for p in files) / 1e6 / elapsed, used, server_used)


def _bare_upload(bucket: str, endpoint: str, files: list[Path], server: int) -> Upload:
    import obstore
    from obstore.store import S3Store

    client = S3Store(
        bucket,
        prefix="bare",
        endpoint=endpoint,
        region="us-east-1",
        access_key_id=ACCESS["AWS_ACCESS_KEY_ID"],
        secret_access_key=ACCESS["AWS_SECRET_ACCESS_KEY"],
        virtual_hosted_style_request=False,
        client_options={"allow_http": True},
    )
    obstore.put(client, "warm-up", b"warm-up")  # the first request opens the connection
    cpu, served = time.process_time(), _process_cpu_s(server)
    started = time.perf_counter()
    for path in files:
        obstore.put(client, path.name, path.read_bytes())
    elapsed = time.perf_counter() - started
    used, server_used = time.process_time() - cpu, _process_cpu_s(server) - served
    return Upload(sum(p.stat().st_size for p in files) / 1e6 / elapsed, used, server_used)


def run(quick: bool, workdir: Path) -> None:
    docs, pages, big = (12, 10, 6) if quick else (40, 20, 16)
    pdfs = _pdfs(workdir / "pdfs", docs, pages)
    notes = _big_notes(workdir / "notes", big)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.store.s3server",
            "--port",
            "0",
            "--data",
            str(workdir / "s3"),
        ],
        cwd=REPO_ROOT,
        env=python_env() | ACCESS,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # printed once the port is bound
        if not line.startswith("listening "):
            raise SystemExit(f"the S3 server did not start: {line!r}")
        endpoint = f"http://127.0.0.1:{line.split()[1]}"
        os.environ.update(ACCESS)
        import boto3

        bucket = "bench-originals"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
            Bucket=bucket
        )
        s3 = ["--store", f"s3://{bucket}/reads", "--s3-endpoint", endpoint]
        stores = {"local": lambda i: ["--store", str(workdir / f"objects-{i}")], "s3": lambda i: s3}
        runs: dict[str, list[Run]] = {"local": [], "s3": []}
        idle: dict[str, Run] = {}
        for i in (1, 2):  # alternated, the faster of each counts
            for name, store in stores.items():
                runs[name].append(_worker_run(store(i), pdfs, workdir / f"{name}-{i}", server.pid))
        for name, store in stores.items():  # start-up: the same worker, nothing to do
            idle[name] = _worker_run(store(9), [], workdir / f"{name}-idle", server.pid)
        total_pages = docs * pages
        best = {n: min(runs[n], key=lambda r: r.wall_s) for n in runs}
        local_rate, s3_rate = total_pages / best["local"].wall_s, total_pages / best["s3"].wall_s
        marginal = {n: total_pages / max(1e-9, best[n].wall_s - idle[n].wall_s) for n in runs}
        print_table(
            f"one worker, {docs} PDFs x {pages} pages (wall, faster of 2 runs each)",
            [
                "store",
                "seconds",
                "pages/s",
                "start-up s",
                "pages/s past start-up",
                "worker CPU s",
                "S3 server CPU s",
            ],
            [
                (
                    label,
                    fmt_num(best[n].wall_s, 2),
                    fmt_num(total_pages / best[n].wall_s),
                    fmt_num(idle[n].wall_s, 2),
                    fmt_num(marginal[n]),
                    fmt_num(best[n].cpu_s, 2),
                    fmt_num(best[n].server_cpu_s, 2),
                )
                for n, label in (("local", "local folder"), ("s3", "S3 on loopback"))
            ],
        )
        bare: list[Upload] = []
        added: list[Upload] = []
        for _ in (1, 2):  # alternated, the faster of each counts
            bare.append(_bare_upload(bucket, endpoint, notes, server.pid))
            added.append(asyncio.run(_upload(bucket, endpoint, notes, workdir, server.pid)))
        fastest = {
            "bare": max(bare, key=lambda u: u.mb_s),
            "add": max(added, key=lambda u: u.mb_s),
        }
        print_table(
            f"upload, {big} files x {BIG_FILE_BYTES // (1024 * 1024)} MiB (faster of 2 runs each)",
            ["path", "MB/s", "client CPU s", "S3 server CPU s"],
            [
                (label, fmt_num(u.mb_s), fmt_num(u.cpu_s, 2), fmt_num(u.server_cpu_s, 2))
                for label, u in (
                    ("bare obstore put", fastest["bare"]),
                    ("add into S3", fastest["add"]),
                )
            ],
        )
    finally:
        server.terminate()
        server.communicate(timeout=60)
    read_ratio, upload_ratio = (
        ratio(s3_rate, local_rate),
        ratio(fastest["add"].mb_s, fastest["bare"].mb_s),
    )
    print_ratio("worker pages/s, S3 / local", read_ratio, "one worker process, wall")
    print_ratio(
        "worker pages/s past start-up, S3 / local",
        ratio(marginal["s3"], marginal["local"]),
        "start-up (an idle run) taken off",
    )
    print_ratio(
        "worker CPU s, S3 / local",
        ratio(best["s3"].cpu_s, best["local"].cpu_s),
        "the worker's and its parser's CPU; the S3 server's own is apart, on the same 2 cores",
    )
    print_ratio("upload MB/s, add / bare client", upload_ratio, "same files, same server")
    print_targets(
        [
            Target("worker reading S3 / local (pages/s)", read_ratio, READ_RATIO_GOAL, ">="),
            Target("add into S3 / bare put (MB/s)", upload_ratio, UPLOAD_RATIO_GOAL, ">="),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.store", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smaller corpus")
    parser.add_argument("--dir", type=Path, help="work folder (default: a temporary one)")
    args = parser.parse_args(argv)
    workdir = Path(args.dir or tempfile.mkdtemp(prefix="bench-store-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print_header("bench.store", args.quick, workdir)
    # Everything of a run in a folder of its own, removed after it: a --dir given is
    # left as it was found.
    scratch = Path(tempfile.mkdtemp(prefix="bench-store-", dir=workdir))
    try:
        run(args.quick, scratch)
    finally:
        shutil.rmtree(scratch if args.dir else workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
