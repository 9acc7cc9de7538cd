"""Parsing, chunking, content sniffing and the killable parser pool, on real files.

No mocks: hostile inputs come from ``tests.hostile`` and really make pypdf fail, spin or
allocate; the pool tests run real spawned processes with real time and memory limits.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable

import pypdf
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.ingest.chunker import Chunk, chunk_text
from core.ingest.parse_pool import ParserPool, estimate_pages
from core.ingest.parser_process import ParserProcess
from core.ingest.parser_warnings import MAX_LOGGED_WARNINGS
from core.ingest.parsing import (
    DEFAULT_CHUNK_SIZE,
    ParsedDocument,
    ParseFailure,
    ParseRequest,
    parse_document,
    parser_info,
)
from core.ingest.sniffing import sniff_kind
from core.states import DocumentKind, ErrorCode
from tests import hostile

LOADED_PARSE_BUDGET_S = 120.0  # seconds a parse gets where its budget is not under test

# Generated once per test session: some take about a second to build.
cached = functools.cache


@cached
def _blank_pages() -> bytes:
    return hostile.blank_pages_pdf()


@cached
def _flate_bomb() -> bytes:
    return hostile.flate_bomb_pdf()


@cached
def _slow_pdf() -> bytes:
    return hostile.slow_pdf()


def _page_numbers(doc: ParsedDocument) -> list[int | None]:
    return [chunk.page for chunk in doc.chunks]


# --- valid documents ------------------------------------------------------------------------


def test_pdf_chunks_keep_page_numbers_and_text() -> None:
    data = hostile.make_pdf(["alpha page one", "bravo page two", "charlie page three"])

    doc = parse_document(data, DocumentKind.PDF)

    assert doc.pages == 3
    assert _page_numbers(doc) == [1, 2, 3]
    assert [chunk.ordinal for chunk in doc.chunks] == [0, 1, 2]
    assert [chunk.text for chunk in doc.chunks] == [
        "alpha page one",
        "bravo page two",
        "charlie page three",
    ]
    for chunk in doc.chunks:
        assert chunk.char_end - chunk.char_start == len(chunk.text)
    assert doc.warnings == 0


def test_long_pages_split_into_ordered_chunks_per_page() -> None:
    line = " ".join(f"word{i:03d}" for i in range(12))  # 95 characters
    data = hostile.make_pdf(["\n".join([line] * 10), "short second page", "\n".join([line] * 4)])

    doc = parse_document(data, "pdf", chunk_size=200, chunk_overlap=40)

    assert doc.pages == 3
    assert [c.ordinal for c in doc.chunks] == list(range(len(doc.chunks)))
    pages = [c.page or 0 for c in doc.chunks]
    assert pages == sorted(pages)
    assert pages.count(2) == 1
    assert pages.count(1) > 4
    for chunk in doc.chunks:
        assert 0 < len(chunk.text) <= 200
        assert chunk.text == chunk.text.strip()
    # Offsets restart on every page: they index that page's text.
    first_of_page = {c.page: c for c in reversed(doc.chunks)}
    assert all(c.char_start == 0 for c in first_of_page.values())


def test_pdfium_parser_reads_the_same_text() -> None:
    data = hostile.make_pdf(["alpha page one", "bravo page two"])

    doc = parse_document(data, "pdf", parser="pdfium")

    assert doc.pages == 2
    assert [(c.page, c.text) for c in doc.chunks] == [(1, "alpha page one"), (2, "bravo page two")]


def test_encrypted_pdf_with_empty_password_parses() -> None:
    doc = parse_document(hostile.encrypted_pdf(""), "pdf")

    assert [c.text for c in doc.chunks] == ["Confidential quarterly numbers"]


def test_markdown_keeps_its_text_and_has_no_page_numbers() -> None:
    data = b"# Title\n\nSome *markdown* body.\n"

    doc = parse_document(data, DocumentKind.MARKDOWN)

    assert doc.pages == 1
    assert doc.chunks == (Chunk(0, "# Title\n\nSome *markdown* body.", None, 0, 30),)


# --- hostile documents ----------------------------------------------------------------------

HOSTILE_PDFS: list[tuple[str, Callable[[], bytes], ErrorCode, str]] = [
    ("truncated", hostile.truncated_pdf, ErrorCode.PARSE_ERROR, "not a valid PDF"),
    ("garbage", hostile.garbage_pdf, ErrorCode.PARSE_ERROR, "not a valid PDF"),
    ("html", hostile.html_as_pdf, ErrorCode.PARSE_ERROR, "not a valid PDF"),
    ("zip", hostile.zip_as_pdf, ErrorCode.PARSE_ERROR, "not a valid PDF"),
    ("empty file", lambda: b"", ErrorCode.PARSE_ERROR, "not a valid PDF (empty file)"),
    (
        "user password",
        lambda: hostile.encrypted_pdf("secret"),
        ErrorCode.PARSE_ERROR,
        "encrypted PDF needs a password",
    ),
    ("cyclic page tree", hostile.cyclic_page_tree_pdf, ErrorCode.PARSE_ERROR, "not a valid PDF"),
    (
        "nested arrays in content",
        hostile.nested_arrays_pdf,
        ErrorCode.PARSE_ERROR,
        "nested too deeply (page 1)",
    ),
    (
        "nested arrays in object",
        lambda: hostile.nested_arrays_pdf(in_content=False),
        ErrorCode.PARSE_ERROR,
        "not a valid PDF",
    ),
    ("flate bomb", _flate_bomb, ErrorCode.PARSE_ERROR, "parser safety limit (page 1)"),
    (
        "operator flood",
        hostile.operator_flood_pdf,
        ErrorCode.PARSE_ERROR,
        "parser safety limit (page 1)",
    ),
    ("20 000 blank pages", _blank_pages, ErrorCode.EMPTY_DOCUMENT, "no extractable text"),
    ("image only", hostile.image_only_pdf, ErrorCode.EMPTY_DOCUMENT, "no extractable text"),
]


@pytest.mark.parametrize(
    ("make", "code", "reason"),
    [
        pytest.param(
            make,
            code,
            reason,
            id=name,
            # pypdf tokenises for 4-7 s before its per-stream token budget stops it.
            marks=[pytest.mark.slow] if name == "operator flood" else [],
        )
        for name, make, code, reason in HOSTILE_PDFS
    ],
)
def test_hostile_pdf_ends_as_parse_failure(
    make: Callable[[], bytes], code: ErrorCode, reason: str
) -> None:
    # pytest.raises(ParseFailure) fails the test on any other exception type.
    with pytest.raises(ParseFailure) as caught:
        parse_document(make(), DocumentKind.PDF)

    assert caught.value.code == code
    assert reason in caught.value.reason
    assert "/" not in caught.value.reason  # no paths
    assert "Traceback" not in str(caught.value)


def test_warning_flood_is_counted_but_logging_is_capped(caplog: pytest.LogCaptureFixture) -> None:
    pypdf_logger = logging.getLogger("pypdf")
    handlers_before = list(pypdf_logger.handlers)
    caplog.set_level(logging.DEBUG)

    doc = parse_document(hostile.warning_flood_pdf(), "pdf")

    assert [c.text for c in doc.chunks] == ["survivor"]
    assert doc.warnings > 1000
    assert not [r for r in caplog.records if r.name.startswith("pypdf")]
    ours = [r for r in caplog.records if r.name == "core.ingest.parsing"]
    assert len(ours) == MAX_LOGGED_WARNINGS
    assert f"{doc.warnings - (MAX_LOGGED_WARNINGS - 1)} more" in ours[-1].getMessage()
    # The capture is undone: pypdf logs normally again outside a parse.
    assert pypdf_logger.handlers == handlers_before
    assert pypdf_logger.propagate


def test_parse_failure_survives_pickling_and_only_takes_parse_codes() -> None:
    failure = ParseFailure("parse_error", "not a valid PDF")

    copy = pickle.loads(pickle.dumps(failure))

    assert (copy.code, copy.reason) == (ErrorCode.PARSE_ERROR, "not a valid PDF")
    assert str(copy) == "parse_error: not a valid PDF"
    assert ParseFailure("empty_document").reason == "The document could not be parsed."
    with pytest.raises(ValueError, match="not a parse failure code"):
        ParseFailure(ErrorCode.LEASE_EXPIRED)


# --- text -----------------------------------------------------------------------------------


def test_cp1252_text_is_decoded_with_one_warning() -> None:
    doc = parse_document(hostile.cp1252_text(), "text")

    assert doc.chunks[0].text.startswith("“Café” costs 5 € — naïve façade.")
    assert doc.warnings == 1


def test_utf16_text_with_bom_is_decoded() -> None:
    doc = parse_document(hostile.utf16_text(), "text")

    assert [c.text for c in doc.chunks] == ["Grüße aus Köln. Ελληνικά too."]
    assert doc.warnings == 0


def test_nul_bytes_are_stripped_from_text() -> None:
    doc = parse_document(hostile.nul_text(), "text")

    assert all("\x00" not in c.text for c in doc.chunks)
    assert "first line of the log" in doc.chunks[0].text
    assert doc.warnings == 1


def test_binary_declared_as_text_is_a_parse_error() -> None:
    with pytest.raises(ParseFailure) as caught:
        parse_document(hostile.garbage_pdf(), "text")

    assert (caught.value.code, caught.value.reason) == (ErrorCode.PARSE_ERROR, "undecodable text")


@pytest.mark.parametrize("data", [b"", b" \n\t \r\n", b"\x00\x00\n", "\u3000\n".encode()])
def test_text_without_words_is_an_empty_document(data: bytes) -> None:
    with pytest.raises(ParseFailure) as caught:
        parse_document(data, "markdown")

    assert caught.value.code == ErrorCode.EMPTY_DOCUMENT


def test_two_megabyte_single_line_is_split_at_chunk_size() -> None:
    data = hostile.long_line_text()
    # CPU seconds of this process: the work's cost, whatever else the machine runs.
    started = time.process_time()

    doc = parse_document(data, "text")  # the default sizes, as workers run them

    assert time.process_time() - started < 2.0
    assert all(len(c.text) <= DEFAULT_CHUNK_SIZE for c in doc.chunks)
    assert sum(len(c.text) for c in doc.chunks) == len(data)  # hard cuts do not overlap
    assert doc.chunks[-1].char_end == len(data)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "odt"}, "odt"),
        ({"kind": "pdf", "parser": "tika"}, "unknown parser"),
        ({"kind": "text", "chunk_size": 0}, "chunk_size"),
        ({"kind": "text", "chunk_overlap": 1000}, "overlap"),
    ],
)
def test_caller_mistakes_are_value_errors_not_parse_failures(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        parse_document(b"some text", **kwargs)  # type: ignore[arg-type]


def test_parser_info_names_library_versions() -> None:
    assert parser_info("pypdf") == {"parser": "pypdf", "version": pypdf.__version__}
    assert parser_info("pdfium")["parser"] == "pdfium"
    assert parser_info("pdfium")["version"]
    with pytest.raises(ValueError, match="unknown parser"):
        parser_info("tika")


# --- chunking -------------------------------------------------------------------------------


def _words(text: str) -> list[tuple[int, int]]:
    import re

    return [m.span() for m in re.finditer(r"\S+", text)]


def test_chunks_overlap_by_about_the_requested_amount() -> None:
    text = " ".join(f"w{i:04d}" for i in range(2000))  # 5-letter words

    spans = chunk_text(text, chunk_size=100, overlap=30)

    for (start, end), (next_start, _) in itertools.pairwise(spans):
        shared = end - next_start
        assert 30 - 6 < shared <= 30
        assert len(text[start:end]) <= 100
    assert spans[0][0] == 0
    assert spans[-1][1] == len(text)


def test_zero_overlap_chunks_tile_the_text() -> None:
    text = "one two three four five six seven eight nine ten"

    spans = chunk_text(text, chunk_size=10, overlap=0)

    assert [text[s:e] for s, e in spans] == [
        "one two",
        "three four",
        "five six",
        "seven",
        "eight nine",
        "ten",
    ]


def test_a_word_after_the_overlap_is_not_cut_when_it_fits_a_chunk() -> None:
    text = "a " + "b" * 9 + " c"

    spans = chunk_text(text, chunk_size=10, overlap=4)

    assert [text[s:e] for s, e in spans] == ["a", "b" * 9, "c"]


@pytest.mark.parametrize(("chunk_size", "overlap"), [(0, 0), (-5, 0), (10, -1), (10, 10), (10, 11)])
def test_chunk_text_rejects_bad_sizes(chunk_size: int, overlap: int) -> None:
    with pytest.raises(ValueError, match=r"chunk_size|overlap"):
        chunk_text("text", chunk_size=chunk_size, overlap=overlap)


def test_chunking_is_linear_on_large_inputs() -> None:
    words = " ".join(["lorem", "ipsum", "dolor", "sit", "amet"] * 70_000)  # ~2 MB
    single_word = "x" * (2 << 20)

    started = time.process_time()  # CPU seconds: the cost, not the machine's load
    word_spans = chunk_text(words, chunk_size=1000, overlap=150)
    giant_spans = chunk_text(single_word, chunk_size=1000, overlap=150)
    elapsed = time.process_time() - started

    assert elapsed < 2.0
    assert len(word_spans) == pytest.approx(len(words) / 850, rel=0.05)
    assert len(giant_spans) == -(-len(single_word) // 1000)


_texts = st.lists(
    st.one_of(
        st.text(alphabet="abcdeé", min_size=1, max_size=12),
        st.text(alphabet=" \n\t\u00a0", min_size=1, max_size=4),
    ),
    max_size=80,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=_texts, chunk_size=st.integers(1, 60), overlap_fraction=st.floats(0, 0.95))
def test_chunk_spans_respect_words_size_and_overlap(
    text: str, chunk_size: int, overlap_fraction: float
) -> None:
    overlap = int(chunk_size * overlap_fraction)
    spans = chunk_text(text, chunk_size=chunk_size, overlap=overlap)
    words = _words(text)
    long_words = [w for w in words if w[1] - w[0] > chunk_size]

    # Progress and size.
    assert all(0 < end - start <= chunk_size for start, end in spans)
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in itertools.pairwise(spans))
    # Every word character is in some chunk.
    covered: set[int] = set()
    for start, end in spans:
        covered.update(range(start, end))
    assert all(i in covered for w in words for i in range(*w))
    # No chunk starts or ends with whitespace.
    assert all(not text[s].isspace() and not text[e - 1].isspace() for s, e in spans)
    # Consecutive chunks share at most `overlap` characters.
    assert all(a[1] - b[0] <= overlap for a, b in itertools.pairwise(spans))
    if not long_words:
        # Words that fit a chunk are never cut.
        starts = {w[0] for w in words}
        ends = {w[1] for w in words}
        assert all(s in starts and e in ends for s, e in spans)


# --- sniffing -------------------------------------------------------------------------------

_PDF = hostile.make_pdf(["sniff me"])


@pytest.mark.parametrize(
    ("data", "filename", "expected"),
    [
        pytest.param(_PDF, "report.pdf", DocumentKind.PDF, id="pdf"),
        pytest.param(_PDF, "REPORT.PDF", DocumentKind.PDF, id="pdf upper-case name"),
        pytest.param(_PDF, "report.txt", DocumentKind.PDF, id="pdf content wins over name"),
        pytest.param(_PDF, "report", DocumentKind.PDF, id="pdf without extension"),
        pytest.param(b"\r\n junk\n" + _PDF, "scan.pdf", DocumentKind.PDF, id="junk before header"),
        pytest.param(b" " * 1100 + _PDF, "late.pdf", None, id="header after 1 KiB"),
        pytest.param(hostile.html_as_pdf(), "report.pdf", None, id="html named pdf"),
        pytest.param(hostile.zip_as_pdf(), "report.pdf", None, id="zip named pdf"),
        pytest.param(hostile.garbage_pdf(), "report.pdf", None, id="garbage named pdf"),
        pytest.param(b"", "empty.pdf", None, id="empty named pdf"),
        pytest.param(hostile.zip_as_pdf(), "report.docx", None, id="zip"),
        pytest.param(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, "cat.png", None, id="png"),
        pytest.param(b"\x7fELF\x02\x01\x01" + b"\x00" * 64, "tool", None, id="elf"),
        pytest.param(hostile.garbage_pdf(), "notes.txt", None, id="random bytes named txt"),
        pytest.param(
            b"{\\rtf1\\ansi\\deff0 {\\fonttbl {\\f0 Times;}}\\f0 Hello\\par}",
            "letter.txt",
            None,
            id="rtf named txt",
        ),
        pytest.param(b"# Title\n\ntext\n", "README.md", DocumentKind.MARKDOWN, id="md"),
        pytest.param(b"# Title\n", "notes.Markdown", DocumentKind.MARKDOWN, id="markdown"),
        pytest.param(b"# Title\n", "notes.txt", DocumentKind.TEXT, id="md content as txt"),
        pytest.param(b"plain words", "LICENSE", DocumentKind.TEXT, id="no extension"),
        pytest.param(b"<html><body>hi</body></html>", "page.html", DocumentKind.HTML, id="html"),
        pytest.param(b"", "empty.txt", DocumentKind.TEXT, id="empty text"),
        pytest.param(hostile.cp1252_text(), "win.txt", DocumentKind.TEXT, id="cp1252"),
        pytest.param(hostile.utf16_text(), "utf16.md", DocumentKind.MARKDOWN, id="utf-16"),
        pytest.param(hostile.nul_text(), "crash.log", DocumentKind.TEXT, id="rare NULs"),
        pytest.param(b"a\x00b\x00c\x00" * 100, "wide.txt", None, id="NUL every other byte"),
        pytest.param(hostile.long_line_text(), "line.txt", DocumentKind.TEXT, id="2 MB line"),
        pytest.param(
            b"Notes on files.\nA PDF starts with %PDF-1.7 and then\n",
            "notes.md",
            DocumentKind.MARKDOWN,
            id="note about pdf headers",
        ),
        pytest.param(
            "é".encode() * 40_000, "utf8-cut.txt", DocumentKind.TEXT, id="sample cuts a character"
        ),
    ],
)
def test_sniff_kind_judges_content(
    data: bytes, filename: str, expected: DocumentKind | None
) -> None:
    assert sniff_kind(data, filename) == expected


# --- the parser pool ------------------------------------------------------------------------


def test_budget_grows_with_pages_and_is_capped() -> None:
    pool = ParserPool(base_timeout_s=10.0, per_page_timeout_s=0.5, max_timeout_s=60.0)
    three_pages = hostile.make_pdf(["a", "b", "c"])

    assert estimate_pages(three_pages, "pdf") == 3
    assert pool.timeout_for(estimate_pages(three_pages, "pdf")) == 11.5
    assert pool.timeout_for(estimate_pages(_blank_pages(), "pdf")) == 60.0
    assert estimate_pages(b"short", "text") == 1
    assert estimate_pages(b"x" * (640 * 1024), "markdown") == 10


@pytest.mark.asyncio
async def test_pool_parses_many_small_files_on_reused_children() -> None:
    texts = [f"document number {i}".encode() for i in range(1000)]
    started = time.perf_counter()

    async with ParserPool(workers=2, max_parses_per_child=5000) as pool:
        docs = await asyncio.gather(*(pool.parse(t, "text") for t in texts))
        assert pool.children_started == 2

    assert [d.chunks[0].text for d in docs] == [t.decode() for t in texts]
    assert time.perf_counter() - started < 20.0


@pytest.mark.asyncio
async def test_pool_children_retire_after_their_parse_quota() -> None:
    async with ParserPool(workers=1, max_parses_per_child=3) as pool:
        for i in range(7):
            await pool.parse(f"doc {i}".encode(), "text")

        assert pool.children_started == 3


@pytest.mark.asyncio
async def test_pool_cuts_off_a_hang_at_the_budget_and_recovers() -> None:
    async with ParserPool(workers=1, base_timeout_s=1.0, per_page_timeout_s=0.0) as pool:
        await pool.parse(b"warm up", "text")  # the child's start-up is not the parse's time
        started = time.perf_counter()

        with pytest.raises(ParseFailure) as caught:
            await pool.parse(_slow_pdf(), "pdf")  # about a minute of work for pypdf

        elapsed = time.perf_counter() - started
        assert (caught.value.code, caught.value.reason) == (
            ErrorCode.PARSE_ERROR,
            "parse timed out after 1.0s",
        )
        assert 1.0 <= elapsed < 3.0

        doc = await pool.parse(hostile.make_pdf(["after the hang"]), "pdf")
        assert doc.chunks[0].text == "after the hang"
        assert pool.children_started == 2


# The memory fault must win its race with the time budget on any machine: this test's
# budget is generous (the cap is what it checks), and its cap low enough that the bomb
# reaches it in ~0.4 CPU-seconds. At 256 MiB two 70 MB pages fitted and pypdf scanned
# each one's whitespace byte by byte (~4 CPU-s a page): 8 CPU-s in all, against the
# default 13 s wall budget, which a loaded 2-core machine lost.
MEMORY_BOMB_CAP_BYTES = 192 << 20  # bytes of address space; an idle child maps ~75 MiB
MEMORY_BOMB_BUDGET_S = 300.0  # seconds


@pytest.mark.asyncio
async def test_pool_memory_bomb_is_a_parse_error_and_the_pool_survives() -> None:
    # 6 pages x 70 MB of cached inflated content against the address-space cap.
    async with ParserPool(
        workers=1, memory_limit_bytes=MEMORY_BOMB_CAP_BYTES, base_timeout_s=MEMORY_BOMB_BUDGET_S
    ) as pool:
        with pytest.raises(ParseFailure) as caught:
            await pool.parse(hostile.memory_bomb_pdf(pages=6), "pdf")

        assert caught.value.code == ErrorCode.PARSE_ERROR
        assert caught.value.reason == "parser exceeded memory limit"

        doc = await pool.parse(hostile.make_pdf(["still standing"]), "pdf")
        assert doc.chunks[0].text == "still standing"


@pytest.mark.asyncio
async def test_document_bigger_than_the_memory_cap_is_refused_cleanly() -> None:
    async with ParserPool(workers=1, memory_limit_bytes=128 << 20) as pool:
        with pytest.raises(ParseFailure) as caught:
            await pool.parse(b"word " * (16 << 20), "text")  # 80 MiB

        assert caught.value.reason == "parser exceeded memory limit"
        doc = await pool.parse(b"small again", "text")
        assert doc.chunks[0].text == "small again"


async def _next_busy_child(
    pool: ParserPool, after: int, timeout_s: float = hostile.BUSY_WAIT_S
) -> int:
    """The pid of the child that replaced ``after``, once it has a parse in hand."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        fresh = [pid for pid in pool.child_pids if pid != after]
        if fresh:
            return fresh[0]
        await asyncio.sleep(0.01)
    raise AssertionError(f"no parser process replaced {after} within {timeout_s}s")


