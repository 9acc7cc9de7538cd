"""Word documents (DOCX, DOCM, templates): what people put in them, each piece with
its place. Macros are never run: only the XML is read.

python-docx opens the package and finds its parts; the WordprocessingML is walked
here, because python-docx's own reading sees only paragraphs and tables that are
direct children of the body and runs that are direct children of a paragraph. Read
here, in document order: paragraphs under their heading path, tables as rows and
cells (a table nested in a cell follows as a table of its own), content controls
(``w:sdt``) at every level, smart tags, fields' results (not a page number's: it
is where the text was laid out), hyperlinks, tracked
insertions and moves (their new place; deletions and a move's old place are
skipped, as Word shows the document with the changes accepted), text boxes (read
once, though Word stores each twice: DrawingML and a VML fallback), and outside the
body: headers and footers (each distinct text once, however many sections repeat
it), footnotes, endnotes and comments, those three under the heading where they are
anchored.

python-docx parses every part with libxml2 without resolving entities (so nothing
expands and nothing external is fetched) and without "huge tree" (so XML deeper than
256 levels is refused rather than walked); parts it does not model (footnotes,
endnotes) are parsed with the same parser.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from core.ingest.chunker import Location
from core.ingest.formats.base import Block, Extracted, Format, Prose, Table
from core.ingest.formats.package import parse_package
from core.ingest.limits import TableBudget
from core.states import DocumentKind

if TYPE_CHECKING:
    from core.ingest.formats.base import ParseOptions
    from core.ingest.parser_warnings import WarningCollector

WHAT = "DOCX"

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"
_M = "{http://schemas.openxmlformats.org/officeDocument/2006/math}"
_R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"

P, TBL, TR, TC, T = _W + "p", _W + "tbl", _W + "tr", _W + "tc", _W + "t"
SDT, SDT_CONTENT = _W + "sdt", _W + "sdtContent"
TXBX_CONTENT = _W + "txbxContent"
ALTERNATE_CONTENT, CHOICE, FALLBACK = _MC + "AlternateContent", _MC + "Choice", _MC + "Fallback"
# Containers whose content is part of the text wherever they stand (block, row, cell
# or run level): content controls, custom XML and smart tags, tracked insertions and a
# move's new place. What else a walk meets inside a paragraph (hyperlinks, fields,
# drawings on their way to a text box) is walked into as well.
_BLOCK_WRAPPERS = frozenset(
    _W + name for name in ("sdtContent", "customXml", "smartTag", "ins", "moveTo")
)
# Never text: properties, deleted text, a move's old place, field instructions, and
# the markers whose text lives elsewhere.
_SKIPPED = frozenset(
    _W + name
    for name in (
        "pPr", "rPr", "sectPr", "tblPr", "tblGrid", "trPr", "tcPr", "sdtPr", "sdtEndPr",
        "del", "moveFrom", "delText", "delInstrText",
        "bookmarkStart", "bookmarkEnd", "proofErr", "lastRenderedPageBreak",
    )
) | {_MC + "Fallback"}  # fmt: skip
FLD_CHAR, INSTR_TEXT, FLD_SIMPLE = _W + "fldChar", _W + "instrText", _W + "fldSimple"
# Fields whose shown result is where the text was laid out, not what it says: the
# number of the page a header was last drawn on would make every section's copy of
# one header a different text, and put stray numbers in the index.
_LAYOUT_FIELDS = frozenset(("PAGE", "NUMPAGES", "SECTIONPAGES"))
_LINE_BREAKS = frozenset((_W + "br", _W + "cr"))
_TABS = frozenset((_W + "tab", _W + "ptab"))
_NOTE_REFERENCES = {
    _W + "footnoteReference": "footnote",
    _W + "endnoteReference": "endnote",
    _W + "commentReference": "comment",
    _W + "commentRangeStart": "comment",
}
# Footnote and endnote entries Word keeps for its own layout, not the author's notes.
_LAYOUT_NOTES = frozenset(("separator", "continuationSeparator", "continuationNotice"))


def heading_level(style_name: str) -> int | None:
    """The outline level a paragraph style stands for: Title 0, "Heading N" N.

    Built-in styles keep their English name in the file ("heading 1", whatever the
    language Word shows), so the match ignores case.
    """
    name = style_name.strip().lower()
    if name == "title":
        return 0
    prefix, _, number = name.partition(" ")
    if prefix == "heading" and number.isdigit():
        return int(number)
    return None


class Sections:
    """Collects prose under the current heading path, and tables beside it.

    Args:
        part: What part of the document this is (``header``, ``footnote``); None for
            the body.
        headings: The heading path it starts under (where a note is anchored).
        follows_headings: Whether heading paragraphs move the path (the body) or are
            lines like any other (a header, a note, a text box).
    """

    def __init__(
        self,
        part: str | None = None,
        headings: tuple[str, ...] = (),
        *,
        follows_headings: bool = True,
    ) -> None:
        self.blocks: list[Block] = []
        self.part = part
        self.follows_headings = follows_headings
        self._path: list[tuple[int, str]] = [(-1, title) for title in headings]
        self._lines: list[str] = []

    @property
    def headings(self) -> tuple[str, ...]:
        return tuple(title for _, title in self._path)

    @property
    def location(self) -> Location:
        return Location(headings=self.headings, part=self.part)

    def heading(self, level: int, title: str) -> None:
        self.flush()
        while self._path and self._path[-1][0] >= level:
            self._path.pop()
        self._path.append((level, title))
        self._lines.append(title)

    def line(self, text: str) -> None:
        if text.strip():
            self._lines.append(text)

    def table(self, rows: list[list[str]]) -> None:
        rows = [row for row in rows if any(cell.strip() for cell in row)]
        if not rows:
            return
        self.flush()
        if len(rows) == 1:
            # One row is content, not a header over nothing (a layout table in a
            # header, a form's single line): as a header alone it would yield no chunk.
            self.blocks.append(Table(None, [(1, rows[0])], self.location))
            return
        numbered = [(number, row) for number, row in enumerate(rows[1:], start=1)]
        self.blocks.append(Table(rows[0], numbered, self.location))

    def aside(self, blocks: list[Block]) -> None:
        """Blocks read from somewhere anchored here (a text box), after what came
        before them."""
        if blocks:
            self.flush()
            self.blocks.extend(blocks)

    def flush(self) -> None:
        if self._lines:
            self.blocks.append(Prose("\n".join(self._lines), self.location))
            self._lines = []


class _Reader:
    """Walks WordprocessingML stories (the body, a header, a note) into sections."""

    def __init__(self, levels: dict[str, int | None]) -> None:
        self.levels = levels
        self.budget = TableBudget(WHAT)
        # (footnote / endnote / comment, its id) → the heading path where it is
        # anchored in the body.
        self.anchors: dict[tuple[str, str], tuple[str, ...]] = {}
        # The complex fields open in the current paragraph: [instruction, showing its
        # result]. A field's runs are siblings (begin, instruction, separate, result,
        # end), so this is state across the walk, reset for every paragraph.
        self._fields: list[list[Any]] = []

    def blocks(self, container: Any, sink: Sections) -> None:
        """Block-level content: paragraphs, tables, and what wraps them, in order."""
        for child in container:
            tag = child.tag
            if tag == P:
                self.paragraph(child, sink)
            elif tag == TBL:
                self.table(child, sink)
            elif tag == SDT:
                content = child.find(SDT_CONTENT)
                if content is not None:
                    self.blocks(content, sink)
            elif tag in _BLOCK_WRAPPERS:
                self.blocks(child, sink)
            elif tag == ALTERNATE_CONTENT:
                branch = _branch(child)
                if branch is not None:
                    self.blocks(branch, sink)

    def paragraph(self, p: Any, sink: Sections) -> None:
        pieces: list[str] = []
        boxes: list[Any] = []
        self._fields = []
        self.inline(p, pieces, boxes, sink.headings)
        text = "".join(pieces)
        style = p.find(f"{_W}pPr/{_W}pStyle")
        level = self.levels.get(style.get(_W + "val", "")) if style is not None else None
        if level is not None and sink.follows_headings and text.strip():
            sink.heading(level, " ".join(text.split()))
        else:
            sink.line(text)
        for box in boxes:
            # A text box in a header is still the header; in the body it is said.
            inner = Sections(sink.part or "text box", sink.headings, follows_headings=False)
            self.blocks(box, inner)
            inner.flush()
            sink.aside(inner.blocks)

    def inline(
        self, element: Any, pieces: list[str], boxes: list[Any], headings: tuple[str, ...]
    ) -> None:
        """A paragraph's text, in order; text boxes met on the way are set aside."""
        for child in element:
            tag = child.tag
            if tag == T or tag == _M + "t":
                if not self._fields or not self._in_layout_field():
                    pieces.append(child.text or "")
            elif tag == FLD_CHAR:
                self._field_char(child.get(_W + "fldCharType"))
            elif tag == INSTR_TEXT:
                if self._fields:
                    self._fields[-1][0] += child.text or ""
            elif tag == FLD_SIMPLE:
                if _field_name(child.get(_W + "instr", "")) not in _LAYOUT_FIELDS:
                    self.inline(child, pieces, boxes, headings)
            elif tag in _SKIPPED or not isinstance(tag, str):
                continue  # (comments and processing instructions have no str tag)
            elif tag in _TABS:
                pieces.append("\t")
            elif tag in _LINE_BREAKS:
                pieces.append("\n")
            elif tag == _W + "noBreakHyphen":
                pieces.append("-")
            elif tag == TXBX_CONTENT:
                boxes.append(child)
            elif tag == ALTERNATE_CONTENT:
                branch = _branch(child)
                if branch is not None:
                    self.inline(branch, pieces, boxes, headings)
            elif tag in _NOTE_REFERENCES:
                note = child.get(_W + "id")
                if note is not None:
                    self.anchors.setdefault((_NOTE_REFERENCES[tag], note), headings)
            elif tag == P:  # a paragraph inside a paragraph's content control (rare)
                if pieces and not pieces[-1].endswith("\n"):
                    pieces.append("\n")
                self.inline(child, pieces, boxes, headings)
            else:
                self.inline(child, pieces, boxes, headings)

    def _field_char(self, kind: str | None) -> None:
        if kind == "begin":
            self._fields.append(["", False])
        elif kind == "separate" and self._fields:
            self._fields[-1][1] = True
        elif kind == "end" and self._fields:
            self._fields.pop()

    def _in_layout_field(self) -> bool:
        return any(
            showing and _field_name(instruction) in _LAYOUT_FIELDS
            for instruction, showing in self._fields
        )

    def table(self, tbl: Any, sink: Sections) -> None:
        rows: list[list[str]] = []
        nested: list[Any] = []
        for tr in _children(tbl, TR):
            if tr.find(f"{_W}trPr/{_W}del") is not None:
                continue  # a row deleted with changes tracked
            cells = [self.cell(tc, nested, sink.headings) for tc in _children(tr, TC)]
            self.budget.take(len(cells))
            rows.append(cells)
        sink.table(rows)
        for inner in nested:
            self.table(inner, sink)

    def cell(self, tc: Any, nested: list[Any], headings: tuple[str, ...]) -> str:
        merge = tc.find(f"{_W}tcPr/{_W}vMerge")
        if merge is not None and merge.get(_W + "val", "continue") == "continue":
            # Covered by the merged cell above: Word shows only that one's content.
            return ""
        lines: list[str] = []
        self._cell_lines(tc, lines, nested, headings)
        return "\n".join(line for line in lines if line.strip())

    def _cell_lines(
        self, container: Any, lines: list[str], nested: list[Any], headings: tuple[str, ...]
    ) -> None:
        for child in container:
            tag = child.tag
            if tag == P:
                pieces: list[str] = []
                boxes: list[Any] = []
                self._fields = []
                self.inline(child, pieces, boxes, headings)
                lines.append("".join(pieces))
                for box in boxes:
                    self._cell_lines(box, lines, nested, headings)
            elif tag == TBL:
                nested.append(child)
            elif tag == SDT:
                content = child.find(SDT_CONTENT)
                if content is not None:
                    self._cell_lines(content, lines, nested, headings)
            elif tag in _BLOCK_WRAPPERS:
                self._cell_lines(child, lines, nested, headings)
            elif tag == ALTERNATE_CONTENT:
                branch = _branch(child)
                if branch is not None:
                    self._cell_lines(branch, lines, nested, headings)


