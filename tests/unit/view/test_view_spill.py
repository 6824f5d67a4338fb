"""A long run's timer and step rows are let go once its folds took them in; nothing is lost.

The dashboard's frame cache feeds the folds of a big kind page by page and then holds only
the rows not all of them took in (``dsmon.view.chunks``, ``dsmon.view.cache``). Real
DeepSpeed logs (2 ranks) in a real store, with the page size and the threshold made small so
these short runs are read in several pages and let go: every fold, a fold first asked for
later, a replay position and the whole frame must still equal what the store's frames give.
"""

from __future__ import annotations

import pandas as pd
import pytest
from lanes import first_fast
from live_feed_support import records_of

from dsmon.analysis import steps
from dsmon.store.frames import pages
from dsmon.store.store import Store
from dsmon.view import cache, fold
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import OPEN, Cutoff
from dsmon.view.step_views import STEP_FOLDS

#: Runs with ZeRO-2 optimizer timers, gradient accumulation and ZeRO-3 coordinator timers.
RUNS = ("z2", "grad_accum", "zero3_coordinator_v0100", "act_ckpt")


def assert_same(got: pd.DataFrame, expect: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got.reset_index(drop=True), expect.reset_index(drop=True))


def assert_folds_of_the_store(frames: RunFrames, store: Store, run: str) -> None:
    """Every fold of :data:`STEP_FOLDS` equals its function over the store's whole frame."""
    for kind, fns in STEP_FOLDS.items():
        whole = store.frames.frame(run, kind)
        for name, fn in fns.items():
            assert_same(frames.fold(name, kind, OPEN, fn), fn(whole))


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fold, "LATE_STEPS", 2)
    monkeypatch.setattr(pages, "FRAME_PAGE_ROWS", 7)
    monkeypatch.setattr(cache, "SPILL_MIN_ROWS", 7)


@pytest.mark.usefixtures("small_pages")
@pytest.mark.parametrize("name", first_fast(RUNS))
def test_a_long_run_is_folded_page_by_page_and_its_raw_rows_let_go(name: str, store: Store) -> None:
    recs = records_of(name)
    half = len(recs) // 2
    store.add(recs[:half])
    frames = RunFrames(store, name, folds=STEP_FOLDS)
    assert_folds_of_the_store(frames, store, name)
    timer = frames._frames["timer"]
    held = sum(len(p) for p in timer.parts)
    assert timer.spilled_rows > 0 and held + timer.spilled_rows == timer.rows
    assert held < 7  # all that every fold took in was let go
    for start in range(half, len(recs), 13):  # the rest arrives live, a batch at a time
        store.add(recs[start : start + 13])
        frames.refresh()
        assert_folds_of_the_store(frames, store, name)
    assert timer.rows == len(store.frames.frame(name, "timer")) >= timer.spilled_rows > half // 4
    assert sum(len(p) for p in timer.parts) < 7


@pytest.mark.usefixtures("small_pages")
@pytest.mark.parametrize("name", first_fast(RUNS))
def test_rows_let_go_are_read_again_for_whoever_needs_them(name: str, store: Store) -> None:
    store.add(records_of(name))
    frames = RunFrames(store, name, folds=STEP_FOLDS)
    frames.fold("steps.breakdown", "timer", OPEN, steps.step_breakdown)
    timer = frames._frames["timer"]
    assert timer.spilled_rows > 0
    whole = store.frames.frame(name, "timer")
    # a fold no page asked for while the run was read: from the store again, page by page
    assert_same(
        frames.fold("later", "timer", OPEN, steps.micro_breakdown), steps.micro_breakdown(whole)
    )
    assert timer.spilled_rows > 0  # and still not held
    cut = Cutoff(step=3)  # a replay position
    expect = steps.step_breakdown(cut.apply(whole))
    assert_same(frames.fold("steps.breakdown", "timer", cut, steps.step_breakdown), expect)
    # asked for whole, the rows are read again and held from then on
    assert_same(frames.frame("timer"), whole)
    assert timer.spilled_rows == 0 and timer.spill(timer.rows) == 0
    assert_folds_of_the_store(frames, store, name)


