"""The GPUs page, on GPU samples built in dashboard_support (the corpus has no NVML output).

Four GPUs on two nodes, 10 one-second samples each: n0/gpu1 runs at 55 % kernel-active time,
the other three at 95 %; n1/gpu1 is an H100 among A100s; n0/gpu0 reports SW power cap in 2
of its 10 samples.
"""

from __future__ import annotations

import pytest
from dashboard_support import app_at, figures, shared_store, texts, trace_names, values


@pytest.fixture(autouse=True)
def store_url(monkeypatch: pytest.MonkeyPatch) -> str:
    url = shared_store()
    monkeypatch.setenv("DSMON_STORE", url)
    return url


def test_counts_models_and_honest_utilisation_label(store_url: str) -> None:
    at = app_at(store_url, "z2", "gpus")
    assert not at.exception
    shown = {m.label: m.value for m in at.metric}
    assert {k: shown.pop(k) for k in ("GPUs", "GPU models", "Nodes")} == {
        "GPUs": "4",
        "GPU models": "2",
        "Nodes": "2",
    }
    # the live tiles, over the newest sample of each GPU
    assert shown == {
        "newest sample": "14:11:10",
        "GPUs reporting": "4 / 4",
        "kernel-active, mean": "85 %",
        "power, all GPUs": "1.3 kW",
        "hottest GPU": "61 °C",
    }
    assert at.warning[0].value.startswith(
        "Mixed GPU models in this run: 3 x NVIDIA A100-SXM4-80GB, 1 x NVIDIA H100 80GB HBM3."
    )
    assert "**kernel-active time**" in texts(at)


def test_heatmap_and_imbalance(store_url: str) -> None:
    figs = figures(app_at(store_url, "z2", "gpus"))
    label = "Kernel-active time (NVML utilization.gpu, not SM occupancy) (%)"
    lines = figs[label]
    assert trace_names(lines) == ["n0/gpu0", "n0/gpu1", "n1/gpu0", "n1/gpu1"]
    assert set(values(lines["data"][1]["y"])) == {55.0}
    grid = figs[f"{label}: GPUs x time"]["data"][0]
    assert grid["y"] == ["n0/gpu0", "n0/gpu1", "n1/gpu0", "n1/gpu1"]
    imb = figs["Imbalance across GPUs: Kernel-active time"]
    by_name = {t["name"]: values(t["y"]) for t in imb["data"]}
    assert set(by_name["max"]) == {95.0} and set(by_name["min"]) == {55.0}


def test_throttle_share_and_latest_sample(store_url: str) -> None:
    at = app_at(store_url, "z2", "gpus")
    throttle = figures(at)["Clock-event (throttle) reasons: % of samples"]
    assert trace_names(throttle) == ["SW power cap"]
    assert values(throttle["data"][0]["y"]) == [20.0, 0.0, 0.0, 0.0]
    latest = at.dataframe[0].value.set_index("gpu")
    assert latest.loc["n1/gpu1", "power_w"] == 500.0
    assert latest.loc["n0/gpu1", "util_gpu_pct"] == 55.0


def test_no_gpu_samples(store_url: str) -> None:
    at = app_at(store_url, "comms_logger", "gpus")
    assert not at.exception
    assert at.info[0].value.startswith("No GPU samples in this run.")
    assert not at.get("plotly_chart")
