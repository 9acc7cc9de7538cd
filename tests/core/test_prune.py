"""``ingestdesk prune`` removes what the store holds that nothing needs: unfinished
incoming files and objects no document or provider result references, once they are
old enough that no upload in flight can be about to use them; ``--dry-run`` counts
first. A real ledger (SQLite and PostgreSQL), a real store, the real CLI."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path

import pytest

from bench.million import build
from core import Settings
from core.cli import main, maintenance
from core.cli.maintenance import STALE_AFTER_S
from core.store import INCOMING_PREFIX, ObjectStore
from tests.api.conftest import cli


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def _prune(settings: Settings, *args: str) -> dict[str, object]:
    run = cli(settings, "prune", "--json", *args)
    assert run.returncode == 0, run.stderr
    return dict(json.loads(run.stdout))


def test_prune_removes_stale_leftovers_and_nothing_in_use(
    settings: Settings, tmp_path: Path
) -> None:
    note = tmp_path / "kept.md"
    note.write_bytes(b"# a document the ledger references\n")
    added = cli(settings, "upload", str(note), "--json")
    assert added.returncode == 0, added.stderr
    store = ObjectStore(settings.store_root)
    [(referenced_key, referenced)] = list(store.objects())
    _age(referenced, 10 * STALE_AFTER_S)

    orphan_key, _ = store.put(b"stored by a request that was then refused")
    orphan = store.path_of(orphan_key)
    _age(orphan, 2 * STALE_AFTER_S)
    young_key, _ = store.put(b"just written by an upload in flight")
    partial = settings.store_root / f"{INCOMING_PREFIX}killed-mid-write"
    partial.write_bytes(b"x" * 1000)
    _age(partial, 2 * STALE_AFTER_S)
    in_flight = settings.store_root / f"{INCOMING_PREFIX}arriving-now"
    in_flight.write_bytes(b"y" * 10)
    expected_bytes = orphan.stat().st_size + 1000

    counted = _prune(settings, "--dry-run")
    assert counted["dry_run"] is True
    assert (counted["incoming_files_removed"], counted["objects_removed"]) == (1, 1)
    assert counted["bytes_removed"] == expected_bytes
    assert orphan.exists() and partial.exists()  # a dry run removes nothing

    removed = _prune(settings)
    assert (removed["incoming_files_removed"], removed["objects_removed"]) == (1, 1)
    assert removed["bytes_removed"] == expected_bytes
    assert not orphan.exists() and not partial.exists()
    assert store.exists(referenced_key) and store.exists(young_key) and in_flight.exists()
    # The document still reads its original.
    shown = cli(settings, "documents", "--json")
    assert shown.returncode == 0 and "kept.md" in shown.stdout
    assert _prune(settings)["objects_removed"] == 0


def test_an_old_object_found_again_by_an_upload_is_young_again(tmp_path: Path) -> None:
    """An upload of bytes already stored, long ago and orphaned, touches the object:
    prune cannot remove it between that upload's check and its commit."""
    store = ObjectStore(tmp_path / "store")
    key, _ = store.put(b"the same bytes twice")
    _age(store.path_of(key), 2 * STALE_AFTER_S)
    store.put(b"the same bytes twice")
    assert time.time() - store.path_of(key).stat().st_mtime < STALE_AFTER_S


def test_a_long_prune_of_tasks_says_how_far_it_got(
    settings: Settings, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A million tasks take minutes to prune: a person sees a line every
    PROGRESS_EVERY_S (here every batch) with what is removed so far; --json keeps
    stdout one value."""
    asyncio.run(build(settings, 1_000))
    monkeypatch.setattr(maintenance, "PROGRESS_EVERY_S", 0.0)
    for name in [k for k in os.environ if k.startswith("INGESTDESK_")]:
        monkeypatch.delenv(name)
    common = ["--db", settings.db_url, "--store", str(settings.store_root), "prune"]
    assert main([*common, "--tasks-older-than", "30", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)  # one value, no progress lines
    assert answer["tasks_removed"] > 0 and answer["batches"] > 1

    assert main([*common, "--tasks-older-than", "1", "--include-failed"]) == 0
    lines = capsys.readouterr().out.splitlines()
    said = [line for line in lines if line.startswith("pruning: ")]
    removed = [int(line.split()[1]) for line in said]
    assert len(removed) > 1 and removed == sorted(removed) and removed[0] > 0
    total = int(lines[-1].split()[1])  # "removed N succeeded, cancelled and failed tasks…"
    assert lines[-1].startswith("removed ") and total == removed[-1]
    # Each line says of how many, the share done, and about how long is left.
    progress = re.compile(
        r"^pruning: (\d+) of (\d+) tasks \((\d+) %\) and \d+ history rows removed so far "
        r"\(\d+ tasks/s, about \d+ (s|min) left\)$"
    )
    for line in said:
        match = progress.match(line)
        assert match, line
        done, of, share = map(int, match.groups()[:3])
        assert of == total and share == 100 * done // total, line
