"""GPU telemetry analysis on samples with chosen values (dashboard_support.gpu_samples).

Four GPUs, 10 samples each at 1 Hz: n0/gpu1 at 55 % kernel-active time and 200 W, the rest at
95 %; n1/gpu1 is an H100 (700 W limit) among A100s (400 W); n0/gpu0 has SW power cap (bit 0x4)
in samples 0 and 5.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from dashboard_support import gpu_samples

from dsmon.analysis import gpus
from dsmon.frames import records_frame


@pytest.fixture(scope="module")
def samples() -> pd.DataFrame:
    return gpus.prepare(records_frame("gpu", gpu_samples()))


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


def test_inventory_and_models(samples: pd.DataFrame) -> None:
    inv = gpus.inventory(samples)
    assert inv["gpu"].tolist() == ["n0/gpu0", "n0/gpu1", "n1/gpu0", "n1/gpu1"]
    assert inv["samples"].tolist() == [10, 10, 10, 10]
    assert inv["power_limit_w"].tolist() == [400.0, 400.0, 400.0, 700.0]
    assert gpus.models(samples) == {"NVIDIA A100-SXM4-80GB": 3, "NVIDIA H100 80GB HBM3": 1}


def test_series_is_per_gpu(samples: pd.DataFrame) -> None:
    s = gpus.series(samples, "util_gpu_pct", ["n0/gpu1"])
    assert s["gpu"].unique().tolist() == ["n0/gpu1"]
    assert len(s) == 10 and set(s["value"]) == {55.0}


def test_buckets_heatmap_and_imbalance(samples: pd.DataFrame) -> None:
    b = gpus.buckets(samples, n_buckets=5)
    assert len(b) == 4 * 5  # every GPU has a sample in each 2 s bucket
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


def test_throttle_share_and_decoding(samples: pd.DataFrame) -> None:
    share = gpus.throttle_share(samples).set_index("gpu")
    assert share.columns.tolist() == ["samples", "SW power cap"]
    assert share["SW power cap"].tolist() == [20.0, 0.0, 0.0, 0.0]
    assert gpus.decode_throttle(0x4 | 0x40) == ("SW power cap", "HW thermal slowdown")
    assert gpus.decode_throttle(None) == ()


def test_latest_sample_per_gpu(samples: pd.DataFrame) -> None:
    latest = gpus.latest(samples).set_index("gpu")
    assert latest.loc["n0/gpu0", "ts"] == pd.Timestamp("2026-11-29T14:11:10")
    assert latest.loc["n0/gpu0", "clock_events"] == "none"


def test_empty_frames() -> None:
    empty = gpus.prepare(records_frame("gpu", []))
    assert gpus.inventory(empty).empty
    assert gpus.buckets(empty).empty
    assert gpus.imbalance(gpus.buckets(empty), "util_gpu_pct").empty
    assert gpus.models(empty) == {}
