# ruff: noqa: RUF001  (the test text is Cyrillic, Greek and CJK on purpose)
"""Text in the code pages knowledge bases are fed: recognised as text when it enters,
decoded to the characters its author typed when it is parsed (never indexed as
mojibake), with one warning naming the encoding that was guessed.

Real files where a corpus has them (a Shift_JIS CSV from Japanese Excel, a Shift_JIS
page from a Japanese blog), and text in each code page written by Python's codecs:
the bytes a Windows or Unix program in that locale writes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.ingest.parsing import parse_document
from core.ingest.sniffing import sniff_kind
from core.ingest.text_encoding import decode_text
from core.states import DocumentKind
from tests import hostile

DATA = Path(__file__).parent / "data" / "formats"
SHARED_PAGE = Path("/work/shared/corpora/formats/hardsoft.at.webry.info.html")

RUSSIAN = (
    "Отчёт о продажах за третий квартал. Выручка выросла во всех регионах, "
    "а расходы на логистику снизились на восемь процентов.\n"
)
CHINESE = "第三季度销售报告。所有地区的收入均有增长，物流成本下降了百分之八。\n"
TRADITIONAL = "第三季度銷售報告。所有地區的收入均有增長，物流成本下降了百分之八。\n"
KOREAN = "3분기 판매 보고서. 모든 지역에서 매출이 증가했고 물류 비용은 8퍼센트 감소했습니다.\n"
POLISH = (
    "Sprawozdanie ze sprzedaży za trzeci kwartał. Przychody wzrosły we wszystkich "
    "regionach, a koszty transportu spadły o osiem procent.\n"
)
GREEK = "Αναφορά πωλήσεων τρίτου τριμήνου. Τα έσοδα αυξήθηκαν σε όλες τις περιοχές.\n"


@pytest.mark.parametrize(
    ("text", "encoding"),
    [
        pytest.param(RUSSIAN, "cp1251", id="windows-1251"),
        pytest.param(RUSSIAN * 2, "koi8_r", id="koi8-r"),
        pytest.param(CHINESE, "gbk", id="gbk"),
        pytest.param(TRADITIONAL, "big5", id="big5"),
        pytest.param(KOREAN, "euc_kr", id="euc-kr"),
        pytest.param(POLISH, "cp1250", id="windows-1250"),
        pytest.param(POLISH, "iso8859_2", id="latin-2"),
        pytest.param(GREEK, "cp1253", id="windows-1253"),
        pytest.param("名前,年齢\n佐藤,30\n", "shift_jis", id="shift_jis-short"),
    ],
)
def test_text_in_a_code_page_is_read_as_its_author_wrote_it(text: str, encoding: str) -> None:
    data = text.encode(encoding)
    assert sniff_kind(data, "notes.txt") is DocumentKind.TEXT

    doc = parse_document(data, DocumentKind.TEXT)

    assert [c.text for c in doc.chunks] == [text.strip()]
    assert doc.warnings == 1  # "text is not UTF-8; decoded as ..."


def test_western_text_stays_cp1252_where_other_code_pages_decode_it_too() -> None:
    # cp1250 and cp1257 decode these bytes without a control character as well, with
    # "naïve" as "naďve": the tie goes to cp1252.
    assert decode_text(hostile.cp1252_text()) == (
        hostile.cp1252_text().decode("cp1252"),
        "cp1252",
    )


def test_a_shift_jis_csv_from_excel_is_a_table_with_its_japanese_header() -> None:
    data = (DATA / "test_mskanji.csv").read_bytes()
    assert sniff_kind(data, "test_mskanji.csv") is DocumentKind.CSV
    assert sniff_kind(data, "export") is DocumentKind.CSV  # by content, not by name

    doc = parse_document(data, DocumentKind.CSV)

    text = doc.chunks[0].text
    assert text.splitlines()[0] == "| 名前 | 年齢 | 住所 |"
    assert "| 髙橋淳 | 35 | 名古屋 |" in text  # 髙: a cp932 character Shift_JIS lacks
    assert doc.warnings == 1


def test_a_page_is_read_in_the_charset_its_meta_names() -> None:
    body = "<p>ハードなソフトの話。文字コードの違い。</p>"
    page = (
        '<html><head><meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS">'
        f"</head><body><h1>見出し</h1>{body}</body></html>"
    ).encode("cp932")
    assert sniff_kind(page, "page") is DocumentKind.HTML

    doc = parse_document(page, DocumentKind.HTML)

    assert "ハードなソフトの話。文字コードの違い。" in doc.chunks[0].text
    assert doc.chunks[0].location is not None
    assert doc.chunks[0].location.headings == ("見出し",)


def test_a_page_labelled_latin_1_that_is_utf8_is_read_as_utf8() -> None:
    page = '<html><head><meta charset="iso-8859-1"></head><body><p>Grüße – “quoted”</p>'
    doc = parse_document(page.encode("utf-8"), DocumentKind.HTML)

    assert doc.chunks[0].text == "Grüße – “quoted”"


def test_a_page_with_a_damaged_byte_is_read_leniently_in_its_declared_charset() -> None:
    good = "<p>文字コードの違いに関する詳細記事</p>".encode("cp932")
    page = b'<html><head><meta charset="shift_jis"></head><body>' + good + b"\x81\x20" + good
    doc = parse_document(page, DocumentKind.HTML)

    assert doc.chunks[0].text.count("文字コードの違いに関する詳細記事") == 2


@pytest.mark.skipif(not SHARED_PAGE.exists(), reason="the shared corpus is not here")
def test_a_real_shift_jis_blog_page_is_html_in_japanese() -> None:
    data = SHARED_PAGE.read_bytes()
    assert sniff_kind(data, SHARED_PAGE.name) is DocumentKind.HTML

    doc = parse_document(data, DocumentKind.HTML)

    assert any("文字コード" in c.text or "シフトJIS" in c.text for c in doc.chunks)


@pytest.mark.parametrize(
    "label",
    [
        *("base64", "zlib", "bz2", "hex", "rot13", "uu", "quopri", "idna", "punycode"),
        *("undefined", "unicode_escape", "utf-7", "utf-16", "utf-32", "no-such-charset"),
    ],
)
def test_a_page_naming_a_byte_transform_or_no_charset_is_read_as_text(label: str) -> None:
    # Python's codec registry also holds transforms (a page "in zlib" would be
    # inflated) and codecs no page is in; a hostile page may name any of them.
    page = (
        f'<?xml version="1.0" encoding="{label}"?><html><head><meta charset="{label}">'
        "</head><body><p>Caf\xe9 cr\xe8me, na\xefve fa\xe7ade.</p></body></html>"
    ).encode("cp1252")
    assert sniff_kind(page, "page") is DocumentKind.HTML

    doc = parse_document(page, DocumentKind.HTML)

    assert [c.text for c in doc.chunks] == ["Café crème, naïve façade."]
