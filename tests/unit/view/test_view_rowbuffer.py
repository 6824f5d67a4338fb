"""The fold's in-place result buffer (``dsmon.view.rowbuffer``) on real step breakdowns.

The buffer must give back exactly the frame it was given (values, missing values, dtypes,
columns), grow past its capacity without losing rows, refuse columns it cannot hold, and
never let a reader change the rows under the next refresh.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from locations import DATA
from shared_fixtures import read_log

from dsmon.analysis import steps
from dsmon.model.frames import records_frame
from dsmon.view import rowbuffer
from dsmon.view.rowbuffer import RowBuffer


def breakdown(name: str) -> pd.DataFrame:
    timers = records_frame("timer", read_log(DATA / name / "train.log", name))
    return steps.step_breakdown(timers)


@pytest.mark.parametrize("name", ["z2", "grad_accum"])
def test_a_buffer_gives_back_the_frame_it_holds(name: str) -> None:
    bd = breakdown(name)
    assert len(bd) >= 5 and isinstance(bd["step"].dtype, pd.Int64Dtype)
    buffer = RowBuffer.of(bd)
    assert buffer is not None
    pd.testing.assert_frame_equal(buffer.frame(len(bd)), bd.reset_index(drop=True))
    pd.testing.assert_frame_equal(buffer.frame(3), bd.head(3).reset_index(drop=True))


def test_rows_written_past_the_capacity_are_all_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rowbuffer, "MIN_SPARE", 1)
    bd = breakdown("z2")
    buffer = RowBuffer.of(bd.head(2))
    assert buffer is not None
    for start in range(2, len(bd)):  # one row at a time: the arrays grow many times
        buffer.write(buffer.rows, bd.iloc[start : start + 1])
    pd.testing.assert_frame_equal(buffer.frame(len(bd)), bd.reset_index(drop=True))


def test_missing_values_stay_missing_when_rows_are_written_over() -> None:
    bd = breakdown("z2")
    with_gap = bd.copy()
    with_gap.loc[with_gap.index[1], "rank"] = pd.NA
    buffer = RowBuffer.of(bd)
    assert buffer is not None
    buffer.write(0, with_gap.head(3))
    got = buffer.frame(3)
    assert got["rank"].isna().tolist() == [False, True, False]
    pd.testing.assert_frame_equal(got, with_gap.head(3).reset_index(drop=True))


def test_readers_cannot_change_the_rows_in_place() -> None:
    bd = breakdown("z2")
    buffer = RowBuffer.of(bd)
    assert buffer is not None
    view = buffer.frame(len(bd))
    with pytest.raises(ValueError, match="read-only"):
        view.loc[0, "fwd_ms"] = -1.0
    changed = view.assign(fwd_ms=view["fwd_ms"] * 2)  # a new frame is fine
    assert np.allclose(changed["fwd_ms"], bd["fwd_ms"].to_numpy() * 2)
    pd.testing.assert_frame_equal(buffer.frame(len(bd)), bd.reset_index(drop=True))


def test_frames_it_cannot_hold_and_rows_that_do_not_fit_are_refused() -> None:
    bd = breakdown("z2")
    assert RowBuffer.of(bd.assign(group="engine")) is None  # strings: joined as before
    buffer = RowBuffer.of(bd)
    assert buffer is not None
    assert buffer.fits(bd.head(1))
    assert not buffer.fits(bd.head(1).assign(extra_ms=1.0))  # a timer first seen
    assert not buffer.fits(bd.head(1).astype({"fwd_ms": "Float64"}))


def test_categorical_columns_are_held_as_codes_and_must_share_categories() -> None:
    labels = pd.CategoricalDtype(["loss", "samples/s", "step= line"])
    frame = pd.DataFrame(
        {
            "step": pd.array([1, 2, None], dtype="Float64"),
            "metric": pd.Categorical(["loss", None, "samples/s"], dtype=labels),
        }
    )
    buffer = RowBuffer.of(frame)
    assert buffer is not None
    buffer.write(3, frame.iloc[[2, 0]])
    got = buffer.frame(5)
    expected = pd.concat([frame, frame.iloc[[2, 0]]], ignore_index=True)
    pd.testing.assert_frame_equal(got, expected)
    other = frame.assign(metric=pd.Categorical(["loss"] * 3, categories=["loss"]))
    assert not buffer.fits(other)  # other categories: its fold joins frames instead
