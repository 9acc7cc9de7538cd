"""IngestDeskApp: the dashboard's bindings, screens and lifetime.

The app owns what lives as long as the dashboard and hands each job to its own
module: the live loop to :class:`~tui.poller.Poller`, the in-process workers to
:class:`~tui.workforce.Workforce`, the read-only rules to :mod:`tui.policy`. Screens
see the app only as a :class:`~tui.desk.Desk`. The ledger handle is opened and closed
by :func:`run_dashboard`, never here.
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual import events, work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen, Screen
from textual.widgets import Input

from core import (
    IngestDeskError,
    Ledger,
    Operator,
    ParserPool,
    Reads,
    Settings,
    WorkerView,
    visible,
)
from core.gc_tuning import tuned_for_interactive_use
from core.ledger import Campaigns, ProviderLedger, ProviderReview, Versions
from core.states import RequestState
from tui import policy
from tui.desk import Desk
from tui.format import failure_line, ledger_label, shown_lines, without_password
from tui.messages import WorkersChanged
from tui.mirror import LedgerMirror
from tui.poller import POLL_INTERVAL_S, Poller
from tui.screens.dashboard import DashboardScreen
from tui.widgets.task_table import WINDOW_ROWS
from tui.workforce import Workforce

if TYPE_CHECKING:
    from textual.notifications import SeverityLevel

    from core.ingest.embedder import Embedder
    from core.ingest.providers import RemoteProvider

logger = logging.getLogger(__name__)

# What the header adds to the ledger's name while the ledger cannot be read.
LEDGER_DOWN_MARK = "· cannot read the ledger, retrying"


class IngestDeskApp(App[int]):
    """The ingestdesk dashboard.

    Args:
        ledger: An open ledger; the caller closes it after the app exits.
        workers: In-process workers started with the app (0: watch only).
        read_only: No operator and no workers: every action that changes the ledger
            is hidden, and refused when its key is pressed.
        pool: Parser pool for the in-process workers (default: one the app owns).
        provider: Embedder or remote provider the in-process workers embed with
            (default: the hashed bag of words). The caller closes a remote one after
            the app exits.
        clock: Clock for ages, stalls and throughput (tests freeze it).
        poll_interval_s: Seconds between polls of the ledger.
        actor: Name recorded in the audit log for operator actions.
        worker_prefix: Prefix of in-process worker ids.
        open_race: Open the claim race screen at start (``ingestdesk race``).
        window_rows: Most rows the task table holds (the newest that match).
    """

    CSS_PATH = "app.tcss"
    TITLE = "ingestdesk"
    ENABLE_COMMAND_PALETTE = True

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit", tooltip="Stop workers (handing back their tasks) and quit"),
        # In the footer only while an in-process worker has stopped by itself
        # (check_action): a key for a rare moment need not cost footer room always.
        Binding(
            "ctrl+r",
            "restart_workers",
            "Restart",
            key_display="^r",
            tooltip="Start again the in-process workers that stopped by themselves",
        ),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("w", "add_worker", "+Worker", tooltip="Start one more in-process worker"),
        Binding("W", "remove_worker", "-Worker", tooltip="Stop the newest in-process worker"),
        Binding("p", "toggle_pause", "Pause", tooltip="Pause or resume the in-process workers"),
        Binding("I", "indexes", "Indexes", tooltip="Vector indexes and their campaigns"),
        # ctrl+f, not a letter: the search box is one key away from every screen,
        # including those whose letters mean something else.
        Binding(
            "ctrl+f", "search", "Search", key_display="^f", tooltip="Search published documents"
        ),
        # Last: the footer leaves out keys from the end when they do not fit, and of
        # these the race (a demonstration) matters least.
        Binding("R", "race", "Race", tooltip="Two workers race to claim one task"),
    ]

    def __init__(
        self,
        ledger: Ledger,
        *,
        workers: int = 2,
        read_only: bool = False,
        pool: ParserPool | None = None,
        provider: Embedder | RemoteProvider | None = None,
        clock: Callable[[], float] | None = None,
        poll_interval_s: float = POLL_INTERVAL_S,
        actor: str | None = None,
        worker_prefix: str | None = None,
        open_race: bool = False,
        window_rows: int = WINDOW_ROWS,
    ) -> None:
        super().__init__()
        settings = ledger.settings
        self.reads: Reads = ledger.reads
        # Read-only is the absence of the roles that change the ledger.
        self.operator: Operator | None = None if read_only else ledger.operator
        self.providers: ProviderLedger = ledger.providers
        self.provider_review: ProviderReview | None = None if read_only else ledger.provider_review
        self.versions: Versions | None = None if read_only else ledger.versions
        self.indexes, self.index_progress = ledger.indexes, ledger.campaigns.progress
        self.campaigns: Campaigns | None = None if read_only else ledger.campaigns
        self.workforce: Workforce | None = None
        if not read_only:
            # Short enough for the table's worker column, distinct between dashboards.
            prefix = worker_prefix or f"tui{os.getpid() % 1000:03d}"
            self.workforce = Workforce(
                ledger,
                self,
                prefix=prefix,
                pool=pool,
                provider=provider,
                on_change=self._workers_changed,
            )
        self.initial_workers = 0 if read_only else max(0, workers)
        self.clock: Callable[[], float] = clock or time.time
        self.actor = actor or _default_actor()
        self.stall_after_s = settings.stall_after_s
        self.window_rows = window_rows
        self.open_race = open_race
        self.mirror = LedgerMirror(stall_after_s=settings.stall_after_s)
        self.poller = Poller(
            self,
            ledger.reads,
            ledger.registry,
            self.mirror,
            providers=ledger.providers,
            clock=self.clock,
            interval_s=poll_interval_s,
            activity=list if self.workforce is None else self.workforce.drain_activity,
            on_baseline=self._started,
            on_outage=self._ledger_outage,
        )
        self._lifetime = ExitStack()  # what on_unmount undoes
        self._quitting = False
        self.db_url = settings.db_url
        self._ledger_label = ledger_label(settings.db_url, read_only=read_only)
        if settings.store_url:
            # Originals in a bucket: which one (and its endpoint, never a key), so
            # hosts meant to share it can be told apart. A local folder is the default.
            from core.store import open_store

            self._ledger_label += f"  store {visible(open_store(settings).label)}"
        self.sub_title = self._ledger_label

    @property
    def desk(self) -> Desk:
        """This app as its screens see it (and proof for the type checker that it is one)."""
        return self

    @property
    def ledger_workers(self) -> list[WorkerView]:
        """Workers the ledger has seen, as of the last read of its registry."""
        return self.poller.ledger_workers

    @property
    def provider_counts(self) -> Mapping[RequestState, int]:
        """Provider requests by state, as of the last read."""
        return self.poller.provider_counts

    def poll_soon(self) -> None:
        """Read the ledger's changes now (after an action) instead of at the next tick."""
        self.poller.poll_soon()

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Show a notification, always as plain text.

        Every notification here may quote what users supplied (document names, paths,
        worker ids, filter text, the ledger's refusals, a driver's error): unsafe
        characters are shown escaped, the ledger's password never appears, and
        ``markup`` is ignored — a name like ``[bold]x[/]`` is shown as written, and
        one like ``[/x]`` cannot break the toast. (Screens' ``notify`` always passes
        ``markup``, so it cannot simply default to False.)
        """
        super().notify(
            shown_lines(without_password(message, self.db_url)),
            title=shown_lines(without_password(title, self.db_url)),
            severity=severity,
            timeout=timeout,
            markup=False,
        )

    def action_help_quit(self) -> None:
        """Ctrl+C: say which key quits. (Textual's own wording is markup, which
        notifications here never parse.)"""
        self.notify(
            "press q to quit: workers hand their running tasks back first",
            title="Do you want to quit?",
        )

    # ----------------------------------------------------------------- lifetime

    def on_mount(self) -> None:
        self.push_screen(DashboardScreen())
        if self.workforce is not None:
            for _ in range(self.initial_workers):
                self.workforce.add()
        if self.open_race:
            self.action_race()
        self.poller.start()

    def _started(self) -> None:
        # Start-up is done once the baseline is read: everything alive now (imports,
        # Textual's DOM and styles, SQLAlchemy's metadata) is frozen out of the
        # collector's reach and young collections come less often; core.gc_tuning
        # keeps the measurements. Undone on unmount.
        self._lifetime.enter_context(tuned_for_interactive_use())

    async def action_quit(self) -> None:
        """Stop the workers cleanly (their running tasks go back to the queue), then exit."""
        if self._quitting:
            return
        self._quitting = True
        self.poller.stop()
        if self.workforce is not None and len(self.workforce):
            self.notify("stopping workers; running tasks are handed back…", timeout=5)
        await self.shutdown()
        self.exit(0)

    async def shutdown(self) -> None:
        """Stop polling, the workers and the parser pool this app owns. Safe to call twice."""
        self._quitting = True
        self.poller.stop()
        if self.workforce is not None:
            await self.workforce.aclose()

    async def on_unmount(self) -> None:
        # Covers exits that did not go through action_quit (tests, ctrl+q, errors).
        await self.shutdown()
        self._lifetime.close()

    def _ledger_outage(self, why: str | None) -> None:
        # The poller's toast fades; the header keeps saying it until the ledger is
        # back, so a view that stopped moving is never taken for a quiet ledger.
        self.sub_title = self._ledger_label + ("" if why is None else f"  {LEDGER_DOWN_MARK}")
        dashboard = self._dashboard()
        if why is None and dashboard is not None:
            # A window load that failed during the outage left the table short.
            dashboard.reload_window()

    # ----------------------------------------------------------------- workers

    def _workers_changed(self) -> None:
        # A worker stopped by itself, lost or found the ledger: the panel shows it
        # now (polls may be failing), and ^r Restart appears or goes.
        self.refresh_bindings()
        for screen in self.screen_stack:
            if hasattr(screen, "on_workers_changed"):
                screen.post_message(WorkersChanged())

    def action_restart_workers(self) -> None:
        workforce = policy.workforce_for(self, "restart_workers")
        if workforce is None:
            return
        restarted = workforce.restart_stopped()
        if not restarted:
            self.notify("no stopped workers to restart", severity="warning", timeout=3)
            return
        self.notify(f"restarted {', '.join(restarted)}: expired leases are reaped first", timeout=3)

    def action_add_worker(self) -> None:
        workforce = policy.workforce_for(self, "add_worker")
        if workforce is None:
            return
        worker_id = workforce.add()
        self.notify(f"started worker {worker_id}", timeout=2)

    def action_remove_worker(self) -> None:
        workforce = policy.workforce_for(self, "remove_worker")
        if workforce is None:
            return
        worker_id = workforce.newest()
        if worker_id is None:
            self.notify("no in-process workers to stop", severity="warning")
            return
        self._retire_in_background(workforce, worker_id)

    @work(group="retire", exit_on_error=False, description="stop an in-process worker")
    async def _retire_in_background(self, workforce: Workforce, worker_id: str) -> None:
        await workforce.retire(worker_id)
        self.notify(f"stopped worker {worker_id}; its running tasks were handed back", timeout=3)

    def action_toggle_pause(self) -> None:
        workforce = policy.workforce_for(self, "toggle_pause")
        if workforce is None:
            return
        workforce.set_paused(not workforce.paused)
        self.notify(
            "workers paused: running tasks finish, no new claims"
            if workforce.paused
            else "workers resumed",
            timeout=2,
        )

    # ----------------------------------------------------------------- screens

    def action_help(self) -> None:
        from tui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_search(self) -> None:
        from tui.screens.search import SearchScreen

        if isinstance(self.screen, ModalScreen):
            return  # not over a dialog: its answer would wait, unseen, under the search
        opened = [s for s in self.screen_stack if isinstance(s, SearchScreen)]
        if not opened:
            self.push_screen(SearchScreen())
            return
        # Back to the search box already open (from a document a hit opened), with
        # its query and hits, rather than a second, empty one.
        while self.screen is not opened[-1]:
            self.pop_screen()
        opened[-1].focus_query()

    def action_indexes(self) -> None:
        from tui.screens.indexes import IndexesScreen

        if not isinstance(self.screen, IndexesScreen | ModalScreen):
            self.push_screen(IndexesScreen())

    def action_race(self) -> None:
        operator = policy.operator_for(self, "race")
        if operator is None:
            return
        workforce = policy.workforce_for(self, "race")
        if workforce is None:
            return
        from tui.screens.race import RaceScreen

        if not isinstance(self.screen, RaceScreen):
            self.push_screen(RaceScreen(operator, workforce))

    # ----------------------------------------------------------------- policy

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide ledger-changing actions from the footer and palette in read-only mode,
        and the restart key while no worker has stopped."""
        if action == "restart_workers" and self.workforce is not None:
            return bool(self.workforce.stopped())
        return policy.allows(self, action)

    def on_key(self, event: events.Key) -> None:
        # In read-only mode the bindings of changing actions are hidden, so their
        # keys reach here unhandled: say why nothing happened.
        action = _changing_keys_of(type(self.screen)).get(event.key)
        if (
            action is not None
            and not policy.allows(self, action)
            and not isinstance(self.focused, Input)
        ):
            event.stop()
            policy.refuse(self, action)

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        commands: list[tuple[str, str, str, Callable[[], object]]] = []
        dashboard = self._dashboard()
        if dashboard is not None:
            commands += dashboard.palette_commands()
        commands += [
            (
                "Help",
                "Every key, the two state machines and the error codes",
                "help",
                self.action_help,
            ),
            (
                "Add worker",
                "Start one more in-process worker",
                "add_worker",
                self.action_add_worker,
            ),
            (
                "Remove worker",
                "Stop the newest in-process worker",
                "remove_worker",
                self.action_remove_worker,
            ),
            (
                "Restart stopped workers",
                "Start again the in-process workers that stopped by themselves (ctrl+r)",
                "restart_workers",
                self.action_restart_workers,
            ),
            (
                "Pause / resume workers",
                "Stop or restart claiming",
                "toggle_pause",
                self.action_toggle_pause,
            ),
            ("Claim race", "Two workers race to claim one new task", "race", self.action_race),
            ("Indexes", "Vector indexes and campaigns (I)", "indexes", self.action_indexes),
            (
                "Search documents",
                "Ranked full-text search over published versions (ctrl+f)",
                "search",
                self.action_search,
            ),
        ]
        for title, help_text, action, callback in commands:
            if policy.allows(self, action):
                yield SystemCommand(title, help_text, callback)

    def _dashboard(self) -> DashboardScreen | None:
        for screen in self.screen_stack:
            if isinstance(screen, DashboardScreen):
                return screen
        return None


