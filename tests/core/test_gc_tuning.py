"""The collector's pause for a held lock (core.gc_tuning.collection_paused): paused
for as long as any thread's block runs, and back as it was after the last."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from core.gc_tuning import collection_paused

WAIT_S = 30.0  # seconds a step may take on a loaded machine


@pytest.fixture
def collecting() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        # As it was: a test leaves the collector off, and the rest of this process's
        # tests (the prune's among them) expect it on.
        if was:
            gc.enable()
        else:
            gc.disable()


def test_the_collector_is_off_in_the_block_and_back_after(collecting: None) -> None:
    with collection_paused():
        assert not gc.isenabled()
        with collection_paused():  # nested on one thread
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off(collecting: None) -> None:
    gc.disable()
    with collection_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_overlapping_blocks_of_two_threads_keep_it_paused_until_the_last_ends(
    collecting: None,
) -> None:
    # The first block to end turned the collector back on while the other thread's
    # block (a prune batch holding the write lock) still ran.
    inside, first_ended, seen_after_first = threading.Event(), threading.Event(), []

    def second() -> None:
        with collection_paused():
            inside.set()
            assert first_ended.wait(WAIT_S)
            seen_after_first.append(gc.isenabled())

    with collection_paused():
        thread = threading.Thread(target=second)
        thread.start()
        assert inside.wait(WAIT_S)
    first_ended.set()
    thread.join(WAIT_S)
    assert seen_after_first == [False]
    assert gc.isenabled()
