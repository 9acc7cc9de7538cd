"""bench.dashboard still runs: ``--quick`` exits 0 and prints every figure it promises.

No timing is asserted: the figures depend on the machine and its load, and the bench
reports them against the issue's targets (PASS/MISS) itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
BENCH_TIMEOUT_S = 240.0  # seconds; a quick run takes about a minute on a busy 2-CPU box

RATIO_LINES = (  # --quick: ledgers of 1 000 and 20 000 tasks
    "ratio list_tasks(limit=None)/tasks_since(R), 1k:",
    "ratio list_tasks(limit=None)/tasks_since(R), 20k:",
    "ratio CPU under load 20k/1k:",
    "ratio CPU idle 20k/1k:",
)
TABLES = (
    "-- reference (issue): one tasks_since(R) vs one list_tasks(limit=None)",
    "-- dashboard process CPU, % of one core",
    "-- key press to repainted frame, ms",
    "-- startup and memory of the dashboard process",
    "-- targets (from the issue)",
)
TARGET_ROWS = (
    "CPU under load, 1k",
    "CPU idle, 20k",
    "cursor key to repaint p99, 20k",
    "status key to repaint p99, 20k",
    "startup, 20k",
    "peak RSS, 20k",
)


@pytest.mark.slow
def test_quick_dashboard_bench_prints_its_figures(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    result = subprocess.run(
        [sys.executable, "-m", "bench.dashboard", "--quick", "--dir", str(tmp_path)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=BENCH_TIMEOUT_S,
    )
    out = result.stdout
    assert result.returncode == 0, f"bench.dashboard failed:\n{out}\n{result.stderr}"
    lines = out.splitlines()
    for expected in RATIO_LINES:
        matching = [line for line in lines if line.startswith(expected)]
        assert matching, f"no line starting {expected!r}:\n{out}"
        value = matching[0][len(expected) :].split()[0]  # e.g. "1.052x"
        assert value.endswith("x"), matching[0]
        float(value[:-1])
    for heading in TABLES:
        assert any(line.startswith(heading) for line in lines), f"no table {heading!r}:\n{out}"
    for row in TARGET_ROWS:
        found = [line for line in lines if line.startswith(row)]
        assert found, f"no target row {row!r}:\n{out}"
        assert found[0].rstrip().endswith(("PASS", "MISS")), found[0]
    assert "targets:" in out, out
    assert not list(tmp_path.iterdir()), "the bench left files behind"
