"""Trace positions kept as a live run grows group its training points as grouping anew does.

Real DeepSpeed logs are stored a few records at a time into a real store, as a live
collector sends them. After each refresh, the positions the dashboard keeps for each kind's
training points (``dsmon.view.group_positions``) must be those ``groups.positions`` finds
over the whole fold result, and the Training page's traces and latest values the same.
"""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest
from lanes import first_fast
from live_feed_support import feed, records_of

from dsmon.analysis import groups, training
from dsmon.store.store import Store
from dsmon.view import fold, step_views
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import OPEN, Cutoff
from dsmon.view.group_positions import GroupPositions

#: Runs with step= lines (loss, learning rate), loss-scale messages and memory lines.
RUNS = ("z2", "fp16_zero2", "memory_breakdown")


def assert_kept_positions_are_the_groups(frames: RunFrames) -> int:
    """Each part's kept positions equal grouping it now; how many parts had them kept."""
    parts = step_views.training_parts(frames, OPEN, None)
    kept = step_views.training_groups(frames, OPEN, None)
    held = 0
    for part, got in zip(parts, kept, strict=True):
        if got is None or part.empty:
            continue
        held += 1
        want = groups.positions(part, training.TRACE_KEYS)
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
    for got, want in zip(
        training.traces_and_latest(parts, kept), training.traces_and_latest(parts), strict=True
    ):
        pd.testing.assert_frame_equal(got, want)
    return held


@pytest.mark.parametrize("name", first_fast(RUNS))
def test_kept_positions_equal_grouping_every_point_again(
    name: str, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fold, "LATE_STEPS", 1)
    _, held = feed(store, name, records_of(name), 11, assert_kept_positions_are_the_groups)
    assert held > 0


def test_shuffled_arrival_regroups_after_a_restart(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fold, "LATE_STEPS", 1)
    recs = records_of("fp16_zero2")
    random.Random(5).shuffle(recs)
    frames, held = feed(store, "fp16_zero2", recs, 25, assert_kept_positions_are_the_groups)
    assert held > 0
    assert frames._folds["training.step"].epoch > 2


def test_replay_groups_on_its_own(store: Store) -> None:
    store.add(records_of("z2"))
    frames = RunFrames(store, "z2")
    assert step_views.training_groups(frames, Cutoff(step=5), None) == [None] * len(
        training.SERIES_KINDS
    )


def test_a_late_step_line_moves_the_rows_after_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step 10's lines sent last land in the middle of the result: the positions kept
    for the rows after them are stale, and are grouped again."""
    monkeypatch.setattr(fold, "LATE_STEPS", 1)
    recs = records_of("z2")
    late = [r for r in recs if r.step == 10]
    assert any(r.KIND == "step" for r in late), "the z2 run prints a step= line at step 10"
    frames, held = feed(
        store,
        "z2",
        [r for r in recs if r.step != 10] + late,
        20,
        assert_kept_positions_are_the_groups,
    )
    assert held > 0
    points = step_views.training_parts(frames, OPEN, None)[training.SERIES_KINDS.index("step")]
    assert 10 in set(points["step"])


def test_a_new_epoch_groups_every_row_again() -> None:
    """A fold that started over may hold the same number of rows in another order."""
    cols = ["metric", "source"]
    metric = pd.Categorical(["loss", "learning rate"] * 3, categories=["learning rate", "loss"])
    frame = pd.DataFrame({"metric": metric, "source": pd.Categorical(["step= line"] * 6)})
    kept = GroupPositions(cols)
    kept.over(frame, epoch=1, stable=6)
    moved = frame.iloc[[1, 0, 2, 3, 4, 5]].reset_index(drop=True)
    got = kept.over(moved, epoch=2, stable=6)
    assert got is not None
    for a, b in zip(got, groups.positions(moved, cols), strict=True):
        np.testing.assert_array_equal(a, b)
    assert GroupPositions(["step"]).over(pd.DataFrame({"step": [1, 2]}), 1, 2) is None
