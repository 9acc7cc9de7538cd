"""HTML pages (and, through :mod:`core.ingest.formats.epub`, XHTML chapters) with the
standard library's tokenizer: text under its heading path (h1-h6), tables as rows and
cells, scripts and styles dropped.

Why not lxml or selectolax (measured candidates): libxml2's HTML parser silently drops
everything past 255 levels of nesting, and selectolax's time grows with the square of
the depth (200 000 levels took 250 s). ``html.parser`` is a linear tokenizer that
builds no tree; the open elements are counted here and a page nested deeper than
``MAX_HTML_DEPTH`` fails at once. It does not read DTDs, so no entity declared in one
is expanded and nothing external is fetched.
"""

from __future__ import annotations

import codecs
import hashlib
import html.parser
import inspect
import re
import textwrap
from html.parser import HTMLParser
from typing import TYPE_CHECKING

from core.ingest.chunker import Location
from core.ingest.formats.base import Block, Extracted, Format, Prose, Table
from core.ingest.formats.text import decoded
from core.ingest.limits import MAX_HTML_DEPTH, LimitExceeded, TableBudget
from core.ingest.text_encoding import codec_for, declared_charset
from core.states import DocumentKind, ErrorCode

if TYPE_CHECKING:
    from core.ingest.formats.base import ParseOptions
    from core.ingest.parser_warnings import WarningCollector


_VOID = frozenset(
    [
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "param",
        "source",
        "track",
        "wbr",
    ]
)
_SKIPPED = frozenset({"script", "style", "template", "noscript", "head", "svg", "math"})
# Elements a page often leaves open: a new one closes the last one still open.
_SELF_CLOSING_SIBLINGS = frozenset({"p", "li", "dt", "dd", "tr", "td", "th", "option"})
_BLOCKS = frozenset(
    [
        "address",
        "article",
        "aside",
        "blockquote",
        "br",
        "dd",
        "details",
        "div",
        "dl",
        "dt",
        "figcaption",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hr",
        "li",
        "main",
        "nav",
        "ol",
        "p",
        "pre",
        "section",
        "summary",
        "table",
        "tr",
        "ul",
    ]
)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_CELLS = frozenset({"td", "th"})
# Tags whose start or end does more than push or pop the open elements and mark a
# block boundary: every other tag (div, span, a, ...) takes the short path, which
# most of a page's tags are and which the profile of real pages is dominated by.
_SPECIAL_END = _SKIPPED | _HEADINGS.keys() | _CELLS | {"table", "pre"}
_SPECIAL_START = _VOID | _SELF_CLOSING_SIBLINGS | _SPECIAL_END | {"title", "body", "tr"}
# Closing siblings that are blocks and nothing more: their start takes a path of its own.
_SIBLING_BLOCKS = (_SELF_CLOSING_SIBLINGS & _BLOCKS) - _SPECIAL_END - {"tr"}
_SPACE_RUN = re.compile(r"\s+")
# The source of the standard library's HTMLParser.parse_starttag (Python 3.11 to 3.13.0)
# that _Extractor.parse_starttag repeats without building the attribute list.
_KNOWN_PARSE_STARTTAG_SHA1 = "588bec9aeabaf42efcf9dbc3e72e9c83d6a1e638"
_FRAMESET = re.compile(r"<frameset[\s>]", re.IGNORECASE)


