"""The Autotuner page and the autotuner's ds_config_optimal.json, on real autotuner output.

Runs (see each tests/data folder's README.md):

- ``gpt2_large``: the autotuner's summary.txt of a GPT2-large fast-mode tuning (16 V100).
- ``deberta``: the summary.txt of a full-mode deberta-v2-xxlarge tuning (``rbs``/``abs`` names).
- ``pr2711``: one experiment's real metrics.json, in the folder name the autotuner gives it.
- ``z0_tuned``: the real log of z0_default_loglevel (DeepSpeed's default log level: the log
  prints no config) with an autotuning_results/ folder beside it: gpt2_large's summary.txt and
  a ds_config_optimal.json. No public ds_config_optimal.json exists, so the real
  config_z2_offload/ds_config.json stands in for it (ZeRO 2 with CPU optimizer offload).
"""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from dashboard_support import DATA, app_at, figures, trace_names, values

from dsmon.ds_config.read import preferred_config
from dsmon.health.gather import inputs_from_store
from dsmon.load.files import import_paths
from dsmon.model.records import ConfigRecord
from dsmon.store.store import open_store


def tuned_run(root: Path) -> Path:
    """A run folder holding a log without config and the autotuner's results folder."""
    run = root / "z0_tuned"
    results = run / "autotuning_results"
    results.mkdir(parents=True)
    shutil.copy(DATA / "z0_default_loglevel" / "train.log", run / "train.log")
    shutil.copy(DATA / "autotune_gpt2_large" / "summary.txt", results / "summary.txt")
    shutil.copy(DATA / "config_z2_offload" / "ds_config.json", results / "ds_config_optimal.json")
    return run


@functools.cache
def autotune_store() -> str:
    """One store of these runs and the plain z2 run per test process (the tests only read it).

    Its folder goes when the process exits (it was left in the temp dir by every run).
    """
    root = Path(tempfile.mkdtemp(prefix="dsmon-autotune-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    path = root / "store.sqlite"
    with open_store(path) as store:
        import_paths(store, [DATA / "autotune_gpt2_large"], run="gpt2_large")
        import_paths(store, [DATA / "autotune_deberta_fullmode"], run="deberta")
        import_paths(store, [DATA / "autotune_pr2711"], run="pr2711")
        import_paths(store, [tuned_run(root)], run="z0_tuned")
        import_paths(store, [DATA / "z2"], run="z2")
    return str(path)


@pytest.fixture(autouse=True)
def store_url(monkeypatch: pytest.MonkeyPatch) -> str:
    url = autotune_store()
    monkeypatch.setenv("DSMON_STORE", url)
    return url


def test_summary_table_chart_and_best_from_the_name(store_url: str) -> None:
    at = app_at(store_url, "gpt2_large", "autotuner")
    assert not at.exception
    summary = at.dataframe[0].value.set_index("tuning_space")
    # | z1 | 5 | 87.3017 | z1_gas1_tmbspg3 |
    assert summary.loc["z1", "num_experiments"] == 5
    assert summary.loc["z1", "best_metric_val"] == 87.3017
    assert (summary.loc["z0", "zero_stage"], summary.loc["z0", "micro_batch"]) == (0, 2)
    spec = figures(at)["Throughput against micro-batch size per ZeRO stage"]
    # z3's best is 0 (nothing ran): not drawn; global repeats z1's best.
    assert trace_names(spec) == [
        "ZeRO 0 (best of tuning space)",
        "ZeRO 1 (best of tuning space)",
        "ZeRO 2 (best of tuning space)",
    ]
    assert [values(t["y"]) for t in spec["data"]] == [[59.0229], [87.3017], [77.8338]]
    assert [values(t["x"]) for t in spec["data"]] == [[2], [3], [3]]
    (code,) = at.code
    assert json.loads(code.value) == {
        "gradient_accumulation_steps": 1,
        "train_micro_batch_size_per_gpu": 3,
        "zero_optimization": {"stage": 1},
    }
    assert "Best experiment: z1_gas1_tmbspg3." in at.caption[1].value


def test_bucket_sizes_in_the_best_name(store_url: str) -> None:
    at = app_at(store_url, "deberta", "autotuner")
    assert not at.exception
    # global best: z1_rbs5.0e+07_abs1.0e+09_gas1_tmbspg11
    assert json.loads(at.code[0].value) == {
        "gradient_accumulation_steps": 1,
        "train_micro_batch_size_per_gpu": 11,
        "zero_optimization": {
            "stage": 1,
            "reduce_bucket_size": 50_000_000,
            "allgather_bucket_size": 1_000_000_000,
        },
    }
    summary = at.dataframe[0].value.set_index("tuning_space")
    assert summary.loc["z1_rbs_abs_tmbspg", "best_metric_val"] == 193.577


def test_experiment_metrics_table(store_url: str) -> None:
    at = app_at(store_url, "pr2711", "autotuner")
    assert not at.exception
    (exp,) = at.dataframe[1].value.to_dict("records")
    # "latency": 5259730.845451355 us, "throughput": 0.013308665796185445
    assert exp["name"] == "z1_gas1_tmbspg35"
    assert (exp["zero_stage"], exp["micro_batch"], exp["grad_accum"]) == (1, 35, 1)
    assert exp["latency_ms"] == pytest.approx(5259.7308, abs=1e-4)
    assert exp["throughput_samples_per_s"] == pytest.approx(0.0133, abs=1e-4)
    spec = figures(at)["Throughput against micro-batch size per ZeRO stage"]
    assert trace_names(spec) == ["ZeRO 1 (experiment)"]
    assert values(spec["data"][0]["x"]) == [35]
    # no summary: the best is the fastest experiment measured, its settings from its name
    assert json.loads(at.code[0].value)["train_micro_batch_size_per_gpu"] == 35


def test_optimal_config_is_shown_but_never_judged_as_the_runs(store_url: str) -> None:
    with open_store(store_url) as store:
        configs = store.records("z0_tuned", "config")
        inputs = inputs_from_store(store, "z0_tuned")
    (optimal,) = configs
    assert isinstance(optimal, ConfigRecord) and optimal.origin == "autotune_optimal"
    assert optimal.src.file == "autotuning_results/ds_config_optimal.json"
    # the run's log prints no config: the health rules have none, not the autotuner's advice
    assert preferred_config(configs) is None
    assert inputs.config is None and inputs.effective is None
    at = app_at(store_url, "z0_tuned", "autotuner")
    assert not at.exception
    shown = json.loads(at.code[0].value)
    assert shown["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": False}
    assert "From the autotuner's ds_config_optimal.json." in at.caption[1].value


def test_no_autotuner_results(store_url: str) -> None:
    at = app_at(store_url, "z2", "autotuner")
    assert not at.exception
    assert at.info[0].value.startswith("No autotuner results in this run.")
    assert not at.get("plotly_chart") and not at.code
