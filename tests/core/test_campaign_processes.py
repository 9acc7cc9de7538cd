"""Campaigns across real processes, on both backends: a separate search process
looping while another process activates a new index sees one whole index at a time
(never an empty, mixed or failed answer), and a worker process SIGKILLed in the middle
of a re-embedding call loses nothing: its task is reaped, the declared-resend-safe
endpoint is asked once more, and every version ends with exactly one vector set in the
new index while the old one is untouched."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from core import Ledger, Settings
from core.states import IndexState, Stage, TaskStatus
from tests.core.test_campaigns import HASHED, SMALL, drain, snapshot, versions
from tests.core.test_openai_provider import DIMS, MODEL, start_endpoint
from tests.core.test_worker import cli, start_cli

WAIT_S = 180.0  # seconds a condition may take on a loaded 2-core machine
ANSWERS_EACH_SIDE = 6  # answers the search process must give from each index
QUERIES = ["leases expire after thirty seconds", "claims and fencing tokens"]
DOCUMENTS = 4


class Lines:
    """A process's stdout, read line by line in a thread as it comes."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def wait_for(self, condition: Callable[[list[str]], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not condition(list(self.lines)):
            assert self.process.poll() is None or condition(list(self.lines)), (
                what,
                self.lines[-5:],
                self.process.stderr.read() if self.process.stderr else "",
            )
            assert time.monotonic() < deadline, (what, self.lines[-5:])
            time.sleep(0.02)

    def finish(self) -> str:
        """Wait for the process to end; its stderr (its pipes closed)."""
        self.process.wait(timeout=60)
        self._reader.join(timeout=30)
        assert self.process.stdout is not None and self.process.stderr is not None
        self.process.stdout.close()
        with self.process.stderr:
            return self.process.stderr.read()


def answered_by(lines: list[str], index: str) -> int:
    return sum(1 for line in lines if json.loads(line).get("index") == index)


async def prepared(settings: Settings) -> tuple[str, str, Answers]:
    """A ledger whose versions are in the active hashed index and in a ready smaller
    one: both names, and the active index's answer to each search."""
    ledger = await Ledger.open(settings)
    try:
        await versions(ledger, DOCUMENTS, publish=DOCUMENTS)
        old = await ledger.indexes.active()
        assert old is not None and old.key == HASHED
        campaign = await ledger.campaigns.create(SMALL)
        await drain(ledger)
        new = (await ledger.campaigns.progress(campaign.index.id)).index
        assert new.state is IndexState.READY
        return old.name, new.name, await answers(ledger, old.name)
    finally:
        await ledger.close()


Answers = dict[tuple[str, str, str], list[list[object]]]


async def answers(ledger: Ledger, index: str) -> Answers:
    return {
        (index, mode, query): [
            [h.document_id, h.ordinal, h.index]
            for h in (await ledger.reads.find(query, mode=mode, limit=5)).hits
        ]
        for mode in ("vector", "hybrid")
        for query in QUERIES
    }


async def answers_now(settings: Settings, index: str) -> Answers:
    ledger = await Ledger.open(settings)
    try:
        return await answers(ledger, index)
    finally:
        await ledger.close()


def test_a_search_process_looping_through_activate_sees_one_whole_index_at_a_time(
    settings: Settings, tmp_path: Path
) -> None:
    old, new, before = asyncio.run(prepared(settings))
    stop = tmp_path / "stop-searching"
    loop = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.search_loop",
            settings.db_url,
            str(settings.store_root),
            str(stop),
            *QUERIES,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out = Lines(loop)
    try:
        out.wait_for(lambda ls: answered_by(ls, old) >= ANSWERS_EACH_SIDE, "old answers")
        switched = cli(settings, "index", "activate", new)
        assert switched.returncode == 0, switched.stderr
        out.wait_for(lambda ls: answered_by(ls, new) >= ANSWERS_EACH_SIDE, "new answers")
    finally:
        stop.touch()
        errors = out.finish()
    assert loop.returncode == 0, errors
    expected = before | asyncio.run(answers_now(settings, new))
    seen = [json.loads(line) for line in out.lines]
    assert [a for a in seen if "error" in a] == []
    for a in seen:
        assert a["hits"], a  # never empty
        assert {h[2] for h in a["hits"]} == {a["index"]}, a  # never mixed
        assert a["hits"] == expected[(a["index"], a["mode"], a["query"])], a  # whole
    order = [a["index"] for a in seen]
    switch = order.index(new)
    assert set(order[:switch]) == {old} and set(order[switch:]) == {new}


