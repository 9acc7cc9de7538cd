"""Every command the README shows, run as written, doing what the README says.

A README command that silently ignored an option (``tasks --filter``) once passed 351
tests; here each example under "Using it" (the race too) runs through the installed
``ingestdesk`` in a scratch folder with no ledger settings, so it uses
``./.ingestdesk/`` exactly as a reader's shell would. The README's placeholder files
are created for real (``report.pdf`` is one the parser refuses, so "what failed, and
why" has an answer) and its placeholder ids are replaced by the real ones. Each row of
the CLI reference is run in a concrete form. Screens (the dashboard, ``demo``,
``race``) run up to the point where Textual would take over the terminal: a stand-in
for :mod:`tui.app` records what they were asked to open.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import tests.hostile as hostile
from core import Settings, sqlite_url
from core.demo import DEMO_DB_FILE

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
CLI_TIMEOUT_S = 120.0  # seconds one command may take
NOTES = b"# Runbook\n\nLeases expire after thirty seconds; the reaper requeues the task.\n"
# The README's placeholders, and what the tests put in their place.
EXAMPLE_TASK_ID = "3f2a9c1e"
TASK_ID = "TASK_ID"


@dataclass(frozen=True)
class Example:
    """One command line of a README ``sh`` block, and its trailing comment."""

    argv: list[str]
    comment: str


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str

    @property
    def value(self) -> Any:
        return json.loads(self.stdout)

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()


def section(title: str) -> str:
    """The README text under ``## title``, up to the next ``## `` heading."""
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def sh_blocks(text: str) -> list[list[Example]]:
    """The ``sh`` code blocks of ``text``, each as its command lines."""
    blocks = []
    for body in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL):
        examples = []
        for line in body.splitlines():
            command, _, comment = line.partition("  #")
            if command.strip() and not command.lstrip().startswith("#"):
                examples.append(Example(shlex.split(command), comment.strip()))
        blocks.append(examples)
    return blocks


def reference_commands() -> set[str]:
    """The command words of the CLI reference table (``--version`` included)."""
    rows = re.findall(r"^\| `ingestdesk ([\w-]+)", section("CLI reference"), flags=re.MULTILINE)
    return set(rows)


def ingestdesk_program() -> list[str]:
    script = Path(sys.executable).with_name("ingestdesk")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tui.cli"]


def scratch_env() -> dict[str, str]:
    """The environment without ledger settings: the default ./.ingestdesk/ is used."""
    return {k: v for k, v in os.environ.items() if not k.startswith("INGESTDESK_")}