@pytest.mark.asyncio
async def test_pool_reports_a_dead_child_and_replaces_it() -> None:
    async with ParserPool(workers=1) as pool:
        await pool.parse(b"warm up", "text")
        (pid,) = pool.child_pids
        parsing = asyncio.create_task(pool.parse(_slow_pdf(), "pdf"))
        await asyncio.sleep(0.3)
        # A crash, as a hostile file would make one (an outside SIGKILL is transient:
        # parser_killed). One crash may not be the document's doing: the parse runs
        # again on a fresh process. A document that crashes that one too is reported.
        os.kill(pid, signal.SIGSEGV)
        retry_pid = await _next_busy_child(pool, pid)
        await asyncio.sleep(0.3)
        os.kill(retry_pid, signal.SIGSEGV)

        with pytest.raises(ParseFailure) as caught:
            await parsing

        assert (caught.value.code, caught.value.reason) == (
            ErrorCode.PARSE_ERROR,
            "parser process died",
        )
        doc = await pool.parse(b"next document", "text")
        assert doc.chunks[0].text == "next document"
        assert pool.children_started == 3


@pytest.mark.asyncio
async def test_a_parser_killed_from_outside_mid_parse_is_retried_on_a_fresh_one() -> None:
    # About 1.5 s of pypdf work, then a good document's text.
    fine_but_slow = hostile.slow_pdf(pages=1, operators_per_page=100_000)
    # The budget is not under test: a loaded machine may parse this page for longer
    # than the 10.5 s a one-page document gets, twice over.
    async with ParserPool(workers=1, base_timeout_s=LOADED_PARSE_BUDGET_S) as pool:
        await pool.parse(b"warm up", "text")
        (pid,) = pool.child_pids
        warmed = {pid: hostile.cpu_seconds(pid)}
        parsing = asyncio.create_task(pool.parse(fine_but_slow, "pdf"))
        # Killed once it is surely inside the parse (CPU used, not time passed).
        killed = await hostile.kill_busy_parser(
            lambda: pool.child_pids, signal.SIGKILL, used_before=warmed
        )  # an operator's kill, not the document's doing
        assert killed == pid

        doc = await parsing

        assert doc.chunks and set(doc.chunks[0].text) == {"a"}
        assert pool.children_started == 2


