"""Hostile office and web documents end as ``parse_error`` with a one-line detail,
in the parser process, within the parse's budget, and the parser serves the next
document as if nothing happened."""

from __future__ import annotations

import io
import socket
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from core.ingest import limits
from core.ingest.parse_pool import ParserPool
from core.ingest.parsing import ParseFailure, parse_document
from core.ingest.sniffing import sniff_kind
from core.states import DocumentKind, ErrorCode
from tests import formats_hostile as h

DATA = Path(__file__).parent / "data" / "formats"
GOOD_DOCX = DATA / "word_tables.docx"


def refused(data: bytes, name: str) -> ParseFailure:
    kind = sniff_kind(data, name)
    assert kind is not None, "accepted at upload: the parse is what must refuse it"
    with pytest.raises(ParseFailure) as failure:
        parse_document(data, kind)
    assert failure.value.code is ErrorCode.PARSE_ERROR
    assert "\n" not in failure.value.reason
    return failure.value


@pytest.mark.parametrize(
    ("make", "name", "says"),
    [
        pytest.param(h.zip_bomb, "bomb.docx", "like a zip bomb", id="zip bomb (ratio)"),
        pytest.param(h.lying_sizes, "liar.docx", "inflates to 4294967294 bytes", id="huge entry"),
        pytest.param(h.many_entries, "many.docx", "10003 zip entries", id="10 000 entries"),
        pytest.param(h.billion_laughs_docx, "lol.docx", "entities", id="entity expansion docx"),
        pytest.param(h.billion_laughs_xlsx, "lol.xlsx", "entities", id="entity expansion xlsx"),
        pytest.param(h.billion_laughs_epub, "lol.epub", "entities", id="entity expansion epub"),
        pytest.param(h.deep_docx, "deep.docx", "nested too deeply", id="XML 100 000 deep"),
        pytest.param(h.deep_html, "deep.html", "nested over 1000", id="HTML 300 000 deep"),
        pytest.param(
            lambda: h.truncated(GOOD_DOCX.read_bytes()), "cut.docx", "truncated", id="truncated"
        ),
    ],
)
def test_hostile_documents_end_as_parse_error_naming_the_limit(
    make: Callable[[], bytes], name: str, says: str
) -> None:
    started = time.monotonic()
    failure = refused(make(), name)
    assert says in failure.reason
    # Refused before the expensive part: well inside any budget, even on a busy machine.
    assert time.monotonic() - started < 30


def test_zip_guards_read_only_the_directory() -> None:
    # The bomb's entry is refused by its declared sizes: nothing was inflated, so the
    # check costs no more than reading the directory of a small file.
    data = h.zip_bomb()
    started = time.process_time()
    for _ in range(20):
        archive = zipfile.ZipFile(io.BytesIO(data))
        with pytest.raises(limits.LimitExceeded):
            limits.check_zip(archive, "DOCX")
    assert time.process_time() - started < 2.0


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    yield server
    server.close()


def _nobody_connected(server: socket.socket) -> bool:
    try:
        connection, _ = server.accept()
    except BlockingIOError:
        return True
    connection.close()
    return False


async def test_external_entities_are_never_fetched_in_the_parser_process(
    listener: socket.socket, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    port = listener.getsockname()[1]
    async with ParserPool() as pool:
        for url in (f"http://127.0.0.1:{port}/entity", secret.as_uri()):
            data = h.external_entity_docx(url)
            try:
                doc = await pool.parse(data, DocumentKind.DOCX)
                read = " ".join(c.text for c in doc.chunks)
            except ParseFailure as failure:  # refusing the entity is fine too
                read = failure.code.value
            assert "TOP-SECRET" not in read
            assert read == "parse_error" or read.startswith("outside:")
    assert _nobody_connected(listener)


async def test_a_million_row_sheet_stops_at_the_row_limit_and_the_parser_goes_on() -> None:
    data = h.million_rows()
    async with ParserPool() as pool:
        budget = pool.timeout_for(10 + len(data) // (64 * 1024))
        started = time.monotonic()
        with pytest.raises(ParseFailure) as failure:
            await pool.parse(data, DocumentKind.XLSX)
        assert failure.value.code is ErrorCode.PARSE_ERROR
        assert f"over {limits.MAX_TABLE_ROWS} rows" in failure.value.reason
        assert time.monotonic() - started < budget
        # The same pool, the next document: parsed as if nothing had happened.
        good = await pool.parse(GOOD_DOCX.read_bytes(), DocumentKind.DOCX)
        assert any("Cell 1.0" in c.text for c in good.chunks)


async def test_every_hostile_document_fails_alone_in_one_pool() -> None:
    hostile = [
        (h.zip_bomb(), DocumentKind.DOCX),
        (h.many_entries(), DocumentKind.DOCX),
        (h.billion_laughs_xlsx(), DocumentKind.XLSX),
        (h.deep_html(), DocumentKind.HTML),
        (h.deep_docx(), DocumentKind.DOCX),
        ((DATA / "password_protected.xlsx").read_bytes(), DocumentKind.XLSX),
    ]
    async with ParserPool() as pool:
        for data, kind in hostile:
            with pytest.raises(ParseFailure) as failure:
                await pool.parse(data, kind)
            assert failure.value.code is ErrorCode.PARSE_ERROR, failure.value
            good = await pool.parse(GOOD_DOCX.read_bytes(), DocumentKind.DOCX)
            assert good.chunks
        # One child served them all: no failure cost a process.
        assert pool.children_started == 1
