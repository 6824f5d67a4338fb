"""The pure file parsers: csv_monitor series, autotuner results, ds_config.json.

Data (see each folder's README.md): csv_tensorboard, flops_z0 and z2 are corpus runs; csv_resumed is
built from the corpus rows; autotune_* come from DeepSpeed / DeepSpeedExamples documentation and a
DeepSpeed pull request; config_files holds real configs from GitHub plus two damaged corpus copies.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from locations import DATA

from dsmon.model.records import AutotuneSummaryRecord
from dsmon.parse.side_files import (
    FileFormatError,
    parse_autotune_experiment,
    parse_autotune_summary,
    parse_csv_monitor,
    parse_ds_config,
)

CSV = DATA / "csv_tensorboard/csv_monitor/tiny_gpt_csv"


def text(path: Path) -> str:
    with path.open(encoding="utf-8", newline="") as f:  # keep the CRLF ends DeepSpeed wrote
        return f.read()


def test_csv_monitor_series_of_the_corpus() -> None:
    tags = {}
    for path in sorted(CSV.glob("*.csv")):
        recs, diag = parse_csv_monitor(text(path), "r", f"tiny_gpt_csv/{path.name}")
        assert (len(recs), dict(diag.unparsed), dict(diag.cut)) == (25, {}, {})
        tags[path.name] = recs[0].tag
        assert [p.samples for p in recs] == list(range(8, 201, 8))
    assert tags["Train_Samples_elapsed_time_ms_backward_allreduce.csv"] == (
        "Train/Samples/elapsed_time_ms_backward_allreduce"
    )
    assert tags["Train_Samples_loss_scale.csv"] == "Train/Samples/loss_scale"


def test_csv_monitor_values_and_positions() -> None:
    recs, _ = parse_csv_monitor(text(CSV / "Train_Samples_lr.csv"), "r", "Train_Samples_lr.csv")
    first, second = recs[:2]
    assert (first.src.line, first.samples, first.value, first.backend) == (2, 8, 0.0, "csv")
    assert (second.src.line, second.samples, second.value) == (3, 16, 3.0102999566398115e-05)
    assert (first.step, first.ts, first.src.file) == (None, None, "Train_Samples_lr.csv")
    loss, _ = parse_csv_monitor(
        text(CSV / "Train_Samples_train_loss.csv"), "r", "Train_Samples_train_loss.csv"
    )
    inf = loss[14]
    assert (inf.samples, inf.src.line) == (120, 16)
    assert inf.value is not None and math.isinf(inf.value)  # the injected overflow at step 15


def test_csv_monitor_tag_without_a_file_name() -> None:
    recs, _ = parse_csv_monitor(text(CSV / "Train_Samples_lr.csv"), "r")
    assert recs[0].tag == "Train/Samples/lr"


def test_csv_monitor_resumed_run_repeats_the_header() -> None:
    path = DATA / "csv_resumed/Train_Samples_lr.csv"
    recs, diag = parse_csv_monitor(text(path), "r", path.name)
    assert (len(recs), dict(diag.unparsed), diag.lines) == (27, {}, 29)
    samples = [p.samples for p in recs]
    assert samples[:13] == list(range(8, 105, 8))
    assert samples[13:] == list(range(96, 201, 8))  # after the second "step,lr" (line 15)
    assert [p.src.line for p in recs if p.samples == 96] == [13, 16]
    assert {p.tag for p in recs} == {"Train/Samples/lr"}


def test_csv_monitor_row_being_written_is_cut_not_stored() -> None:
    path = DATA / "csv_resumed/Train_Samples_train_loss.csv"
    recs, diag = parse_csv_monitor(text(path), "r", path.name)
    assert [p.samples for p in recs] == [8, 16, 24, 32, 40]
    assert dict(diag.cut) == {"csv_monitor": 1}
    assert diag.examples["csv_monitor"] == ["Train_Samples_train_loss.csv:7: 48,6.45"]


def test_csv_monitor_garbled_row_is_counted_and_skipped() -> None:
    path = DATA / "csv_resumed/Train_Samples_loss_scale.csv"
    recs, diag = parse_csv_monitor(text(path), "r", path.name)
    assert len(recs) == 23
    assert 72 not in {p.samples for p in recs}
    assert dict(diag.unparsed) == {"csv_monitor": 1}
    assert diag.examples["csv_monitor"] == ["Train_Samples_loss_scale.csv:10: 72,6580,65536536"]


def summary_rows(folder: str) -> list[AutotuneSummaryRecord]:
    recs, diag = parse_autotune_summary(text(DATA / folder / "summary.txt"), "r", "summary.txt")
    assert dict(diag.unparsed) == {}
    return recs


def test_autotune_summary_fast_mode() -> None:
    recs = summary_rows("autotune_gpt2_large")
    assert [
        (r.tuning_space, r.num_experiments, r.best_metric_val, r.best_exp_name) for r in recs
    ] == [
        ("z0", 4, 59.0229, "z0_gas1_tmbspg2"),
        ("z1", 5, 87.3017, "z1_gas1_tmbspg3"),
        ("z2", 3, 77.8338, "z2_gas1_tmbspg3"),
        ("z3", 1, 0.0, "z3_gas1_tmbspg3"),
        ("global", 13, 87.3017, "z1_gas1_tmbspg3"),
    ]
    assert [r.src.line for r in recs] == [3, 4, 5, 6, 7]
    assert {(r.tuning_duration_s, r.total_experiments) for r in recs} == {(27 * 60 + 33.988447, 13)}


def test_autotune_summary_full_mode_names() -> None:
    recs = summary_rows("autotune_deberta_fullmode")
    space = recs[2]
    assert (space.tuning_space, space.num_experiments, space.best_metric_val) == (
        "z1_rbs_abs_tmbspg",
        12,
        193.577,
    )
    assert space.best_exp_name == "z1_rbs5.0e+07_abs1.0e+09_gas1_tmbspg11"
    assert recs[-1].tuning_space == "global"
    assert (recs[0].tuning_duration_s, recs[0].total_experiments) == (3600 + 2 * 60 + 32.759424, 24)


def test_autotune_summary_old_header_and_no_total() -> None:
    recs = summary_rows("autotune_tutorial")
    assert [(r.tuning_space, r.num_experiments) for r in recs] == [
        ("z0", 2),
        ("z1", 2),
        ("z2", 2),
        ("global", 6),
    ]
    assert recs[1].best_metric_val == 187.298
    assert (recs[0].tuning_duration_s, recs[0].total_experiments) == (3.602291, None)


def test_autotune_summary_row_of_wrong_width() -> None:
    lines = text(DATA / "autotune_gpt2_large/summary.txt").splitlines()
    lines[4] = lines[4][: lines[4].rindex("|", 0, -1)] + "|"  # the z2 row loses its last column
    recs, diag = parse_autotune_summary("\n".join(lines), "r", "summary.txt")
    assert [r.tuning_space for r in recs] == ["z0", "z1", "z3", "global"]
    assert diag.examples["autotune_summary"][0].startswith("summary.txt:5: | z2 ")


METRICS = DATA / "autotune_pr2711/z1_gas1_tmbspg35/metrics.json"


def test_autotune_metrics_microseconds_become_ms() -> None:
    rec = parse_autotune_experiment(
        "z1_gas1_tmbspg35", text(METRICS), "r", "z1_gas1_tmbspg35/metrics.json"
    )
    assert rec.name == "z1_gas1_tmbspg35"
    assert rec.fwd_ms == 1314.1558837890625  # "forward": 1314155.8837890625 (pre-v0.10.1 name)
    assert rec.bwd_ms == 3941.037841796875
    assert rec.step_ms == 4.5371198654174805
    assert rec.latency_ms == 5259.730845451355
    assert rec.flops_per_s_per_gpu == 70800994.509407
    assert rec.throughput_samples_per_s == 0.013308665796185445
    assert (rec.num_gpus, rec.num_nodes, rec.ds_config) == (None, None, None)
    assert rec.src.file == "z1_gas1_tmbspg35/metrics.json"


def test_autotune_experiment_takes_its_ds_config() -> None:
    cfg = text(DATA / "z2/ds_config.json")  # any real ds_config.json stands in for the experiment's
    rec = parse_autotune_experiment(
        "z1_gas1_tmbspg35", text(METRICS), "r", None, ds_config_text=cfg
    )
    assert rec.ds_config is not None
    assert rec.ds_config["zero_optimization"] == {"stage": 2}


def test_autotune_metrics_cut_file_names_file_and_line() -> None:
    cut = text(METRICS)[:60]
    with pytest.raises(FileFormatError, match=r"^m/metrics.json:3: not JSON"):
        parse_autotune_experiment("m", cut, "r", "m/metrics.json")


def test_ds_config_from_disk() -> None:
    rec = parse_ds_config(text(DATA / "flops_z0/ds_config.json"), "r", "ds_config.json")
    assert (rec.origin, rec.src.file, rec.src.line) == ("file", "ds_config.json", None)
    assert rec.config["optimizer"] == {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}}
    assert rec.config["flops_profiler"]["top_modules"] == 3
    assert list(rec.config)[:2] == ["train_batch_size", "train_micro_batch_size_per_gpu"]


def test_ds_config_hjson_that_deepspeed_accepts() -> None:
    rec = parse_ds_config(text(DATA / "config_files/naifu_issue36_ds_config.json"), "r", "c.json")
    assert rec.config["train_batch_size"] == 8  # no comma after it: HJSON, not JSON
    assert rec.config["zero_optimization"]["allgather_bucket_size"] == 1000000000
    assert rec.config["bf16"] == {"enabled": True}
    rec = parse_ds_config(
        text(DATA / "config_files/autotuning_readme_ds_config.json"), "r", "c.json"
    )
    assert (
        rec.config["autotuning"]["arg_mappings"]["gradient_accumulation_steps"]
        == "--gradient_accumulation_steps"
    )


def test_ds_config_duplicate_key_names_file_and_key() -> None:
    path = DATA / "config_files/z0_duplicate_key_ds_config.json"
    with pytest.raises(FileFormatError) as err:
        parse_ds_config(text(path), "r", path.name)
    assert str(err.value) == (
        "z0_duplicate_key_ds_config.json:10: field 'train_batch_size': duplicate key (DeepSpeed rejects it)"
    )
    assert (err.value.file, err.value.line, err.value.field) == (path.name, 10, "train_batch_size")


def test_ds_config_cut_file() -> None:
    path = DATA / "config_files/z0_cut_ds_config.json"
    with pytest.raises(FileFormatError, match=r"^z0_cut_ds_config.json:8: not JSON"):
        parse_ds_config(text(path), "r", path.name)