@pytest.mark.asyncio
async def test_a_parser_that_dies_right_before_a_parse_does_not_fail_the_document() -> None:
    # The race behind "internal_error (BrokenPipeError)": the pool picks an idle child
    # that is alive, and it is gone by the time the request is written (a broken
    # pipe) or read (EOF before a reply). SIGKILL takes effect a moment after kill()
    # returns, so the parse that follows at once nearly always meets the dying child.
    async with ParserPool(workers=1) as pool:
        for i in range(5):
            await pool.parse(b"warm up", "text")
            (pid,) = pool.child_pids
            os.kill(pid, signal.SIGKILL)

            doc = await pool.parse(f"good document {i}".encode(), "text")

            assert doc.chunks[0].text == f"good document {i}"


@pytest.mark.asyncio
async def test_a_parser_started_from_a_thread_that_ends_lives_on() -> None:
    # On Linux a child asks to be killed when its parent dies, and the kernel means the
    # parent *thread*: a child started from a caller's short-lived thread must not
    # die with that thread.
    async with ParserPool(workers=1) as pool:

        def prestart_then_end() -> None:
            pool.prestart()
            time.sleep(1.0)  # long enough for the child to have set up its death signal

        starter = threading.Thread(target=prestart_then_end)
        starter.start()
        await asyncio.to_thread(starter.join)
        await asyncio.sleep(0.3)
        (pid,) = pool.child_pids

        doc = await pool.parse(b"still here", "text")

        assert doc.chunks[0].text == "still here"
        assert (pool.children_started, pool.child_pids) == (1, (pid,))


