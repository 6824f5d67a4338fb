"""GPU telemetry analysis on samples with chosen values (dashboard_support.gpu_samples).

Summaries and buckets are checked twice with the same expectations: folded in memory (a log
checked without a store) and by the SQLite store from its roll-ups.

Four GPUs, 10 samples each at 1 Hz: n0/gpu1 at 55 % kernel-active time and 200 W, the rest at
95 %; n1/gpu1 is an H100 (700 W limit) among A100s (400 W); n0/gpu0 has SW power cap (bit 0x4)
in samples 0 and 5.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pandas as pd
import pytest
from dashboard_support import gpu_samples

from dsmon.analysis import gpus
from dsmon.model.frames import records_frame
from dsmon.store.gpu import buckets
from dsmon.store.store import open_store


@pytest.fixture(scope="module")
def samples() -> pd.DataFrame:
    return gpus.prepare(records_frame("gpu", gpu_samples()))


class Source(NamedTuple):
    """Per-GPU summary and buckets as one source computes them."""

    summary: Callable[[], pd.DataFrame]
    buckets: Callable[[int], pd.DataFrame]


@pytest.fixture(scope="module", params=["memory", "sqlite"])
def source(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Source:
    """The same answers folded in pandas (a log in memory) and by the store's SQL roll-ups."""
    recs = gpu_samples()
    if request.param == "memory":
        frame = records_frame("gpu", recs)

        def fold_summary() -> pd.DataFrame:
            got = buckets.grid_of_samples(frame, None)
            return buckets.summary(got.stats, got.series)

        def fold_buckets(n: int) -> pd.DataFrame:
            got = buckets.grid_of_samples(frame, n)
            return got.per_bucket()

        return Source(fold_summary, fold_buckets)
    store = open_store(tmp_path_factory.mktemp("gpus") / "s.sqlite")
    store.add(recs)
    run = recs[0].src.run
    return Source(lambda: store.gpu.summary(run), lambda n: store.gpu.buckets(run, n))


def test_prepare_derives_units(samples: pd.DataFrame) -> None:
    row = samples[samples["gpu"] == "n1/gpu1"].iloc[0]
    assert row["mem_used_gib"] == 40.0 and row["mem_used_pct"] == 50.0
    assert row["power_pct"] == pytest.approx(500.0 / 700.0 * 100, rel=1e-6)
    assert gpus.gpu_label(None, 3) == "gpu3"
    nodes = pd.Series([None, "n0", None, "n0"])
    assert gpus._labels(nodes, pd.Series([3, 1, 3, 2])).tolist() == [
        "gpu3",
        "n0/gpu1",
        "gpu3",
        "n0/gpu2",
    ]


def test_inventory_and_models(source: Source) -> None:
    summary = source.summary()
    inv = gpus.inventory(summary)
    assert inv["gpu"].tolist() == ["n0/gpu0", "n0/gpu1", "n1/gpu0", "n1/gpu1"]
    assert inv["samples"].tolist() == [10, 10, 10, 10]
    assert inv["power_limit_w"].tolist() == [400.0, 400.0, 400.0, 700.0]
    assert inv["mem_total_gib"].tolist() == [80.0] * 4
    assert gpus.models(summary) == {"NVIDIA A100-SXM4-80GB": 3, "NVIDIA H100 80GB HBM3": 1}
    row = summary.set_index("gpu").loc["n1/gpu1"]
    assert row["mem_used_pct_max"] == 50.0
    assert row["power_pct"] == pytest.approx(500.0 / 700.0 * 100)
    assert row["last_ts"] == pd.Timestamp("2026-11-29T14:11:10")


def test_lines_keep_each_buckets_extremes(source: Source) -> None:
    s = gpus.lines(source.buckets(5), "util_gpu_pct", ["n0/gpu1"])
    assert s["gpu"].unique().tolist() == ["n0/gpu1"]
    assert len(s) == 2 * 5 and set(s["value"]) == {55.0}
    assert s["ts"].is_monotonic_increasing


def test_buckets_heatmap_and_imbalance(source: Source) -> None:
    b = source.buckets(5)
    assert len(b) == 4 * 5  # every GPU has a sample in each 2 s bucket
    assert b["n"].tolist() == [2] * 20
    grid = gpus.heatmap(b, "util_gpu_pct")
    assert grid.shape == (4, 5)
    assert grid.loc["n0/gpu1"].tolist() == [55.0] * 5
    imb = gpus.imbalance(b, "util_gpu_pct")
    assert imb["spread"].tolist() == [40.0] * 5
    assert imb["n_gpus"].tolist() == [4] * 5
    # mean 85, population std of (95, 55, 95, 95) = 17.32: cv = 0.2038
    assert imb["cv"].iloc[0] == pytest.approx(np.std([95, 55, 95, 95]) / 85.0)
    power = gpus.imbalance(b, "power_w")
    assert power["max"].iloc[0] == 500.0 and power["min"].iloc[0] == 200.0


def test_throttle_share_and_decoding(source: Source) -> None:
    share = gpus.throttle_share(source.summary()).set_index("gpu")
    assert share.columns.tolist() == ["samples", "SW power cap"]
    assert share["SW power cap"].tolist() == [20.0, 0.0, 0.0, 0.0]
    assert gpus.decode_throttle(0x4 | 0x40) == ("SW power cap", "HW thermal slowdown")
    assert gpus.decode_throttle(None) == ()


def test_latest_sample_per_gpu(samples: pd.DataFrame) -> None:
    latest = gpus.latest(samples).set_index("gpu")
    assert latest.loc["n0/gpu0", "ts"] == pd.Timestamp("2026-11-29T14:11:10")
    assert latest.loc["n0/gpu0", "clock_events"] == "none"


def test_empty_inputs() -> None:
    empty = buckets.grid_of_samples(records_frame("gpu", []), 5)
    summary = buckets.summary(empty.stats, empty.series)
    assert gpus.inventory(summary).empty
    bucketed = buckets.per_bucket(empty.stats, empty.series, 0, 1)
    assert bucketed.empty
    assert gpus.imbalance(bucketed, "util_gpu_pct").empty
    assert gpus.lines(bucketed, "util_gpu_pct").empty
    assert gpus.models(summary) == {}
    assert gpus.throttle_share(summary).empty


def test_live_tiles_count_only_the_gpus_that_report_now(samples: pd.DataFrame) -> None:
    newest = gpus.latest(samples)
    tiles = gpus.live_tiles(newest)
    assert tiles is not None and (tiles.gpus, tiles.reporting) == (4, 4)
    assert tiles.util_mean_pct == pytest.approx((95 * 3 + 55) / 4)
    # a GPU whose newest sample is a minute old is listed, not counted as reporting
    stale = newest.copy()
    stale.loc[0, "ts"] = stale["ts"].max() - pd.Timedelta(minutes=1)
    tiles = gpus.live_tiles(stale)
    assert tiles is not None and (tiles.gpus, tiles.reporting) == (4, 3)
    assert dict(tiles.values())["GPUs reporting"] == "3 / 4"
    assert gpus.live_tiles(gpus.latest(samples.iloc[0:0])) is None