def decode_html(data: bytes, warnings: WarningCollector, what: str = "HTML") -> str:
    """A page's text: its BOM; else UTF-8 when it decodes (a page labelled
    ``iso-8859-1`` that is UTF-8 is common); else the charset its ``<meta>`` names,
    leniently, as browsers read it; else :func:`~core.ingest.text_encoding.decode_text`'s
    guess."""
    codec = None
    if not data.startswith((codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        label = declared_charset(data)
        codec = codec_for(label)
        if label is not None and codec is None:
            warnings.add(f"{what} names an unknown charset; guessing")
    if codec is not None and not codec.startswith(("utf_8", "utf_16", "utf_32")):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return data.decode(codec, "replace")
    return decoded(data, warnings, what)


def _stock_parse_starttag_is_known() -> bool:
    """Whether the running Python's ``parse_starttag`` is the one ours repeats: a
    tokenizer fixed in a later release (3.12 and 3.13 patch releases changed it) keeps
    its own, slower one rather than get ours."""
    try:
        source = textwrap.dedent(inspect.getsource(HTMLParser.parse_starttag))
    except (OSError, TypeError):  # no source shipped: cannot tell
        return False
    return hashlib.sha1(source.encode()).hexdigest() == _KNOWN_PARSE_STARTTAG_SHA1


_TAG_FIND = html.parser.tagfind_tolerant  # type: ignore[attr-defined]
_ATTR_FIND = html.parser.attrfind_tolerant  # type: ignore[attr-defined]
_NO_ATTRS: list[tuple[str, str | None]] = []  # never filled: no handler here adds to it


class _Extractor(HTMLParser):
    def __init__(self, base: tuple[str, ...], what: str, budget: TableBudget) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[Block] = []
        self.title = ""
        self._what = what
        self._base = base
        self._budget = budget
        self._open: list[str] = []
        self._skipping = 0  # depth inside elements whose text is not content
        self._in_title = False
        self._path: list[tuple[int, str]] = []
        self._heading: tuple[int, list[str]] | None = None
        self._text: list[str] = []
        self._tables = 0  # open tables (only the outermost keeps its structure)
        self._rows: list[list[str]] = []
        self._cell: list[str] | None = None
        self._pre = 0

    # What html.parser does per token that no caller here reads is skipped, a quarter
    # of its time on real pages (measured): the line and column kept for getpos(), and
    # each start tag's attributes (unescaped, lower-cased, listed), which nothing here
    # looks at.
    def updatepos(self, i: int, j: int) -> int:
        return j

    def _parse_starttag_without_attrs(self, i: int) -> int:
        # HTMLParser.parse_starttag, attributes matched (so where the tag ends and
        # what counts as junk are its own) but not collected.
        self._HTMLParser__starttag_text = None
        endpos: int = self.check_for_whole_start_tag(i)
        if endpos < 0:
            return endpos
        rawdata = self.rawdata
        self._HTMLParser__starttag_text = rawdata[i:endpos]
        match = _TAG_FIND.match(rawdata, i + 1)
        assert match, "unexpected call to parse_starttag()"
        k = match.end()
        self.lasttag = tag = match.group(1).lower()
        attr_match = _ATTR_FIND.match
        while k < endpos:
            m = attr_match(rawdata, k)
            if not m:
                break
            k = m.end()
        end = rawdata[k:endpos].strip()
        if end not in (">", "/>"):
            self.handle_data(rawdata[i:endpos])
            return endpos
        if end.endswith("/>"):
            self.handle_startendtag(tag, _NO_ATTRS)
        else:
            self.handle_starttag(tag, _NO_ATTRS)
            if tag in self.CDATA_CONTENT_ELEMENTS:
                self.set_cdata_mode(tag)
        return endpos

    if _stock_parse_starttag_is_known():
        parse_starttag = _parse_starttag_without_attrs

    @property
    def location(self) -> Location:
        return Location(headings=self._base + tuple(t for _, t in self._path))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _SPECIAL_START:
            opened = self._open
            opened.append(tag)
            if len(opened) > MAX_HTML_DEPTH:
                raise LimitExceeded(f"{self._what} nested over {MAX_HTML_DEPTH} elements deep")
            if tag in _BLOCKS and not self._skipping:  # _block_boundary, inlined
                if self._cell is not None:
                    self._cell.append(" ")
                elif not self._tables:
                    self._text.append("\n")
            return
        if tag in _SIBLING_BLOCKS:  # p and li, the commonest tags of real pages
            opened = self._open
            if tag in opened[-4:]:
                self._close(tag)
            opened.append(tag)
            if len(opened) > MAX_HTML_DEPTH:
                raise LimitExceeded(f"{self._what} nested over {MAX_HTML_DEPTH} elements deep")
            if not self._skipping:
                self._block_boundary()
            return
        if tag == "title":
            self._in_title = True
        if tag in _VOID:
            self._boundary(tag)
            return
        if tag == "body" and "head" in self._open:  # a head left open ends here
            self._close("head")
        if tag in _SELF_CLOSING_SIBLINGS and tag in self._open[-4:]:
            self._close(tag)
        self._open.append(tag)
        if len(self._open) > MAX_HTML_DEPTH:
            raise LimitExceeded(f"{self._what} nested over {MAX_HTML_DEPTH} elements deep")
        if tag in _SKIPPED:
            self._skipping += 1
        elif tag in _HEADINGS and not self._tables:
            self._flush()
            self._heading = (_HEADINGS[tag], [])
        elif tag == "table":
            self._tables += 1
            if self._tables == 1:
                self._flush()
                self._rows = []
        elif tag == "tr" and self._tables == 1:
            self._end_cell()
            self._rows.append([])
        elif tag in _CELLS and self._tables == 1:
            self._end_cell()
            if not self._rows:
                self._rows.append([])
            self._cell = []
        elif tag == "pre":
            self._pre += 1
        self._boundary(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        opened = self._open
        if opened and opened[-1] == tag:  # the usual case: the innermost one closes
            opened.pop()
            if tag in _SPECIAL_END:
                self._ended(tag)
            elif tag in _BLOCKS and not self._skipping:  # _ended's short path, inlined
                if self._cell is not None:
                    self._cell.append(" ")
                elif not self._tables:
                    self._text.append("\n")
        elif tag in opened:
            self._close(tag)

    def _close(self, tag: str) -> None:
        while self._open:
            top = self._open.pop()
            self._ended(top)
            if top == tag:
                return

    def _ended(self, tag: str) -> None:
        if tag not in _SPECIAL_END:
            if tag in _BLOCKS and not self._skipping:
                self._block_boundary()
            return
        if tag in _SKIPPED:
            self._skipping -= 1
        elif tag in _HEADINGS and self._heading is not None and not self._tables:
            level, words = self._heading
            self._heading = None
            title = " ".join("".join(words).split())
            if title:
                while self._path and self._path[-1][0] >= level:
                    self._path.pop()
                self._path.append((level, title))
                self._text.append(title + "\n")
        elif tag == "table":
            self._tables -= 1
            if self._tables == 0:
                self._end_cell()
                self._emit_table()
        elif tag in _CELLS and self._tables == 1:
            self._end_cell()
        elif tag == "pre":
            self._pre -= 1
        self._boundary(tag)

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        if self._skipping:
            return
        if self._heading is not None:
            self._heading[1].append(data)
        elif self._cell is not None:
            self._cell.append(data)
        elif self._tables:
            return  # between cells: whitespace
        elif self._pre:
            self._text.append(data)
        elif data.isspace():  # the indentation between tags: what the pattern makes of it
            self._text.append(" ")
        elif data.isprintable() and "  " not in data:
            # No whitespace but single ASCII spaces (every other space character is
            # unprintable): the pattern would change nothing, and most text is so.
            self._text.append(data)
        else:
            self._text.append(_SPACE_RUN.sub(" ", data))

    def _boundary(self, tag: str) -> None:
        if tag in _BLOCKS and not self._skipping:
            self._block_boundary()

    def _block_boundary(self) -> None:
        if self._cell is not None:
            self._cell.append(" ")
        elif not self._tables:
            self._text.append("\n")

    def _end_cell(self) -> None:
        if self._cell is not None:
            self._rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def _emit_table(self) -> None:
        rows = [row for row in self._rows if any(cell for cell in row)]
        self._rows = []
        for row in rows:
            self._budget.take(len(row))
        if len(rows) == 1:
            self.blocks.append(Table(None, [(1, rows[0])], self.location))
        elif rows:
            self.blocks.append(Table(rows[0], list(enumerate(rows[1:], start=1)), self.location))

    def _flush(self) -> None:
        lines = (line.strip() for line in "".join(self._text).split("\n"))
        text = "\n".join(line for line in lines if line)
        self._text = []
        if text:
            self.blocks.append(Prose(text, self.location))

    def finish(self) -> list[Block]:
        self.close()
        self._end_cell()
        if self._tables:
            self._emit_table()
        self._flush()
        return self.blocks


def extract(
    text: str, budget: TableBudget, *, base: tuple[str, ...] = (), what: str = "HTML"
) -> tuple[list[Block], str]:
    """A page's blocks, each heading path starting with ``base``, and its ``<title>``.

    Raises:
        LimitExceeded: Nested deeper than MAX_HTML_DEPTH, or over a table limit.
    """
    extractor = _Extractor(base, what, budget)
    extractor.feed(text)
    blocks = extractor.finish()
    return blocks, " ".join(extractor.title.split())


def parse(data: bytes, request: ParseOptions, warnings: WarningCollector) -> Extracted:
    text = decode_html(data, warnings)
    blocks, _ = extract(text, TableBudget("HTML"))
    if not blocks and _FRAMESET.search(text):
        from core.ingest.failures import ParseFailure

        # Its text is in the pages its frames load, which a parser never fetches: say
        # so, rather than leave an operator to wonder why a full page read as empty.
        raise ParseFailure(
            ErrorCode.EMPTY_DOCUMENT,
            "HTML page is a frameset: its text is in the pages its frames load, which "
            "are not fetched; upload those pages",
        )
    return Extracted(1, blocks)


FORMAT = Format(
    kind=DocumentKind.HTML,
    name="HTML page",
    recognised_by="text starting (within 1 KiB) with <!doctype html or <html",
    needs=(),
    parse=parse,
    captures_warnings=False,
)