def test_a_parser_whose_parent_closes_its_socket_exits_even_mid_parse() -> None:
    # The portable fallback for PR_SET_PDEATHSIG: a dead parent's sockets close, and
    # the child's watch thread ends it, even while pypdf is busy.
    child = ParserProcess(1 << 30, 10)
    child.start()
    process = child._process
    conn = child._conn
    assert process is not None and conn is not None
    try:
        conn.send(ParseRequest(DocumentKind.PDF))
        conn.send_bytes(_slow_pdf())  # about a minute of work
        time.sleep(0.3)
        conn.close()

        process.wait(timeout=2.0)

        assert process.returncode == 0  # it left by itself, nobody killed it
    finally:
        child.kill()
        child.reap()


@pytest.mark.asyncio
async def test_pool_does_not_block_the_event_loop() -> None:
    gaps: list[float] = []

    async def ticker(stop: asyncio.Event) -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    async with ParserPool(workers=1, base_timeout_s=1.5, per_page_timeout_s=0.0) as pool:
        stop = asyncio.Event()
        ticking = asyncio.create_task(ticker(stop))
        with pytest.raises(ParseFailure):
            await pool.parse(_slow_pdf(), "pdf")  # child start-up plus 1.5 s of parsing
        stop.set()
        await ticking

    assert len(gaps) > 50
    assert max(gaps) < 0.25