@pytest.mark.usefixtures("small_pages")
def test_a_fold_a_page_made_later_holds_the_rows_it_has_not_taken_in(store: Store) -> None:
    recs = records_of("grad_accum")
    half = len(recs) // 2
    store.add(recs[:half])
    frames = RunFrames(store, "grad_accum", folds=STEP_FOLDS)
    late = frames.fold("late", "timer", OPEN, steps.micro_breakdown)  # not in STEP_FOLDS
    timer = frames._frames["timer"]
    for start in range(half, len(recs), 3):  # a few rows a refresh: no page is full
        store.add(recs[start : start + 3])
        frames.refresh()
        for name, fn in STEP_FOLDS["timer"].items():  # all but "late" are kept up to date
            frames.fold(name, "timer", OPEN, fn)
        assert timer.spilled_rows <= frames._folds["late"].consumed(timer)
    whole = store.frames.frame("grad_accum", "timer")
    assert len(late) < len(steps.micro_breakdown(whole))
    assert_same(
        frames.fold("late", "timer", OPEN, steps.micro_breakdown), steps.micro_breakdown(whole)
    )
    assert_folds_of_the_store(frames, store, "grad_accum")


@pytest.mark.usefixtures("small_pages")
def test_a_kind_first_read_whole_is_held_as_read(store: Store) -> None:
    """Replay reads the timer rows whole first: nothing is let go to be read again."""
    store.add(records_of("z2"))
    frames = RunFrames(store, "z2", folds=STEP_FOLDS)
    cut = Cutoff(step=4)
    whole = store.frames.frame("z2", "timer")
    assert_same(frames.frame("timer", cut), cut.apply(whole))
    timer = frames._frames["timer"]
    assert timer.spilled_rows == 0 and frames._folds["steps.breakdown"]._result is None
    assert_folds_of_the_store(frames, store, "z2")
    assert timer.spilled_rows == 0


@pytest.mark.usefixtures("small_pages")
def test_a_run_growing_live_while_one_fold_is_asked_holds_about_a_page(store: Store) -> None:
    """A dashboard left on one page: the folds no page asks for still take in the new rows
    once a page's worth is held, and the rows are let go."""
    recs = records_of("grad_accum")
    frames = RunFrames(store, "grad_accum", folds=STEP_FOLDS)
    store.add(recs[:3])
    timer = frames._chunks("timer")
    for start in range(3, len(recs), 3):
        store.add(recs[start : start + 3])
        frames.refresh()
        frames.fold("steps.breakdown", "timer", OPEN, steps.step_breakdown)
        assert timer.rows - timer.spilled_rows < 7 + 3  # at most a page and a batch held
    assert timer.spilled_rows > 0
    assert_folds_of_the_store(frames, store, "grad_accum")


def test_a_small_run_is_held_whole_and_its_folds_fed_only_when_asked(store: Store) -> None:
    store.add(records_of("z2"))
    frames = RunFrames(store, "z2", folds=STEP_FOLDS)
    assert frames.has_rows("timer")
    timer = frames._frames["timer"]
    assert timer.spilled_rows == 0 and sum(len(p) for p in timer.parts) == timer.rows
    assert frames._folds["steps.breakdown"]._result is None  # not computed until a page asks
    assert_folds_of_the_store(frames, store, "z2")
    assert timer.spilled_rows == 0


@pytest.mark.usefixtures("small_pages")
def test_a_live_page_reading_a_long_run_whole_is_warned_of(store: Store) -> None:
    """Reading the whole frame live, after the folds let its rows go, holds them all again.

    That is what a page does when it reads a long run's timer frame instead of asking a fold:
    it costs a gigabyte at a million steps, so the cache says so (and the suite fails on it).
    """
    store.add(records_of("z2"))
    frames = RunFrames(store, "z2", folds=STEP_FOLDS)
    frames.fold("steps.breakdown", "timer", OPEN, steps.step_breakdown)
    assert frames._frames["timer"].spilled_rows > 0
    with pytest.warns(cache.WholeFrameRead, match="whole timer frame of run z2"):
        whole = frames.frame("timer")
    assert_same(whole, store.frames.frame("z2", "timer"))
    assert frames.frame("timer", Cutoff(step=3)).shape[0] > 0  # replay: held already, no warning
