"""The HTML extractor's shortcuts through html.parser read every page as the stock
tokenizer does: the start tags it reads without collecting their attributes, and the
text it leaves as it is when the whitespace pattern would change nothing."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest

from core.ingest.formats import html
from core.ingest.formats.base import Block
from core.ingest.limits import TableBudget

DATA = Path(__file__).parent / "data" / "formats"
SHARED_CORPUS = Path("/work/shared/corpora/formats")

# Tags the attribute loop must end where the stock one does: unquoted and quoted
# values, entities in values, a bare attribute, junk after the attributes (which the
# stock tokenizer hands over as text), self-closing forms, upper case, a script.
TRICKY = (
    "<!DOCTYPE html><HTML><head><title>A &amp; B</title><script>if (a<b) {x='</p>'}"
    "</script></head><BODY class=x data-v='1 &gt; 0' hidden><h1 id=\"t\">Top&nbsp;line</h1>"
    '<p a=1 b = "2" c>one\u00a0two\u2009three\tfour  five\nsix</p>'
    '<div junk attr="v" !!! >kept junk</div><br/><img src=x.png /><p/>'
    '<table border=1><tr><th scope=col>H</th></tr><tr><td colspan="2">c&lt;1</td></tr>'
    "</table><pre class='p'>  keep   spaced\n  lines </pre><span title='a\nb'>end</span>"
    '<p>unclosed <a href="x?a=1&b=2">link</a <p>after'
)


class _StockExtractor(html._Extractor):
    parse_starttag = HTMLParser.parse_starttag


def _extract(cls: type[html._Extractor], text: str) -> list[Block]:
    extractor = cls((), "HTML", TableBudget("HTML"))
    extractor.feed(text)
    return extractor.finish()


def _pages() -> list[str]:
    texts = [TRICKY]
    for folder in (DATA, SHARED_CORPUS):
        if folder.is_dir():
            texts += [p.read_bytes().decode("utf-8", "replace") for p in folder.glob("*.html")]
    return texts


def test_this_python_takes_the_fast_start_tags() -> None:
    # A Python whose tokenizer changed keeps its own, correct and slower: this says
    # when the fingerprint needs a look, rather than letting the speed go unnoticed.
    if not html._stock_parse_starttag_is_known():
        pytest.skip("this Python's parse_starttag differs from the one ours repeats")
    assert html._Extractor.parse_starttag is html._Extractor._parse_starttag_without_attrs


@pytest.mark.parametrize("text", _pages())
def test_pages_read_as_the_stock_tokenizer_reads_them(text: str) -> None:
    assert _extract(html._Extractor, text) == _extract(_StockExtractor, text)


def test_text_is_spaced_as_the_pattern_spaces_it() -> None:
    blocks, title = html.extract(TRICKY, TableBudget("HTML"))
    assert title == "A & B"
    prose = "\n".join(b.text for b in blocks if isinstance(b, html.Prose))
    assert "one two three four five six" in prose
    assert "keep   spaced\nlines" in prose
    assert "Top line" in prose