@pytest.mark.asyncio
async def test_cancelled_parse_kills_its_child_and_the_pool_goes_on() -> None:
    async with ParserPool(workers=1) as pool:
        await pool.parse(b"warm up", "text")
        (first_pid,) = pool.child_pids
        parsing = asyncio.create_task(pool.parse(_slow_pdf(), "pdf"))  # 20 s budget
        await asyncio.sleep(0.3)
        cancelled_at = time.perf_counter()

        parsing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await parsing

        doc = await pool.parse(b"after cancel", "text")
        assert doc.chunks[0].text == "after cancel"
        assert pool.child_pids != (first_pid,)
    # Nothing waited out the cancelled parse's budget, not even closing the pool.
    assert time.perf_counter() - cancelled_at < 5.0


@pytest.mark.asyncio
async def test_closing_the_pool_cuts_short_running_parses() -> None:
    pool = ParserPool(workers=1)
    await pool.parse(b"warm up", "text")
    parsing = asyncio.create_task(pool.parse(_slow_pdf(), "pdf"))
    await asyncio.sleep(0.3)
    started = time.perf_counter()

    await pool.aclose()

    # Not a ParseFailure: the document did nothing wrong.
    with pytest.raises(RuntimeError, match="closed during the parse"):
        await parsing
    assert time.perf_counter() - started < 5.0
    assert pool.child_pids == ()


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("make", "code", "reason"),
    [
        pytest.param(make, code, reason, id=name)
        for name, make, code, reason in HOSTILE_PDFS
        if name in {"garbage", "user password", "nested arrays in content"}
    ],
)
async def test_pool_returns_the_same_failures_as_in_process(
    make: Callable[[], bytes], code: ErrorCode, reason: str
) -> None:
    async with ParserPool() as pool:
        with pytest.raises(ParseFailure) as caught:
            await pool.parse(make(), "pdf")

    assert caught.value.code == code
    assert reason in caught.value.reason


