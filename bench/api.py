"""bench.api: the HTTP API under load while two worker processes ingest.

Measures, in one run:

* the **floor**: GET requests/s against the same ASGI server (uvicorn, one process,
  FastAPI) answering a constant JSON response — what HTTP itself costs here;
* ``GET /api/ingestion-tasks/{id}`` requests/s against ``ingestdesk serve`` while two
  ``ingestdesk worker --loop`` processes ingest a corpus on the same ledger;
* ``POST /api/documents/{id}/submit`` latency (p50/p99), one at a time, meanwhile;
* the **hostile neighbour**: ``GET /api/ingestion-tasks/{id}`` p99, one at a time,
  while another process keeps HOSTILE_FILTER_CLIENTS clients sending the largest
  filter the API accepts and HOSTILE_SLOW_CONNECTIONS connections trickling their
  headers (reopened when the server cuts them off), as a ratio to the quiet p99
  measured the same way just before, in the same run.

The client is the same asyncio httpx client for both servers, with the same
concurrency, so its own cost cancels out of the ratio. Targets (from the issue):
GET >= 0.3x the floor's requests/s, submit p99 <= 50 ms, hostile p99 <= 3x quiet.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.common import (
    REPO_ROOT,
    Target,
    compile_bytecode,
    fmt_num,
    ingestdesk_command,
    print_header,
    print_ratio,
    print_table,
    print_targets,
    python_env,
    ratio,
)
from core.filters import FILTER_TERMS_MAX, FILTER_TEXT_MAX

SUBMIT_NAME = "bench-submit"  # the timed submits' documents, told apart from the corpus
CONCURRENCY = 8  # requests in flight from the load client
PDF_PAGES = 30  # pages per corpus PDF: ~0.1 s of parsing each, so the workers stay busy
START_TIMEOUT_S = 30.0  # seconds for a server to answer
HOSTILE_FILTER_CLIENTS = 4  # clients sending the largest accepted filter, back to back
HOSTILE_SLOW_CONNECTIONS = 100  # connections that trickle their headers
SLOW_BYTE_EVERY_S = 1.0  # seconds between the bytes a slow connection sends


@dataclass(frozen=True)
class Plan:
    get_seconds: float  # seconds of GET load per measurement
    submits: int  # submits timed
    documents: int  # documents the workers ingest meanwhile
    rounds: int  # interleaved floor/API rounds (best of)
    probes: int  # GET task requests timed, quiet and again with hostile neighbours


FULL = Plan(get_seconds=5.0, submits=300, documents=2400, rounds=3, probes=1000)
QUICK = Plan(get_seconds=1.0, submits=40, documents=300, rounds=1, probes=150)


def largest_filter() -> str:
    """A filter at the API's limits: as many terms as it accepts, each negated and as
    long as still fits the length limit (the most work one request may ask for)."""
    width = (FILTER_TEXT_MAX + 1) // FILTER_TERMS_MAX - 1  # characters a term, with its space
    terms = [f"!name:hostile-{i:04d}".ljust(width, "x") for i in range(FILTER_TERMS_MAX)]
    text = " ".join(terms)
    assert len(text) <= FILTER_TEXT_MAX
    return text


def probe_latencies(url: str, headers: dict[str, str], n: int) -> list[float]:
    """Seconds for each of ``n`` GETs of ``url``, one at a time, on one connection."""
    out: list[float] = []
    with httpx.Client(headers=headers, timeout=30.0) as client:
        for _ in range(n):
            start = time.perf_counter()
            answer = client.get(url)
            out.append(time.perf_counter() - start)
            if answer.status_code != 200:
                raise RuntimeError(f"GET {url}: {answer.status_code} {answer.text[:200]}")
    return out


async def _slow_connection(host: str, port: int, stop: asyncio.Event) -> None:
    """Headers a byte at a time, for ever; a new connection when the server cuts one."""
    while not stop.is_set():
        try:
            _, writer = await asyncio.open_connection(host, port)
        except OSError:
            await asyncio.sleep(SLOW_BYTE_EVERY_S)
            continue
        try:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: bench\r\n")
            while not stop.is_set() and not writer.is_closing():
                await asyncio.sleep(SLOW_BYTE_EVERY_S)
                writer.write(b"X")
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()


async def _filter_client(url: str, headers: dict[str, str], stop: asyncio.Event) -> None:
    async with httpx.AsyncClient(headers=headers, timeout=60.0) as client:
        while not stop.is_set():
            answer = await client.get(url, params={"filter": largest_filter()})
            if answer.status_code != 200:
                raise RuntimeError(f"hostile filter: {answer.status_code} {answer.text[:200]}")


async def _hostile(base: str, token: str) -> None:
    stop = asyncio.Event()
    host, port = base.removeprefix("http://").split(":")
    headers = {"Authorization": f"Bearer {token}"}
    tasks = [
        *(_slow_connection(host, int(port), stop) for _ in range(HOSTILE_SLOW_CONNECTIONS)),
        *(
            _filter_client(f"{base}/api/ingestion-tasks", headers, stop)
            for _ in range(HOSTILE_FILTER_CLIENTS)
        ),
    ]
    print("hostile load running", flush=True)
    await asyncio.gather(*tasks)


def hostile_load(base: str, token: str) -> None:
    """The hostile neighbours, in a process of their own (their client-side cost must
    not slow the probe's client): until killed."""
    asyncio.run(_hostile(base, token))


def start_hostile(base: str, token: str, env: dict[str, str]) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", "import sys; from bench.api import hostile_load; "
         "hostile_load(sys.argv[1], sys.argv[2])", base, token],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert process.stdout is not None
    if process.stdout.readline().strip() != "hostile load running":
        raise RuntimeError("the hostile load did not start")
    return process


