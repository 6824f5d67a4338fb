"""The FLOPS page on real flops-profiler output.

From tests/data/z2/train.log ("Profile Summary at step 6"): fwd flops per GPU 471.76 M,
params per GPU 932.61 K, samples/second 158.56, FLOPS per GPU 28.05 GFLOPS. Achieved TFLOPS
per step = 3 x 471.76e6 / (fwd + bwd + step) of each of the 30 steps; their median is
0.02594 TFLOPS. The run's config has no bf16/fp16 section, so the fp32 peak applies; the GPU
samples built for the z2 run name an A100 (19.5 TFLOPS fp32 dense) first.
"""

from __future__ import annotations

import pytest
from dashboard_support import app_at, figures, shared_store, texts, values


@pytest.fixture(autouse=True)
def store_url(monkeypatch: pytest.MonkeyPatch) -> str:
    url = shared_store()
    monkeypatch.setenv("DSMON_STORE", url)
    return url


def test_profile_summary(store_url: str) -> None:
    at = app_at(store_url, "z2", "flops")
    assert not at.exception
    summary = at.dataframe[0].value.set_index("quantity")
    assert summary.loc["profiled at step", "value"] == 6
    assert summary.loc["fwd FLOPs per GPU", "value"] == pytest.approx(0.47176)
    assert summary.loc["params per GPU", "value"] == pytest.approx(0.93261)
    assert summary.loc["samples/second", "value"] == 158.56
    assert "backward FLOPs are estimated as 2 x forward" in at.info[0].value


def test_mfu_against_the_detected_gpu_and_dtype(store_url: str) -> None:
    at = app_at(store_url, "z2", "flops")
    assert at.selectbox[0].value == "A100" and at.selectbox[1].value == "fp32"
    mfu = at.dataframe[1].value.set_index("quantity")
    assert mfu.loc["achieved TFLOPS per GPU", "value"] == pytest.approx(0.02594, abs=1e-5)
    assert mfu.loc["dense fp32 peak TFLOPS (A100)", "value"] == 19.5
    assert mfu.loc["MFU %", "value"] == pytest.approx(0.133, abs=1e-3)
    assert "0.02805 TFLOPS per GPU" in texts(at)
    assert "Real figures vary with model architecture, batch size and sequence length." in texts(at)
    assert "tuning guide" not in texts(at)


def test_top_modules_from_the_aggregated_section(store_url: str) -> None:
    at = app_at(store_url, "z2", "flops")
    top = figures(at)["Top modules by params"]["data"][0]
    # detailed=false: the deepest printed depth (3) of the aggregated section, largest on top.
    assert top["y"] == ["LayerNorm", "MultiheadAttention", "Sequential"]


def test_module_tree_of_a_detailed_profile(store_url: str) -> None:
    at = app_at(store_url, "flops_detailed_stdout", "flops")
    assert not at.exception
    tree = figures(at)["Module tree, sized by params"]["data"][0]
    assert tree["type"] == "icicle"
    assert "blocks.0.attn" in tree["ids"]
    assert tree["parents"][tree["ids"].index("tok")] == "TinyGPT"
    # Leaves only: (0): Linear(66.05 K = 7.08% Params, ...) of blocks.0.mlp is the largest layer.
    top = figures(at)["Top modules by params"]["data"][0]
    assert top["y"][-1] == "blocks.0.mlp.0 (Linear)"
    assert values(top["x"])[-1] == 66050.0


def test_no_profile(store_url: str) -> None:
    at = app_at(store_url, "fp16_zero2", "flops")
    assert not at.exception
    assert at.info[0].value.startswith("No flops-profiler output in this run.")
