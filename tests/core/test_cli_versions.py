"""Document versions from the command line: ``upload --replaces``, ``publish``,
``reject``, ``withdraw``, ``delete``, ``document``'s versions and history, and
``search`` by version, each run as a real ``python -m core.cli`` subprocess.

The promise under test is the one the README makes: a new version is searchable only
once a person publishes it, and publishing retires the old one in the same
transaction; every decision is in the document's history; and every refusal is one
line (one JSON value under ``--json``) with the exit code that names it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from core import Ledger, Settings, sqlite_url
from core.ledger.search import SEARCH_LIMIT_MAX
from tests.core.test_search import NO_WORDS

CLI_TIMEOUT_S = 60.0  # seconds one command may take
EXIT_OK, EXIT_BAD_INPUT, EXIT_CONFLICT, EXIT_NOT_FOUND = 0, 2, 3, 4
UNKNOWN_ID = "0123456789abcdef0123456789abcdef"
V1_TEXT = b"Leases expire after thirty seconds; the reaper requeues the task.\n"
V2_TEXT = b"Leases now expire after sixty seconds; the reaper requeues the task.\n"


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str

    @property
    def value(self) -> Any:
        """stdout as exactly one JSON value (json.loads refuses anything more)."""
        return json.loads(self.stdout)

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()


Cli = Callable[..., Ran]


def run_cli(settings: Settings, *args: str, stdin: bytes = b"") -> Ran:
    """``ingestdesk ARGS`` on this test's ledger, as a shell would run it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INGESTDESK_")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "core.cli",
            "--db",
            settings.db_url,
            "--store",
            str(settings.store_root),
            *args,
        ],
        input=stdin,
        capture_output=True,
        timeout=CLI_TIMEOUT_S,
        env=env,
        check=False,
    )
    return Ran(proc.returncode, proc.stdout.decode(), proc.stderr.decode())


@pytest.fixture
def sqlite_settings(tmp_path: Path) -> Settings:
    return Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "objects")


@pytest.fixture
def cli(sqlite_settings: Settings) -> Cli:
    return lambda *args, stdin=b"": run_cli(sqlite_settings, *args, stdin=stdin)


def ok(ran: Ran) -> Ran:
    assert ran.code == EXIT_OK, ran
    return ran


def value(cli: Cli, *args: str, stdin: bytes = b"") -> Any:
    return ok(cli(*args, "--json", stdin=stdin)).value


def refused(cli: Cli, code: int, *args: str, stdin: bytes = b"") -> str:
    """Run a command that must be refused with ``code``, in both output modes: one
    ``ingestdesk: …`` line on stderr, and under ``--json`` exactly one JSON value on
    stdout and nothing on stderr. Returns the message."""
    human = cli(*args, stdin=stdin)
    assert human.code == code, human
    assert human.stdout == "", human
    (line,) = human.stderr.splitlines()
    assert line.startswith("ingestdesk: ") and "Traceback" not in human.stderr
    as_json = cli(*args, "--json", stdin=stdin)
    assert (as_json.code, as_json.stderr) == (code, ""), as_json
    answer = as_json.value
    assert list(answer) == ["error"] and set(answer["error"]) == {"kind", "message"}, answer
    message: str = answer["error"]["message"]
    assert line == f"ingestdesk: {message}"
    return message


def write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def published_v1(cli: Cli, tmp_path: Path) -> str:
    """A document whose first version is published; its id."""
    (task,) = value(cli, "add", write(tmp_path / "runbook.txt", V1_TEXT))
    ok(cli("worker", "--until-idle"))
    assert value(cli, "publish", task["document_id"])["status"] == "published"
    return str(task["document_id"])


def reviewed_v2(cli: Cli, tmp_path: Path, family: str, data: bytes = V2_TEXT) -> str:
    """The document's next version, processed and waiting for review; its id."""
    (v2,) = value(cli, "upload", "--replaces", family, write(tmp_path / "next.txt", data))
    value(cli, "submit", v2["document_id"])
    ok(cli("worker", "--until-idle"))
    assert value(cli, "document", v2["document_id"])["status"] == "review_pending"
    return str(v2["document_id"])


def searched(cli: Cli, query: str, *extra: str) -> list[tuple[str, int]]:
    # Keyword search: these tests ask which versions hold a word (a vector search would
    # also bring the nearest chunks of others).
    found = value(cli, "search", query, "--mode", "keyword", *extra)
    return [(h["family_id"], h["version_no"]) for h in found]


# ------------------------------------------------------------------ round trips


