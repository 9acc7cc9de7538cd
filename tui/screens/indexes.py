"""Indexes: the ledger's vector indexes — which embedder each is, its state, how many
vectors it holds, which one search answers from — with each re-embedding campaign's
progress as a bar, and the operator's actions on the selected index: ``n`` a new
index (its campaign is queued at once), ``a`` activate (asks, saying which index
retires), ``r`` resume, ``c`` cancel its campaign (asks), ``d`` drop (asks; the
ledger refuses the active one, and says so).

Everything goes through the same ledger roles as ``ingestdesk index``: the ledger's
rule is the answer, shown as its one line. A read-only dashboard shows the view
without the actions.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Header, Label, ListItem, ListView, ProgressBar, Static

from core import NotFound, TaskStatus, visible
from core.states import IndexState
from tui import policy
from tui.desk import Desk, desk_of
from tui.format import failure_line, when
from tui.messages import LedgerChanged
from tui.screens.actions import notify_refusal
from tui.widgets.footer import WholeKeysFooter

if TYPE_CHECKING:
    from core.ledger import CampaignProgress, IndexView

RELOAD_AFTER_S = 0.5  # seconds between reloads while campaign tasks keep moving
# Seconds between reloads when no campaign task moved: creating, activating and
# dropping an index in another process (the CLI, the API) change indexes, and the
# poller's news is about tasks; they show up within this long.
RESYNC_S = 5.0
NO_INDEX = "no index yet: the first worker to embed a document makes one (and makes it active)"
LIVE = (TaskStatus.QUEUED.value, TaskStatus.RUNNING.value, TaskStatus.RETRY_WAIT.value)


def kind_text(index: IndexView) -> str:
    """``hashed bag-of-words 256d``: the embedder, its model and dimensions."""
    model = f" {index.model}" if index.model else ""
    return f"{index.embedder}{model} {index.dimensions}d"


def campaign_text(progress: CampaignProgress) -> Text:
    """``campaign 3/10 · 1 failed · 6 queued`` (the failed count stands out)."""
    if not progress.total:
        return Text("no campaign: its vectors came from ingestion", style="dim")
    out = Text(f"campaign {progress.done}/{progress.total}")
    for status, n in sorted(progress.by_status.items()):
        if status == TaskStatus.SUCCEEDED.value or not n:
            continue
        out.append(" · ")
        out.append(f"{n} {status}", style="bold red" if status == "failed" else "")
    return out


NEXT_STEP = {
    IndexState.BUILDING: "its campaign runs on the workers; activate it (a) once it is ready",
    IndexState.READY: "every version has its vectors: activate it (a) to switch search to it",
    IndexState.ACTIVE: "search answers from it; activate another index to switch",
    IndexState.RETIRED: "not kept current: resume (r) catches it up; drop (d) removes it",
}


def detail_text(progress: CampaignProgress) -> Text:
    """The selected index: its version, options, when it was built and activated
    (last), and what comes next."""
    index = progress.index
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append(visible(index.name), style="bold")
    out.append(f"  {index.state.value}  version {visible(index.version)}\n")
    if index.options:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(index.options.items()))
        out.append(f"options {visible(shown)}\n")
    out.append(f"built {_when(index.built_at)} · activated {_when(index.activated_at)}\n")
    out.append(NEXT_STEP[index.state], style="italic")
    return out


def _when(at: float | None) -> str:
    return "-" if at is None else when(at)


class IndexRow(ListItem):
    """One index: its name and state, embedder, vectors; its campaign as a bar."""

    def __init__(self, progress: CampaignProgress) -> None:
        super().__init__(id=f"index-{progress.index.id}", classes="index-row")
        self.index_id = progress.index.id
        self.progress = progress
        self._shown: tuple[object, ...] | None = None
        self._drawn = False  # its labels exist (on_mount ran)

    def compose(self) -> ComposeResult:
        with Horizontal(classes="index-head"):
            yield Label("", classes="index-name")
            yield Label("", classes="index-state")
            yield Label("", classes="index-kind")
            yield Label("", classes="index-vectors")
        with Horizontal(classes="index-campaign"):
            yield ProgressBar(total=1, show_eta=False, show_percentage=True)
            yield Label("", classes="index-counts")

    def on_mount(self) -> None:
        self._drawn = True
        self.show(self.progress)

    def show(self, progress: CampaignProgress) -> None:
        """Draw ``progress`` (unchanged rows are not touched: no repaint)."""
        self.progress = progress
        index = progress.index
        signature = (index, tuple(sorted(progress.by_status.items())))
        if signature == self._shown or not self._drawn:
            return
        self._shown = signature
        for state in IndexState:
            self.set_class(index.state is state, f"-{state.value}")
        self.query_one(".index-name", Label).update(Text(visible(index.name), style="bold"))
        self.query_one(".index-state", Label).update(index.state.value)
        self.query_one(".index-kind", Label).update(Text(visible(kind_text(index))))
        self.query_one(".index-vectors", Label).update(f"{index.vectors} vectors")
        bar = self.query_one(ProgressBar)
        bar.display = progress.total > 0
        bar.update(total=max(progress.total, 1), progress=progress.done)
        self.query_one(".index-counts", Label).update(campaign_text(progress))


class IndexesScreen(Screen[None]):
    """Vector indexes and their campaigns; the keys to build, switch and drop them."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("n", "create_index", "New", tooltip="A new index for another embedder"),
        Binding("a", "activate_index", "Activate", tooltip="Search answers from this index"),
        Binding("r", "resume_index", "Resume", tooltip="Queue what it lacks, requeue failures"),
        Binding("c", "cancel_campaign", "Cancel", tooltip="Cancel its campaign's tasks to run"),
        Binding("d", "drop_index", "Drop", tooltip="Remove an index that is not active"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.progress: dict[int, CampaignProgress] = {}  # as of the last read, by id
        self.loads = 0  # reads finished (tests wait for one after an action)
        self._asked_at = float("-inf")  # monotonic
        self._stale = False
        self._loading = False

    @property
    def desk(self) -> Desk:
        return desk_of(self)

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="indexes"):
            yield Label(NO_INDEX, id="indexes-empty")
            yield ListView(id="index-list")
            yield Static("", id="index-detail")
        yield WholeKeysFooter()

    def on_mount(self) -> None:
        self.query_one("#index-list", ListView).focus()
        self.query_one("#index-detail").border_title = "Selected index"
        self.reload()

    # ------------------------------------------------------------------ data

    @work(group="indexes", exit_on_error=False, description="load indexes")
    async def reload(self) -> None:
        # Not exclusive: a slow read is never cancelled by the next poll's; a poll
        # arriving meanwhile leaves the screen stale, and the next one reads again.
        if self._loading:
            self._stale = True
            return
        self._loading, self._stale = True, False
        self._asked_at = time.monotonic()
        desk = self.desk
        try:
            found = [await desk.index_progress(i.id) for i in await desk.indexes.list()]
        except NotFound:  # dropped between the list and its progress: read again
            self._stale = True
            return
        except Exception as exc:  # the ledger cannot be read now: a later poll tries
            self.notify(failure_line(exc), severity="error", title="cannot load the indexes")
            self._stale = True
            return
        finally:
            self._loading = False
        await self._show(found)
        self.loads += 1

    async def _show(self, found: list[CampaignProgress]) -> None:
        self.progress = {p.index.id: p for p in found}
        rows = self.query_one("#index-list", ListView)
        shown = {row.index_id: row for row in rows.query(IndexRow)}
        for row_id, row in shown.items():
            if row_id not in self.progress:
                await row.remove()  # dropped
        for progress in found:
            if progress.index.id in shown:
                shown[progress.index.id].show(progress)
            else:
                await rows.append(IndexRow(progress))  # new ids are higher: in order
        if rows.index is None and found:
            rows.index = 0
        self.query_one("#indexes-empty").display = not found
        active = next((p.index for p in found if p.index.state is IndexState.ACTIVE), None)
        rows.border_title = "Vector indexes" + (
            f" · search answers from {visible(active.name)}" if active else ""
        )
        self._show_selected()

    def _show_selected(self) -> None:
        progress = self.selected()
        detail = self.query_one("#index-detail", Static)
        detail.display = progress is not None
        if progress is not None:
            detail.update(detail_text(progress))

    @on(ListView.Highlighted, "#index-list")
    def _highlighted(self, event: ListView.Highlighted) -> None:
        self._show_selected()

    def on_ledger_changed(self, message: LedgerChanged) -> None:
        # A campaign's task moved, or an ingestion finished (it queues one for every
        # index being built). Polls arrive even when nothing changed, so a reload
        # held back by the throttle still happens on a later one.
        if any(t.index_id is not None or t.status is TaskStatus.SUCCEEDED for t in message.tasks):
            self._stale = True
        since = time.monotonic() - self._asked_at
        if (self._stale and since >= RELOAD_AFTER_S) or since >= RESYNC_S:
            self.reload()

    def selected(self) -> CampaignProgress | None:
        """The index under the cursor, as last read."""
        row = self.query_one("#index-list", ListView).highlighted_child
        return self.progress.get(row.index_id) if isinstance(row, IndexRow) else None

    def _chosen(self) -> CampaignProgress | None:
        progress = self.selected()
        if progress is None:
            self.notify("no index selected", severity="warning")
        return progress

    # --------------------------------------------------------------- actions

    def _run(self, what: str, action: Callable[[], Awaitable[str]]) -> None:
        """Run a ledger action as the app's worker (it outlives this screen), say
        what it did or the ledger's refusal, then read the indexes again."""
        desk = self.desk

        async def run() -> None:
            try:
                said = await action()
            except Exception as exc:
                notify_refusal(desk, what, exc)
            else:
                desk.notify(said, timeout=5)
            desk.poll_soon()
            if self.is_attached:
                self.reload()

        self.app.run_worker(run(), group="actions", exit_on_error=False, description=what)

    def _confirm(
        self,
        title: str,
        body: str,
        label: str,
        then: Callable[[str], None],
        *,
        ask_reason: bool = False,
    ) -> None:
        from tui.screens.modals import ConfirmScreen

        def answered(reason: str | None) -> None:
            if reason is not None:
                then(reason)

        self.app.push_screen(
            ConfirmScreen(title, body, confirm_label=label, ask_reason=ask_reason), answered
        )

    def action_create_index(self) -> None:
        campaigns = policy.campaigns_for(self.desk, "create_index")
        if campaigns is None:
            return
        from tui.screens.index_dialogs import CreateIndexScreen

        actor = self.desk.actor

        def chosen(answer: tuple[str, str | None] | None) -> None:
            if answer is None:
                return
            spec, name = answer

            async def create() -> str:
                from core.ingest.embedding import index_key_for_spec

                key = index_key_for_spec(spec)
                made = await campaigns.create(key, name=name, actor=actor)
                if not made.total:
                    return f"index {made.index.name} created ({made.index.state.value})"
                return (
                    f"index {made.index.name} created: {made.total} re-embedding tasks "
                    "queued; workers run them, then activate it (a)"
                )

            self._run("create the index", create)

        self.app.push_screen(CreateIndexScreen(), chosen)

    def action_activate_index(self) -> None:
        campaigns = policy.campaigns_for(self.desk, "activate_index")
        chosen = self._chosen() if campaigns is not None else None
        if campaigns is None or chosen is None:
            return
        index = chosen.index
        if index.state is IndexState.ACTIVE:
            self.notify(f"index {visible(index.name)} is active already", severity="warning")
            return
        active = next(
            (p.index for p in self.progress.values() if p.index.state is IndexState.ACTIVE), None
        )
        retires = (
            f"{visible(active.name)} ({kind_text(active)}) retires: kept until dropped, "
            "but no longer kept current (resume catches it up before it is activated "
            "again)."
            if active is not None
            else "No index is active now."
        )
        body = (
            f"Search will answer from {visible(index.name)} ({kind_text(index)}), "
            f"switched in one transaction.\n\n{retires}"
        )
        force = index.state is not IndexState.READY
        if force:
            # The ledger refuses an index that is not ready without force: ask for
            # it here, saying what it costs, rather than after a refusal.
            body += (
                f"\n\nIt is {index.state.value}, not ready ({campaign_text(chosen).plain}): "
                "versions without its vectors are not found by search until its "
                "campaign catches up."
            )

        async def activate() -> str:
            done = await campaigns.activate(index.id, force=force)
            return f"index {done.name} is active: search answers from it"

        self._confirm(
            "Activate anyway?" if force else "Activate index?",
            body,
            "Activate anyway" if force else "Activate",
            lambda _reason: self._run("activate the index", activate),
        )

    def action_resume_index(self) -> None:
        campaigns = policy.campaigns_for(self.desk, "resume_index")
        chosen = self._chosen() if campaigns is not None else None
        if campaigns is None or chosen is None:
            return
        index_id, actor = chosen.index.id, self.desk.actor

        async def resume() -> str:
            done = await campaigns.resume(index_id, actor=actor)
            left = sum(done.by_status.get(s, 0) for s in LIVE)
            return f"index {done.index.name} resumed: {left} re-embedding tasks to run"

        self._run("resume the index", resume)

    def action_cancel_campaign(self) -> None:
        campaigns = policy.campaigns_for(self.desk, "cancel_campaign")
        chosen = self._chosen() if campaigns is not None else None
        if campaigns is None or chosen is None:
            return
        index, actor = chosen.index, self.desk.actor
        left = sum(chosen.by_status.get(s, 0) for s in LIVE)
        body = (
            f"Cancel the campaign of {visible(index.name)}: its {left} re-embedding tasks "
            "still to run (queued, running, waiting) are cancelled.\n\n"
            "The vectors written so far stay; resume (r) goes on from there."
        )

        def cancel(reason: str) -> None:
            async def run() -> str:
                done = await campaigns.cancel(index.id, actor=actor, reason=reason or None)
                return f"campaign of {done.index.name} cancelled: resume it to go on"

            self._run("cancel the campaign", run)

        self._confirm("Cancel campaign?", body, "Cancel campaign", cancel, ask_reason=True)

    def action_drop_index(self) -> None:
        campaigns = policy.campaigns_for(self.desk, "drop_index")
        chosen = self._chosen() if campaigns is not None else None
        if campaigns is None or chosen is None:
            return
        index, actor = chosen.index, self.desk.actor
        body = (
            f"Drop {visible(index.name)} ({kind_text(index)}) with its {index.vectors} "
            "vectors? Its campaign's tasks still to run are cancelled.\n\n"
            "This cannot be undone: an index for this embedder again re-embeds every version."
        )

        async def drop() -> str:
            gone = await campaigns.drop(index.id, actor=actor)
            return f"index {gone.name} dropped with its {gone.vectors} vectors"

        # Asked even for the active index: the ledger's refusal is the rule (the
        # list may be a poll old), and it is shown in its words.
        self._confirm(
            "Drop index?", body, "Drop index", lambda _r: self._run("drop the index", drop)
        )

    def action_back(self) -> None:
        self.dismiss(None)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return policy.allows(self.desk, action)