@pytest.mark.asyncio
async def test_pdfium_meets_hostile_files_only_inside_the_pool() -> None:
    # PDFium is native code: it only ever sees hostile bytes behind the process wall.
    must_fail = [
        hostile.truncated_pdf(),
        hostile.garbage_pdf(),
        hostile.html_as_pdf(),
        hostile.zip_as_pdf(),
        hostile.encrypted_pdf("secret"),
        hostile.cyclic_page_tree_pdf(),
        hostile.image_only_pdf(),
    ]
    # PDFium shrugs these off and finds the text pypdf could not reach.
    tolerated = [hostile.nested_arrays_pdf(), hostile.nested_arrays_pdf(in_content=False)]

    async with ParserPool(workers=2) as pool:
        failures = await asyncio.gather(
            *(pool.parse(data, "pdf", parser="pdfium") for data in must_fail),
            return_exceptions=True,
        )
        docs = [await pool.parse(data, "pdf", parser="pdfium") for data in tolerated]

    assert all(isinstance(f, ParseFailure) for f in failures), failures
    assert all(d.chunks[0].text == "after the arrays" for d in docs)


@pytest.mark.asyncio
async def test_pool_logs_capped_child_warnings_in_the_parent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="core.ingest.parsing")

    async with ParserPool() as pool:
        doc = await pool.parse(hostile.warning_flood_pdf(), "pdf")

    assert doc.warnings > 1000
    assert (
        len([r for r in caplog.records if r.name == "core.ingest.parsing"]) == MAX_LOGGED_WARNINGS
    )


