"""A cancel reaches a task waiting on a slow remote provider within about a second,
not at the call's time-out; the request it abandoned stays ``unknown`` for reconcile,
and nothing is sent again. Real provider process, real worker process."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core import Ledger, Settings, TaskStatus, sqlite_url
from core.states import RequestState, Stage
from tests.core.test_provider_drills import DemoProvider, note, start_provider, submit
from tests.core.test_worker import start_cli

SLOW_S = 20.0  # the provider's delay: far beyond the cancel's budget
CANCEL_BUDGET_S = 3.0  # a heartbeat (1 s) plus a loaded machine's slack


@pytest.fixture
def slow_provider(tmp_path: Path) -> Iterator[DemoProvider]:
    started = start_provider(tmp_path / "provider.sqlite3", "--slow", str(SLOW_S))
    yield started
    if started.process.poll() is None:
        started.stop()


async def _wait_for(ledger: Ledger, task_id: str, stage: Stage, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        task = await ledger.reads.get_task(task_id)
        if task.status is TaskStatus.RUNNING and task.stage is stage:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"task {task_id} never reached {stage.value}")


async def test_a_cancel_abandons_a_slow_provider_call_at_once(
    tmp_path: Path, slow_provider: DemoProvider
) -> None:
    settings = Settings(db_url=sqlite_url(tmp_path / "l.db"), store_root=tmp_path / "o")
    ledger = await Ledger.open(settings)
    try:
        task_id = await submit(ledger, note(1), "slow.md")
        worker = start_cli(settings, "worker", "--loop", "--provider", slow_provider.url)
        try:
            await _wait_for(ledger, task_id, Stage.EMBEDDING)
            await asyncio.sleep(0.5)  # the call is out, waiting on the provider
            cancelled_at = time.monotonic()
            await ledger.operator.cancel(task_id, actor="op", reason="too slow")
            # The worker lets go of the task: it logs the loss once its heartbeat finds
            # the task cancelled, long before the provider would answer.
            assert worker.stdout is not None  # the worker's log
            lost = ""
            with contextlib.suppress(TimeoutError):
                while not lost:
                    line = await asyncio.wait_for(
                        asyncio.to_thread(worker.stdout.readline), SLOW_S / 2
                    )
                    if f"lost task={task_id[:8]}" in line:
                        lost = line
            waited = time.monotonic() - cancelled_at
            assert lost, "the worker never let go of the cancelled task"
            assert waited < CANCEL_BUDGET_S, f"the cancel took {waited:.1f}s to reach the call"
        finally:
            worker.terminate()
            worker.communicate(timeout=30)
        (request,) = await ledger.providers.for_task(task_id)
        assert request.state is RequestState.UNKNOWN  # for reconcile, never resent blindly
        assert slow_provider.submits_of(request.request_key) == 1
        task = await ledger.reads.get_task(task_id)
        assert task.status is TaskStatus.CANCELLED
    finally:
        await ledger.close()
