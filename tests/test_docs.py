"""The README's tables are the product's contract: they must say what the code does."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from core import ERRORS, PAIRED_DOCUMENT_STATUS, TASK_MEANING

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def table_rows(first_header: str) -> dict[str, list[str]]:
    """Rows of the markdown table whose first header cell is ``first_header``."""
    lines = README.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows: dict[str, list[str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def test_state_table_matches_the_state_machine() -> None:
    rows = table_rows("task status")
    assert set(rows) == {s.value for s in TASK_MEANING}
    for status, (document_status, meaning) in rows.items():
        assert PAIRED_DOCUMENT_STATUS[status].value == document_status  # type: ignore[index]
        assert TASK_MEANING[status] == meaning  # type: ignore[index]


def test_error_table_matches_the_error_codes() -> None:
    rows = table_rows("error_code")
    assert set(rows) == {c.value for c in ERRORS}
    for code, (meaning, advice, retried) in rows.items():
        info = ERRORS[code]  # type: ignore[index]
        assert (info.meaning, info.advice) == (meaning, advice)
        assert info.transient == retried.startswith("yes")


def test_cli_reference_lists_every_command() -> None:
    # The installed command's parser: core's commands and the screens tui/ adds.
    from tui.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    documented = set(re.findall(r"`ingestdesk (\w+)", README))
    assert set(sub.choices) <= documented  # type: ignore[arg-type]


def test_quickstart_is_two_commands_and_ci_runs_the_test_one() -> None:
    quick = README.split("## Quickstart", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    commands = [line for line in quick.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[1] in ci


def test_help_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "core.cli", "--help"], capture_output=True, text=True, check=True
    )
    assert "ingestdesk" in out.stdout
