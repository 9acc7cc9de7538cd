"""Names a person types that look alike are one name to a reader of the history:
``--actor`` and ``--worker-id`` are kept normalised (NFKC, trimmed), and refused when
they mix scripts or (``--actor``) look like a name ingestdesk records by itself.
The token names the API uses as actors: tests/core/test_tokens.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CYRILLIC_O = "\u043e"


def core_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "core.cli", "--db", str(tmp_path / "l.db"), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=None,
    )


@pytest.mark.parametrize(
    "actor",
    [
        "local",
        "System",
        "\uff2c\uff2f\uff23\uff21\uff2c",  # full-width LOCAL
        f"l{CYRILLIC_O}cal",  # a Cyrillic o
        f"ali{chr(0x441)}e",  # a Cyrillic es among Latin letters
    ],
)
def test_an_actor_that_impersonates_or_mixes_scripts_is_refused(tmp_path: Path, actor: str) -> None:
    doc = tmp_path / "a.md"
    doc.write_text("some text\n")
    refused = core_cli(tmp_path, "--actor", actor, "add", str(doc))
    assert refused.returncode == 2, refused
    [line] = refused.stderr.strip().splitlines()
    assert "reserved" in line or "mixes scripts" in line, line
    assert not (tmp_path / "l.db").exists()  # refused before anything was written


def test_an_actor_is_kept_as_nfkc_trimmed(tmp_path: Path) -> None:
    doc = tmp_path / "a.md"
    doc.write_text("some text\n")
    wide_alice = "\uff41\uff4c\uff49\uff43\uff45 "
    added = core_cli(tmp_path, "--actor", wide_alice, "add", str(doc), "--json")
    assert added.returncode == 0, added.stderr
    task_id = json.loads(added.stdout)[0]["task_id"]
    shown = core_cli(tmp_path, "task", task_id, "--json")
    assert {e["actor"] for e in json.loads(shown.stdout)["history"]} == {"alice"}


def test_a_worker_id_that_mixes_scripts_is_refused(tmp_path: Path) -> None:
    refused = core_cli(tmp_path, "worker", "--until-idle", "--worker-id", f"w{CYRILLIC_O}rker")
    assert refused.returncode == 2, refused
    assert "mixes scripts" in refused.stderr