def _field_name(instruction: str) -> str:
    """A field instruction's name: ``PAGE`` of `` PAGE \\* MERGEFORMAT ``."""
    words = instruction.split(maxsplit=1)
    return words[0].upper() if words else ""


def _branch(alternate: Any) -> Any:
    """The one branch of an ``mc:AlternateContent`` to read: its first choice (what
    Word itself shows), else its fallback; reading both would read it twice."""
    choice = alternate.find(CHOICE)
    return choice if choice is not None else alternate.find(FALLBACK)


def _children(parent: Any, tag: str) -> Iterator[Any]:
    """``parent``'s ``tag`` children, also those inside content controls and custom
    XML (rows and cells may be wrapped in either)."""
    for child in parent:
        if child.tag == tag:
            yield child
        elif child.tag == SDT:
            content = child.find(SDT_CONTENT)
            if content is not None:
                yield from _children(content, tag)
        elif child.tag in _BLOCK_WRAPPERS:
            yield from _children(child, tag)


def parse(data: bytes, request: ParseOptions, warnings: WarningCollector) -> Extracted:
    # Strict Open XML (ISO 29500 Strict) differs from what python-docx reads in its
    # namespaces' names; the elements read here are the same.
    return parse_package(data, WHAT, _extract, reads_strict=True)


