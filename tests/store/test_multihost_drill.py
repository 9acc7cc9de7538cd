"""The multi-host drill: one real PostgreSQL, one real S3-compatible server, two
worker processes that share no directory (each its own working folder, HOME and
TMPDIR; the originals only in the bucket), uploads made from a third process. The
S3 server is stopped mid-batch (once DONE_BEFORE_STOP tasks have succeeded), kept
down for OUTAGE_S and started again: every document still ends succeeded, exactly
once, with chunk sets identical to a single-host run on a local folder."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from core import Ledger, Settings, sqlite_url
from core.states import TaskStatus
from tests.store import netns
from tests.store.conftest import REPO_ROOT, SECRET_KEY, S3Server, aws_env
from tests.store.netns import Host

DOCUMENTS = 60  # documents in the batch
DONE_BEFORE_STOP = 8  # tasks succeeded when the S3 server is stopped
OUTAGE_S = 10.0  # seconds the S3 server stays down
DRILL_TIMEOUT_S = 300.0  # seconds for the whole batch, outage included
POLL_S = 0.1  # seconds between looks at the ledger
WORKERS = ("host-a", "host-b")

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("aws_credentials")]


def _corpus(folder: Path) -> list[Path]:
    folder.mkdir()
    files = []
    for i in range(DOCUMENTS):
        path = folder / f"doc-{i:03d}.md"
        paragraphs = [
            f"## Part {j}\n\nDocument {i} paragraph {j}: the shared ledger keeps claims "
            f"exactly once while the originals wait in the bucket ({i * 31 + j})."
            for j in range(12)
        ]
        path.write_text(f"# Document {i}\n\n" + "\n\n".join(paragraphs) + "\n")
        files.append(path)
    return files


async def _chunks_by_name(settings: Settings) -> dict[str, list[tuple[int, str]]]:
    async with await Ledger.open(settings, create=False) as ledger:
        documents = await ledger.reads.list_documents(limit=None)
        return {
            d.filename: [(c.ordinal, c.text) for c in await ledger.reads.chunks(d.document_id)]
            for d in documents
        }


def _cli(settings: Settings, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tui.cli", "--db", settings.db_url]
    command += ["--store", settings.store_url or str(settings.store_root)]
    if settings.s3_endpoint:
        command += ["--s3-endpoint", settings.s3_endpoint]
    env = aws_env() | {"HOME": str(cwd), "TMPDIR": str(cwd), "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [*command, *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env
    )


def _start_worker(
    settings: Settings, name: str, home: Path, host: Host | None
) -> subprocess.Popen[str]:
    """A ``worker --loop`` in a folder of its own; in a namespace of its own when
    ``host`` is given, reaching the services at the host's address."""
    home.mkdir()
    db, endpoint = settings.db_url, settings.s3_endpoint or ""
    if host is not None:
        url = make_url(db)
        db = url.set(host=host.address).render_as_string(hide_password=False)
        endpoint = endpoint.replace("127.0.0.1", host.address)
    command = [sys.executable, "-m", "tui.cli", "--db", db]
    command += ["--store", settings.store_url or "", "--s3-endpoint", endpoint]
    command += ["worker", "--loop", "--worker-id", name, "--embedder", "hashed"]
    env = aws_env() | {"HOME": str(home), "TMPDIR": str(home), "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        command if host is None else host.command(command),
        cwd=home,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


async def _statuses(settings: Settings) -> list[TaskStatus]:
    async with await Ledger.open(settings, create=False) as ledger:
        return [t.status for t in await ledger.reads.list_tasks(limit=None)]


async def _drill(
    shared: Settings, server: S3Server, workers: list[subprocess.Popen[str]]
) -> tuple[int, list[str]]:
    """Wait for DONE_BEFORE_STOP successes, stop the S3 server for OUTAGE_S, start it
    again and wait for every document; then stop the workers. Returns the tasks
    succeeded when the server stopped and what each worker printed."""
    outputs: list[str] = []
    try:
        deadline = time.monotonic() + DRILL_TIMEOUT_S
        while (await _statuses(shared)).count(TaskStatus.SUCCEEDED) < DONE_BEFORE_STOP:
            assert time.monotonic() < deadline, "the workers did not start succeeding"
            await asyncio.sleep(POLL_S)
        server.stop()
        stopped_at = time.monotonic()
        done_at_stop = (await _statuses(shared)).count(TaskStatus.SUCCEEDED)
        # The outage itself lasts OUTAGE_S: meanwhile no task may end for good.
        while time.monotonic() - stopped_at < OUTAGE_S:
            assert TaskStatus.FAILED not in await _statuses(shared)
            await asyncio.sleep(POLL_S * 5)
        server.start()  # the same port, the same objects
        while (statuses := await _statuses(shared)).count(TaskStatus.SUCCEEDED) < DOCUMENTS:
            assert TaskStatus.FAILED not in statuses
            assert time.monotonic() < deadline, f"not all succeeded: {statuses}"
            await asyncio.sleep(POLL_S)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGINT)
        for worker in workers:
            out, _ = worker.communicate(timeout=120)
            outputs.append(out)
    return done_at_stop, outputs