def shell(argv: list[str], cwd: Path, stdin: bytes = b"") -> Ran:
    """Run ``ingestdesk …`` as a shell would (``argv[0]`` is ``ingestdesk``)."""
    assert argv[0] == "ingestdesk", argv
    proc = subprocess.run(
        [*ingestdesk_program(), *argv[1:]],
        cwd=cwd,
        env=scratch_env(),
        input=stdin,
        capture_output=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    return Ran(proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def ok(ran: Ran) -> Ran:
    assert ran.code == 0, ran
    return ran


def tasks_of(cwd: Path) -> dict[str, dict[str, Any]]:
    """The scratch ledger's tasks by document name (a check, not a README example)."""
    return {t["document_name"]: t for t in ok(shell(["ingestdesk", "tasks", "--json"], cwd)).value}


class Screens:
    """A stand-in for :mod:`tui.app`: records which screen was asked for, on which
    ledger, instead of taking over the terminal."""

    def __init__(self) -> None:
        self.opened: list[tuple[str, Settings, dict[str, Any]]] = []
        self.module = types.ModuleType("tui.app")
        self.module.run_dashboard = self._dashboard  # type: ignore[attr-defined]
        self.module.run_race = self._race  # type: ignore[attr-defined]

    def _dashboard(self, settings: Settings, **options: Any) -> int:
        self.opened.append(("dashboard", settings, options))
        return 0

    def _race(self, settings: Settings) -> int:
        self.opened.append(("race", settings, {}))
        return 0


@pytest.fixture
def screens(monkeypatch: pytest.MonkeyPatch) -> Screens:
    fake = Screens()
    monkeypatch.setitem(sys.modules, "tui.app", fake.module)
    return fake


@pytest.fixture
def in_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[[list[str], Path], Ran]:
    """Run an ``ingestdesk`` example that opens a screen, in this process (so the
    screen can be stood in for), from ``cwd`` with no ledger settings."""
    from tui.cli import main

    for name in [k for k in os.environ if k.startswith("INGESTDESK_")]:
        monkeypatch.delenv(name)

    def go(argv: list[str], cwd: Path) -> Ran:
        assert argv[0] == "ingestdesk", argv
        monkeypatch.chdir(cwd)
        code = main(argv[1:])
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    return go


def default_ledger(cwd: Path) -> str:
    return sqlite_url(cwd / ".ingestdesk" / "ledger.db")


# ------------------------------------------------------------------------- Using it


def test_only_the_known_sections_hold_sh_examples() -> None:
    """A new ``sh`` block anywhere else must get a test here too."""
    holders = {
        title
        for title in re.findall(r"^## (.+)$", README, flags=re.MULTILINE)
        if "```sh" in section(title)
    }
    # Quickstart installs (tests/test_docs.py checks CI runs its test command);
    # Benchmarks run minutes-long measurements (tests/test_bench_smoke.py).
    # An OpenAI-compatible embedding endpoint: tests/core/test_openai_provider.py.
    # Search: tests/retrieval/test_readme_search.py.
    # Many hosts: tests/store/test_readme_s3.py (it needs an S3 server).
    assert holders == {
        "Quickstart",
        "Using it",
        "The HTTP API",
        "An OpenAI-compatible embedding endpoint",
        "Benchmarks",
        "Search",
        "Many hosts: originals in an S3-compatible bucket",
    }


def test_using_it_does_what_the_readme_says(
    tmp_path: Path, screens: Screens, in_process: Callable[[list[str], Path], Ran]
) -> None:
    (block, _race) = sh_blocks(section("Using it"))
    assert [e.argv[:2] for e in block] == [
        ["ingestdesk", "add"],
        ["ingestdesk", "worker"],
        ["ingestdesk", "tasks"],
        ["ingestdesk", "retry"],
        ["ingestdesk"],
    ], "the README's first example changed: update this test with it"
    add, worker, tasks, retry, dashboard = block
    # The README's files, for real: report.pdf is a PDF the parser cannot read.
    (tmp_path / "report.pdf").write_bytes(hostile.truncated_pdf())
    (tmp_path / "notes.md").write_bytes(NOTES)

    # "upload + submit; returns at once": both queued, nothing run yet.
    added = ok(shell(add.argv, tmp_path))
    assert [line.split()[0] for line in added.lines] == ["submitted", "submitted"]
    assert {t["status"] for t in tasks_of(tmp_path).values()} == {"queued"}

    # "a worker process drains the queue".
    drained = ok(shell(worker.argv, tmp_path))
    assert "stopped: claimed=2" in drained.lines[-1]
    states = {name: (t["status"], t["error_code"]) for name, t in tasks_of(tmp_path).items()}
    assert states == {"report.pdf": ("failed", "parse_error"), "notes.md": ("succeeded", None)}

    # "what failed, and why": the failed task only, with its error code.
    failed = ok(shell(tasks.argv, tmp_path))
    assert len(failed.lines) == 1, failed
    assert "failed" in failed.lines[0] and "parse_error" in failed.lines[0]
    assert "report.pdf" in failed.lines[0] and "notes.md" not in failed.stdout

    # "requeue a failed task", by the short id the dashboard and `tasks` show.
    report = tasks_of(tmp_path)["report.pdf"]
    assert EXAMPLE_TASK_ID in retry.argv
    argv = [report["task_id"][:8] if a == EXAMPLE_TASK_ID else a for a in retry.argv]
    assert ok(shell(argv, tmp_path)).stdout.startswith(f"requeued task={report['task_id']}")
    shown = ok(shell(["ingestdesk", "task", report["task_id"], "--json"], tmp_path)).value
    assert (shown["status"], shown["history"][-1]["reason"]) == ("queued", "fixed")

    # "the dashboard on ./.ingestdesk/".
    assert dashboard.argv == ["ingestdesk"]
    assert in_process(dashboard.argv, tmp_path).code == 0
    ((screen, settings, options),) = screens.opened
    assert (screen, settings.db_url, options) == (
        "dashboard",
        default_ledger(tmp_path),
        {"workers": 2, "read_only": False},
    )


def test_the_race_example_does_what_the_readme_says(
    tmp_path: Path, screens: Screens, in_process: Callable[[list[str], Path], Ran]
) -> None:
    (_block, race) = sh_blocks(section("Using it"))
    add, *panes = race
    assert add.argv == ["ingestdesk", "add", "big.pdf", "--json"]
    assert len(panes) == 2 and all(TASK_ID in p.argv for p in panes)
    pages = [f"Page {i}: leases, claims and workers. " * 20 for i in range(30)]
    (tmp_path / "big.pdf").write_bytes(hostile.make_pdf(pages))
    (task,) = ok(shell(add.argv, tmp_path)).value  # "note the task_id"
    task_id = task["task_id"]

    # Two terminals at once: one claims, the other's claim misses (an answer, exit 0).
    procs = []
    for pane in panes:
        argv = [task_id if a == TASK_ID else a for a in pane.argv]
        procs.append(
            subprocess.Popen(
                [*ingestdesk_program(), *argv[1:]],
                cwd=tmp_path,
                env=scratch_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = [p.communicate(timeout=CLI_TIMEOUT_S)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    outcomes = set()
    for pane, out in zip(panes, outputs, strict=True):
        me = pane.argv[pane.argv.index("--worker-id") + 1]
        if f"claimed task={task_id[:8]} worker={me}" in out:
            outcomes.add("claimed")
        if f"claim missed task={task_id[:8]} worker={me}" in out:
            outcomes.add("missed")
    assert outcomes == {"claimed", "missed"}, outputs
    # The comments show what each pane prints.
    assert "claimed task=… worker=worker-one" in panes[0].comment
    assert "claim missed task=… worker=worker-two" in panes[1].comment

    # "(or `ingestdesk race` in one)".
    assert "(or `ingestdesk race` in one)" in section("Using it")
    assert in_process(["ingestdesk", "race"], tmp_path).code == 0
    assert [(s, st.db_url) for s, st, _ in screens.opened] == [("race", default_ledger(tmp_path))]


# -------------------------------------------------------------------- CLI reference


def test_every_cli_reference_row_does_what_it_says(
    tmp_path: Path, screens: Screens, in_process: Callable[[list[str], Path], Ran]
) -> None:
    covered: set[str] = set()

    def run(*args: str, stdin: bytes = b"") -> Ran:
        covered.add(args[0])
        return shell(["ingestdesk", *args], tmp_path, stdin)

    def value(*args: str, stdin: bytes = b"") -> Any:
        return ok(run(*args, "--json", stdin=stdin)).value

    for name, data in {
        "a.txt": b"Quarterly ingestion report: the reaper requeued nine tasks.\n",
        "b.md": NOTES,
        "c.txt": b"Another note, to be renamed on the way in.\n",
        "bad.pdf": hostile.truncated_pdf(),
    }.items():
        (tmp_path / name).write_bytes(data)

    # upload FILE… [--name NAME]: store files as draft documents (- reads stdin, needs --name)
    drafts = value("upload", "a.txt", "b.md")
    assert [(d["filename"], d["status"]) for d in drafts] == [("a.txt", "draft"), ("b.md", "draft")]
    (piped,) = value("upload", "-", "--name", "piped.txt", stdin=b"From a pipe.\n")
    assert (piped["filename"], piped["status"]) == ("piped.txt", "draft")
    assert run("upload", "-", stdin=b"no name\n").code == 2

    # add FILE… [--name NAME]: upload and submit each file
    (renamed,) = value("add", "c.txt", "--name", "renamed.txt")
    assert renamed["status"] == "queued"
    (bad,) = value("add", "bad.pdf")

    # submit DOC_ID: submit a draft document: creates a queued task
    a_task = value("submit", drafts[0]["document_id"])
    assert (a_task["status"], a_task["document_id"]) == ("queued", drafts[0]["document_id"])

    # tasks [--status S] [--error-code C] [--filter EXPR] [--limit N]: tasks, newest first
    listed = value("tasks")
    assert [t["task_id"] for t in listed] == [a_task["task_id"], bad["task_id"], renamed["task_id"]]
    narrowed = value("tasks", "--status", "queued", "--filter", "name:renamed", "--limit", "5")
    assert [t["task_id"] for t in narrowed] == [renamed["task_id"]]
    assert len(value("tasks", "--limit", "1")) == 1

    # task TASK_ID: one task with its event history (the audit log)
    assert "-> queued" in ok(run("task", renamed["task_id"][:8])).stdout

    # documents [--status S]
    assert {d["filename"] for d in value("documents", "--status", "draft")} == {
        "b.md",
        "piped.txt",
    }

    # document DOC_ID: one document: status, row version, its tasks
    shown = ok(run("document", drafts[0]["document_id"][:8])).stdout
    assert "processing (row version 2)" in shown and a_task["task_id"][:8] in shown

    # cancel TASK_ID | --filter EXPR | --all [--dry-run] [--reason R]
    dry = value("cancel", "--filter", "name:renamed", "--dry-run")
    assert (dry["matched"], dry["eligible"], dry["done"]) == (1, 1, 0)
    assert value("cancel", "--all", "--dry-run")["eligible"] == 3
    cancelled = value("cancel", renamed["task_id"], "--reason", "renamed by mistake")
    assert cancelled["status"] == "cancelled"
    assert value("document", renamed["document_id"])["status"] == "draft"

    # worker [TASK_ID] [--loop | --until-idle] [--concurrency N] [--parsers N]
    #        [--worker-id NAME] [--lease S] [--parser …] [--chunk-size N]
    #        [--chunk-overlap N] [--log-format text|json]: claim and run tasks
    one = ok(run("worker", a_task["task_id"], "--worker-id", "ref-one"))
    assert f"claimed task={a_task['task_id'][:8]} worker=ref-one" in one.stdout
    drained = ok(
        run(
            "worker", "--until-idle", "--concurrency", "2", "--parsers", "1",
            "--worker-id", "ref-two", "--lease", "30", "--parser", "pypdf",
            "--chunk-size", "400", "--chunk-overlap", "40", "--log-format", "json",
        )
    )  # fmt: skip
    *log, summary = drained.lines
    assert summary == "worker=ref-two stopped: claimed=1 failed=1"
    assert all(json.loads(line)["worker_id"] == "ref-two" for line in log)
    assert value("task", bad["task_id"])["error_code"] == "parse_error"

    # retry TASK_ID | --filter EXPR | --all [--dry-run] [--reason R]: requeue failed tasks
    assert value("retry", "--all", "--dry-run")["eligible"] == 1
    assert value("retry", "--filter", "code:parse_error", "--dry-run")["eligible"] == 1
    assert value("retry", bad["task_id"][:8], "--reason", "re-exported")["status"] == "queued"
    # ... and a --loop worker keeps polling until stopped (SIGTERM hands back, exits 0).
    looping = subprocess.Popen(
        [*ingestdesk_program(), "worker", "--loop", "--worker-id", "ref-loop"],
        cwd=tmp_path,
        env=scratch_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    covered.add("worker")
    assert looping.stdout is not None
    deadline = time.monotonic() + CLI_TIMEOUT_S
    while "task=" not in (line := looping.stdout.readline()) or "failed" not in line:
        assert line and time.monotonic() < deadline, "the looping worker never ran the task"
    time.sleep(0.3)  # idle now: still polling, not exited
    assert looping.poll() is None
    looping.send_signal(signal.SIGTERM)
    rest, _ = looping.communicate(timeout=CLI_TIMEOUT_S)
    assert looping.returncode == 0
    assert "worker=ref-loop stopped: claimed=1" in rest

    # publish DOC_ID: approve a reviewed document: it becomes searchable
    doc_a = drafts[0]["document_id"]
    assert value("document", doc_a)["status"] == "review_pending"
    # search QUERY [--all]: full-text search over published documents
    assert ok(run("search", "reaper")).stdout.startswith("no matches")
    assert [h["document_id"] for h in value("search", "reaper", "--all")] == [doc_a]
    assert value("publish", doc_a[:8])["status"] == "published"
    hits = ok(run("search", "reaper"))
    # The ledger's index is a real model's (wordllama): hybrid, which says so first.
    assert hits.lines[0].startswith("mode=hybrid index=")
    assert hits.lines[1].startswith(doc_a[:8]) and "a.txt" in hits.lines[1]

    # chunks DOC_ID: a document's chunks (ordinal, page, text)
    (chunk,) = ok(run("chunks", doc_a[:8])).lines
    assert chunk.split()[0] == "0" and "reaper requeued" in chunk

    # document DOC_ID: ... then every version of the document and its history
    shown_a = value("document", doc_a[:8])
    assert [(v["version_no"], v["status"]) for v in shown_a["versions"]] == [(1, "published")]
    assert [(e["action"], e["to_status"]) for e in shown_a["history"]] == [
        ("upload", "draft"),
        ("publish", "published"),
    ]
    assert "history:" in ok(run("document", doc_a[:8])).stdout

    # upload --replaces DOC_ID FILE [--name NAME]: the next version, a draft; search keeps
    # finding the published version until this one is published
    (tmp_path / "a2.txt").write_bytes(b"Revised report: the reaper requeued ten tasks.\n")
    (v2,) = value("upload", "--replaces", doc_a[:8], "a2.txt", "--name", "a.txt")
    assert (v2["family_id"], v2["version_no"], v2["status"]) == (doc_a, 2, "draft")
    assert run("upload", "--replaces", doc_a, "a2.txt", "--idempotency-key", "k").code == 2
    assert value("submit", v2["document_id"])["status"] == "queued"
    ok(run("worker", "--until-idle"))
    assert value("document", v2["document_id"])["status"] == "review_pending"
    assert [(h["family_id"], h["version_no"]) for h in value("search", "reaper")] == [(doc_a, 1)]

    # publish DOC_ID [--expect-version N] [--reason R]: the old version retired with it;
    # a row version that changed since is refused (exit 3)
    row = value("document", v2["document_id"])["version"]
    stale = run("publish", v2["document_id"], "--expect-version", str(row - 1))
    assert stale.code == 3 and f"changed since you looked: now version {row}" in stale.stderr
    assert value("document", v2["document_id"])["status"] == "review_pending"
    published = value(
        "publish", v2["document_id"][:8], "--expect-version", str(row), "--reason", "revised"
    )
    assert (published["status"], published["version_no"]) == ("published", 2)
    assert value("document", doc_a)["status"] == "retired"
    # search QUERY [--limit K] [--all]: now the new version only, with version and snippet
    assert [(h["family_id"], h["version_no"]) for h in value("search", "reaper")] == [(doc_a, 2)]
    (line,) = ok(run("search", "reaper", "--limit", "5", "--mode", "keyword")).lines
    assert line.startswith(f"{doc_a[:8]}  v2 ") and "**reaper**" in line and "ten tasks" in line

    # withdraw DOC_ID --reason R: out of search; publish puts it back
    assert run("withdraw", v2["document_id"]).code == 2  # the reason is required
    withdrawn = value("withdraw", v2["document_id"], "--reason", "wrong figures")
    assert withdrawn["status"] == "withdrawn"
    assert value("search", "reaper") == []
    assert value("publish", v2["document_id"])["status"] == "published"
    assert [h["version_no"] for h in value("search", "reaper")] == [2]

    # reject DOC_ID --reason R: a version waiting for review goes back to draft, chunks
    # dropped; it can be submitted again
    (tmp_path / "a3.txt").write_bytes(b"A third draft in which the reaper is renamed.\n")
    (v3,) = value("upload", "--replaces", doc_a, "a3.txt")
    value("submit", v3["document_id"])
    ok(run("worker", "--until-idle"))
    assert run("reject", v3["document_id"]).code == 2  # the reason is required
    rejected = value("reject", v3["document_id"], "--reason", "renaming is out of scope")
    assert (rejected["status"], value("chunks", v3["document_id"])) == ("draft", [])
    assert [h["version_no"] for h in value("search", "reaper", "--all")] == [2]
    history = value("document", v3["document_id"])["history"]
    assert (history[-1]["action"], history[-1]["reason"]) == ("reject", "renaming is out of scope")
    value("submit", v3["document_id"])
    ok(run("worker", "--until-idle"))
    assert value("document", v3["document_id"])["status"] == "review_pending"

    # delete DOC_ID [--reason R]: every version and its chunks; the document is gone
    deleted = value("delete", v3["document_id"][:8], "--reason", "superseded by policy")
    assert [(v["version_no"], v["status"]) for v in deleted["deleted"]] == [
        (1, "retired"),
        (2, "published"),
        (3, "review_pending"),
    ]
    assert run("chunks", doc_a).code == 4
    gone = value("document", doc_a)  # its history is kept
    assert gone["deleted"] is True and gone["history"][-1]["action"] == "delete"
    assert value("search", "reaper", "--all") == []

    # errors: the error codes, what they mean, what to do
    errors = ok(run("errors")).stdout
    for code in ("parse_error", "empty_document", "lease_expired", "internal_error"):
        assert code in errors

    # formats: the document formats accepted, how each is recognised, what each needs
    formats = value("formats")
    assert {f["kind"] for f in formats} >= {"pdf", "docx", "pptx", "xlsx", "html", "epub", "csv"}
    assert all(f["available"] for f in formats)

    # embedders: the embedders an index can use, what each needs, whether available, the default
    embedders = {e["kind"]: e for e in value("embedders")}
    assert list(embedders) == ["hashed", "wordllama", "openai"]
    assert embedders["hashed"]["available"] and embedders["wordllama"]["available"]
    assert embedders["wordllama"]["default"] and embedders["wordllama"]["dimensions"] == (
        "64, 128, 256"
    )

    # index list | show | create | resume | cancel | activate | drop: the vector indexes
    (tmp_path / "kept.txt").write_bytes(b"Runbook: a lease expires after thirty seconds.\n")
    (kept,) = value("add", "kept.txt")
    ok(run("worker", "--until-idle"))
    assert value("publish", kept["document_id"])["status"] == "published"
    (first,) = value("index", "list")
    assert (first["state"], first["embedder"]) == ("active", "wordllama")
    assert value("index", "show", first["name"])["vectors"] > 0
    made = value("index", "create", "hashed:64", "--name", "lexical")
    assert (made["name"], made["state"], made["campaign"]["total"]) == ("lexical", "building", 1)
    assert value("index", "cancel", "lexical", "--reason", "not yet")["campaign"]["by_status"] == {
        "cancelled": 1
    }
    early = run("index", "activate", "lexical")
    assert early.code == 3 and "not ready" in early.stderr
    assert value("index", "resume", "lexical")["campaign"]["by_status"]["queued"] == 1
    ok(run("worker", "--until-idle"))
    assert value("index", "show", "lexical")["state"] == "ready"
    assert value("index", "activate", "lexical")["state"] == "active"
    assert run("index", "drop", "lexical").code == 3  # the active index stays
    assert value("index", "drop", first["name"])["name"] == first["name"]
    assert [i["name"] for i in value("index", "list")] == ["lexical"]

    # --version: the installed version
    from importlib.metadata import version

    assert ok(run("--version")).stdout == f"ingestdesk {version('ingestdesk')}\n"

    # dashboard [--workers N] [--read-only]: the dashboard (also plain `ingestdesk`)
    assert (
        in_process(["ingestdesk", "dashboard", "--workers", "0", "--read-only"], tmp_path).code == 0
    )
    # demo [DIR]: build a demo ledger with a generated corpus and open the dashboard on it
    built = in_process(["ingestdesk", "demo", "demo-here"], tmp_path)
    assert built.code == 0 and "building a demo ledger in demo-here" in built.stdout
    assert (tmp_path / "demo-here" / DEMO_DB_FILE).is_file()
    # demo --faults: the same, its workers embedding through a faulty demo provider
    assert in_process(["ingestdesk", "demo", "demo-faults", "--faults"], tmp_path).code == 0
    # race: the claim-race demonstration in one screen
    assert in_process(["ingestdesk", "race"], tmp_path).code == 0
    covered |= {"dashboard", "demo", "race"}
    demo_ledger = sqlite_url(tmp_path / "demo-here" / DEMO_DB_FILE)
    assert [(s, st.db_url, o) for s, st, o in screens.opened] == [
        ("dashboard", default_ledger(tmp_path), {"workers": 0, "read_only": True}),
        ("dashboard", demo_ledger, {"workers": 2, "read_only": False, "faults_dir": None}),
        (
            "dashboard",
            sqlite_url(tmp_path / "demo-faults" / DEMO_DB_FILE),
            {"workers": 2, "read_only": False, "faults_dir": tmp_path / "demo-faults"},
        ),
        ("race", default_ledger(tmp_path), {}),
    ]

    # tokens create NAME --role R | list | revoke NAME: shown once, kept as a hash
    made = value("tokens", "create", "ref-bot", "--role", "viewer")
    assert made["token"].startswith("idk_") and made["role"] == "viewer"
    listed_tokens = ok(run("tokens", "list")).stdout
    assert "ref-bot" in listed_tokens and made["token"] not in listed_tokens
    assert value("tokens", "revoke", "ref-bot")["revoked_at"] is not None
    # serve [--host H] [--port P]: the HTTP API on this ledger (tests/api go further)
    port = free_port()
    server = subprocess.Popen(
        [*ingestdesk_program(), "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=tmp_path,
        env=scratch_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    covered.add("serve")
    try:
        wait_for_http(f"http://127.0.0.1:{port}/healthz", server)
    finally:
        server.send_signal(signal.SIGTERM)
        out, _ = server.communicate(timeout=CLI_TIMEOUT_S)
    assert "Application shutdown complete" in out, out

    # add/upload/submit --idempotency-key K: a repeat returns the first answer
    (keyed,) = value("add", "c.txt", "--name", "keyed.txt", "--idempotency-key", "ref-k1")
    (repeat,) = value("add", "c.txt", "--name", "keyed.txt", "--idempotency-key", "ref-k1")
    assert repeat["task_id"] == keyed["task_id"]
    assert run("submit", keyed["document_id"], "--idempotency-key", "ref-k1").code == 3
    (kept,) = value("upload", "b.md", "--idempotency-key", "ref-k2")
    assert value("upload", "b.md", "--idempotency-key", "ref-k2")[0] == kept
    # prune [--older-than DAYS]: forget idempotency keys past their retention
    assert value("prune")["idempotency_keys_removed"] == 0
    assert value("prune", "--older-than", "0")["idempotency_keys_removed"] == 2
    # prune --tasks-older-than DAYS [--include-failed] --dry-run: count old finished tasks
    dry = value("prune", "--tasks-older-than", "0", "--include-failed", "--dry-run")
    assert dry["tasks_removed"] > 0 and dry["task_events_removed"] >= dry["tasks_removed"]
    assert value("prune", "--tasks-older-than", "3650")["tasks_removed"] == 0

    # provider serve …, worker --provider URL, reconcile, review: the README's "Try it",
    # with every reply lost so the reconcile has something to find.
    provider = subprocess.Popen(
        [*ingestdesk_program(), "provider", "serve", "--lose-reply", "1"],
        cwd=tmp_path,
        env=scratch_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    covered.add("provider")
    try:
        wait_for_http(f"{PROVIDER_URL}/healthz", provider)
        (remote,) = value("add", "a.txt", "--name", "remote.txt")
        worked = value("worker", remote["task_id"], "--provider", PROVIDER_URL)
        assert worked["outcomes"] == {remote["task_id"]: "retry_wait"}
        task = value("task", remote["task_id"])
        assert task["error_code"] == "outcome_unknown"
        assert value("review") == []  # unknown is not "needs review": it is looked up
        # The provider has it (it committed, then lost the reply): reconcile finds it.
        reconciled = value("reconcile", "--all")
        assert [(d["answer"], d["state"]) for d in reconciled["decisions"]] == [
            ("found", "recovered")
        ]
        assert reconciled["requests"]["recovered"] == 1, reconciled
        assert "nothing waits for review" in ok(run("review")).stdout
        assert run("review", "fail", remote["task_id"]).code == 2  # a reason is needed
    finally:
        provider.send_signal(signal.SIGTERM)
        provider.communicate(timeout=CLI_TIMEOUT_S)
    assert provider.returncode == 0

    # Every row of the reference was run (a new row needs an example above).
    assert covered == reference_commands()


# ---------------------------------------------------------------------- The HTTP API

API_PORT = 8000  # the README's examples name this port
PROVIDER_URL = "http://127.0.0.1:8100"  # the README's provider example (its default port)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_http(url: str, process: subprocess.Popen[str]) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + CLI_TIMEOUT_S
    while True:
        assert process.poll() is None, process.communicate()[0]
        try:
            with urllib.request.urlopen(url, timeout=1) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        assert time.monotonic() < deadline, f"{url} never answered"
        time.sleep(0.1)


def port_is_free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_the_http_api_examples_do_what_the_readme_says(tmp_path: Path) -> None:
    """The two terminals and every curl line, as written, in a scratch folder."""
    if not port_is_free(API_PORT):
        pytest.skip(f"port {API_PORT}, which the README's examples use, is taken here")
    terminals, curls = sh_blocks(section("The HTTP API"))
    assert [e.argv for e in terminals] == [
        ["ingestdesk", "serve"],
        ["ingestdesk", "worker", "--loop"],
    ], "the README's API example changed: update this test with it"
    (tmp_path / "notes.md").write_bytes(NOTES)
    started = [
        subprocess.Popen(
            [*ingestdesk_program(), *e.argv[1:]],
            cwd=tmp_path,
            env=scratch_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for e in terminals
    ]
    server, worker = started
    try:
        wait_for_http(f"http://127.0.0.1:{API_PORT}/healthz", server)
        ids: dict[str, str] = {}

        def curl(example: Example) -> Any:
            line = " ".join(shlex.quote(a) for a in example.argv)
            for placeholder, real in ids.items():
                line = line.replace(placeholder, real)
            done = subprocess.run(
                line, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=60
            )
            assert done.returncode == 0, done
            return json.loads(done.stdout)

        upload, submit, task, failed, publish, search = curls
        doc = curl(upload)
        assert (doc["filename"], doc["status"]) == ("notes.md", "draft")
        ids["DOC_ID"] = doc["document_id"]
        queued = curl(submit)
        assert (queued["status"], queued["stage"], queued["attempt"]) == ("queued", "download", 0)
        ids["TASK_ID"] = queued["task_id"]
        deadline = time.monotonic() + CLI_TIMEOUT_S
        while (seen := curl(task))["status"] != "succeeded":  # terminal 2's worker runs it
            assert time.monotonic() < deadline, seen
            time.sleep(0.2)
        assert curl(failed) == {"tasks": [], "next_cursor": None}
        assert curl(publish)["status"] == "published"
        (hit,) = curl(search)
        assert hit["document_id"] == ids["DOC_ID"] and "Leases expire" in hit["text"]
    finally:
        for process in reversed(started):
            process.send_signal(signal.SIGTERM)
        outputs = [p.communicate(timeout=CLI_TIMEOUT_S)[0] for p in started]
    assert "Application shutdown complete" in outputs[0], outputs[0]
    assert worker.returncode == 0, outputs[1]
