"""Helpers shared by the benchmarks: the printed report, targets, process memory.

Nothing here measures anything by itself; the benches own their baselines.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.pool import Pool

REPO_ROOT = Path(__file__).resolve().parents[1]
RSS_POLL_S = 0.1  # seconds between VmHWM samples of the watched processes
TREE_SCAN_S = 0.5  # seconds between scans of /proc for new descendants


# --------------------------------------------------------------------------- printing


def fmt_num(value: float, digits: int = 1) -> str:
    """A figure with thousands separators (``12 345.6``)."""
    return f"{value:,.{digits}f}".replace(",", " ")


def fmt_ratio(value: float) -> str:
    return f"{value:.3f}x"


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, or NaN when the denominator is zero."""
    return numerator / denominator if denominator else float("nan")


def print_header(title: str, quick: bool, workdir: Path) -> None:
    """What ran where: enough to compare two printed runs honestly."""
    print(f"== {title} {'(--quick)' if quick else '(full run)'} ==")
    print(
        f"python {platform.python_version()}  sqlite {sqlite3.sqlite_version}  "
        f"cpus {os.cpu_count()}  {load_line()}"
    )
    print(f"work dir {workdir} ({filesystem_of(workdir)})")
    print(flush=True)


def load_line() -> str:
    """The 1/5/15-minute load averages: other work on the machine skews every figure."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return f"load avg {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"


def print_table(title: str, headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """A plain aligned table: first column left-aligned, the rest right-aligned."""
    body = [[str(c) for c in row] for row in rows]
    cols = [list(headers), *body]
    widths = [max(len(r[i]) for r in cols) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        parts = [cells[0].ljust(widths[0])]
        parts += [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join(parts).rstrip()

    print(f"-- {title}")
    print(line(list(headers)))
    print(line(["-" * w for w in widths]))
    for row in body:
        print(line(row))
    print(flush=True)


def print_ratio(label: str, value: float, how: str) -> None:
    """One ratio line; the smoke test looks for lines starting with ``ratio``."""
    print(f"ratio {label}: {fmt_ratio(value)}  ({how})", flush=True)


def filesystem_of(path: Path) -> str:
    """The file-system type holding ``path`` (tmpfs makes fsync free, ext4 does not)."""
    best, fstype = "", "unknown"
    try:
        target = str(path.resolve())
        with open("/proc/mounts", encoding="utf-8") as mounts:
            for entry in mounts:
                parts = entry.split()
                if len(parts) >= 3 and target.startswith(parts[1]) and len(parts[1]) > len(best):
                    best, fstype = parts[1], parts[2]
    except OSError:
        pass
    return fstype


# ---------------------------------------------------------------------------- targets


@dataclass(frozen=True)
class Target:
    """A goal from the issue and the figure measured against it."""

    label: str
    value: float
    goal: float
    op: str  # ">=", "<=", "<" or "=="
    show: str = "ratio"  # "ratio" (0.123x), "count" (integer), "mb", "seconds" or "ms"

    @property
    def passed(self) -> bool:
        if self.value != self.value:  # NaN never passes
            return False
        if self.op == ">=":
            return self.value >= self.goal
        if self.op == "<=":
            return self.value <= self.goal
        if self.op == "<":
            return self.value < self.goal
        return self.value == self.goal

    def _fmt(self, x: float) -> str:
        if self.show == "count":
            return str(int(x))
        if self.show == "mb":
            return f"{x:.1f} MB"
        if self.show == "seconds":
            return f"{x:.3f} s"
        if self.show == "ms":
            return f"{x:.1f} ms"
        return fmt_ratio(x)


def print_targets(targets: Sequence[Target]) -> None:
    rows = [
        (t.label, f"{t.op} {t._fmt(t.goal)}", t._fmt(t.value), "PASS" if t.passed else "MISS")
        for t in targets
    ]
    print_table("targets (from the issue)", ["target", "goal", "measured", "result"], rows)
    missed = sum(not t.passed for t in targets)
    print(f"targets: {len(targets) - missed} PASS, {missed} MISS", flush=True)


# ------------------------------------------------------------------------ SQL tracing


@dataclass
class SqlCounts:
    """What SQLite ran while a :meth:`SqliteTracer.recording` was open."""

    write_tx: int = 0  # BEGIN IMMEDIATE
    read_tx: int = 0  # BEGIN (deferred)
    commits: int = 0
    statements: list[str] = field(default_factory=list)  # everything else, as run

    def add(self, sql: str) -> None:
        head = sql.lstrip()[:16].upper()
        if head.startswith("BEGIN IMMEDIATE"):
            self.write_tx += 1
        elif head.startswith("BEGIN"):
            self.read_tx += 1
        elif head.startswith(("COMMIT", "END")):
            self.commits += 1
        elif not head.startswith(("ROLLBACK", "PRAGMA", "--")):
            self.statements.append(sql)


def _raw_sqlite(dbapi_connection: Any) -> sqlite3.Connection | None:
    """The stdlib connection behind a pool's DBAPI connection (pysqlite directly,
    aiosqlite through its adapter), or None for other drivers."""
    for candidate in (
        dbapi_connection,
        getattr(getattr(dbapi_connection, "_connection", None), "_conn", None),
    ):
        if isinstance(candidate, sqlite3.Connection):
            return candidate
    return None


class SqliteTracer:
    """Counts every statement SQLite itself runs, on every connection any SQLAlchemy
    pool in this process opens (whichever engines the ledger uses) and on connections
    added with :meth:`watch`.

    SQLite's own trace hook sees statements however they are sent (through
    SQLAlchemy's ``execute`` or straight to the DBAPI cursor), BEGIN and COMMIT
    included; an ``executemany`` counts once per row, as SQLite runs it. The hook is
    set only while recording, so measured code pays nothing otherwise.
    """

    def __init__(self) -> None:
        self._connections: dict[int, sqlite3.Connection] = {}
        self._counts: SqlCounts | None = None
        self._lock = threading.Lock()
        event.listen(Pool, "connect", self._on_connect)
        event.listen(Pool, "close", self._on_close)

    def _on_connect(self, dbapi_connection: Any, _record: Any) -> None:
        raw = _raw_sqlite(dbapi_connection)
        if raw is not None:
            self.watch(raw)

    def _on_close(self, dbapi_connection: Any, _record: Any) -> None:
        raw = _raw_sqlite(dbapi_connection)
        if raw is not None:
            with self._lock:
                self._connections.pop(id(raw), None)

    def watch(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            self._connections[id(conn)] = conn
            if self._counts is not None:
                self._hook(conn, self._callback())

    def _callback(self) -> Callable[[str], None]:
        counts = self._counts
        last: list[str] = [""]

        def on_sql(sql: str) -> None:
            # Python 3.11 reports each trigger program under its parent statement's
            # text: an immediate repeat is a trigger echo, not a statement.
            if counts is None or sql == last[0]:
                return
            last[0] = sql
            with self._lock:
                counts.add(sql)

        return on_sql

    @staticmethod
    def _hook(conn: sqlite3.Connection, callback: Callable[[str], None] | None) -> None:
        with contextlib.suppress(sqlite3.ProgrammingError):  # closed meanwhile
            conn.set_trace_callback(callback)

    @contextmanager
    def recording(self) -> Iterator[SqlCounts]:
        """Count what SQLite runs until the block ends. Start it between calls,
        not during one: the hook is set on idle connections."""
        with self._lock:
            self._counts = SqlCounts()
            counts = self._counts
            for conn in self._connections.values():
                self._hook(conn, self._callback())
        try:
            yield counts
        finally:
            with self._lock:
                self._counts = None
                for conn in self._connections.values():
                    self._hook(conn, None)


@contextmanager
def record_connection(conn: sqlite3.Connection) -> Iterator[SqlCounts]:
    """Count what SQLite runs on one stdlib connection until the block ends."""
    counts = SqlCounts()
    last: list[str] = [""]

    def on_sql(sql: str) -> None:
        if sql != last[0]:  # see SqliteTracer: trigger echoes
            last[0] = sql
            counts.add(sql)

    conn.set_trace_callback(on_sql)
    try:
        yield counts
    finally:
        conn.set_trace_callback(None)


# --------------------------------------------------------------------- processes, memory


def compile_bytecode() -> None:
    """Compile the project's modules to bytecode before anything is timed.

    An installed package has its bytecode (pip compiles it), and a checkout writes it
    on its first run, unless ``PYTHONDONTWRITEBYTECODE`` is set, as it is on the
    development machine: there every worker process would compile ~60 modules from
    source (~40 ms) that the libraries it is compared with never compile. Written
    even under that variable, so runs measure what a user's second start costs.
    """
    import compileall

    for package in ("core", "tui", "bench"):
        compileall.compile_dir(REPO_ROOT / package, quiet=1)


def python_env() -> dict[str, str]:
    """Environment for child Pythons: the repository importable, output unbuffered."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def ingestdesk_command() -> list[str]:
    """The installed ``ingestdesk`` console script next to this interpreter."""
    script = Path(sys.executable).with_name("ingestdesk")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "core.cli"]


