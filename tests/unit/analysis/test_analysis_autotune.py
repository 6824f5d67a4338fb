"""Autotuner tables from real summary.txt files (tests/data/autotune_*, see their README.md)."""

from __future__ import annotations

from dashboard_support import read_records

from dsmon.analysis import autotune


def test_older_name_layout_and_zero_bests() -> None:
    """The 2021 layout names experiments ``z1_tmbspg3_gas1`` (micro-batch before gas)."""
    recs = read_records("autotune_tutorial", "tutorial")
    summary = autotune.summary_table(recs)
    # | z2 | 2 | 148.154 | z2_tmbspg3_gas1 |
    row = summary.set_index("tuning_space").loc["z2"]
    assert (row["zero_stage"], row["micro_batch"], row["best_metric_val"]) == (2, 3, 148.154)
    points = autotune.throughput_points(autotune.experiments_table(recs), summary)
    assert points[["zero_stage", "micro_batch"]].values.tolist() == [[0, 2], [1, 3], [2, 3]]
    best = autotune.best_config(recs, summary, autotune.experiments_table(recs))
    assert best is not None and (best.name, best.origin) == ("z1_tmbspg3_gas1", "name")
    assert best.config == {
        "zero_optimization": {"stage": 1},
        "train_micro_batch_size_per_gpu": 3,
        "gradient_accumulation_steps": 1,
    }


def test_failed_spaces_are_not_drawn() -> None:
    """deberta's z0 and z3 spaces report a best of 0: nothing of theirs ran."""
    recs = read_records("autotune_deberta_fullmode", "deberta")
    summary = autotune.summary_table(recs)
    points = autotune.throughput_points(autotune.experiments_table(recs), summary)
    # z1 177.843 at tmbspg11, z1_rbs_abs_tmbspg 193.577 at tmbspg11, z2 154.002 at tmbspg14
    assert points[["zero_stage", "micro_batch", "throughput_samples_per_s"]].values.tolist() == [
        [1, 11, 177.843],
        [1, 11, 193.577],
        [2, 14, 154.002],
    ]
