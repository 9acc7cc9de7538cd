"""Idempotency keys: a repeated request gets the first answer and does nothing new;
the same key with other content is a conflict; keys are forgotten after retention."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from core import (
    BadInput,
    Conflict,
    Ledger,
    Settings,
)
from core.errors import KeyReused
from tests.api.conftest import start_server, stop_server
from tests.conftest import FakeClock
from tests.core.test_cli import (
    EXIT_CONFLICT,
    EXIT_OK,
    MARKDOWN,
    core_cli,
    write,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTE = b"# Runbook\n\nRetry once; then report the task id.\n"


async def count(ledger: Ledger) -> tuple[int, int]:
    return len(await ledger.reads.list_documents()), len(await ledger.reads.list_tasks())


async def test_a_repeated_add_returns_the_first_task_and_adds_nothing(ledger: Ledger) -> None:
    first = await ledger.operator.add_once(NOTE, "runbook.md", key="batch-7/1", submit=True)
    again = await ledger.operator.add_once(NOTE, "renamed.md", key="batch-7/1", submit=True)
    assert (first.replayed, again.replayed) == (False, True)
    assert again.value[1] is not None and first.value[1] is not None
    assert again.value[1].task_id == first.value[1].task_id
    assert await count(ledger) == (1, 1)
    with pytest.raises(KeyReused, match="different request"):
        await ledger.operator.add_once(NOTE + b"!", "runbook.md", key="batch-7/1", submit=True)
    # An upload is not an add: the same key for it is a different request.
    with pytest.raises(Conflict):
        await ledger.operator.add_once(NOTE, "runbook.md", key="batch-7/1", submit=False)
    assert await count(ledger) == (1, 1)


async def test_a_repeated_submit_returns_the_original_task_even_after_it_moved(
    ledger: Ledger,
) -> None:
    doc = await ledger.operator.upload(NOTE, "runbook.md")
    other = await ledger.operator.upload(NOTE + b"?", "other.md")
    first = await ledger.operator.submit_once(doc.document_id, key="s-1")
    await ledger.operator.cancel(first.value.task_id)
    again = await ledger.operator.submit_once(doc.document_id[:8], key="s-1")
    assert again.replayed and again.value.task_id == first.value.task_id
    assert again.value.status.value == "cancelled"
    with pytest.raises(KeyReused):
        await ledger.operator.submit_once(other.document_id, key="s-1")
    assert len(await ledger.reads.list_tasks()) == 1


async def test_concurrent_requests_with_one_key_do_the_work_once(ledger: Ledger) -> None:
    answers = await asyncio.gather(
        *(ledger.operator.add_once(NOTE, "runbook.md", key="race", submit=True) for _ in range(5))
    )
    assert sorted(a.replayed for a in answers) == [False, True, True, True, True]
    assert len({a.value[1].task_id for a in answers if a.value[1]}) == 1
    assert await count(ledger) == (1, 1)


@pytest.mark.parametrize("key", ["", "   ", "k\x1b[2J", "k\nforged", "x" * 256])
async def test_unusable_keys_are_bad_input(ledger: Ledger, key: str) -> None:
    with pytest.raises(BadInput):
        await ledger.operator.add_once(NOTE, "a.md", key=key, submit=True)
    assert await count(ledger) == (0, 0)


async def test_keys_are_forgotten_after_their_retention(ledger: Ledger, clock: FakeClock) -> None:
    await ledger.operator.add_once(NOTE, "a.md", key="old", submit=True)
    clock.advance(6 * 24 * 3600)
    assert await ledger.idempotency.prune() == 0
    clock.advance(2 * 24 * 3600)
    assert await ledger.idempotency.prune() == 1
    # Forgotten: the same key now does the work again.
    fresh = await ledger.operator.add_once(NOTE, "a.md", key="old", submit=True)
    assert not fresh.replayed and await count(ledger) == (2, 2)


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "--db", settings.db_url, "--store",
         str(settings.store_root), *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_cli_takes_an_idempotency_key(settings: Settings, tmp_path: Path) -> None:
    note, other = tmp_path / "note.md", tmp_path / "other.md"
    note.write_bytes(NOTE)
    other.write_bytes(NOTE + b"more\n")
    first = cli(settings, "add", str(note), "--idempotency-key", "nightly-42", "--json")
    again = cli(settings, "add", str(note), "--idempotency-key", "nightly-42", "--json")
    assert first.returncode == again.returncode == 0, again.stderr
    assert json.loads(first.stdout)[0]["task_id"] == json.loads(again.stdout)[0]["task_id"]
    assert (
        "already done under this idempotency key"
        in cli(settings, "add", str(note), "--idempotency-key", "nightly-42").stdout
    )
    clash = cli(settings, "add", str(other), "--idempotency-key", "nightly-42", "--json")
    assert clash.returncode == 3 and json.loads(clash.stdout)["error"]["kind"] == "KeyReused"
    two = cli(settings, "add", str(note), str(other), "--idempotency-key", "k2")
    assert two.returncode == 2 and "exactly one file" in two.stderr
    assert len(json.loads(cli(settings, "tasks", "--json").stdout)) == 1
    pruned = cli(settings, "prune", "--older-than", "0", "--json")
    assert json.loads(pruned.stdout)["idempotency_keys_removed"] == 1


def objects(tmp_path: Path) -> set[Path]:
    return {p for p in (tmp_path / "objects").rglob("*") if p.is_file()}


# A batch refused after its originals were stored (an idempotency key used for other
# content) left them in the store, referenced by no document.
def test_a_refused_batch_leaves_no_orphan_object_and_keeps_shared_ones(tmp_path: Path) -> None:
    a, b = write(tmp_path / "a.md", MARKDOWN), write(tmp_path / "b.md", MARKDOWN + b"other")
    assert core_cli(tmp_path, "add", str(a), "--idempotency-key", "k1").code == EXIT_OK
    kept = objects(tmp_path)
    assert len(kept) == 1

    reused = core_cli(tmp_path, "add", str(b), "--idempotency-key", "k1")
    assert reused.code == EXIT_CONFLICT, reused
    assert objects(tmp_path) == kept  # b's object, stored for nothing, is gone

    # The same bytes as a stored document: the object is shared, and stays.
    shared = core_cli(tmp_path, "upload", str(a), "--idempotency-key", "k1")
    assert shared.code == EXIT_CONFLICT, shared
    assert objects(tmp_path) == kept
    with sqlite3.connect(tmp_path / "ledger.db") as raw:
        (key,) = raw.execute("SELECT object_key FROM documents").fetchone()
    assert (tmp_path / "objects" / key) in kept
    assert core_cli(tmp_path, "worker", "--until-idle").code == EXIT_OK


def test_an_idempotency_key_has_one_limit_and_one_message(
    settings: Settings, tmp_path: Path
) -> None:
    note_file = tmp_path / "n.md"
    note_file.write_bytes(b"# Keys\n\nOne limit.\n")
    longest, too_long = "k" * 255, "k" * 256
    ok = cli(settings, "add", str(note_file), "--idempotency-key", longest)
    assert ok.returncode == 0, ok.stderr
    refused = [cli(settings, "add", str(note_file), "--idempotency-key", k) for k in (too_long,)]
    refused.append(cli(settings, "add", str(note_file), "--idempotency-key", "k" * 400))
    for answer in refused:
        assert answer.returncode == 2, answer.stderr
        assert "idempotency key is longer than 255 characters" in answer.stderr
    server = start_server(settings)
    try:
        with httpx.Client(base_url=server.base, timeout=30) as client:
            upload = {"file": ("n.md", b"# Keys\n\nOver HTTP.\n")}
            key = "Idempotency-Key"
            fits = client.post("/api/documents", files=upload, headers={key: "h" * 255})
            assert fits.status_code == 201, fits.text
            over = client.post("/api/documents", files=upload, headers={key: too_long})
            assert over.status_code == 422, over.text
            assert "idempotency key is longer than 255 characters" in over.text
    finally:
        stop_server(server)