@dataclass(frozen=True)
class CpuTimes:
    """Machine-wide CPU jiffies from /proc/stat (all CPUs together)."""

    idle: int
    total: int

    @classmethod
    def now(cls) -> CpuTimes:
        try:
            with open("/proc/stat", encoding="ascii") as stat:
                fields = [int(x) for x in stat.readline().split()[1:]]
        except (OSError, ValueError):
            return cls(0, 0)
        # user nice system idle iowait irq softirq steal ...: idle + iowait is idle.
        return cls(fields[3] + fields[4], sum(fields[:8]))

    def idle_since(self, earlier: CpuTimes) -> float:
        """Fraction of the machine's CPU time that was idle between two snapshots:
        near 0 means every CPU was busy (ours or someone else's)."""
        return ratio(self.idle - earlier.idle, self.total - earlier.total)


def _status_kb(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for entry in status:
                if entry.startswith(key + ":"):
                    return int(entry.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def peak_rss_kb(pid: int) -> int | None:
    """VmHWM (peak resident set) of a live process, in kB; None once it is gone."""
    return _status_kb(pid, "VmHWM")


def _parent_map() -> dict[int, int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                # The command name may contain spaces and parentheses: split after the last ")".
                fields = stat.read().rsplit(")", 1)[1].split()
            parents[int(entry)] = int(fields[1])
        except (OSError, ValueError, IndexError):
            continue
    return parents


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (children, grandchildren, ...)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _parent_map().items():
        children.setdefault(ppid, []).append(pid)
    out: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def process_role(pid: int) -> str:
    """'parser' for a parser child (core.ingest.parse_child run by python -c, or a multiprocessing
    spawn child in older versions), 'helper' for a resource tracker, else 'other'."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "other"
    if "resource_tracker" in cmd:
        return "helper"
    if "core.ingest.parse_child" in cmd or "spawn_main" in cmd or "multiprocessing-fork" in cmd:
        return "parser"
    return "other"


@dataclass
class PeakRSS:
    """Peak resident memory seen per process, grouped by role."""

    by_pid: dict[int, tuple[str, int]] = field(default_factory=dict)

    def peak_mb(self, role: str) -> float:
        values = [kb for r, kb in self.by_pid.values() if r == role]
        return max(values) / 1024 if values else float("nan")

    def count(self, role: str) -> int:
        return sum(1 for r, _ in self.by_pid.values() if r == role)


class RSSMonitor:
    """Samples VmHWM of some root processes and all their descendants until stopped.

    VmHWM is the kernel's own high-water mark, so sampling only has to catch each
    process once shortly before it exits, not at its peak. The process tree is
    rescanned less often than memory is read, to keep the monitor's own CPU use
    (which competes with what is measured) small.
    """

    def __init__(self, roots: Sequence[int], root_role: str = "worker") -> None:
        self.roots = list(roots)
        self.root_role = root_role
        self.result = PeakRSS()
        self._roles: dict[int, str] = {pid: root_role for pid in roots}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-monitor", daemon=True)

    def __enter__(self) -> RSSMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _scan(self) -> None:
        for root in self.roots:
            for pid in descendants(root):
                if pid not in self._roles:
                    self._roles[pid] = process_role(pid)

    def _sample(self) -> None:
        for pid, role in list(self._roles.items()):
            kb = peak_rss_kb(pid)
            if kb is None:
                continue
            known = self.result.by_pid.get(pid)
            self.result.by_pid[pid] = (role, max(kb, known[1] if known else 0))

    def _run(self) -> None:
        last_scan = 0.0
        while not self._stop.is_set():
            if time.monotonic() - last_scan >= TREE_SCAN_S:
                self._scan()
                last_scan = time.monotonic()
            self._sample()
            self._stop.wait(RSS_POLL_S)
        self._sample()
