"""Refusals of the command line: one line that says what is wrong, the exit code for
bad input, and nothing left behind (the screens' `ingestdesk` included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.test_cli import (
    EXIT_BAD_INPUT,
    EXIT_UNEXPECTED,
    MARKDOWN,
    SCREENS,
    TEXT,
    added,
    core_cli,
    run,
    write,
)


# `ingestdesk demo /tmp/x/a.txt/sub --json` printed a progress line, then {"error": …
# "unexpected NotADirectoryError: a bug in ingestdesk…"}; `ingestdesk --json` opened the
# whole dashboard, escape codes on stderr and no JSON.
def test_the_demo_under_a_file_is_one_line(tmp_path: Path) -> None:
    write(tmp_path / "a.txt", TEXT)
    for where in ("a.txt/sub", "a.txt"):
        result = run(["demo", where], cwd=tmp_path, program=SCREENS)
        assert (result.code, result.stdout) == (EXIT_BAD_INPUT, ""), result
        assert result.stderr == f"ingestdesk: cannot create {where}: not a directory\n"


@pytest.mark.parametrize(
    "args",
    [["--json"], ["dashboard", "--json"], ["demo", "x/a.txt/sub", "--json"], ["race", "--json"]],
)
def test_a_screen_under_json_is_refused_with_one_json_value(
    tmp_path: Path, args: list[str]
) -> None:
    result = run(args, cwd=tmp_path, program=SCREENS)
    assert (result.code, result.stderr) == (EXIT_BAD_INPUT, ""), result
    assert "no JSON form" in result.error["message"]
    assert list(tmp_path.iterdir()) == []


def test_small_refusals_say_what_is_wrong(tmp_path: Path) -> None:
    added(tmp_path, write(tmp_path / "a.md", MARKDOWN))
    # '""' said "'!' needs a term after it".
    empty_term = core_cli(tmp_path, "cancel", "--filter", '""')
    assert empty_term.code == EXIT_BAD_INPUT and 'an empty term ("")' in empty_term.stderr
    # `upload ''` said ".: is a directory, not a file".
    empty_path = core_cli(tmp_path, "upload", "")
    assert empty_path.code == EXIT_BAD_INPUT and "an empty path" in empty_path.stderr
    # `--db a.txt/x.db add …` said "cannot create its folder (File exists)".
    write(tmp_path / "a.txt", TEXT)
    under_file = run(["--db", "a.txt/x.db", "--store", "objects", "add", "a.md"], cwd=tmp_path)
    assert under_file.code == EXIT_UNEXPECTED
    assert f"{tmp_path / 'a.txt'} is a file, not a directory" in under_file.stderr
    # `--lease 1e-300` was accepted: every task would be reaped while it ran.
    for lease in ("1e-300", "0.5"):
        tiny = core_cli(tmp_path, "worker", "--lease", lease)
        assert tiny.code == EXIT_BAD_INPUT and "at least 1" in tiny.stderr, lease
