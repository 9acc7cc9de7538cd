"""What a command imports is most of its start-up time (``python -m bench.startup``
prints it): each command imports what it needs when it needs it. These run the
installed command's entry point in a fresh interpreter and read its ``sys.modules``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from core import Ledger, Settings, sqlite_url

REPO = Path(__file__).resolve().parents[2]
# Never needed to build the command line, print a version, the help or the error codes.
HEAVY = (
    "sqlalchemy",
    "numpy",
    "wordllama",
    "textual",
    "fastapi",
    "uvicorn",
    "httpx",
    "pypdf",
    "pypdfium2",
    "alembic",
)
# Nor these, which cost ~10-20 ms each: the event loop, the parser pool, the look-alike
# tables for names (only a name check needs them), logging.
LIGHT_ONLY = ("asyncio", "multiprocessing", "confusable_homoglyphs", "logging")
PROGRAM = (
    "import sys\n"
    "from tui.cli import main\n"
    "try:\n"
    "    code = main(sys.argv[1:])\n"
    "except SystemExit as exc:  # --help\n"
    "    code = exc.code\n"
    "assert not code, code\n"
    "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
)


def modules_loaded_by(*argv: str, cwd: Path) -> set[str]:
    """Every module ``ingestdesk ARGV`` has imported when it is done."""
    run = subprocess.run(
        [sys.executable, "-c", PROGRAM, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(cwd)},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return set(run.stderr.splitlines()[-1].split())


def loaded_by(*argv: str, cwd: Path) -> set[str]:
    """The top-level packages ``ingestdesk ARGV`` has imported when it is done."""
    return {name.split(".")[0] for name in modules_loaded_by(*argv, cwd=cwd)}


def make_ledger(tmp_path: Path) -> tuple[str, ...]:
    """A ledger with one queued task; the global options that name it."""
    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "store")

    async def create() -> None:
        async with await Ledger.open(settings) as ledger:
            doc = await ledger.operator.upload(b"a note", "note.md", actor="test")
            await ledger.operator.submit(doc.document_id, actor="test")

    asyncio.run(create())
    return ("--db", str(tmp_path / "ledger.db"), "--store", str(tmp_path / "store"))


@pytest.mark.parametrize("argv", [("--version",), ("--help",), ("errors",), ("formats",)])
def test_commands_that_open_nothing_import_nothing_heavy(
    argv: tuple[str, ...], tmp_path: Path
) -> None:
    loaded = loaded_by(*argv, cwd=tmp_path)
    assert "core" in loaded  # it did run
    assert sorted(loaded & {*HEAVY, *LIGHT_ONLY}) == []
    assert not (tmp_path / ".ingestdesk").exists()  # and opened no ledger


# The modules of the ledger's other roles (operator actions, the worker's queue and its
# statements, campaigns, versions, tokens, the provider ledgers), Alembic (the schema
# is at its head: only an upgrade needs it) and the parts of SQLAlchemy a SQLite
# ledger never uses: a read of the ledger imports none of them.
NOT_FOR_A_READ = (
    "core.ledger.actions",
    "core.ledger.queue",
    "core.ledger.campaigns",
    "core.ledger.versions",
    "core.ledger.tokens",
    "core.ledger.idempotency",
    "core.ledger.provider_review",
    "core.ledger.chunk_writes",
    "core.ingest.worker",
    "core.ingest.pipeline",
    "alembic",
    "sqlalchemy.orm",
    "sqlalchemy.ext.asyncio",
    "sqlalchemy.dialects.postgresql",
)


@pytest.mark.parametrize(
    "argv",
    [("tasks",), ("documents",), ("task", "ID"), ("search", "words", "--mode", "keyword")],
)
def test_a_read_of_the_ledger_loads_no_model_ui_or_server(
    argv: tuple[str, ...], tmp_path: Path
) -> None:
    """A read needs SQLAlchemy and asyncio, and nothing else heavy: not the model
    (keyword search embeds no query), not textual, not the API, not the look-alike
    tables (the default actor is looked up only when an action records it), not
    the other roles' modules nor Alembic."""
    where = make_ledger(tmp_path)
    if argv == ("task", "ID"):
        # The one task's id, read the way a person would.
        listed = subprocess.run(
            [sys.executable, "-m", "core.cli", *where, "--json", "tasks"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        )
        assert listed.returncode == 0, listed.stderr
        argv = ("task", json.loads(listed.stdout)[0]["task_id"])
    modules = modules_loaded_by(*where, *argv, cwd=tmp_path)
    loaded = {name.split(".")[0] for name in modules}
    assert "sqlalchemy" in loaded  # it did read the ledger
    unwanted = {*HEAVY, "confusable_homoglyphs", "multiprocessing"} - {"sqlalchemy"}
    assert sorted(loaded & unwanted) == []
    assert sorted(m for m in modules if m.startswith(NOT_FOR_A_READ)) == []


def test_an_action_still_records_the_login_name_as_its_actor(tmp_path: Path) -> None:
    """The default actor is looked up late, and still looked up: an upload's history
    names the login name (``USER`` here), and a reserved one is not used."""
    note = tmp_path / "note.md"
    note.write_text("# a note\n", encoding="utf-8")
    for user, expected in (("alice", "alice"), ("system", "uid-")):
        db = tmp_path / f"{user}.db"
        run = subprocess.run(
            [sys.executable, "-m", "core.cli", "--db", str(db), "--json", "upload", str(note)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env={"PYTHONPATH": str(REPO), "USER": user, "LOGNAME": user, "HOME": str(tmp_path)},
        )
        assert run.returncode == 0, run.stderr

        async def history(path: Path = db) -> list[str]:
            settings = Settings(db_url=sqlite_url(path), store_root=tmp_path / ".ingestdesk")
            async with await Ledger.open(settings) as ledger:
                [doc] = await ledger.reads.list_documents(limit=None)
                return [e.actor for e in await ledger.reads.document_history(doc.document_id)]

        actors = asyncio.run(history())
        assert actors and all(a.startswith(expected) for a in actors), actors


def test_every_lazily_exported_name_resolves() -> None:
    """``core`` and ``core.ledger`` import their names when first asked for: each name
    they export is found (a missing entry would surface only in the caller that asks)."""
    import core
    import core.ledger

    for package in (core, core.ledger):
        missing = [name for name in package.__all__ if getattr(package, name, None) is None]
        assert missing == [], package.__name__
    with pytest.raises(AttributeError):
        core.ledger.NoSuchName  # noqa: B018