@pytest.mark.asyncio
async def test_pool_rejects_caller_mistakes_without_starting_a_child() -> None:
    async with ParserPool() as pool:
        with pytest.raises(ValueError, match="chunk_size"):
            await pool.parse(b"text", "text", chunk_size=0)
        with pytest.raises(ValueError, match="odt"):
            await pool.parse(b"text", "odt")

        assert pool.children_started == 0


@pytest.mark.asyncio
async def test_closed_pool_refuses_work() -> None:
    pool = ParserPool()
    await pool.parse(b"once", "text")
    await pool.aclose()
    await pool.aclose()  # idempotent

    assert pool.child_pids == ()
    with pytest.raises(RuntimeError, match="closed"):
        await pool.parse(b"twice", "text")


@pytest.mark.parametrize("algorithm", ["AES-128", "AES-256"])
def test_aes_encrypted_pdf_with_an_empty_password_parses(algorithm: str) -> None:
    """Most modern encrypted PDFs use AES, which pypdf decrypts only with the
    cryptography package (the pypdf[crypto] dependency)."""
    import io

    from pypdf import PdfWriter

    writer = PdfWriter(clone_from=io.BytesIO(hostile.make_pdf(["Quarterly secrets"])))
    writer.encrypt(user_password="", owner_password="owner", algorithm=algorithm)
    buffer = io.BytesIO()
    writer.write(buffer)
    parsed = parse_document(buffer.getvalue(), DocumentKind.PDF)
    assert "Quarterly secrets" in parsed.chunks[0].text
