"""MinMaxLTTB downsampling in the query layer: ~1,000 points per trace, spikes kept."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dsmon.analysis.downsample import N_OUT, downsample, indices


def test_small_frames_pass_through_sorted() -> None:
    frame = pd.DataFrame({"step": [3, 1, 2], "ms": [30.0, 10.0, 20.0]})
    out = downsample(frame, "step", ["ms"])
    assert out["step"].tolist() == [1, 2, 3]
    assert out["ms"].tolist() == [10.0, 20.0, 30.0]


def test_a_long_trace_keeps_its_spike_and_dip() -> None:
    n = 100_000
    y = np.full(n, 50.0)
    y[12_345] = 1300.0  # one warm-up-like spike
    y[77_777] = 1.0
    frame = pd.DataFrame({"step": np.arange(1, n + 1), "total_ms": y})
    out = downsample(frame, "step", ["total_ms"])
    assert len(out) == N_OUT
    assert 12_346 in out["step"].tolist() and 77_778 in out["step"].tolist()
    assert out["total_ms"].max() == 1300.0 and out["total_ms"].min() == 1.0
    assert out["step"].is_monotonic_increasing


def test_each_group_is_its_own_trace() -> None:
    n = 5000
    frame = pd.DataFrame(
        {
            "step": np.tile(np.arange(n), 2),
            "rank": np.repeat([0, 1], n),
            "v": np.arange(2 * n, dtype=float),
        }
    )
    out = downsample(frame, "step", ["v"], n_out=500, by="rank")
    assert out.groupby("rank").size().tolist() == [500, 500]
    assert out[out["rank"] == 1]["v"].iloc[-1] == 2 * n - 1


def test_union_of_columns_keeps_stacks_aligned() -> None:
    n = 10_000
    a = np.zeros(n)
    b = np.zeros(n)
    a[100], b[9000] = 5.0, 7.0
    frame = pd.DataFrame({"step": np.arange(n), "a": a, "b": b})
    out = downsample(frame, "step", ["a", "b"], n_out=100)
    assert {100, 9000} <= set(out["step"])
    assert len(out) <= 200


def test_datetime_axis_and_nan_gaps() -> None:
    ts = pd.date_range("2026-11-29 14:00", periods=20_000, freq="s")
    y = np.sin(np.arange(20_000) / 500.0)
    y[5000:6000] = np.nan
    out = downsample(pd.DataFrame({"ts": ts, "util": y}), "ts", ["util"])
    assert 900 <= len(out) <= N_OUT
    assert out["util"].isna().any()  # the gap stays a gap


def test_all_nan_trace_keeps_its_ends() -> None:
    x = np.arange(5000, dtype=float)
    assert indices(x, np.full(5000, np.nan), 100).tolist() == [0, 4999]