def _extract(data: bytes) -> Extracted:
    from io import BytesIO

    import docx

    document = docx.Document(BytesIO(data))
    part = document.part
    # Styles by id, read from the XML once: python-docx's Paragraph.style looks the
    # default style up anew for every paragraph (measured: 20 of 28 s on an 872-page
    # handbook), and its style objects refuse a style without a type (POI's 60329.docx).
    levels = {
        style.get(_W + "styleId", ""): heading_level(_style_name(style))
        for style in part.styles.element.iterchildren(_W + "style")
    }
    reader = _Reader(levels)
    body = Sections()
    reader.blocks(document.element.body, body)
    body.flush()
    blocks = body.blocks
    blocks += _headers_and_footers(document, reader)
    blocks += _notes(part, reader)
    return Extracted(1, _merged(blocks))


def _style_name(style: Any) -> str:
    name = style.find(_W + "name")
    return "" if name is None else str(name.get(_W + "val", ""))


def _headers_and_footers(document: Any, reader: _Reader) -> list[Block]:
    """Every section's headers and footers (first-page, odd, even), each distinct text
    once: a 300-page report repeats one header on every page and in every section."""
    part = document.part
    seen_parts: set[str] = set()
    seen_texts: set[tuple[str, str]] = set()
    out: dict[str, list[Block]] = {"header": [], "footer": []}
    for sect in document.element.body.iter(_W + "sectPr"):
        for reference in sect:
            kind = {_W + "headerReference": "header", _W + "footerReference": "footer"}.get(
                reference.tag
            )
            rid = reference.get(_R + "id")
            if kind is None or rid is None or rid in seen_parts:
                continue
            seen_parts.add(rid)
            story = part.related_parts.get(rid)
            if story is None:
                continue
            sink = Sections(kind, follows_headings=False)
            reader.blocks(_element(story), sink)
            sink.flush()
            text = " ".join(_block_text(b) for b in sink.blocks).split()
            key = (kind, " ".join(text))
            if not text or key in seen_texts:
                continue
            seen_texts.add(key)
            out[kind] += sink.blocks
    return out["header"] + out["footer"]


