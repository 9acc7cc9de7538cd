"""bench.api --million: the task list's first page over HTTP and from the CLI, at
1 000 000 tasks against 1 000.

Two ledgers are built with :mod:`bench.million` (untimed). For each, ``ingestdesk
serve`` answers ``GET /api/ingestion-tasks?limit=50`` with no filter and with each
filter of :data:`bench.scale.FILTERS`, then the page after (its ``next_cursor``), one
request at a time on one connection (p50 and p99); and ``ingestdesk tasks --filter F
--limit 50 --json`` runs as a whole process (the least of :data:`CLI_RUNS`: start-up
is the same at both sizes, so the difference is the read). Target (from the issue):
the API's first page p99 <= 50 ms at 1M, every filter.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import httpx

from bench.api import free_port, percentile, stop, wait_until_up
from bench.common import (
    Target,
    fmt_num,
    ingestdesk_command,
    load_line,
    print_header,
    print_table,
    print_targets,
    python_env,
    ratio,
)
from bench.million import build
from bench.scale import FILTERS, SCREENFUL
from core import Settings, sqlite_url

SIZES = (1_000, 1_000_000)
QUICK_SIZES = (1_000, 100_000)
PROBES = 200  # requests per list (quick: 40)
CLI_RUNS = 5  # whole-process runs of each CLI listing; the least counts (quick: 2)
PAGE_P99_TARGET_MS = 50.0


def _probe(client: httpx.Client, path: str, n: int) -> tuple[list[float], list[float]]:
    """ms of ``n`` first pages, and of the page after each."""
    first: list[float] = []
    after: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        answer = client.get(path)
        first.append((time.perf_counter() - t0) * 1000)
        answer.raise_for_status()
        cursor = answer.json()["next_cursor"]
        if cursor:
            t0 = time.perf_counter()
            client.get(f"{path}&cursor={quote(cursor)}").raise_for_status()
            after.append((time.perf_counter() - t0) * 1000)
    return first, after


def _measure(db: Path, store: Path, probes: int, cli_runs: int) -> dict[str, list[float]]:
    env = python_env()
    cmd = [*ingestdesk_command(), "--db", str(db), "--store", str(store)]
    made = subprocess.run(
        [*cmd, "tokens", "create", "bench", "--role", "viewer", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    headers = {"Authorization": f"Bearer {json.loads(made.stdout)['token']}"}
    port = free_port()
    api = subprocess.Popen(
        [*cmd, "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    out: dict[str, list[float]] = {}
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_up(f"{base}/healthz", api)
        with httpx.Client(base_url=base, headers=headers, timeout=60.0) as client:
            for expr in ("", *FILTERS):
                path = f"/api/ingestion-tasks?limit={SCREENFUL}"
                if expr:
                    path += f"&filter={quote(expr)}"
                _probe(client, path, 3)  # warm
                first, after = _probe(client, path, probes)
                out[f"API {expr or '(no filter)'} first page"] = first
                if after:
                    out[f"API {expr or '(no filter)'} next page"] = after
    finally:
        stop(api)
    for expr in FILTERS[:4]:
        runs = []
        for _ in range(cli_runs):
            t0 = time.perf_counter()
            subprocess.run(
                [*cmd, "tasks", "--filter", expr, "--limit", str(SCREENFUL), "--json"],
                env=env,
                capture_output=True,
                check=True,
            )
            runs.append((time.perf_counter() - t0) * 1000)
        out[f"CLI tasks --filter {expr} (whole process, least)"] = [min(runs)]
    return out


def run_million(quick: bool, workdir: Path) -> int:
    print_header("bench.api --million", quick, workdir)
    sizes = QUICK_SIZES if quick else SIZES
    probes, cli_runs = (40, 2) if quick else (PROBES, CLI_RUNS)
    results = {}
    for n in sizes:
        db, store = workdir / f"ledger-{n}.db", workdir / f"objects-{n}"
        built = asyncio.run(build(Settings(db_url=sqlite_url(db), store_root=store), n))
        print(f"set-up: {n} tasks built in {built.seconds:.1f} s (not measured)", flush=True)
        results[n] = _measure(db, store, probes, cli_runs)
    small, large = sizes
    label = f"{large // 1000}k"
    rows = []
    for name, big in results[large].items():
        # A filter with one page at 1k has no "next page" there.
        little = results[small].get(name)
        small_p50 = percentile(little, 0.5) if little else float("nan")
        rows.append(
            [
                name,
                fmt_num(small_p50, 1),
                fmt_num(percentile(big, 0.5), 1),
                fmt_num(percentile(big, 0.99), 1),
                f"{ratio(percentile(big, 0.5), small_p50):.2f}x",
            ]
        )
    print_table(
        f"task lists, ms ({load_line()})",
        ["list", "1k p50", f"{label} p50", f"{label} p99", f"{label}/1k"],
        rows,
    )
    firsts = [v for k, v in results[large].items() if k.startswith("API") and "first" in k]
    targets = [
        Target(
            f"API first page p99 at {label}, slowest filter, ms",
            max(percentile(v, 0.99) for v in firsts),
            PAGE_P99_TARGET_MS,
            "<=",
            "ms",
        )
    ]
    print_targets(targets)
    return 0 if all(t.passed for t in targets) else 1


if __name__ == "__main__":  # pragma: no cover - run through bench.api --million
    sys.exit(run_million("--quick" in sys.argv, Path(sys.argv[-1])))