# On both backends (the settings fixture): search ranks and marks words differently on
# each, and the version rules must not.
def test_a_new_version_is_searched_only_once_published(settings: Settings, tmp_path: Path) -> None:
    def cli(*args: str, stdin: bytes = b"") -> Ran:
        return run_cli(settings, *args, stdin=stdin)

    family = published_v1(cli, tmp_path)
    path = write(tmp_path / "v2.txt", V2_TEXT)
    uploaded = ok(cli("upload", "--replaces", family[:8], path, "--name", "runbook.txt"))
    assert re.fullmatch(
        rf"uploaded document=(?P<id>[0-9a-f]{{32}}) kind=text name=runbook\.txt "
        rf"family={family} version=v2 \(a draft: .*\)\n",
        uploaded.stdout,
    ), uploaded.stdout
    v2 = uploaded.stdout.split("document=", 1)[1].split()[0]
    value(cli, "submit", v2)
    ok(cli("worker", "--until-idle"))

    # Processed and waiting for review: search still finds the published version only.
    assert searched(cli, "reaper") == [(family, 1)]
    assert sorted(searched(cli, "reaper", "--all")) == [(family, 1), (family, 2)]
    (line,) = ok(cli("search", "seconds", "--mode", "keyword")).lines
    assert line.startswith(f"{family[:8]}  v1 ") and "**seconds**" in line

    published = value(cli, "publish", v2, "--reason", "leases are longer now")
    assert (published["status"], published["family_id"], published["version_no"]) == (
        "published",
        family,
        2,
    )
    assert searched(cli, "reaper") == [(family, 2)]
    assert searched(cli, "thirty") == []  # the old version's words are gone with it
    (line,) = ok(cli("search", "sixty", "--mode", "keyword")).lines
    assert line.startswith(f"{family[:8]}  v2 ") and "**sixty**" in line and "score=" in line

    # `document` by any version's id: both versions, and the history that got here.
    shown = value(cli, "document", family[:8])
    assert shown["document_id"] == family and shown["status"] == "retired"
    assert [(v["version_no"], v["status"]) for v in shown["versions"]] == [
        (1, "retired"),
        (2, "published"),
    ]
    moves = [
        (e["action"], e["version_no"], e["from_status"], e["to_status"]) for e in shown["history"]
    ]
    assert moves == [
        ("upload", 1, None, "draft"),
        ("publish", 1, "review_pending", "published"),
        ("upload", 2, None, "draft"),
        ("retire", 1, "published", "retired"),
        ("publish", 2, "review_pending", "published"),
    ]
    assert shown["history"][-1]["reason"] == "leases are longer now"
    assert {"tasks", "kind", "sha256", "version", "filename"} <= set(shown)
    text = ok(cli("document", v2)).stdout
    assert f"version   v2 of document {family}" in text
    assert re.search(rf"\* v2 +{v2[:8]}  published ", text), text
    assert "publish  v2   review_pending -> published  reason='leases are longer now'" in text
    listed = ok(cli("documents")).lines
    assert [line.split()[:3] for line in listed] == [
        [v2[:8], "v2", "published"],
        [family[:8], "v1", "retired"],
    ]


def test_withdraw_takes_a_version_out_of_search_and_publish_puts_it_back(
    cli: Cli, tmp_path: Path
) -> None:
    family = published_v1(cli, tmp_path)
    withdrawn = ok(cli("withdraw", family[:8], "--reason", "figures under review"))
    assert withdrawn.stdout.startswith(f"withdrew document={family} version=v1")
    assert value(cli, "search", "reaper", "--mode", "keyword") == []
    assert ok(cli("search", "reaper", "--mode", "keyword")).stdout.startswith("no matches")
    assert searched(cli, "reaper", "--all") == [(family, 1)]  # kept, chunks and all
    assert value(cli, "publish", family)["status"] == "published"
    assert searched(cli, "reaper") == [(family, 1)]
    history = value(cli, "document", family)["history"]
    assert [(e["action"], e["reason"]) for e in history[-2:]] == [
        ("withdraw", "figures under review"),
        ("publish", None),
    ]
    # Withdrawing what is not published is a conflict that says why.
    value(cli, "withdraw", family, "--reason", "again")
    message = refused(cli, EXIT_CONFLICT, "withdraw", family, "--reason", "twice")
    assert "is withdrawn" in message and "only published" in message


