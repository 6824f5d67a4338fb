"""Compared series and config differences from real runs (tests/data, DeepSpeed 0.19.8 CPU)."""

from __future__ import annotations

import pandas as pd
import pytest
from dashboard_support import read_records

from dsmon.analysis import compare
from dsmon.model.frames import records_frame


def frames_of(folder: str) -> dict[str, pd.DataFrame]:
    by_kind: dict[str, list] = {}
    for rec in read_records(folder, folder):
        by_kind.setdefault(rec.KIND, []).append(rec)
    return {k: records_frame(k, v) for k, v in by_kind.items()}


def test_loss_from_csv_monitor_on_the_step_axis() -> None:
    """Train_Samples_train_loss.csv: ``8,6.342278003692627`` then ``16,6.468693256378174``;
    train_batch_size 8 puts them at steps 1 and 2."""
    series = compare.run_series(frames_of("csv_tensorboard"), train_batch_size=8)
    loss = series[series["metric"] == "loss"].set_index("step")["value"]
    assert loss.loc[1.0] == pytest.approx(6.342278003692627)
    assert loss.loc[2.0] == pytest.approx(6.468693256378174)
    assert set(series["metric"]) == {"step time", "samples/s", "exposed comm", "loss"}


def test_a_run_without_config_is_left_out_of_the_differences() -> None:
    diff = compare.config_diff(
        {"a": {"zero_optimization": {"stage": 2}}, "b": {"zero_optimization": {}}, "c": None}
    )
    assert diff.to_dict("records") == [
        {"key": "zero_optimization", "a": "(not set)", "b": "{}"},
        {"key": "zero_optimization.stage", "a": "2", "b": "(not set)"},
    ]


def test_zero_written_as_true_is_stage_1_like_the_section() -> None:
    """DeepSpeed reads ``"zero_optimization": true`` as stage 1: not a difference."""
    diff = compare.config_diff(
        {"a": {"zero_optimization": True}, "b": {"zero_optimization": {"stage": 1}}}
    )
    assert diff.empty
    other = compare.config_diff(
        {"a": {"zero_optimization": True}, "b": {"zero_optimization": {"stage": 2}}}
    )
    assert other.to_dict("records") == [{"key": "zero_optimization.stage", "a": "1", "b": "2"}]
