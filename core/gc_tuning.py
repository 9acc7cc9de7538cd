"""Garbage-collector tuning for ingestdesk's long-running processes, in one place.

Three measured problems, one remedy each:

* **Full collections walk everything alive.** After start-up a process holds tens of
  thousands of long-lived objects (imports, SQLAlchemy's metadata, Textual's DOM and
  styles). Every full collection walked all of them: 70-170 ms pauses of the
  dashboard's event loop (``bench.dashboard``'s slowest key presses) and ~50 ms of
  teardown per worker process at exit. :func:`freeze_startup_objects` moves what is
  alive at the end of start-up out of the collector's sight.
* **Promotions set off full collections.** With CPython's default young threshold
  (700 allocations) a frame's or a parsed document's short-lived objects were
  promoted before reference counting freed them; the promotions set off ~40 full
  collections a minute at 40-60 ms each with two in-process workers. Collecting the
  young generation every 20 000 allocations lets them die young
  (:data:`YOUNG_GC_ALLOCATIONS`); none fell in the measured key presses since.
* **A collection inside a held lock holds it too.** At a million tasks the one prune
  batch of ~3 000 past 50 ms (70-90 ms, no wait for a CPU) was a full collection
  (70 ms) run by the batch's own thread. :func:`collection_paused` keeps collections
  out of such a block.

Reference counting still frees almost everything; only cycles wait for a collection.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_GC_ALLOCATIONS = 20_000  # net allocations per young collection (CPython: 700)


def freeze_startup_objects() -> None:
    """Move every object alive now into the permanent generation (see above).

    Call once start-up is done; a process that exits without undoing it also skips
    collecting those objects at exit.
    """
    gc.freeze()


@contextmanager
def tuned_for_interactive_use(young_allocations: int = YOUNG_GC_ALLOCATIONS) -> Iterator[None]:
    """Freeze start-up objects and collect the young generation less often, for as
    long as the block runs; both are undone when it ends (tests run several apps in
    one interpreter)."""
    saved = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(young_allocations, saved[1], saved[2])
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*saved)


@contextmanager
def collection_paused() -> Iterator[None]:
    """No automatic collection while the block runs: keep it short (one write
    transaction). A collection that falls due meanwhile runs on the first allocation
    after the block. The collector has no per-thread switch, so this pauses it for
    the whole process: blocks of several threads that overlap count as one pause,
    and the collector comes back (if it was on when the first began) when the last
    ends, not when the first does."""
    global _pauses, _resume
    with _pause_lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()


_pause_lock = threading.Lock()
_pauses = 0  # collection_paused blocks running now, in every thread
_resume = False  # whether the collector was on when the first of them began