# The keys read-only mode answers with a refusal: those of the changing actions bound
# on the app and on the dashboard (most screens bind the same keys to the same ones),
# and over them those of the screen shown, where a key means something else there
# (s resends a provider request on the failures screen, not submit).
_CHANGING_KEYS = policy.changing_keys([*IngestDeskApp.BINDINGS, *DashboardScreen.BINDINGS])
_SCREEN_CHANGING_KEYS: dict[type[Screen[Any]], dict[str, str]] = {}


def _changing_keys_of(screen: type[Screen[Any]]) -> dict[str, str]:
    keys = _SCREEN_CHANGING_KEYS.get(screen)
    if keys is None:
        keys = {**_CHANGING_KEYS, **policy.changing_keys(screen.BINDINGS)}
        _SCREEN_CHANGING_KEYS[screen] = keys
    return keys


def _default_actor() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in some containers
        return "operator"


def _one_line(message: str, settings: Settings) -> str:
    """A message for stderr: one line, unsafe characters escaped, and no password (a
    driver's error may quote the URL it was given)."""
    return visible(without_password(message, settings.db_url))


def _one_line_background_failure(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    exc = context.get("exception")
    what = context.get("message", "background task failed")
    if isinstance(exc, BaseException):
        logger.warning("%s: %s", visible(what), failure_line(exc))
    else:
        logger.warning("%s", visible(what))


async def _run(settings: Settings, *, faults_dir: Path | None = None, **options: object) -> int:
    try:
        ledger = await Ledger.open(settings)
    except IngestDeskError as exc:
        print(f"ingestdesk: {_one_line(exc.message, settings)}", file=sys.stderr)
        return exc.exit_code or 1
    except Exception as exc:  # e.g. a driver error before the ledger's own checks
        why = _one_line(failure_line(exc), settings)
        print(f"ingestdesk: cannot open the ledger: {why}", file=sys.stderr)
        return 1
    # A background task that failed with nobody awaiting it is reported by asyncio
    # when it is collected, with a traceback, often after the app has given the
    # terminal back: one line in the log instead, whatever state the workers are in.
    asyncio.get_running_loop().set_exception_handler(_one_line_background_failure)
    try:
        # Whatever is entered here outlives the app and is closed after it, in
        # reverse: the workers have stopped before their provider goes.
        async with AsyncExitStack() as lifetime:
            if faults_dir is not None:
                from tui.provider_process import ProviderStartFailed, faulty_provider

                try:
                    provider = await lifetime.enter_async_context(faulty_provider(faults_dir))
                except ProviderStartFailed as exc:
                    print(f"ingestdesk: {visible(str(exc))}", file=sys.stderr)
                    return 1
                print(f"demo provider with faults at {provider.endpoint}", flush=True)
                options["provider"] = provider
            elif not options.get("read_only"):
                # The in-process workers embed as `ingestdesk worker` does: with the
                # active index's embedder (a fresh ledger: the default model).
                from core.ingest.embedders import worker_embedder

                try:
                    options["provider"] = await worker_embedder(ledger)
                except IngestDeskError as exc:
                    print(f"ingestdesk: {visible(exc.message)}", file=sys.stderr)
                    return exc.exit_code or 1
            app = IngestDeskApp(ledger, **options)  # type: ignore[arg-type]
            result = await app.run_async()
            return int(result or 0) if app.return_code in (None, 0) else int(app.return_code or 1)
    finally:
        await ledger.close()


def run_dashboard(
    settings: Settings,
    *,
    workers: int = 2,
    read_only: bool = False,
    faults_dir: Path | None = None,
) -> int:
    """Open the ledger, run the dashboard until the operator quits, close the ledger.

    A ledger that cannot be opened gets one line on stderr and exit code 1, before
    any screen is drawn.

    Args:
        settings: Where the ledger is.
        workers: In-process workers started with the dashboard.
        read_only: Hide and refuse every action that changes the ledger.
        faults_dir: Run the demo provider with faults as a child process (its
            database and log in this folder) and embed through it; it is stopped
            when the dashboard exits, however it exits.

    Returns:
        The process exit code.
    """
    from core.ingest.wordllama_embedder import tokenize_on_one_thread

    # The in-process workers embed one document's few chunks at a time, as a worker
    # process does; set before any thread starts.
    tokenize_on_one_thread()
    return asyncio.run(_run(settings, workers=workers, read_only=read_only, faults_dir=faults_dir))


def run_race(settings: Settings) -> int:
    """``ingestdesk race``: the dashboard opened on the claim race screen, no workers."""
    return asyncio.run(_run(settings, workers=0, open_race=True))
