"""The S3 store against a real S3-compatible server on loopback (moto's): objects
appear only whole under their key, every read checks the digest, a damaged object is
repaired by the next upload of the same bytes, faults have stable meanings, and a
refused upload's objects and stale orphans are taken back. The real CLI, a real
ledger file, the real bucket."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core import Ledger
from core.cli.maintenance import STALE_AFTER_S, Removed, _prune_store
from core.errors import EXIT_TEMPFAIL, ObjectReadError, StoreUnavailable, StoreUnreachable
from core.store import track_created
from core.store.s3 import INCOMING_DIR, PART_BYTES, S3Store, split_location
from tests.store.conftest import (
    ACCESS_KEY,
    REPO_ROOT,
    SECRET_KEY,
    S3Server,
    aws_env,
    s3_cli,
    s3_settings,
)

pytestmark = pytest.mark.usefixtures("aws_credentials")


def _store(server: S3Server, bucket: str, **kw: float) -> S3Store:
    return S3Store(f"s3://{bucket}/originals", endpoint=server.endpoint, **kw)  # type: ignore[arg-type]


def _keys(server: S3Server, bucket: str) -> list[str]:
    listed = server.client().list_objects_v2(Bucket=bucket)
    return sorted(o["Key"] for o in listed.get("Contents", []))


def test_put_and_read_verify_and_a_damaged_object_is_repaired(s3_server: S3Server) -> None:
    bucket = s3_server.new_bucket()
    store = _store(s3_server, bucket)
    with track_created() as created:
        key, digest = store.put(b"an original")
        assert store.put(b"an original") == (key, digest)
    assert created == [key]  # the second put found it: not this block's to take back
    assert _keys(s3_server, bucket) == [f"originals/{key}"]
    assert asyncio.run(store.read(key, digest, 11)) == b"an original"

    s3_server.client().put_object(Bucket=bucket, Key=f"originals/{key}", Body=b"an 0riginal")
    with pytest.raises(ObjectReadError, match="does not match its checksum"):
        store.get(key, digest)
    with pytest.raises(ObjectReadError, match="does not match its checksum"):
        asyncio.run(store.read(key, digest, 11))
    store.put(b"an original")  # uploading it again repairs it
    assert store.get(key, digest) == b"an original"
    with pytest.raises(ObjectReadError, match="malformed object key"):
        store.get("../../etc/passwd", digest)


def test_a_big_streamed_upload_goes_up_in_parts_and_appears_only_whole(
    s3_server: S3Server,
) -> None:
    bucket = s3_server.new_bucket()
    store = _store(s3_server, bucket)
    piece = bytes(range(256)) * 4096  # 1 MiB
    receiving = store.receive()
    for _ in range(PART_BYTES // len(piece) + 3):  # past one part: a multipart upload
        receiving.write(piece)
    # Mid-way nothing is under an object key: only the hidden multipart upload.
    assert not [k for k in _keys(s3_server, bucket) if "/sha256/" in k]
    stored = receiving.store()
    assert stored.size == len(piece) * (PART_BYTES // len(piece) + 3)
    assert stored.head == (piece * 2)[: len(stored.head)]
    assert _keys(s3_server, bucket) == [f"originals/{stored.key}"]  # no incoming/ left
    assert len(store.get(stored.key, stored.sha256)) == stored.size

    cut_short = store.receive()
    for _ in range(PART_BYTES // len(piece) + 2):
        cut_short.write(piece + b"x")
    cut_short.discard()
    assert _keys(s3_server, bucket) == [f"originals/{stored.key}"]


def test_a_missing_bucket_or_no_credentials_is_one_line_at_start_up(
    s3_server: S3Server, tmp_path: Path
) -> None:
    settings = s3_settings(s3_server, tmp_path, bucket="no-such-bucket-here")
    note = tmp_path / "a.md"
    note.write_text("# a\n")
    run = s3_cli(settings, "add", str(note))
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [
        "ingestdesk: s3://no-such-bucket-here: the bucket does not exist"
    ], run.stderr
    served = s3_cli(settings, "serve", "--port", "0", timeout=60)
    assert served.returncode == 1 and "Traceback" not in served.stderr
    assert "s3://no-such-bucket-here: the bucket does not exist" in served.stderr

    nobody = {k: v for k, v in aws_env().items() if k not in ("AWS_ACCESS_KEY_ID",)}
    nobody.pop("AWS_SECRET_ACCESS_KEY")
    run = s3_cli(s3_settings(s3_server, tmp_path), "add", str(note), env=nobody)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert "no AWS credentials found" in run.stderr


@pytest.mark.parametrize("bucket", ["Bad_Bucket!", "ab", "-leading", "a b", "x" * 256, "café"])
def test_a_bucket_name_no_service_accepts_is_named_as_such(bucket: str) -> None:
    with pytest.raises(StoreUnavailable, match="is not a valid bucket name"):
        split_location(f"s3://{bucket}/originals")


def test_todays_and_legacy_bucket_names_are_taken() -> None:
    assert split_location("s3://docs.example-1/originals") == ("docs.example-1", "originals")
    # us-east-1 buckets made before 2018 may hold capitals and underscores.
    assert split_location("s3://Legacy_Bucket") == ("Legacy_Bucket", "")


PROBE = """
import sys
from core.store.s3 import S3Store
store = S3Store(sys.argv[1], endpoint=sys.argv[2])
key, digest = store.put(b"read back through " + sys.argv[3].encode())
assert store.get(key, digest).endswith(sys.argv[3].encode())
print("botocore" in sys.modules)
"""


def test_keys_in_the_environment_need_no_botocore_and_a_profile_still_works(
    s3_server: S3Server, tmp_path: Path
) -> None:
    bucket = f"s3://{s3_server.new_bucket()}/originals"

    def probe(env: dict[str, str], how: str) -> bool:
        run = subprocess.run(
            [sys.executable, "-c", PROBE, bucket, s3_server.endpoint, how],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert run.returncode == 0, run.stderr
        return run.stdout.strip() == "True"

    # Keys in the environment and no config file to read: botocore would answer the
    # same, so it is not imported (0.15 s of every command's start).
    assert probe(aws_env(), "the environment") is False
    # A named profile in the shared files: botocore's resolution, as the AWS tools'.
    credentials = tmp_path / "credentials"
    credentials.write_text(
        f"[desk]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"
    )
    profiled = {k: v for k, v in aws_env().items() if not k.startswith("AWS_ACCESS_KEY")}
    del profiled["AWS_SECRET_ACCESS_KEY"]
    profiled |= {"AWS_PROFILE": "desk", "AWS_SHARED_CREDENTIALS_FILE": str(credentials)}
    assert probe(profiled, "a profile") is True
    # Keys in the environment beside a config file: the file may name a region or an
    # endpoint, so botocore reads it.
    config = tmp_path / "config"
    config.write_text("[default]\nregion = us-east-1\n")
    assert probe(aws_env() | {"AWS_CONFIG_FILE": str(config)}, "keys and a config") is True


def test_upload_and_worker_on_a_bucket_with_no_local_store(
    s3_server: S3Server, tmp_path: Path
) -> None:
    settings = s3_settings(s3_server, tmp_path)
    note = tmp_path / "note.md"
    note.write_text("# Remote\n\nThe originals live in a bucket now.\n")
    added = s3_cli(settings, "add", str(note), "--json")
    assert added.returncode == 0, added.stderr
    worked = s3_cli(settings, "worker", "--until-idle", "--embedder", "hashed")
    assert worked.returncode == 0, worked.stderr
    [task] = json.loads(s3_cli(settings, "tasks", "--json").stdout)
    assert task["status"] == "succeeded", task
    assert not settings.store_root.exists()  # nothing went to a local folder
    assert SECRET_KEY not in added.stdout + added.stderr + worked.stdout + worked.stderr


async def test_the_store_down_during_a_task_is_object_read_error_naming_the_cause(
    own_s3_server: S3Server, tmp_path: Path
) -> None:
    from core.ingest.embedder import HashingEmbedder
    from core.ingest.worker import Worker

    settings = s3_settings(own_s3_server, tmp_path)
    async with await Ledger.open(settings) as ledger:
        doc = await ledger.operator.upload(b"# A note\n\nread while the store is down\n", "a.md")
        await ledger.operator.submit(doc.document_id)
        # A short retry window, so the test does not wait out the default one.
        bucket = (settings.store_url or "").split("/")[2]
        ledger.operator.store = _store(own_s3_server, bucket, retry_s=1)
        own_s3_server.stop()
        worker = Worker(ledger, "w1", register=False, embedder=HashingEmbedder())
        try:
            assert await worker.run_one()
        finally:
            await worker.close()
        [task] = await ledger.reads.list_tasks()
    assert task.error_code == "object_read_error"
    assert task.status in ("retry_wait", "queued")
    assert "unreachable" in (task.error_detail or "")
    assert SECRET_KEY not in (task.error_detail or "")


async def test_a_refused_uploads_objects_and_stale_orphans_are_taken_back(
    s3_server: S3Server, tmp_path: Path
) -> None:
    settings = s3_settings(s3_server, tmp_path)
    bucket = (settings.store_url or "").split("/")[2]
    async with await Ledger.open(settings) as ledger:
        kept = await ledger.operator.upload(b"kept: a document references it\n", "kept.md")
        with track_created() as created:
            await asyncio.to_thread(ledger.operator.store.put, b"stored, then refused")
        await ledger.take_back(created)
        assert _keys(s3_server, bucket) == [f"originals/{kept.object_key}"]

        await asyncio.to_thread(ledger.operator.store.put, b"an orphan")
        s3_server.client().put_object(
            Bucket=bucket, Key=f"originals/{INCOMING_DIR}0123abcd", Body=b"x" * 100
        )
        now = time.time()
        young = Removed()
        await _prune_store(ledger, True, young, now=now)
        assert (young.objects, young.incoming) == (0, 0)  # all just written
        later = now + 2 * STALE_AFTER_S
        counted = Removed()
        await _prune_store(ledger, True, counted, now=later)
        assert (counted.objects, counted.incoming, counted.bytes) == (1, 1, 9 + 100)
        assert len(_keys(s3_server, bucket)) == 3  # a dry run removes nothing
        removed = Removed()
        await _prune_store(ledger, False, removed, now=later)
        assert (removed.objects, removed.incoming) == (1, 1)
        assert _keys(s3_server, bucket) == [f"originals/{kept.object_key}"]
        assert ledger.operator.store.get(kept.object_key, kept.sha256).startswith(b"kept")


def test_healthz_names_the_bucket_and_endpoint_never_a_key(
    s3_server: S3Server, tmp_path: Path
) -> None:
    from tests.api.conftest import start_server, stop_server

    settings = s3_settings(s3_server, tmp_path)
    api = start_server(
        settings,
        "--store",
        settings.store_url or "",
        "--s3-endpoint",
        s3_server.endpoint,
        env=aws_env(),
    )
    try:
        with api.client(role=None) as client:
            health = client.get("/healthz")
    finally:
        _code, out = stop_server(api)
    assert health.status_code == 200
    assert health.json()["store"] == f"{settings.store_url} at {s3_server.endpoint}"
    assert SECRET_KEY not in health.text + out and "AKID" not in health.text


def test_the_store_down_during_an_upload_refuses_it_and_writes_nothing(
    own_s3_server: S3Server,
) -> None:
    bucket = own_s3_server.new_bucket()
    store = _store(own_s3_server, bucket, retry_s=1)
    receiving = store.receive()
    receiving.write(b"a" * (PART_BYTES + 1))  # past one part: a multipart upload begun
    own_s3_server.stop()

    def finish() -> None:
        receiving.write(b"b" * PART_BYTES)
        receiving.store()

    # The parts go up behind the writes: the refusal comes by the end of the upload.
    # For now, not for good: exit 75 and Retry-After, as for an unreachable ledger.
    with pytest.raises(StoreUnreachable, match=f"s3://{bucket}: the store is unreachable"):
        finish()
    with pytest.raises(StoreUnreachable, match="unreachable") as refused:
        store.put(b"refused while the store is down")
    assert refused.value.exit_code == EXIT_TEMPFAIL
    own_s3_server.start()
    assert _keys(own_s3_server, bucket) == []  # nothing half-written, under any name