FLOOR_APP = """
from fastapi import FastAPI
app = FastAPI()
ANSWER = {"task_id": "0" * 32, "status": "queued", "stage": "download"}

@app.get("/constant")
async def constant() -> dict:
    return ANSWER
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_up(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer in time")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()


async def get_rate(url: str, headers: dict[str, str], seconds: float) -> float:
    """Requests/s of GET ``url`` with CONCURRENCY in flight for ``seconds``."""
    done = 0
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(headers=headers, limits=limits, timeout=30.0) as client:

        async def loop() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                answer = await client.get(url)
                if answer.status_code != 200:
                    raise RuntimeError(f"GET {url}: {answer.status_code} {answer.text[:200]}")
                done += 1

        start = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(CONCURRENCY)))
        return done / (time.perf_counter() - start)


def submit_latencies(base: str, headers: dict[str, str], n: int) -> list[float]:
    """Seconds for each of ``n`` submits (each of a fresh draft uploaded untimed)."""
    out: list[float] = []
    with httpx.Client(base_url=base, headers=headers, timeout=30.0) as client:
        for i in range(n):
            data = f"bench submit note {i} {time.time_ns()}\n".encode() * 4
            name = f"{SUBMIT_NAME}-{i}.md"
            doc = client.post("/api/documents", files={"file": (name, data)}).json()
            start = time.perf_counter()
            answer = client.post(f"/api/documents/{doc['document_id']}/submit")
            out.append(time.perf_counter() - start)
            if answer.status_code != 202:
                raise RuntimeError(f"submit: {answer.status_code} {answer.text[:200]}")
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def make_corpus(folder: Path, n: int) -> list[Path]:
    """30-page PDFs (parsed in the workers' parser processes) and Markdown notes,
    enough that both workers stay busy through every measurement."""
    from core.demo import pdf_document

    folder.mkdir(parents=True)
    paths = []
    for i in range(n):
        if i % 2:
            path = folder / f"note-{i}.md"
            words = " ".join(f"ingestion{j % 97} ledger{i % 13}" for j in range(3000))
            path.write_text(f"# Note {i}\n\n{words}\n")
        else:
            path = folder / f"report-{i}.pdf"
            pages = [
                [f"Report {i} page {p} line {k}: ingestion ledger lease claim" for k in range(40)]
                for p in range(PDF_PAGES)
            ]
            path.write_bytes(pdf_document(pages))
        paths.append(path)
    return paths


def queued(cmd: list[str], env: dict[str, str]) -> int:
    """Tasks still waiting for a worker (the workers were busy if some are)."""
    answer = subprocess.run(
        [
            *cmd,
            "tasks",
            "--json",
            "--limit",
            "1000000",
            "--filter",
            f"status:queued !name:{SUBMIT_NAME}",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return len(json.loads(answer.stdout))


def run(plan: Plan, quick: bool, workdir: Path) -> int:
    print_header("bench.api", quick, workdir)
    env = python_env()
    db, store = workdir / "ledger.db", workdir / "objects"
    cmd = [*ingestdesk_command(), "--db", str(db), "--store", str(store)]
    token = subprocess.run(
        [*cmd, "tokens", "create", "bench", "--role", "operator", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    secret = json.loads(token.stdout)["token"]
    headers = {"Authorization": f"Bearer {secret}"}
    corpus = make_corpus(workdir / "corpus", plan.documents)
    subprocess.run([*cmd, "upload", *map(str, corpus)], env=env, check=True, capture_output=True)
    sample = subprocess.run(
        [*cmd, "add", str(corpus[0]), "--name", "probe.md", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    probe_task = json.loads(sample.stdout)[0]["task_id"]

    floor_file = workdir / "floor_app.py"
    floor_file.write_text(FLOOR_APP)
    floor_port, api_port = free_port(), free_port()
    floor = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "floor_app:app", "--port", str(floor_port),
         "--log-level", "warning", "--app-dir", str(workdir)],
        env=env,
    )  # fmt: skip
    api = subprocess.Popen(
        [*cmd, "serve", "--port", str(api_port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers: list[subprocess.Popen[bytes]] = []
    try:
        floor_url = f"http://127.0.0.1:{floor_port}/constant"
        api_base = f"http://127.0.0.1:{api_port}"
        wait_until_up(floor_url, floor)
        wait_until_up(f"{api_base}/healthz", api)
        # Submit the corpus so the workers have work, then start them.
        drafts = subprocess.run(
            [*cmd, "documents", "--status", "draft", "--json", "--limit", str(plan.documents)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        with httpx.Client(base_url=api_base, headers=headers, timeout=30.0) as client:
            for doc in json.loads(drafts.stdout):
                client.post(f"/api/documents/{doc['document_id']}/submit")
        workers = [
            subprocess.Popen(
                [*cmd, "worker", "--loop", "--worker-id", f"bench-{i}"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for i in range(2)
        ]
        time.sleep(1.0)  # let the workers get going
        floor_rates, api_rates = [], []
        task_url = f"{api_base}/api/ingestion-tasks/{probe_task}"
        for _ in range(plan.rounds):
            floor_rates.append(asyncio.run(get_rate(floor_url, {}, plan.get_seconds)))
            api_rates.append(asyncio.run(get_rate(task_url, headers, plan.get_seconds)))
        latencies = submit_latencies(api_base, headers, plan.submits)
        quiet = probe_latencies(task_url, headers, plan.probes)
        hostile = start_hostile(api_base, secret, env)
        try:
            time.sleep(1.0)  # the slow connections open, the filters start arriving
            noisy = probe_latencies(task_url, headers, plan.probes)
            hostile_alive = hostile.poll() is None
        finally:
            hostile.kill()
            hostile.wait()
        still_running = all(w.poll() is None for w in workers)
        left = queued(cmd, env)
    finally:
        for process in (*workers, api, floor):
            stop(process)

    floor_rps, api_rps = max(floor_rates), max(api_rates)
    p50, p99 = statistics.median(latencies), percentile(latencies, 0.99)
    print_table(
        f"GET requests/s, {CONCURRENCY} in flight, best of {plan.rounds}",
        ["server", "requests/s"],
        [
            ("floor: constant response", fmt_num(floor_rps)),
            ("GET /api/ingestion-tasks/{id}, 2 workers ingesting", fmt_num(api_rps)),
        ],
    )
    print_table(
        f"submit latency, {plan.submits} submits one at a time, 2 workers ingesting",
        ["p50 ms", "p99 ms", "max ms"],
        [(fmt_num(p50 * 1000), fmt_num(p99 * 1000), fmt_num(max(latencies) * 1000))],
    )
    quiet_p99, noisy_p99 = percentile(quiet, 0.99), percentile(noisy, 0.99)
    print_table(
        f"GET task latency, {plan.probes} one at a time, 2 workers ingesting",
        ["neighbours", "p50 ms", "p99 ms"],
        [
            ("quiet", fmt_num(statistics.median(quiet) * 1000), fmt_num(quiet_p99 * 1000)),
            (
                f"{HOSTILE_FILTER_CLIENTS} largest-filter clients + "
                f"{HOSTILE_SLOW_CONNECTIONS} slow connections",
                fmt_num(statistics.median(noisy) * 1000),
                fmt_num(noisy_p99 * 1000),
            ),
        ],
    )
    print(f"hostile load ran throughout: {'yes' if hostile_alive else 'NO'}")
    busy = still_running and left > 0
    print(
        f"workers busy throughout: {'yes' if busy else 'NO'} "
        f"({left} of {plan.documents} tasks still queued at the end)"
    )
    print_ratio("GET task / floor requests/s", ratio(api_rps, floor_rps), "same server, client")
    hostile_ratio = ratio(noisy_p99, quiet_p99)
    print_ratio("GET task p99 hostile / quiet", hostile_ratio, "same run, same client")
    print_targets(
        [
            Target("GET task >= 0.3x floor requests/s", ratio(api_rps, floor_rps), 0.3, ">="),
            Target("submit p99 <= 50 ms", p99 * 1000, 50.0, "<=", show="count"),
            Target("GET task p99 with hostile neighbours <= 3x quiet", hostile_ratio, 3.0, "<="),
        ]
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.api", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="reduced run (< 60 s)")
    parser.add_argument("--dir", type=Path, help="parent of the work directory (default: temp)")
    parser.add_argument(
        "--million",
        action="store_true",
        help="the task list's first page at 1 000 000 tasks vs 1 000 (bench.api_million)",
    )
    args = parser.parse_args(argv)
    compile_bytecode()
    parent = args.dir or Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench-api-", dir=parent))
    os.chdir(REPO_ROOT)
    try:
        if args.million:
            from bench.api_million import run_million

            return run_million(args.quick, workdir)
        return run(QUICK if args.quick else FULL, args.quick, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # a ledger, a corpus and its objects


if __name__ == "__main__":
    sys.exit(main())