def test_reject_sends_a_version_back_to_draft_and_it_can_be_submitted_again(
    cli: Cli, tmp_path: Path
) -> None:
    family = published_v1(cli, tmp_path)
    v2 = reviewed_v2(cli, tmp_path, family)
    rejected = value(cli, "reject", v2[:8], "--reason", "sixty is too long")
    assert (rejected["status"], rejected["version_no"]) == ("draft", 2)
    assert value(cli, "chunks", v2) == []
    assert searched(cli, "reaper", "--all") == [(family, 1)]  # v1 untouched
    # Rejected is not a dead end: submit, process, and publish it after all.
    value(cli, "submit", v2)
    ok(cli("worker", "--until-idle"))
    assert value(cli, "publish", v2)["status"] == "published"
    assert searched(cli, "reaper") == [(family, 2)]
    reject_event = [e for e in value(cli, "document", v2)["history"] if e["action"] == "reject"]
    assert [(e["actor"] != "", e["reason"]) for e in reject_event] == [(True, "sixty is too long")]
    # A version that is not waiting for review cannot be rejected.
    message = refused(cli, EXIT_CONFLICT, "reject", v2, "--reason", "changed my mind")
    assert "is published" in message and "waiting for review" in message


def test_a_stale_expect_version_is_refused_and_changes_nothing(cli: Cli, tmp_path: Path) -> None:
    family = published_v1(cli, tmp_path)
    v2 = reviewed_v2(cli, tmp_path, family)
    looked = value(cli, "document", v2)["version"]
    # Someone else acts meanwhile: rejects, resubmits, and it is back for review.
    value(cli, "reject", v2, "--reason", "one more pass")
    value(cli, "submit", v2)
    ok(cli("worker", "--until-idle"))
    now = value(cli, "document", v2)["version"]
    assert now > looked
    message = refused(cli, EXIT_CONFLICT, "publish", v2, "--expect-version", str(looked))
    assert f"changed since you looked: now version {now}" in message
    assert value(cli, "document", v2)["status"] == "review_pending"
    assert searched(cli, "reaper") == [(family, 1)]
    assert value(cli, "publish", v2, "--expect-version", str(now))["status"] == "published"


def test_delete_removes_every_version_and_refuses_while_a_task_runs(
    cli: Cli, sqlite_settings: Settings, tmp_path: Path
) -> None:
    family = published_v1(cli, tmp_path)
    (v2,) = value(cli, "upload", "--replaces", family, write(tmp_path / "v2.txt", V2_TEXT))
    task = value(cli, "submit", v2["document_id"])

    async def claim() -> None:  # a worker holds the task: it is running
        async with await Ledger.open(sqlite_settings) as ledger:
            assert await ledger.queue.claim(task["task_id"], "holder") is not None

    asyncio.run(claim())
    message = refused(cli, EXIT_CONFLICT, "delete", family, "--reason", "obsolete")
    assert f"task {task['task_id'][:8]}" in message and "is running" in message
    assert value(cli, "document", family)["status"] == "published"  # nothing removed

    value(cli, "cancel", task["task_id"], "--reason", "deleting instead")
    deleted = ok(cli("delete", v2["document_id"][:8], "--reason", "obsolete"))
    assert deleted.stdout == f"deleted document={family}: v1 (published), v2 (draft)\n"
    for version in (family, v2["document_id"]):
        assert "no document" in refused(cli, EXIT_NOT_FOUND, "chunks", version)
        # Its history is kept, and shown by any of its versions' ids.
        gone = value(cli, "document", version)
        assert gone["deleted"] is True
        assert (gone["history"][-1]["action"], gone["history"][-1]["reason"]) == (
            "delete",
            "obsolete",
        )
    assert value(cli, "search", "reaper", "--all", "--mode", "keyword") == []
    assert value(cli, "documents") == []


def test_a_queued_task_of_a_deleted_document_fails_document_not_found(
    cli: Cli, tmp_path: Path
) -> None:
    (task,) = value(cli, "add", write(tmp_path / "a.txt", V1_TEXT))
    answer = value(cli, "delete", task["document_id"])
    assert [v["status"] for v in answer["deleted"]] == ["processing"]
    ok(cli("worker", "--until-idle"))
    failed = value(cli, "task", task["task_id"])
    assert (failed["status"], failed["error_code"]) == ("failed", "document_not_found")


def test_a_new_version_from_stdin_uses_the_upload_cap(cli: Cli, tmp_path: Path) -> None:
    family = published_v1(cli, tmp_path)
    (piped,) = value(cli, "upload", "--replaces", family, "-", "--name", "piped.txt", stdin=V2_TEXT)
    assert (piped["filename"], piped["version_no"], piped["status"]) == ("piped.txt", 2, "draft")
    assert "needs --name" in refused(cli, EXIT_BAD_INPUT, "upload", "--replaces", family, "-")
    # Over the cap, from a file or from stdin: refused by the same capped reader, and
    # no version is added.
    cap = ("--max-upload-mb", "0.00002")  # 20 bytes
    path = write(tmp_path / "big.txt", V2_TEXT)
    for source, stdin in ((path, b""), ("-", V2_TEXT)):
        named = ("--name", "big.txt") if source == "-" else ()
        message = refused(
            cli, EXIT_BAD_INPUT, *cap, "upload", "--replaces", family, source, *named, stdin=stdin
        )
        assert "big.txt" in message and "limit" in message, message
    assert [v["version_no"] for v in value(cli, "document", family)["versions"]] == [1, 2]


