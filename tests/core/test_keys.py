"""The processing key: content or any result-changing option makes a new key; option
order, value spelling and the file's name never do."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from core import Ledger, TaskStatus, Worker
from core.ingest.keys import canonical_options, processing_key

OPTION_NAMES = st.sampled_from(
    ["parser", "version", "chunk_size", "chunk_overlap", "chunker", "embedder"]
)
OPTIONS = st.dictionaries(OPTION_NAMES, st.text(min_size=1, max_size=12), min_size=1)


@given(data=st.binary(), options=OPTIONS)
def test_option_order_never_changes_the_key(data: bytes, options: dict[str, str]) -> None:
    reversed_order = dict(reversed(list(options.items())))
    assert processing_key(data, options) == processing_key(data, reversed_order)


@given(data=st.binary(), other=st.binary(), options=OPTIONS)
def test_different_content_makes_a_different_key(
    data: bytes, other: bytes, options: dict[str, str]
) -> None:
    assert (processing_key(data, options) == processing_key(other, options)) == (data == other)


@given(data=st.binary(), options=OPTIONS, name=OPTION_NAMES, value=st.text(max_size=12))
def test_changing_any_option_makes_a_different_key(
    data: bytes, options: dict[str, str], name: str, value: str
) -> None:
    changed = options | {name: value}
    same = changed == options
    assert (processing_key(data, changed) == processing_key(data, options)) == same


def test_the_key_is_sha256_of_bytes_nul_and_canonical_json() -> None:
    options = {"chunk_size": 1000, "parser": "pypdf"}
    canonical = b'{"chunk_size":"1000","parser":"pypdf"}'
    assert canonical_options(options) == canonical
    expected = hashlib.sha256(b"abc" + b"\0" + canonical).hexdigest()
    assert processing_key(b"abc", options) == expected
    assert processing_key(b"abc", {"parser": "pypdf", "chunk_size": "1000"}) == expected
    # Content and options cannot trade bytes across the separator.
    assert processing_key(b"abc\0", options) != expected


async def test_a_task_records_its_processing_key_and_a_rename_keeps_it(
    ledger: Ledger, tmp_path: Path
) -> None:
    note = b"# Runbook\n\nLeases expire after thirty seconds.\n"
    first = await ledger.operator.upload(note, "runbook.md")
    second = await ledger.operator.upload(note, "renamed-runbook.md")
    other = await ledger.operator.upload(note + b"!", "runbook.md")
    tasks = [await ledger.operator.submit(d.document_id) for d in (first, second, other)]
    worker = Worker(ledger, "w-keys", concurrency=1, register=False)
    await worker.run(until_idle=True)
    done = [await ledger.reads.get_task(t.task_id) for t in tasks]
    assert [t.status for t in done] == [TaskStatus.SUCCEEDED] * 3
    keys = [t.options["processing_key"] for t in done]
    assert keys[0] == keys[1] != keys[2]
    recorded = {k: v for k, v in done[0].options.items() if k != "processing_key"}
    assert keys[0] == processing_key(note, recorded)
    assert json.loads(canonical_options(recorded))["chunk_size"] == recorded["chunk_size"]
    assert {"parser", "chunk_size", "chunk_overlap", "chunker", "embedder"} <= set(recorded)
