"""The search box: ranked search over published document versions, as you type.
Each hit shows the document's name, version, page, score and a snippet whose matched
words are highlighted; enter opens the document (its versions, history and the hit's
chunk). ``ctrl+t`` steps the mode through keyword, vector and hybrid search (until
then the ledger's default: hybrid when the active index is a real model); the hits'
title says which mode answered and from which index, and a vector or hybrid hit
says where each leg ranked it.

The ledger marks matched words ``**like this**``; they become a Rich style
(:func:`tui.format.snippet_text`) and everything else is escaped into
:class:`~rich.text.Text`, never markup: a document reading ``[link=…]`` is shown as
written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Header, Input, OptionList, Static
from textual.widgets.option_list import Option

from core import BadInput, SearchHit, visible
from core.errors import ProviderUnreachable
from core.ledger.hybrid import MODES, SearchAnswer
from tui.desk import Desk, desk_of
from tui.format import failure_line, shorten, snippet_text
from tui.widgets.footer import WholeKeysFooter
from tui.widgets.plain_input import PlainInput

if TYPE_CHECKING:
    from textual.timer import Timer

SEARCH_LIMIT = 50  # hits asked for: a screenful or two, ranked
MIN_CHARS = 2  # typed characters before searching as you type (enter searches any)
DEBOUNCE_S = 0.3  # seconds of no typing before searching: one query per pause
NAME_WIDTH = 40  # characters of a document name in a hit


def hit_key(hit: SearchHit) -> str:
    """A hit's id in the list: one chunk of one version."""
    return f"{hit.document_id}:{hit.ordinal}"


def hit_text(hit: SearchHit) -> Text:
    """A hit in two lines (the snippet wraps): which document, version and page, how
    well it ranks, and the snippet."""
    out = Text()
    out.append(shorten(visible(hit.filename), NAME_WIDTH), style="bold")
    page = f"page {hit.page}" if hit.page is not None else "no page"
    if set(hit.location) - {"page"}:  # a slide, a sheet's rows, a heading path
        page = visible(hit.place)
    out.append(f"  v{hit.version_no} · {page} · chunk #{hit.ordinal}")
    out.append(f" · score {hit.score:.3g}", style="dim")
    if hit.mode != "keyword":
        legs = [("keyword", hit.keyword_rank)] if hit.mode == "hybrid" else []
        legs.append(("vector", hit.vector_rank))
        out.append(
            "".join(f" · {leg} {f'#{rank}' if rank else '-'}" for leg, rank in legs), style="dim"
        )
    out.append("\n")
    out.append_text(snippet_text(hit.snippet))
    return out