# ------------------------------------------------------------------ hostile input


# Each of these loops over its cases on one ledger: a subprocess costs ~0.3 s, and
# the set-up (a worker run) is the same for every case.
def test_a_decision_without_a_reason_is_bad_input(cli: Cli, tmp_path: Path) -> None:
    family = published_v1(cli, tmp_path)
    v2 = reviewed_v2(cli, tmp_path, family)
    for command, target in (("reject", v2), ("withdraw", family)):
        for reason in ((), ("--reason", "   "), ("--reason", "\t")):
            message = refused(cli, EXIT_BAD_INPUT, command, target, *reason)
            assert "reason" in message, (command, reason)
    assert value(cli, "document", v2)["status"] == "review_pending"
    assert value(cli, "document", family)["status"] == "published"


def test_unknown_ids_are_not_found(cli: Cli, tmp_path: Path) -> None:
    value(cli, "upload", write(tmp_path / "a.txt", V1_TEXT))  # a ledger with something in it
    new_version = write(tmp_path / "x.txt", V2_TEXT)
    for args in (
        ("publish", UNKNOWN_ID),
        ("publish", "abcd"),
        ("publish", UNKNOWN_ID, "--expect-version", "3"),
        ("reject", UNKNOWN_ID, "--reason", "r"),
        ("withdraw", UNKNOWN_ID, "--reason", "r"),
        ("delete", UNKNOWN_ID),
        ("document", UNKNOWN_ID),
        ("document", "not-hex!"),
        ("upload", "--replaces", UNKNOWN_ID, new_version),
        # The id is checked before the file is read: a missing file is not the answer.
        ("upload", "--replaces", UNKNOWN_ID, str(tmp_path / "nope.txt")),
    ):
        assert "no document" in refused(cli, EXIT_NOT_FOUND, *args), args


def test_publishing_a_draft_is_a_conflict_that_says_why(cli: Cli, tmp_path: Path) -> None:
    (draft,) = value(cli, "upload", write(tmp_path / "a.txt", V1_TEXT))
    message = refused(cli, EXIT_CONFLICT, "publish", draft["document_id"])
    assert message == (
        f"document {draft['document_id'][:8]} is draft; only versions waiting for review "
        "(or withdrawn) can be published"
    )
    # Publishing the version that is already published: the same kind of answer.
    family = published_v1(cli, tmp_path)
    assert "is published" in refused(cli, EXIT_CONFLICT, "publish", family)


def test_an_unusable_expect_version_is_bad_input(cli: Cli, tmp_path: Path) -> None:
    family = published_v1(cli, tmp_path)
    v2 = reviewed_v2(cli, tmp_path, family)
    for given in ("-1", "0", "abc", "1.5", "", "99999999999999999999"):
        message = refused(cli, EXIT_BAD_INPUT, "publish", v2, "--expect-version", given)
        assert "--expect-version" in message, given
    assert value(cli, "document", v2)["status"] == "review_pending"


def test_a_new_version_of_a_document_being_processed_is_a_conflict(
    cli: Cli, tmp_path: Path
) -> None:
    (task,) = value(cli, "add", write(tmp_path / "a.txt", V1_TEXT))
    message = refused(
        cli,
        EXIT_CONFLICT,
        "upload",
        "--replaces",
        task["document_id"],
        write(tmp_path / "b.txt", V2_TEXT),
    )
    assert "is processing" in message and "cancel its task" in message
    assert [v["version_no"] for v in value(cli, "document", task["document_id"])["versions"]] == [1]


def test_replaces_takes_one_file_and_no_idempotency_key(cli: Cli, tmp_path: Path) -> None:
    family = published_v1(cli, tmp_path)
    a, b = write(tmp_path / "a.txt", V2_TEXT), write(tmp_path / "b.txt", V2_TEXT + b"more\n")
    assert "exactly one FILE" in refused(cli, EXIT_BAD_INPUT, "upload", "--replaces", family, a, b)
    keyed = refused(
        cli, EXIT_BAD_INPUT, "upload", "--replaces", family, a, "--idempotency-key", "k1"
    )
    assert "--idempotency-key" in keyed
    assert [v["version_no"] for v in value(cli, "document", family)["versions"]] == [1]
    # add has no --replaces: a new version is uploaded, then submitted like any draft.
    assert "--replaces" in refused(cli, EXIT_BAD_INPUT, "add", "--replaces", family, a)


