"""The demo corpus and ledger (core.demo): deterministic, and every file does what
the demo promises once parsed."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import BadInput, ErrorCode, Ledger, TaskStatus
from core.demo import (
    BIG_PDFS,
    CORRUPT_PDF,
    NO_TEXT_PDF,
    RETRY_DOCUMENT,
    SCANNED_PDF,
    build_demo_async,
    generate_corpus,
)
from core.ingest.formats import ocr
from core.ingest.parsing import ParseFailure, parse_document
from core.ingest.sniffing import sniff_kind
from core.states import PageDecision


def test_corpus_is_deterministic_and_parses_as_promised() -> None:
    first, second = generate_corpus(), generate_corpus()
    assert [(f.name, f.data) for f in first] == [(f.name, f.data) for f in second]
    pages = {}
    big = {name for name, _ in BIG_PDFS}
    for item in first:
        kind = sniff_kind(item.data, item.name)
        assert kind is not None, item.name
        if item.name in big:
            continue  # seconds of parsing each; the worker tests cover big files
        if item.name in (CORRUPT_PDF, NO_TEXT_PDF):
            with pytest.raises(ParseFailure) as failure:
                parse_document(item.data, kind)
            expected = (
                ErrorCode.PARSE_ERROR if item.name == CORRUPT_PDF else ErrorCode.EMPTY_DOCUMENT
            )
            assert failure.value.code is expected
        elif item.name == SCANNED_PDF:
            _read_as_a_scan(item.data)
        else:
            pages[item.name] = parse_document(item.data, kind).pages
    assert {1, 5, 20, 60} <= set(pages.values())


def _read_as_a_scan(data: bytes) -> None:
    """The demo's scan is read by OCR where the engine is installed; where it is not,
    it fails with the code that names what to install."""
    if ocr.unavailable_reason() is not None:
        with pytest.raises(ParseFailure) as failure:
            parse_document(data, "pdf")
        assert failure.value.code is ErrorCode.OCR_UNAVAILABLE
        return
    parsed = parse_document(data, "pdf")
    (reading,) = parsed.readings
    assert reading.decision is PageDecision.OCR and (reading.confidence or 0) > 80, reading
    text = " ".join(c.text for c in parsed.chunks)
    assert "SERVICE CONTRACT 2025-117" in text and "cooling pumps" in text, text


async def test_demo_ledger_has_a_task_that_needs_a_retry(tmp_path: Path) -> None:
    settings = await build_demo_async(tmp_path / "demo")
    ledger = await Ledger.open(settings)
    try:
        counts = await ledger.reads.counts()
        assert counts[TaskStatus.QUEUED] == len(generate_corpus()) - 1
        (failed,) = await ledger.reads.list_tasks(status=TaskStatus.FAILED)
        assert failed.document_name == RETRY_DOCUMENT
        assert failed.error_code is ErrorCode.OBJECT_READ_ERROR
        document = await ledger.reads.get_document(failed.document_id)
        # The original is back in the store: a retry will be able to read it.
        assert ledger.operator.store.get(document.object_key, document.sha256)
        await ledger.operator.retry(failed.task_id, actor="tester")
    finally:
        await ledger.close()
    assert (tmp_path / "demo" / "corpus" / RETRY_DOCUMENT).is_file()
    with pytest.raises(BadInput, match="already holds a ledger"):
        await build_demo_async(tmp_path / "demo")