def wait_until(
    condition: Callable[[], bool], what: str, state: Callable[[], object] = lambda: None
) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, (what, state())
        time.sleep(0.05)


def test_a_worker_killed_mid_reembedding_loses_nothing_and_doubles_nothing(
    settings: Settings,
) -> None:
    ids, kept = asyncio.run(published_and_kept(settings))
    endpoint = start_endpoint()
    try:
        spec = f"openai:{MODEL}?url={endpoint.url}&dimensions={DIMS}&resend_safe=true"
        created = cli(settings, "index", "create", spec, "--name", "remote", "--json")
        assert created.returncode == 0, created.stderr
        answer = json.loads(created.stdout)
        assert answer["campaign"]["total"] == DOCUMENTS
        # The declaration is the workers', not the index's: said, not dropped.
        assert answer["worker_options"] == ["resend_safe"]
        # Every reply now waits: the victim's first call is in flight when it dies.
        endpoint.faults(slow_s=600)
        victim = start_cli(
            settings,
            "worker",
            "--embedder",
            spec,
            "--loop",
            "--concurrency",
            "1",
            "--worker-id",
            "victim",
            "--lease",
            "2",
        )  # one task at a time: exactly one call in flight when it dies
        wait_until(lambda: endpoint.stats()["submits"] >= 1, "the victim's first call")
        shown = json.loads(cli(settings, "tasks", "--json").stdout)
        running = [t for t in shown if t["status"] == "running"]
        assert [(t["worker_id"], t["stage"]) for t in running] == [("victim", Stage.EMBEDDING)]
        victim.send_signal(signal.SIGKILL)
        victim.communicate(timeout=30)
        endpoint.faults(slow_s=0)
        rescuer = start_cli(
            settings, "worker", "--embedder", spec, "--loop", "--worker-id", "rescuer"
        )
        try:

            def finished() -> bool:
                shown = json.loads(cli(settings, "index", "show", "remote", "--json").stdout)
                campaign = shown["campaign"]
                return bool(campaign["done"] == campaign["total"] == DOCUMENTS)

            wait_until(
                finished,
                "the campaign to finish",
                lambda: (cli(settings, "tasks").stdout, cli(settings, "review").stdout),
            )
        finally:
            rescuer.send_signal(signal.SIGINT)
            rescuer.communicate(timeout=60)
        stats = endpoint.stats()
    finally:
        endpoint.stop()
    killed = next(t for t in running if t["worker_id"] == "victim")
    final = json.loads(cli(settings, "task", killed["task_id"], "--json").stdout)
    assert (final["status"], final["attempt"], final["worker_id"]) == (
        TaskStatus.SUCCEEDED,
        2,
        "rescuer",
    )
    # One call lost with the victim, sent again once (declared resend-safe); every
    # other version's call once.
    assert stats["submits"] == DOCUMENTS + 1, stats
    asyncio.run(check_vectors(settings, ids, kept))


async def published_and_kept(settings: Settings) -> tuple[list[str], list[tuple[object, ...]]]:
    ledger = await Ledger.open(settings)
    try:
        ids = await versions(ledger, DOCUMENTS, publish=DOCUMENTS - 1)
        return ids, await snapshot(ledger, ids)
    finally:
        await ledger.close()


async def check_vectors(settings: Settings, ids: list[str], kept: list[tuple[object, ...]]) -> None:
    """The old index and every status as they were; each version's chunks, each with
    one vector, in the new index."""
    ledger = await Ledger.open(settings)
    try:
        assert await snapshot(ledger, ids) == kept  # the old index and every status
        remote = next(i for i in await ledger.indexes.list() if i.name == "remote")
        for document_id in ids:
            chunks = await ledger.reads.chunk_records(document_id, HASHED)
            vectors = await ledger.reads.chunk_records(document_id, remote.key)
            assert [(c.ordinal, c.text) for c in vectors] == [(c.ordinal, c.text) for c in chunks]
            assert all(v.embedding for v in vectors)
    finally:
        await ledger.close()
