"""Keyword search inside Chinese, Japanese and Korean text, on both backends: a word
inside a sentence written without spaces is found, its characters only where they
follow each other, and the snippet shows the text as written; a ledger from before
migration 0018 is indexed again when opened; a real Shift_JIS document through the
CLI and a worker process."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.engine import Connection

from core import Ledger, Settings, sqlite_url
from core.ledger.segment import query_tokens, search_text, segment, unsegment
from tests.core.test_formats_end_to_end import _cli
from tests.core.test_search import published_text

DATA = Path(__file__).parent / "data" / "formats"

JAPANESE = "この文書は文字コードについて説明します。"
CHINESE = "北京是中华人民共和国的首都，也是全国的政治中心。"  # noqa: RUF001 (as written in Chinese)
KOREAN = "서울에서 내일 회의가 있습니다."
MIXED = "設定ファイルはUnicode文字で保存されます。"
LATIN = "Au café on sert une crème brûlée."


def _shown_as_written(snippet: str, source: str) -> bool:
    """Every piece of the snippet, marks taken away, is a piece of the source."""
    return all(piece in source for piece in snippet.replace("**", "").split("…"))


@pytest.mark.parametrize(
    ("query", "source", "marked"),
    [
        ("文字コード", JAPANESE, "**文字コード**"),
        ("説明", JAPANESE, "**説明**"),
        ("コー", JAPANESE, "**コー**"),  # the prolonged sound mark is a character
        ("字", JAPANESE, "**字**"),
        ("中华人民共和国", CHINESE, "**中华人民共和国**"),
        ("首都", CHINESE, "**首都**"),
        ("회의", KOREAN, "**회의**"),
        ("서울", KOREAN, "**서울**"),
        ("Unicode文字", MIXED, "**Unicode文字**"),
        ("unicode 保存", MIXED, "**保存**"),
    ],
)
async def test_a_word_inside_cjk_text_is_found_and_shown_as_written(
    ledger: Ledger, query: str, source: str, marked: str
) -> None:
    doc = await published_text(ledger, source, "doc.txt")
    await published_text(ledger, LATIN, "latin.txt")
    (hit,) = await ledger.reads.search(query, mode="keyword")
    assert hit.document_id == doc.document_id
    assert hit.text == source
    assert marked in hit.snippet
    # Only the words asked for: PostgreSQL's headline marks each character of the
    # query wherever it is (the 文 of 文書), and only whole terms keep their marks.
    assert hit.snippet.count("**") == (4 if " " in query else 2), hit.snippet
    assert _shown_as_written(hit.snippet, source), hit.snippet


@pytest.mark.parametrize(
    ("query", "source"),
    [
        ("文コード", JAPANESE),  # every character there, 字 between
        ("京北", CHINESE),  # both there, the other way round
        ("국회", KOREAN),  # 회 there, 국 not
        ("서회", KOREAN),  # both there, apart
        ("Unicode保存", MIXED),
    ],
)
async def test_characters_that_appear_apart_are_not_found(
    ledger: Ledger, query: str, source: str
) -> None:
    await published_text(ledger, source, "doc.txt")
    assert await ledger.reads.search(query, mode="keyword") == []


async def test_only_cjk_chunks_are_indexed_otherwise_and_kept_exact(ledger: Ledger) -> None:
    await published_text(ledger, LATIN, "latin.txt")
    doc = await published_text(ledger, JAPANESE, "ja.txt")

    def stored(conn: Connection) -> dict[str, str | None]:
        rows = conn.execute(text("SELECT text, search_text FROM chunks"))
        return {r.text: r.search_text for r in rows}

    # A chunk in Latin script is indexed from its text, as before 0018.
    assert await ledger.transactions.read(stored) == {LATIN: None, JAPANESE: segment(JAPANESE)}
    await ledger.versions.delete(doc.document_id, actor="pat")
    assert await ledger.reads.search("文字", mode="keyword") == []
    assert len(await ledger.reads.search("creme", mode="keyword")) == 1
    if ledger.backend == "sqlite":
        # The delete trigger handed FTS5 what had been indexed: the index and its
        # content view agree row by row.
        await ledger.transactions.write(_integrity_check)


def _integrity_check(conn: Connection) -> None:
    conn.execute(text("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)"))


async def test_a_sqlite_ledger_from_0017_is_indexed_again_when_opened(tmp_path: Path) -> None:
    from tests.old_ledgers import set_back

    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "o")
    async with await Ledger.open(settings) as ledger:
        await published_text(ledger, JAPANESE, "ja.txt")
        await published_text(ledger, LATIN, "latin.txt")
    set_back(tmp_path / "ledger.db", "0017")
    async with await Ledger.open(settings) as ledger:
        (hit,) = await ledger.reads.search("文字コード", mode="keyword")
        assert "**文字コード**" in hit.snippet
        assert len(await ledger.reads.search("creme brulee", mode="keyword")) == 1
        await ledger.transactions.write(_integrity_check)
        # Written after the upgrade, found alike.
        await published_text(ledger, CHINESE, "zh.txt")
        assert len(await ledger.reads.search("人民", mode="keyword")) == 1


def _indexed(conn: Connection, word: str) -> int:
    if conn.dialect.name == "sqlite":
        sql = "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH :w"
    else:
        sql = "SELECT count(*) FROM chunks WHERE search @@ to_tsquery('ingestdesk_search', :w)"
    return int(conn.execute(text(sql), {"w": word}).scalar() or 0)


def _migrate(conn: Connection, revision: str, *, down: bool) -> None:
    from alembic import command

    from core.ledger.migrate import _alembic_config

    (command.downgrade if down else command.upgrade)(_alembic_config(conn), revision)


async def test_the_segmented_index_downgrades_and_upgrades_again(settings: Settings) -> None:
    # On PostgreSQL the downgrade is the ledger as 0017 left it; the upgrade from
    # there is the one a ledger of that age gets.
    async with await Ledger.open(settings) as ledger:
        await published_text(ledger, JAPANESE, "ja.txt")
        await published_text(ledger, LATIN, "latin.txt")
        await ledger.transactions.write(lambda c: _migrate(c, "0017", down=True))
        # 0017's index (this code's statements read 0018's schema): the run of
        # Japanese is one word again, and the Latin words are there.
        assert await ledger.transactions.read(lambda c: _indexed(c, "文字")) == 0
        assert await ledger.transactions.read(lambda c: _indexed(c, "creme")) == 1
        if ledger.backend == "sqlite":
            await ledger.transactions.write(_integrity_check)
    async with await Ledger.open(settings) as ledger:  # upgrades again
        (hit,) = await ledger.reads.search("文字コード", mode="keyword")
        assert "**文字コード**" in hit.snippet
        assert len(await ledger.reads.search("creme", mode="keyword")) == 1


@given(st.text(alphabet="文字コー ドa b\n서울é、.", max_size=30))
def test_segmentation_is_undone_exactly(source: str) -> None:
    assert unsegment(segment(source)) == source
    assert (search_text(source) is None) == (segment(source) == source)


def test_a_query_word_becomes_the_tokens_the_index_holds() -> None:
    assert query_tokens("文字コード") == ["文", "字", "コ", "ー", "ド"]
    assert query_tokens("Unicode文字") == ["Unicode", "文", "字"]
    assert query_tokens("서울에서") == ["서", "울", "에", "서"]
    assert query_tokens("café") == ["café"]


def test_shift_jis_documents_are_found_by_a_word_inside_through_the_cli(
    db_url: str, tmp_path: Path
) -> None:
    store = tmp_path / "objects"
    note = tmp_path / "note.txt"
    note.write_bytes(f"{JAPANESE}\n文字化けしたファイルは変換表で直します。\n".encode("shift_jis"))
    added = _cli(db_url, store, "add", str(DATA / "test_mskanji.csv"), str(note))
    assert len(added) == 2
    _cli(db_url, store, "worker", "--until-idle")
    statuses = {t["document_name"]: t["status"] for t in _cli(db_url, store, "tasks")}
    assert statuses == {"test_mskanji.csv": "succeeded", "note.txt": "succeeded"}

    def search(query: str) -> list[tuple[str, str]]:
        hits = _cli(db_url, store, "search", "--mode", "keyword", "--all", query)
        return [(h["filename"], h["snippet"]) for h in hits]

    (found,) = search("太郎")  # inside the cell 佐藤太郎
    assert found[0] == "test_mskanji.csv" and "**太郎**" in found[1]
    assert [name for name, _ in search("名古屋")] == ["test_mskanji.csv"]
    (found,) = search("文字コード")
    assert found[0] == "note.txt" and "**文字コード**" in found[1]
    assert {name for name, _ in search("文字")} == {"note.txt"}
    assert search("藤郎") == []  # both in 佐藤太郎, apart
