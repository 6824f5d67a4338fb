"""Whole-run medians kept sorted as a live run grows quote what the whole breakdown gives.

Real DeepSpeed logs (2 ranks) are stored a few records at a time into a real store, as a
live collector sends them. After each refresh, every figure of ``dsmon.analysis.step_stats``
taken from the dashboard's sorted values (``dsmon.view.quantiles``) must equal, to the last
bit, the same figure computed by numpy from the whole timer frame: the figures the folds of
the timer records keep (``dsmon.view.step_views``) and those the checklist keeps of the
store's timer tables (``dsmon.view.timer_steps``). The thresholds are made
small so these short runs keep their values sorted, merge them, and see late rows.
"""

from __future__ import annotations

import random
from datetime import datetime

import numpy as np
import pandas as pd
import pytest
from lanes import first_fast
from live_feed_support import feed, records_of
from locations import DATA
from shared_fixtures import read_log

from dsmon.analysis import step_stats, steps
from dsmon.analysis.percentiles import Percentiles
from dsmon.health import measures
from dsmon.health.gather import inputs_from_store
from dsmon.health.registry import evaluate
from dsmon.health.rules import communication as runtime_rules
from dsmon.model.frames import records_frame
from dsmon.store.store import Store
from dsmon.view import fold, quantiles, step_views, timer_steps
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import OPEN
from dsmon.view.health_panel import panel

#: ZeRO-2 optimizer timers, gradient accumulation, ZeRO-3 coordinator timers, fp16 (skips).
RUNS = ("z2", "grad_accum", "zero3_coordinator_v0100", "fp16_zero2")


@pytest.fixture(autouse=True)
def keep_sorted_from_the_first_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(step_views, "KEEP_SORTED_ROWS", 0)
    monkeypatch.setattr(quantiles, "MERGE_VALUES", 3)
    monkeypatch.setattr(fold, "LATE_STEPS", 2)


def figures(values: Percentiles) -> tuple[float, float, float, int]:
    return values.median(), values.percentile(0.9 * 100.0), values.percentile(10.0), values.n


def assert_figures_of_the_whole_run(frames: RunFrames) -> int:
    """Each figure live equals the figure of the whole breakdown; how many were kept sorted."""
    bd = steps.step_breakdown(frames.frame("timer"))
    kept = 0
    for name in step_stats.STEP_STATS:
        live = step_views.stat(frames, OPEN, name)
        kept += live._plain is None
        want = figures(step_stats.ranked(steps.steady(bd), name))
        np.testing.assert_array_equal(figures(live), want, err_msg=name)
        stored = timer_steps.stat(frames, OPEN, name)
        kept += stored._plain is None
        np.testing.assert_array_equal(figures(stored), want, err_msg=f"{name} (stored)")
    table = step_stats.timer_table(bd, lambda name: step_views.stat(frames, OPEN, name))
    pd.testing.assert_frame_equal(table, steps.step_stats(bd))  # the Steps page's table
    return kept


@pytest.mark.parametrize("name", first_fast(RUNS))
def test_figures_kept_sorted_equal_numpy_over_the_whole_run(name: str, store: Store) -> None:
    _, kept = feed(store, name, records_of(name), 9, assert_figures_of_the_whole_run)
    assert kept > 0  # the sorted values answered, not only the fallback


def test_late_and_shuffled_rows_start_the_sorted_values_again(store: Store) -> None:
    """Rows of finished steps arriving late make the fold start over: so do its figures."""
    recs = records_of("grad_accum")
    random.Random(11).shuffle(recs)
    frames, kept = feed(store, "grad_accum", recs, 30, assert_figures_of_the_whole_run)
    assert kept > 0
    assert frames._folds["steps.breakdown"].epoch > 2


def test_the_live_checklist_with_sorted_figures_says_what_the_store_says(store: Store) -> None:
    recs = read_log(DATA / "z2" / "train.log", "z2")  # whole: the checklist judges its end
    frames, now = RunFrames(store, "z2"), datetime.now()
    for start in range(0, len(recs), 40):
        store.add(recs[start : start + 40])
        frames.refresh()
        live = panel(frames, "z2", OPEN, now)
    assert timer_steps._live(frames).quantiles  # the checklist's figures: sorted values
    full = evaluate(inputs_from_store(store, "z2", now=now))
    assert [(r.rule_id, r.status, r.summary, r.evidence) for r in live.checklist.results] == [
        (r.rule_id, r.status, r.summary, r.evidence) for r in full.results
    ]


@pytest.mark.parametrize("seed", range(6))
def test_ranked_answers_what_numpy_answers(seed: int) -> None:
    """Medians and percentiles of sorted parts and of plain values, against numpy's own."""
    rng = np.random.default_rng(seed)
    for n in [1, 2, 3, 4, 7, 10, 101, 1000, int(rng.integers(1, 5000))]:
        values = np.round(rng.normal(50.0, 20.0, n), int(rng.integers(0, 4)))  # with ties
        want = (np.median(values), np.percentile(values, 90.0), np.percentile(values, 10.0), n)
        split = int(rng.integers(0, n + 1))
        for got in (
            Percentiles.of(values.copy()),
            Percentiles.merged(np.sort(values[:split]), np.sort(values[split:])),
        ):
            assert figures(got) == want
    assert np.isnan(Percentiles.of(np.array([np.nan])).median())
    assert Percentiles.of(np.array([1.0, np.nan, 3.0])).median() == 2.0


def test_values_added_in_parts_read_as_one_sorted_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quantiles, "MERGE_VALUES", 5)
    rng = np.random.default_rng(3)
    kept, seen = quantiles.SortedValues(), []
    for _ in range(40):
        part = rng.integers(0, 20, int(rng.integers(0, 6))).astype(np.float64)
        kept.add(np.append(part, np.nan))  # NaN is no value
        seen.extend(part)
        more = rng.random(2)
        got = kept.ranked(more)
        assert got.n == len(seen) + 2
        assert got.median() == np.median(np.concatenate([seen, more]))


@pytest.mark.parametrize("n", [3, 50])  # kept small, and big at once
def test_a_first_add_sorts_a_copy_and_leaves_the_values_given(
    n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(quantiles, "MERGE_VALUES", 5)
    values = np.random.default_rng(n).random(n)
    values[1] = np.nan
    given = values.copy()
    kept = quantiles.SortedValues()
    kept.add(values)
    np.testing.assert_array_equal(values, given)
    known = np.sort(given[~np.isnan(given)])
    assert kept.ranked(np.empty(0)).at(list(range(len(known)))) == known.tolist()


def test_a_figure_of_no_steps_is_no_figure() -> None:
    empty = step_stats.ranked(pd.DataFrame(), step_stats.COMM_SHARE)
    assert empty.n == 0 and np.isnan(empty.median()) and step_stats.share_stats(empty) is None


@pytest.mark.parametrize("name", first_fast(RUNS))
def test_the_share_step_range_read_from_both_ends_is_that_of_every_row(name: str) -> None:
    """The comm-share rule reads its step range a part at a time from each end of a long
    breakdown: the same range as its rows with a known share, whatever the part size."""
    timers = records_frame("timer", records_of(name))
    bd = steps.steady(steps.step_breakdown(timers))
    want = measures.step_range(runtime_rules._known_share(bd))
    assert want is not None
    for part in (1, 2, 5, 1024):
        assert runtime_rules._shared_steps(bd, part) == want
    shuffled = bd.sample(frac=1.0, random_state=1)  # not in step order: every row is read
    assert runtime_rules._shared_steps(shuffled, 2) == want