def _notes(part: Any, reader: _Reader) -> list[Block]:
    """Footnotes, endnotes and comments, each under the heading where it is anchored."""
    from docx.opc.constants import RELATIONSHIP_TYPE as RT

    stories = ((RT.FOOTNOTES, "footnote"), (RT.ENDNOTES, "endnote"), (RT.COMMENTS, "comment"))
    blocks: list[Block] = []
    for reltype, kind in stories:
        targets = (r for r in part.rels.values() if r.reltype == reltype and not r.is_external)
        story = next((r.target_part for r in targets), None)
        if story is None:
            continue
        for note in _element(story).iterchildren(_W + kind):
            if note.get(_W + "type") in _LAYOUT_NOTES:
                continue
            headings = reader.anchors.get((kind, note.get(_W + "id", "")), ())
            sink = Sections(kind, headings, follows_headings=False)
            reader.blocks(note, sink)
            sink.flush()
            blocks += sink.blocks
    return blocks


def _element(story: Any) -> Any:
    """A part's XML root: python-docx's own for the parts it models (headers,
    footers, comments), parsed with python-docx's parser for those it keeps as bytes."""
    element = getattr(story, "element", None)
    if element is not None:
        return element
    from docx.oxml.parser import parse_xml

    return parse_xml(story.blob)


def _block_text(block: Block) -> str:
    if isinstance(block, Prose):
        return block.text
    header = list(block.header or ())
    return " ".join(header + [cell for _, row in block.rows for cell in row])


def _merged(blocks: list[Block]) -> list[Block]:
    """Neighbouring prose at the same place as one block (a document's 138 footnotes
    under one heading are one text to chunk, not 138 slivers)."""
    out: list[Block] = []
    run: list[Prose] = []  # joined once, at its end: adding text on text is quadratic

    def close() -> None:
        if run:
            out.append(replace(run[0], text="\n".join(p.text for p in run)))
            run.clear()

    for block in blocks:
        if not (isinstance(block, Prose) and run and run[0].location == block.location):
            close()
        if isinstance(block, Prose):
            run.append(block)
        else:
            out.append(block)
    close()
    return out


FORMAT = Format(
    kind=DocumentKind.DOCX,
    name="Word document (DOCX, DOCM)",
    recognised_by="zip whose [Content_Types].xml names a wordprocessingml main part",
    needs=("python-docx",),
    parse=parse,
    # 2: the XML walked here (headers, notes, content controls, text boxes, tracked
    # changes); 1 read python-docx's paragraphs and tables only.
    revision="2",
)
