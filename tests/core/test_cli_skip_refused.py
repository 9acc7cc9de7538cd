"""``add``/``upload --skip-refused``: a bulk load leaves out the files whose content is
refused and adds the rest in one batch, reporting each one it left out; a wrong path
still refuses the whole batch, and without the flag a batch stays all or nothing
(tests/core/test_cli.py holds those tests).

Every command is a real ``python -m core.cli`` process on a SQLite file and an object
store under ``tmp_path``, with real documents from tests/core/data/formats/ (and the
shared corpus when it is there) beside an RTF, an empty file and random bytes.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from core.cli import main
from core.errors import BadInput
from core.intake import check_upload
from tests.core.test_cli import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    TEXT,
    Cli,
    Result,
    assert_nothing_written,
    one_error_line,
    pdf_bytes,
    run,
    stored_objects,
    write,
)

DATA = Path(__file__).parent / "data" / "formats"
SHARED_CORPUS = Path("/work/shared/corpora/formats")
GOOD_HERE = ("docx_lists.docx", "raw_text.csv", "powerpoint_sample.pptx", "winter-sports.epub")
GOOD_SHARED = ("alice.epub", "test.xlsx", "bbc-1.html")
RTF = rb"{\rtf1\ansi{\fonttbl\f0\fswiss Helvetica;}\f0\pard A rich text memo.\par}"
UNSUPPORTED = "unsupported file type (judged by content)"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "objects"


@pytest.fixture
def cli(tmp_path: Path, db_path: Path, store: Path) -> Cli:
    def call(*args: str, stdin: bytes | None = None) -> Result:
        return run(["--db", str(db_path), "--store", str(store), *args], cwd=tmp_path, stdin=stdin)

    return call


def good_files(folder: Path) -> list[Path]:
    """Real documents of several formats, copied in, and a generated PDF and text."""
    folder.mkdir()
    sources = [DATA / name for name in GOOD_HERE]
    sources += [SHARED_CORPUS / name for name in GOOD_SHARED if (SHARED_CORPUS / name).is_file()]
    copied = [Path(shutil.copy(source, folder / source.name)) for source in sources]
    return [
        *copied,
        write(folder / "memo.pdf", pdf_bytes()),
        write(folder / "notes.txt", TEXT),
    ]


def refused_files(folder: Path) -> dict[Path, str]:
    """Files whose content is refused, each with the start of its reason."""
    folder.mkdir()
    noise = random.Random(6665).randbytes(4096)
    return {
        write(folder / "memo.rtf", RTF): UNSUPPORTED,
        write(folder / "empty.txt", b""): "the file is empty (0 bytes)",
        write(folder / "noise.bin", noise): UNSUPPORTED,
        write(folder / "report.pdf", (DATA / "docx_lists.docx").read_bytes()): (
            "not a PDF: the content is a Word document"
        ),
    }


def interleaved(good: list[Path], bad: list[Path]) -> list[Path]:
    """good[0], bad[0], good[1], bad[1], …: skipped files among the added ones."""
    mixed: list[Path] = []
    for i in range(max(len(good), len(bad))):
        mixed += good[i : i + 1] + bad[i : i + 1]
    return mixed


def names_of(tasks_or_documents: list[dict[str, Any]], key: str) -> list[str]:
    return [str(row[key]) for row in tasks_or_documents]


def test_add_skips_each_refused_file_and_adds_the_rest(
    cli: Cli, tmp_path: Path, db_path: Path, store: Path
) -> None:
    good = good_files(tmp_path / "good")
    bad = refused_files(tmp_path / "bad")
    batch = [str(p) for p in interleaved(good, list(bad))]

    # Without the flag the batch is refused whole, naming every bad file; nothing is
    # written, and no ledger is created.
    refused = cli("add", *batch)
    assert refused.code == EXIT_BAD_INPUT
    line = one_error_line(refused)
    assert not db_path.exists() and stored_objects(store) == []

    result = cli("add", *batch, "--skip-refused")
    assert result.code == EXIT_OK, result
    submitted = result.stdout.splitlines()
    assert [s.rsplit(" name=", 1)[1] for s in submitted] == [p.name for p in good]
    assert all(s.startswith("submitted task=") for s in submitted)
    skipped = result.stderr.splitlines()
    assert len(skipped) == len(bad), result.stderr
    for text, (path, reason) in zip(skipped, bad.items(), strict=True):
        assert text.startswith(f"skipped {path}: {reason}"), text
        # The same reason the refused batch gave for this file, by its name.
        assert f"{path.name}: {text.removeprefix(f'skipped {path}: ')}" in line

    tasks = ok_json(cli("tasks", "--json"))
    assert sorted(names_of(tasks, "document_name")) == sorted(p.name for p in good)
    assert {t["status"] for t in tasks} == {"queued"}
    assert len(stored_objects(store)) == len(good)  # nothing of the skipped is stored


def test_upload_json_lists_what_was_added_and_what_was_skipped(
    cli: Cli, tmp_path: Path, store: Path
) -> None:
    good = good_files(tmp_path / "good")
    bad = refused_files(tmp_path / "bad")
    result = cli("upload", *map(str, interleaved(good, list(bad))), "--skip-refused", "--json")
    assert (result.code, result.stderr) == (EXIT_OK, ""), result
    value = result.value
    assert set(value) == {"added", "skipped"}
    assert names_of(value["added"], "filename") == [p.name for p in good]
    assert {d["status"] for d in value["added"]} == {"draft"}
    assert [s["file"] for s in value["skipped"]] == [str(p) for p in bad]
    assert [s["name"] for s in value["skipped"]] == [p.name for p in bad]
    for entry, (path, reason) in zip(value["skipped"], bad.items(), strict=True):
        assert set(entry) == {"file", "name", "reason"}
        assert entry["reason"].startswith(reason)
        with pytest.raises(BadInput) as refusal:
            check_upload(path.read_bytes(), path.name, 100 * 1024 * 1024)
        assert refusal.value.message == f"{path.name}: {entry['reason']}"
    documents = ok_json(cli("documents", "--json"))
    assert sorted(names_of(documents, "filename")) == sorted(p.name for p in good)
    assert len(stored_objects(store)) == len(good)


def test_the_flag_with_nothing_refused_answers_the_object(cli: Cli, tmp_path: Path) -> None:
    notes = write(tmp_path / "notes.txt", TEXT)
    value = ok_json(cli("add", str(notes), "--skip-refused", "--json"))
    assert set(value) == {"added", "skipped"} and value["skipped"] == []
    assert names_of(value["added"], "document_name") == ["notes.txt"]
    # Without the flag the answer is the bare list, as it always was.
    again = ok_json(cli("add", str(notes), "--json"))
    assert isinstance(again, list) and names_of(again, "document_name") == ["notes.txt"]


def test_a_file_over_the_upload_limit_is_skipped_unread(cli: Cli, tmp_path: Path) -> None:
    small = write(tmp_path / "small.txt", TEXT)
    big = write(tmp_path / "big.txt", TEXT * 40)  # over a 0.002 MB (2097 bytes) limit
    result = cli("--max-upload-mb", "0.002", "add", str(big), str(small), "--skip-refused")
    assert result.code == EXIT_OK, result
    assert result.stderr == (
        f"skipped {big}: {big.stat().st_size} bytes is over the upload limit of 2097 bytes\n"
    )
    assert result.stdout.splitlines()[0].endswith(" name=small.txt")
    # Without the flag the same file refuses the batch, with the same words.
    refused = cli("--max-upload-mb", "0.002", "add", str(big), str(small))
    assert refused.code == EXIT_BAD_INPUT
    assert one_error_line(refused) == (
        f"ingestdesk: {big}: {big.stat().st_size} bytes is over the upload limit of 2097 bytes"
    )


@pytest.mark.parametrize("wrong", ["missing.txt", "a-folder", ""])
def test_a_wrong_path_still_refuses_the_whole_batch(
    cli: Cli, tmp_path: Path, db_path: Path, store: Path, wrong: str
) -> None:
    (tmp_path / "a-folder").mkdir()
    good = write(tmp_path / "notes.txt", TEXT)
    rtf = write(tmp_path / "memo.rtf", RTF)
    path = str(tmp_path / wrong) if wrong else ""
    for command in ("add", "upload"):
        result = cli(command, str(good), path, str(rtf), "--skip-refused")
        assert result.code == EXIT_BAD_INPUT, result
        line = one_error_line(result)  # no "skipped" lines: nothing was left out
        assert (wrong or "an empty path") in line and "notes.txt" not in line
        as_json = cli(command, str(good), path, str(rtf), "--skip-refused", "--json")
        assert (as_json.code, as_json.stderr) == (EXIT_BAD_INPUT, "")
        assert as_json.error["kind"] == "BadInput"
    assert not db_path.exists()
    assert_nothing_written(db_path, store)


def test_when_every_file_is_refused_nothing_is_created(
    cli: Cli, tmp_path: Path, db_path: Path, store: Path
) -> None:
    bad = refused_files(tmp_path / "bad")
    result = cli("add", *map(str, bad), "--skip-refused")
    assert (result.code, result.stdout) == (EXIT_BAD_INPUT, ""), result
    *skipped, last = result.stderr.splitlines()
    assert [s.split(": ", 1)[0] for s in skipped] == [f"skipped {p}" for p in bad]
    assert last == f"ingestdesk: nothing was added: every input was refused ({len(bad)} skipped)"

    as_json = cli("upload", *map(str, bad), "--skip-refused", "--json")
    assert (as_json.code, as_json.stderr) == (EXIT_BAD_INPUT, ""), as_json
    value = as_json.value
    assert set(value) == {"added", "skipped", "error"} and value["added"] == []
    assert [s["name"] for s in value["skipped"]] == [p.name for p in bad]
    assert value["error"] == {
        "kind": "BadInput",
        "message": f"nothing was added: every input was refused ({len(bad)} skipped)",
    }
    # As for a refused batch: no ledger where there was none, no stored object.
    assert not db_path.exists() and not (tmp_path / ".ingestdesk").exists()
    assert stored_objects(store) == []


def test_a_refused_stdin_upload_is_skipped_like_a_file(cli: Cli, db_path: Path) -> None:
    result = cli("add", "-", "--name", "piped.rtf", "--skip-refused", stdin=RTF)
    assert result.code == EXIT_BAD_INPUT
    assert result.stderr.splitlines()[0].startswith(f"skipped -: {UNSUPPORTED}")
    assert not db_path.exists()
    piped = ok_json(cli("add", "-", "--name", "piped.txt", "--skip-refused", "--json", stdin=TEXT))
    assert names_of(piped["added"], "document_name") == ["piped.txt"]


@pytest.mark.parametrize(
    ("command", "option", "words"),
    [
        ("add", ("--idempotency-key", "bulk-load-0001"), "--idempotency-key"),
        ("upload", ("--idempotency-key", "bulk-load-0001"), "--idempotency-key"),
        ("upload", ("--replaces", "0123456789abcdef"), "--replaces"),
    ],
)
def test_the_flag_is_refused_where_a_request_is_one_file(
    cli: Cli, tmp_path: Path, db_path: Path, command: str, option: tuple[str, str], words: str
) -> None:
    notes = write(tmp_path / "notes.txt", TEXT)
    result = cli(command, str(notes), *option, "--skip-refused")
    assert result.code == EXIT_BAD_INPUT
    line = one_error_line(result)
    assert "--skip-refused cannot be combined with" in line and words in line
    assert not db_path.exists()  # refused before anything is read or opened


def test_the_help_says_what_the_flag_does_and_its_exit_codes(tmp_path: Path) -> None:
    for command in ("add", "upload"):
        shown = run([command, "--help"], cwd=tmp_path)
        assert shown.code == EXIT_OK
        text = " ".join(shown.stdout.split())
        assert "--skip-refused for a bulk load: leave out each file whose content" in text
        assert "Exit 0 when anything was added, 2 when every file was skipped" in text


def test_an_interrupt_after_the_commit_counts_only_what_was_added(
    tmp_path: Path,
    db_path: Path,
    store: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The "too late" line names the batch recorded, not the files given."""
    from core.ledger import Operator

    real = Operator.add_many

    async def committed_then_interrupted(self: Operator, *args: Any, **kwargs: Any) -> Any:
        await real(self, *args, **kwargs)
        raise asyncio.CancelledError  # what asyncio.run makes of the first SIGINT

    monkeypatch.setattr(Operator, "add_many", committed_then_interrupted)
    for name in [k for k in os.environ if k.startswith("INGESTDESK_")]:
        monkeypatch.delenv(name)
    a, b = write(tmp_path / "a.txt", TEXT), write(tmp_path / "b.txt", TEXT + b"b")
    rtf = write(tmp_path / "memo.rtf", RTF)
    args = ["--db", str(db_path), "--store", str(store), "add", str(a), str(rtf), str(b)]
    code = main([*args, "--skip-refused"])
    captured = capsys.readouterr()
    assert code == EXIT_INTERRUPTED
    assert captured.err.splitlines() == [
        "ingestdesk: interrupted too late: the whole batch was already recorded "
        "(2 documents added; `ingestdesk documents` lists them)"
    ]
    assert len(stored_objects(store)) == 2


def ok_json(result: Result) -> Any:
    assert result.code == EXIT_OK, result
    return result.value
