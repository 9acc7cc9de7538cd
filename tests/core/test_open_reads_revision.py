"""Opening a ledger reads its schema revision in a read transaction: a command on an
up-to-date ledger waits for no writer (the upgrade, which needs the write lock, runs
only when the revision is not the head)."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path

from core import Ledger, Settings, sqlite_url
from core.ledger.migrate import SCHEMA_HEAD
from tests.old_ledgers import set_back

REPO = Path(__file__).resolve().parents[2]
# Less than the ledger's busy timeout (30 s): a command that queued for the write
# lock would still be waiting when this ends it.
COMMAND_TIMEOUT_S = 20.0


def test_a_read_opens_while_a_writer_holds_the_write_lock(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    settings = Settings(db_url=sqlite_url(db), store_root=tmp_path / "store")

    async def create() -> None:
        async with await Ledger.open(settings) as ledger:
            doc = await ledger.operator.upload(b"a note", "note.md", actor="test")
            await ledger.operator.submit(doc.document_id, actor="test")

    asyncio.run(create())
    writer = sqlite3.connect(db, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")  # what a worker's write transaction holds
        where = ["--db", str(db), "--store", str(tmp_path / "store")]
        run = subprocess.run(
            [sys.executable, "-m", "core.cli", *where, "--json", "tasks"],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            cwd=tmp_path,
            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        )
    finally:
        writer.rollback()
        writer.close()
    assert run.returncode == 0, run.stderr
    assert '"note.md"' in run.stdout


def test_an_old_ledger_is_still_upgraded_on_open(tmp_path: Path) -> None:
    """The read that finds the schema at its head must not hide one that is not."""
    db = tmp_path / "ledger.db"
    settings = Settings(db_url=sqlite_url(db), store_root=tmp_path / "store")

    async def revision() -> str | None:
        async with await Ledger.open(settings) as ledger:
            return await ledger.schema_revision()

    assert asyncio.run(revision()) == SCHEMA_HEAD
    set_back(db, "0015")
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == ("0015",)
    assert asyncio.run(revision()) == SCHEMA_HEAD
    with sqlite3.connect(db) as conn:  # and 0016's tables are back
        assert conn.execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'task_counters'"
        ).fetchone() == (1,)


def test_a_command_says_once_that_it_upgrades_an_old_ledger(tmp_path: Path) -> None:
    """Building 0019's indexes over a million tasks takes seconds, and the command sat
    silent meanwhile. One line on stderr (stdout stays the command's answer), and none
    for a new ledger or one at the head."""
    db = tmp_path / "ledger.db"
    where = ["--db", str(db), "--store", str(tmp_path / "store")]
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nRestart the worker.\n")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "core.cli", *where, *args],
            capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, cwd=tmp_path,
            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        )  # fmt: skip

    created = cli("add", str(note))
    assert created.returncode == 0 and created.stderr == "", created
    set_back(db, "0018")
    upgraded = cli("--json", "tasks")
    assert upgraded.returncode == 0, upgraded.stderr
    assert upgraded.stderr == (
        f"upgrading the ledger's schema from revision 0018 to {SCHEMA_HEAD}; "
        "a large ledger takes a while\n"
    )
    assert '"note.md"' in upgraded.stdout
    again = cli("--json", "tasks")
    assert again.returncode == 0 and again.stderr == "", again