class SearchScreen(Screen[None]):
    """Type words; see the published chunks that hold them, best first."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("down", "to_hits", "Hits", show=False),
        Binding("ctrl+t", "next_mode", "Mode", tooltip="Keyword, vector or hybrid search"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.hits: dict[str, SearchHit] = {}  # by hit_key, as shown
        self.searched: str | None = None  # the query whose hits are shown
        self.mode: str | None = None  # asked for with ctrl+t; None: the ledger's default
        self.answer: SearchAnswer | None = None  # how the hits shown were found
        self._debounce: Timer | None = None

    @property
    def desk(self) -> Desk:
        return desk_of(self)

    def compose(self) -> ComposeResult:
        yield Header()
        yield PlainInput(
            placeholder="search published documents: words (enter searches, esc goes back)",
            id="search-query",
        )
        yield Static(Text(f"type at least {MIN_CHARS} characters", style="dim"), id="search-status")
        yield OptionList(id="search-hits")
        yield WholeKeysFooter()

    def on_mount(self) -> None:
        self._title()
        self.focus_query()

    def _title(self) -> None:
        """The hits' title: the mode that answered (or the one asked for, before an
        answer), and the index whose vectors answered."""
        title = "Hits, best first"
        answer = self.answer
        if answer is not None and self.searched is not None:
            title += f" · {answer.mode}"
            if answer.index:
                title += f" ({shorten(visible(answer.index), 30)})"
        elif self.mode is not None:
            title += f" · {self.mode}"
        self.query_one("#search-hits", OptionList).border_title = title

    def action_next_mode(self) -> None:
        """Keyword → vector → hybrid → keyword, from the mode now shown; the hits shown
        are searched again in it."""
        shown = self.mode or (self.answer.mode if self.answer else MODES[0])
        self.mode = MODES[(MODES.index(shown) + 1) % len(MODES)]
        self.answer = None
        self._title()
        if self.searched:
            self.run_search(self.searched, focus_hits=False)

    def focus_query(self) -> None:
        """Put the cursor in the search box (ctrl+f on this screen)."""
        self.query_one("#search-query", Input).focus()

    # ------------------------------------------------------------------ search

    @on(Input.Changed, "#search-query")
    def _typed(self, event: Input.Changed) -> None:
        if self._debounce is not None:
            self._debounce.stop()
            self._debounce = None
        if len(event.value.strip()) >= MIN_CHARS:
            self._debounce = self.set_timer(DEBOUNCE_S, self._search_typed)

    def _search_typed(self) -> None:
        self._debounce = None
        self.run_search(self.query_one("#search-query", Input).value.strip(), focus_hits=False)

    @on(Input.Submitted, "#search-query")
    def _submitted(self, event: Input.Submitted) -> None:
        if self._debounce is not None:
            self._debounce.stop()
            self._debounce = None
        query = event.value.strip()
        if query:
            self.run_search(query, focus_hits=True)

    @work(exclusive=True, group="search", exit_on_error=False, description="search")
    async def run_search(self, query: str, *, focus_hits: bool) -> None:
        status = self.query_one("#search-status", Static)
        try:
            answer = await self.desk.reads.find(query, limit=SEARCH_LIMIT, mode=self.mode)
        except (BadInput, ProviderUnreachable) as exc:
            # A query with no word in it ("!!!"): the hits of the last one would
            # read as its answer.
            self.searched, self.hits, self.answer = query, {}, None
            self.query_one("#search-hits", OptionList).clear_options()
            self._title()
            status.update(Text(failure_line(exc), style="bold"))
            return
        except Exception as exc:  # a database fault
            status.update(Text(failure_line(exc), style="bold"))
            return
        hits = answer.hits
        self.searched, self.answer = query, answer
        self._title()
        self.hits = {hit_key(hit): hit for hit in hits}
        shown = self.query_one("#search-hits", OptionList)
        shown.clear_options()
        shown.add_options(Option(hit_text(hit), id=key) for key, hit in self.hits.items())
        quoted = f"“{shorten(visible(query), 60)}”"
        if not hits:
            status.update(Text(f"no published document holds {quoted}", style="dim"))
            return
        many = "the first " if len(hits) >= SEARCH_LIMIT else ""
        count = f"{many}{len(hits)} hit{'s' if len(hits) != 1 else ''}"
        line = Text(f"{count} for {quoted}, best first · enter opens the document")
        if answer.notice:  # not what was asked: hybrid answered from keyword ranks
            line = Text(f"{count} for {quoted} · {visible(answer.notice)}", style="bold")
        status.update(line)
        shown.highlighted = 0
        if focus_hits:
            shown.focus()

    # ------------------------------------------------------------- navigation

    @on(OptionList.OptionSelected, "#search-hits")
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        hit = self.hits.get(event.option_id or "")
        if hit is not None:
            from tui.screens.document import DocumentScreen

            self.app.push_screen(DocumentScreen(hit.document_id, hit=hit))

    def action_to_hits(self) -> None:
        hits = self.query_one("#search-hits", OptionList)
        if hits.option_count:
            hits.focus()

    def action_back(self) -> None:
        # From the hits back to the box; from the box back to where search began.
        if self.focused is self.query_one("#search-hits", OptionList):
            self.focus_query()
            return
        self.dismiss(None)
