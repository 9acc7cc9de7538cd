"""The README's many-hosts example, run as written against a real S3-compatible
server on loopback: its ledger URL and endpoint are swapped for this test's (a
SQLite file here; the drill runs PostgreSQL), its bucket made in the server."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from core import sqlite_url
from tests.store.conftest import S3Server, aws_env
from tests.test_readme_examples import NOTES, ingestdesk_program, section, sh_blocks

SECTION = "Many hosts: originals in an S3-compatible bucket"
README_DB = "postgresql+asyncpg://ingest@db.internal/ingest"
README_ENDPOINT = "http://127.0.0.1:9000"
README_BUCKET = "ingest-originals"

pytestmark = pytest.mark.usefixtures("aws_credentials")


def test_the_many_hosts_example_does_what_the_readme_says(
    s3_server: S3Server, tmp_path: Path
) -> None:
    [block] = sh_blocks(section(SECTION))
    assert [e.argv[:2] for e in block] == [
        ["export", f"INGESTDESK_DB={README_DB}"],
        ["ingestdesk", "add"],
        ["ingestdesk", "worker"],
        ["ingestdesk", "prune"],
    ], "the README's example changed: update this test with it"
    client = s3_server.client()
    if README_BUCKET not in {b["Name"] for b in client.list_buckets()["Buckets"]}:
        client.create_bucket(Bucket=README_BUCKET)
    (tmp_path / "notes.md").write_bytes(NOTES)
    env = {k: v for k, v in aws_env().items() if not k.startswith("INGESTDESK_")}
    swap = {README_DB: sqlite_url(tmp_path / "ledger.db"), README_ENDPOINT: s3_server.endpoint}
    for name, _, value in (word.partition("=") for word in block[0].argv[1:]):
        env[name] = swap.get(value, value)
    runs = []
    for example in block[1:]:
        run = subprocess.run(
            [*ingestdesk_program(), *example.argv[1:], "--json"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, (example.argv, run.stderr)
        runs.append(run)
    [task] = json.loads(runs[0].stdout)
    listed = client.list_objects_v2(Bucket=README_BUCKET, Prefix="team/sha256/")
    assert [o["Key"].rsplit("/", 1)[1] for o in listed["Contents"]] == [
        hashlib.sha256(NOTES).hexdigest()
    ]
    tasks = subprocess.run(
        [*ingestdesk_program(), "tasks", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert [t["status"] for t in json.loads(tasks.stdout)] == ["succeeded"]
    assert json.loads(runs[2].stdout)["dry_run"] is True
    assert not (tmp_path / ".ingestdesk" / "objects").exists()  # nothing in a local folder
    assert task["status"] == "queued"
