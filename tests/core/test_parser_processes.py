"""How many parser processes a worker runs: by default one per CPU, at most its
concurrency, started only when two parses are wanted at once. Watched through /proc,
as an operator would with ``ps``, on a real ``ingestdesk worker`` process."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pytest

from core.cli.worker import parser_processes
from core.ingest.parse_pool import default_parsers, usable_cpus
from tests import hostile
from tests.core.test_cli import CLI_TIMEOUT_S, added, start_core_cli, task_row, write
from tests.core.test_worker_faults import LONG_PDF_PAGES
from tests.hostile import children_of


def long_pdf(title: str) -> bytes:
    # Different bytes: the same content twice would be parsed once and reused.
    return hostile.make_pdf([f"{title} page {i} ledger lease" for i in range(LONG_PDF_PAGES)])


def worker_args(*, concurrency: int, parsers: int | None) -> argparse.Namespace:
    return argparse.Namespace(concurrency=concurrency, parsers=parsers)


def test_the_default_is_one_parser_per_cpu_up_to_the_concurrency() -> None:
    cpus = usable_cpus()
    assert default_parsers(1) == 1
    assert default_parsers(2) == min(2, cpus)
    assert default_parsers(256) == cpus
    assert parser_processes(worker_args(concurrency=2, parsers=None)) == min(2, cpus)


def test_parsers_given_are_kept_but_never_more_than_the_tasks_in_flight() -> None:
    assert parser_processes(worker_args(concurrency=4, parsers=3)) == 3
    assert parser_processes(worker_args(concurrency=2, parsers=8)) == 2
    assert parser_processes(worker_args(concurrency=2, parsers=1)) == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="watches /proc")
@pytest.mark.skipif(usable_cpus() < 2, reason="one CPU: the default is one parser")
def test_a_default_worker_parses_two_big_documents_at_once(tmp_path: Path) -> None:
    # Each PDF keeps a parser busy for seconds: with one parser process the second
    # would wait for the first, and the worker would never have two children.
    tasks = added(
        tmp_path,
        write(tmp_path / "first.pdf", long_pdf("First")),
        write(tmp_path / "second.pdf", long_pdf("Second")),
    )
    proc = start_core_cli(tmp_path, "worker", "--until-idle", "--json")
    most = 0
    deadline = time.monotonic() + hostile.BUSY_WAIT_S
    try:
        while proc.poll() is None and most < 2 and time.monotonic() < deadline:
            most = max(most, len(children_of(proc.pid)))
            time.sleep(0.01)
        out, err = proc.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert most == 2
    outcomes = json.loads(out)["outcomes"]
    assert outcomes == {task["task_id"]: "succeeded" for task in tasks}
    for task in tasks:
        assert task_row(tmp_path, task["task_id"])["status"] == "succeeded"
