"""``ingestdesk demo --faults``: the demo provider as a child process, started and
stopped with the dashboard (also when it fails), and the in-process workers
embedding through it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from core import Settings, TaskStatus, sqlite_url
from core.ingest.http_provider import HttpProvider
from core.ingest.providers import NotSent
from core.states import RequestState
from tests.tui.conftest import APP_SIZE, Seeded, submit, wait_for
from tests.tui.driving import dashboard
from tui import app as app_module
from tui.app import IngestDeskApp
from tui.cli import build_parser
from tui.provider_process import (
    PROVIDER_DB_FILE,
    PROVIDER_LOG_FILE,
    ProviderProcess,
    ProviderStartFailed,
    faulty_provider,
)
from tui.widgets.counts import ProviderLine

POLL_S = 0.1  # seconds


async def gone(url: str) -> bool:
    """Whether nothing answers at ``url`` any more."""
    try:
        provider = await HttpProvider.connect(url, timeout_s=2.0)
    except NotSent:
        return True
    await provider.aclose()
    return False


async def test_the_provider_runs_for_the_block_and_stops_after_it(tmp_path: Path) -> None:
    async with faulty_provider(tmp_path) as provider:
        url = provider.endpoint
        assert url.startswith("http://127.0.0.1:")
        assert provider.name and provider.dimensions > 0
        assert not await gone(url)
    assert await gone(url)
    assert (tmp_path / PROVIDER_DB_FILE).is_file()
    assert (tmp_path / PROVIDER_LOG_FILE).is_file()


async def test_the_provider_stops_when_the_block_fails(tmp_path: Path) -> None:
    urls: list[str] = []

    async def dashboard_that_breaks() -> None:
        async with faulty_provider(tmp_path) as provider:
            urls.append(provider.endpoint)
            raise RuntimeError("the dashboard broke")

    with pytest.raises(RuntimeError, match="the dashboard broke"):
        await dashboard_that_breaks()
    assert urls and await gone(urls[0])


async def test_a_provider_that_exits_at_once_is_one_line(tmp_path: Path) -> None:
    script = "import sys; sys.stderr.write('address already in use\\n'); sys.exit(1)"
    with pytest.raises(ProviderStartFailed) as failed:
        await ProviderProcess.start(tmp_path, command=[sys.executable, "-c", script])
    assert str(failed.value) == (
        "the demo provider exited instead of its URL: address already in use"
    )


async def test_a_silent_provider_is_stopped_not_left_behind(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    )
    with pytest.raises(ProviderStartFailed, match="said nothing for 1 s"):
        await ProviderProcess.start(tmp_path, command=[sys.executable, "-c", script], timeout_s=1.0)
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # ended and reaped


async def test_the_dashboard_stops_its_provider_even_when_it_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    async def broken(self: IngestDeskApp, *args: Any, **kwargs: Any) -> int:
        assert self.workforce is not None and self.workforce.provider is not None
        seen["url"] = self.workforce.provider.endpoint
        seen["up"] = not await gone(seen["url"])
        raise RuntimeError("the dashboard broke")

    monkeypatch.setattr(IngestDeskApp, "run_async", broken)
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "objects")
    with pytest.raises(RuntimeError, match="the dashboard broke"):
        await app_module._run(settings, workers=0, faults_dir=tmp_path)
    assert seen["up"] and await gone(seen["url"])


def test_demo_takes_faults() -> None:
    assert build_parser().parse_args(["demo", "somewhere", "--faults"]).faults
    assert not build_parser().parse_args(["demo"]).faults


async def test_workers_embed_through_the_provider(empty: Seeded, tmp_path: Path) -> None:
    task = await submit(empty, "embed-me.md")
    # No faults: this is about the plumbing, the provider drills live in core's tests.
    async with faulty_provider(tmp_path / "provider", faults=()) as provider:
        app = IngestDeskApp(
            empty.ledger,
            workers=1,
            provider=provider,
            clock=empty.clock,
            poll_interval_s=POLL_S,
            worker_prefix="t",
        )
        async with app.run_test(size=APP_SIZE) as pilot:
            await wait_for(
                pilot,
                lambda: app.mirror.counts[TaskStatus.SUCCEEDED] == 1,
                what="the task to be embedded through the provider",
            )
            line = dashboard(app).query_one(ProviderLine)
            app.poll_soon()  # the provider counts are a slow read
            await wait_for(pilot, lambda: line.display, what="the provider line")
            await pilot.press("q")
            await wait_for(pilot, lambda: not app.is_running)
    requests = await empty.ledger.providers.for_task(task.task_id)
    assert requests and {r.state for r in requests} == {RequestState.DONE}
    assert all(r.endpoint == provider.endpoint for r in requests)


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (an exited one waiting to be reaped is not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    state = next(line for line in status.splitlines() if line.startswith("State:"))
    return "Z" not in state.split()[1]


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_dashboard_killed_with_kill_9_leaves_no_provider_behind(tmp_path: Path) -> None:
    """The demo's provider, started as the dashboard starts it, ends when its starter
    is killed with SIGKILL (which gives the starter no chance to stop it)."""
    import signal
    import subprocess
    import time

    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import asyncio, sys\n"
            "from pathlib import Path\n"
            "from tui.provider_process import ProviderProcess\n"
            "async def main():\n"
            "    provider = await ProviderProcess.start(Path(sys.argv[1]))\n"
            "    print(provider.process.pid, flush=True)\n"
            "    await asyncio.sleep(3600)\n"
            "asyncio.run(main())\n",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    assert starter.stdout is not None
    provider_pid = int(starter.stdout.readline())
    assert _running(provider_pid)
    starter.send_signal(signal.SIGKILL)
    starter.wait(10)
    starter.stdout.close()
    deadline = time.monotonic() + 10
    while _running(provider_pid) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    try:
        assert not _running(provider_pid), "the provider outlived its dashboard"
    finally:
        if _running(provider_pid):
            os.kill(provider_pid, signal.SIGKILL)
