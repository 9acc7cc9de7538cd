"""The shape of the code: one idea per file, and dependencies that run one way.

A file over 600 lines, or two modules importing each other, is where a second idea
moved in. Imports under ``if TYPE_CHECKING:`` count: a screen that imports the app
class only for its type still knows about the app.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "tui")
MAX_LINES = 600


def _sources() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    return modules


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    at_import_time = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        for target in targets:
            if target in modules and target != name:
                found.add(target)
            # "import core.ledger.views" from outside core.ledger, at import time, also
            # runs core/ledger/__init__ first: a module the package's front door
            # imports cannot import into the package without a circle at run time.
            if id(node) not in at_import_time:
                continue
            parts = target.split(".")
            for depth in range(2, len(parts)):
                front = ".".join(parts[:depth])
                if front in modules and not name.startswith(front + ".") and front != name:
                    found.add(front)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def test_no_import_circles_in_core_or_tui() -> None:
    modules = _sources()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    # A package's __init__ re-exporting its own modules is its front door, not a
    # dependency the modules can circle back through.
    for name in graph:
        graph[name] = {t for t in graph[name] if not name.startswith(t + ".")}
    assert _cycles(graph) == []


def test_the_circle_check_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_source_file_in_core_or_tui_is_over_600_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in _sources().values()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_a_sqlite_worker_loads_neither_the_orm_nor_postgresql_nor_a_pdf_library(
    tmp_path: Path,
) -> None:
    """What a worker imports is its start-up time (bench.ingest prints it): on a SQLite
    ledger it has no use for SQLAlchemy's ORM or asyncio extension, the PostgreSQL
    dialect, or a PDF library (those load in the parser process). The ledger exists
    already, as it does for every worker but the first (migrating loads Alembic)."""
    import asyncio
    import subprocess
    import sys

    from core import Ledger, Settings, sqlite_url

    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "store")

    async def create() -> None:
        await (await Ledger.open(settings)).close()

    asyncio.run(create())
    program = (
        "import runpy, sys\n"
        "sys.argv = ['ingestdesk', '--db', sys.argv[1], '--store', sys.argv[2],\n"
        "            'worker', '--until-idle', '--parser', 'pdfium']\n"
        "try:\n"
        "    runpy.run_module('core.cli', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", program, str(tmp_path / "ledger.db"), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parent.parent,
    )
    assert run.returncode == 0, run.stderr
    loaded = set(run.stdout.splitlines()[-1].split())
    assert "core.ingest.worker" in loaded and "sqlalchemy" in loaded  # it did run
    unwanted = ("sqlalchemy.orm", "sqlalchemy.ext.asyncio", "sqlalchemy.dialects.postgresql")
    assert [m for m in unwanted if m in loaded] == []
    assert [m for m in loaded if m.split(".")[0] in ("pypdf", "pypdfium2")] == []
