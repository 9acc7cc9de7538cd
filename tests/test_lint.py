"""The checks CI relies on run with the test suite, so a green run means clean code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "--quiet", "."],
        ["ruff", "format", "--check", "--quiet", "."],
    ],
    ids=["ruff-check", "ruff-format"],
)
def test_ruff(command: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_on_core_and_tui() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout[-4000:]


def test_tui_talks_to_the_ledger_only_through_core() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "tui").rglob("*.py")
        if any(
            word in path.read_text(encoding="utf-8")
            for word in ("import sqlalchemy", "from sqlalchemy", "import sqlite3", "aiosqlite")
        )
    ]
    assert offenders == []
