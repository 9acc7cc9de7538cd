"""Office and web documents through the real CLI and a real worker process: added,
ingested, their chunks listed with their location, a table cell's word found by
search, and a hostile file in the same batch failing alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests import formats_hostile as h

DATA = Path(__file__).parent / "data" / "formats"
COMMAND_TIMEOUT_S = 300.0  # seconds; the worker ingests the whole batch
MENU = (
    b"<!doctype html><html><head><title>Menu</title></head><body><h1>Lunch</h1>"
    b"<table><tr><th>Dish</th><th>Price</th></tr><tr><td>Quesadilla</td><td>7</td></tr>"
    b"</table></body></html>"
)


def _cli(db_url: str, store: Path, *args: str) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INGESTDESK_")}
    proc = subprocess.run(
        [sys.executable, "-m", "core.cli", "--db", db_url, "--store", str(store), "--json", *args],
        capture_output=True,
        env=env,
        input=b"",
        timeout=COMMAND_TIMEOUT_S,
        check=False,
        cwd=store.parent,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    return json.loads(proc.stdout)


def test_office_and_web_documents_are_ingested_with_their_locations(
    db_url: str, tmp_path: Path
) -> None:
    store = tmp_path / "objects"
    (tmp_path / "menu.html").write_bytes(MENU)
    (tmp_path / "bomb.docx").write_bytes(h.zip_bomb())
    files = [
        DATA / "word_tables.docx",
        DATA / "test.xlsx",
        DATA / "powerpoint_sample.pptx",
        DATA / "winter-sports.epub",
        DATA / "raw_text.csv",
        tmp_path / "menu.html",
        tmp_path / "bomb.docx",
    ]
    added = _cli(db_url, store, "add", *map(str, files))
    ids = {task["document_name"]: task["document_id"] for task in added}
    assert set(ids) == {f.name for f in files}

    _cli(db_url, store, "worker", "--until-idle")

    tasks = {t["document_name"]: t for t in _cli(db_url, store, "tasks")}
    assert tasks["bomb.docx"]["status"] == "failed"
    assert tasks["bomb.docx"]["error_code"] == "parse_error"
    others = {name: t["status"] for name, t in tasks.items() if name != "bomb.docx"}
    assert set(others.values()) == {"succeeded"}, others

    slides = _cli(db_url, store, "chunks", ids["powerpoint_sample.pptx"])
    assert {"slide": 2, "notes": True} in [c["location"] for c in slides]
    assert "slide 2 notes" in [c["place"] for c in slides]
    sheet = _cli(db_url, store, "chunks", ids["test.xlsx"])
    assert sheet[0]["location"] == {"sheet": "Sheet1", "rows": [2, 24]}
    chapters = _cli(db_url, store, "chunks", ids["winter-sports.epub"])
    assert all(c["location"].get("headings") for c in chapters)

    hits = _cli(db_url, store, "search", "--mode", "keyword", "--all", "Quesadilla")
    assert [(h["filename"], h["place"]) for h in hits] == [("menu.html", "Lunch row 1")]
    assert "| **Quesadilla** | 7 |" in hits[0]["snippet"]
    cells = _cli(db_url, store, "search", "--mode", "keyword", "--all", "Gamma")
    assert cells and cells[0]["location"] == {"sheet": "Sheet1", "rows": [2, 24]}