def test_the_cli_acts_on_the_version_the_documents_name_means(cli: Cli, tmp_path: Path) -> None:
    family = published_v1(cli, tmp_path)
    (draft,) = value(cli, "upload", "--replaces", family, write(tmp_path / "v2.txt", V2_TEXT))
    v2 = draft["document_id"]
    submitted = ok(cli("submit", family))
    assert f"document={v2} status=queued" in submitted.stdout
    assert f"{family} names the document; its draft {v2[:8]} is the one submitted" in (
        submitted.stdout
    )
    ok(cli("worker", "--until-idle"))
    published = ok(cli("publish", family))
    assert published.stdout.startswith(f"published document={family} version=v2 ({v2})")
    assert f"{family} names the document; its version v2 is the one acted on" in published.stdout
    (header, *lines) = ok(cli("chunks", family[:8])).lines
    assert header == (
        f"document={family} version=v2 ({v2}) published ({family[:8]} names the document; "
        "its version v2 is the one shown):"
    )
    assert lines and all("sixty" in line for line in lines)
    assert [c["document_id"] for c in value(cli, "chunks", family)] == [v2] * len(lines)
    withdrawn = value(cli, "withdraw", family, "--reason", "stale")
    assert (withdrawn["document_id"], withdrawn["status"]) == (v2, "withdrawn")
    message = refused(cli, EXIT_CONFLICT, "withdraw", family, "--reason", "twice")
    assert message == (
        f"version 1 ({family[:8]}) of document {family[:8]} is retired; only published "
        f"documents can be withdrawn; its newest version, 2 ({v2[:8]}), is withdrawn"
    )
    assert value(cli, "publish", family[:8])["document_id"] == v2


def test_the_cli_shows_a_deleted_document_from_its_history(cli: Cli, tmp_path: Path) -> None:
    family = published_v1(cli, tmp_path)
    v2 = reviewed_v2(cli, tmp_path, family)
    ok(cli("delete", family, "--reason", "gone"))
    for ident in (family, family[:8], v2[:8]):
        shown = ok(cli("document", ident)).stdout
        assert "(deleted)" in shown, ident
        assert re.search(r"delete +v1 +published -> -  reason='gone'", shown), shown
        assert re.search(r"delete +v2 +review_pending -> -  reason='gone'", shown), shown
    answer = value(cli, "document", v2)
    assert (answer["deleted"], answer["status"], answer["document_id"]) == (True, "deleted", v2)
    assert answer["reason"] == "gone" and answer["history"][-1]["action"] == "delete"
    assert [(v["version_no"], v["status_before"]) for v in answer["versions"]] == [
        (1, "published"),
        (2, "review_pending"),
    ]
    assert value(cli, "document", family)["family_id"] == family


def test_the_cli_search_refuses_what_the_ledger_would_not_do(cli: Cli, tmp_path: Path) -> None:
    published_v1(cli, tmp_path)
    for query in ("", "!!!", "((("):
        assert refused(cli, EXIT_BAD_INPUT, "search", query) == NO_WORDS
    message = refused(cli, EXIT_BAD_INPUT, "search", "reaper", "--limit", "5000")
    assert "--limit" in message and f"from 1 to {SEARCH_LIMIT_MAX}" in message
    assert len(value(cli, "search", "reaper", "--limit", str(SEARCH_LIMIT_MAX))) == 1
    message = refused(cli, EXIT_BAD_INPUT, "search", "reaper", "--mode", "semantic")
    assert message == "search mode is one of keyword, vector, hybrid ('semantic' asked)"
    (hit,) = value(cli, "search", "reaper", "--mode", "keyword")
    assert (hit["mode"], hit["index"], hit["keyword_rank"], hit["vector_rank"]) == (
        "keyword",
        "",
        1,
        None,
    )


def test_a_hostile_reason_is_kept_inert_and_shown_escaped(cli: Cli, tmp_path: Path) -> None:
    family = published_v1(cli, tmp_path)
    reason = "bad\x1b[31m figures\u202e\nforged line"
    value(cli, "withdraw", family, "--reason", reason)
    shown = ok(cli("document", family)).stdout
    assert "\x1b" not in shown and "\u202e" not in shown
    (line,) = [x for x in shown.splitlines() if " withdraw " in x]
    assert "forged line" in line  # one history line, not two