@pytest.mark.parametrize("network", ["processes", "namespaces"])
async def test_two_hosts_one_ledger_one_bucket_ride_out_a_store_restart(
    network: str, pg_url: str, own_s3_server: S3Server, tmp_path: Path
) -> None:
    """``processes``: the workers are plain processes here. ``namespaces``: each in a
    network namespace of its own, over a veth pair (as root)."""
    if network == "namespaces" and (reason := netns.why_not()):
        pytest.skip(reason)
    files = _corpus(tmp_path / "corpus")

    # The single-host reference: one worker, a local folder, a SQLite file.
    alone = tmp_path / "alone"
    alone.mkdir()
    reference = Settings(db_url=sqlite_url(alone / "ledger.db"), store_root=alone / "objects")
    assert _cli(reference, "add", *map(str, files), cwd=alone).returncode == 0
    ran = _cli(reference, "worker", "--until-idle", "--embedder", "hashed", cwd=alone)
    assert ran.returncode == 0, ran.stderr
    expected = await _chunks_by_name(reference)
    assert len(expected) == DOCUMENTS and all(expected.values())

    shared = Settings(
        db_url=pg_url,
        store_root=tmp_path / "no-such-folder",
        store_url=f"s3://{own_s3_server.new_bucket()}/originals",
        s3_endpoint=own_s3_server.endpoint,
    )
    uploader = tmp_path / "uploader"
    uploader.mkdir()
    added = _cli(shared, "add", *map(str, files), "--json", cwd=uploader)
    assert added.returncode == 0, added.stderr
    with contextlib.ExitStack() as stack:
        hosts: list[Host | None] = [None] * len(WORKERS)
        if network == "namespaces":
            ports = [make_url(pg_url).port or 5432, own_s3_server.port]
            hosts = list(stack.enter_context(netns.hosts(len(WORKERS), ports)))
        workers = [
            _start_worker(shared, name, tmp_path / name, host)
            for name, host in zip(WORKERS, hosts, strict=True)
        ]
        done_at_stop, outputs = await _drill(shared, own_s3_server, workers)
    assert done_at_stop < DOCUMENTS, "the batch ended before the outage: not mid-batch"

    tasks = json.loads(_cli(shared, "tasks", "--json", "--limit", "1000", cwd=uploader).stdout)
    assert len(tasks) == DOCUMENTS and {t["status"] for t in tasks} == {"succeeded"}
    assert await _chunks_by_name(shared) == expected  # each exactly once, as on one host
    # Ridden out inside the reads (the client's retries), not by failing attempts.
    again = [t["task_id"] for t in tasks if t["attempt"] != 1]
    assert not again, [line for out in outputs for line in out.splitlines() if "retry" in line]
    assert {t["worker_id"] for t in tasks} == set(WORKERS)  # both hosts did work
    for out in outputs:
        assert "Traceback" not in out and SECRET_KEY not in out
