"""Training curves from real output: csv_monitor files, step= lines, Megatron iteration lines.

Values read by hand from the files:
- tests/data/csv_tensorboard (train_batch_size 8): csv_monitor ``Train_Samples_train_loss.csv``
  rows ``8,6.342278003692627`` and ``16,6.468693256378174`` (steps 1 and 2); line 215
  ``step=5, ... lr=[6.989700043360187e-05]``; line 216 ``CurrSamplesPerSec=136.36454541836014``.
- tests/data/health_megatron_h100: iteration 43 ``elapsed time per iteration (ms): 5444.9 |
  throughput per GPU (TFLOP/s/GPU): 239.8 | learning rate: 8.600000E-06 | ... | lm loss:
  1.825991E+00``.
- tests/data/fp16_zero2 line 216: ``Attempted loss scale: 65536, reducing to 32768`` (step 9).
- tests/data/memory_breakdown line 23: ``MA 0.25 GB`` (step 1).
- tests/data/warmup_lr: no timer lines; ``CurrSamplesPerSec=158.99168948460644`` at step 4.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from dashboard_support import app_at, figures, texts, values
from shared_fixtures import DATA

from dsmon.analysis import training as tr
from dsmon.analysis.downsample import downsample
from dsmon.analysis.training import latest, train_batch_size, training_series
from dsmon.load.files import import_paths
from dsmon.model.frames import records_frame
from dsmon.model.records import ConfigRecord, Record
from dsmon.store.store import open_store

KINDS = ("step", "iteration", "monitor", "loss_scale", "memory", "throughput")


def frames_of(folder: str) -> tuple[dict[str, object], list[Record]]:
    from dsmon.load.files import read_found
    from dsmon.load.kinds import discover
    from dsmon.parse.base import Diagnostics

    recs = [
        r for found in discover(DATA / folder) for r in read_found(found, folder, Diagnostics())
    ]
    return {k: records_frame(k, [r for r in recs if k == r.KIND]) for k in KINDS}, recs


def point(series: object, metric: str, source_part: str, step: int) -> float:
    s = series  # type: ignore[assignment]
    rows = s[(s["metric"] == metric) & s["source"].str.contains(source_part) & (s["step"] == step)]
    assert len(rows) == 1, (metric, source_part, step, rows)
    return float(rows["value"].iloc[0])


def test_csv_monitor_step_lines_and_throughput() -> None:
    frames, recs = frames_of("csv_tensorboard")
    configs = [r for r in recs if isinstance(r, ConfigRecord)]
    tbs = train_batch_size(configs[0].config)
    assert tbs == 8
    s = training_series(frames, tbs)  # type: ignore[arg-type]
    assert point(s, "loss", "train_loss", 1) == pytest.approx(6.342278003692627)
    assert point(s, "loss", "train_loss", 2) == pytest.approx(6.468693256378174)
    assert point(s, "learning rate", "step=", 5) == pytest.approx(6.989700043360187e-05)
    assert point(s, "samples/s", "ThroughputTimer", 5) == pytest.approx(136.36454541836014)
    # without the batch size, samples cannot be placed on the step axis: no monitor points
    assert not training_series(frames).query("source.str.startswith('monitor')").shape[0]  # type: ignore[arg-type]


def test_megatron_iteration_lines_give_the_curves_without_engine_timers() -> None:
    frames, _ = frames_of("health_megatron_h100")
    s = training_series(frames)  # type: ignore[arg-type]
    assert point(s, "loss", "iteration", 43) == pytest.approx(1.825991)
    assert point(s, "learning rate", "iteration", 43) == pytest.approx(8.6e-06)
    assert point(s, "TFLOPS per GPU", "iteration", 43) == pytest.approx(239.8)
    assert point(s, "iteration time", "iteration", 43) == pytest.approx(5444.9)
    last = latest(s)
    assert last[last["metric"] == "TFLOPS per GPU"]["value"].tolist() == pytest.approx([228.4])


def test_loss_scale_and_memory() -> None:
    s = training_series(frames_of("fp16_zero2")[0])  # type: ignore[arg-type]
    assert point(s, "loss scale", "loss-scale", 9) == 32768.0
    m = training_series(frames_of("memory_breakdown")[0])  # type: ignore[arg-type]
    assert m[(m["metric"] == "memory allocated") & (m["step"] == 1)]["value"].max() >= 0.25


@pytest.fixture
def store(tmp_path, monkeypatch: pytest.MonkeyPatch) -> str:  # type: ignore[no-untyped-def]
    path = tmp_path / "s.sqlite"
    with open_store(path) as s:
        for run in ("csv_tensorboard", "warmup_lr", "health_megatron_h100"):
            import_paths(s, [DATA / run], run=run)
    monkeypatch.setenv("DSMON_STORE", str(path))
    return str(path)


def test_training_page_draws_every_source(store: str) -> None:
    at = app_at(store, "csv_tensorboard", "training")
    assert not at.exception
    (spec,) = figures(at).values()
    names = [t["name"] for t in spec["data"]]
    assert "loss · monitor Train/Samples/train_loss" in names
    assert "learning rate · step= line" in names
    loss = next(t for t in spec["data"] if t["name"] == "loss · monitor Train/Samples/train_loss")
    assert values(loss["y"])[:2] == pytest.approx([6.342278003692627, 6.468693256378174])


def test_steps_page_without_timers_shows_the_speed_it_has(store: str) -> None:
    at = app_at(store, "warmup_lr", "steps")
    assert not at.exception
    assert "wall_clock_breakdown" in texts(at)
    (spec,) = figures(at).values()
    tp = next(t for t in spec["data"] if t["name"] == "samples/s · ThroughputTimer")
    assert 158.99168948460644 in values(tp["y"])
    at = app_at(store, "health_megatron_h100", "steps")
    (spec,) = figures(at).values()
    assert {t["name"] for t in spec["data"]} >= {"iteration time · iteration line"}


def test_megatron_deepspeed_tokens_per_gpu_per_second() -> None:
    """tests/data/megatron_alcf_tgs line 2: iteration 199 ``... (tgs): 1146.733``."""
    s = training_series(frames_of("megatron_alcf_tgs")[0])  # type: ignore[arg-type]
    assert point(s, "tokens/s per GPU", "tgs", 199) == pytest.approx(1146.733)


@pytest.mark.parametrize(
    "folder", ["csv_tensorboard", "fp16_zero2", "memory_breakdown", "health_megatron_h100"]
)
def test_chart_points_and_latest_values_per_kind_equal_those_of_the_joined_series(
    folder: str,
) -> None:
    """The Training page groups each kind's points apart; the answer is the joined one's."""
    frames, _ = frames_of(folder)
    parts = [tr.kind_series(k, frames[k], 32) for k in tr.SERIES_KINDS]  # type: ignore[arg-type]
    whole = tr.joined(parts)
    assert not whole.empty
    shown, newest = tr.traces_and_latest(parts)
    pd.testing.assert_frame_equal(newest, latest(whole))
    expected = downsample(whole, "step", ["value"], n_out=1000, by=tr.TRACE_KEYS)
    pd.testing.assert_frame_equal(shown, expected.reset_index(drop=True))


def test_steps_page_draws_what_only_the_probe_saw(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """tests/data/probe_fp16_default: no timer, step= or loss-scale line reached the log (see
    its README); the probe's step times, loss scale and skipped steps are drawn instead."""
    path = tmp_path / "s.sqlite"
    with open_store(path) as s:
        import_paths(s, [DATA / "probe_fp16_default"], run="fp16")
        import_paths(s, [DATA / "probe_accelerate" / "default"], run="fp32")
    monkeypatch.setenv("DSMON_STORE", str(path))
    at = app_at(str(path), "fp16", "steps")
    assert not at.exception
    traces = {
        t["name"]: values(t["y"])
        for c in at.get("plotly_chart")
        for t in json.loads(c.proto.spec)["data"]  # type: ignore[attr-defined]
    }
    probe = "dsmon run's probe"
    assert f"iteration time · {probe}" in traces
    assert set(traces[f"loss scale · {probe}"]) == {65536.0, 32768.0, 16384.0, 8192.0}
    assert max(traces[f"skipped steps · {probe}"]) == 4
    # an fp32 run's scale never moves and nothing is skipped: no overflow chart
    at = app_at(str(path), "fp32", "steps")
    names = [
        t["name"]
        for c in at.get("plotly_chart")
        for t in json.loads(c.proto.spec)["data"]  # type: ignore[attr-defined]
    ]
    assert f"iteration time · {probe}" in names
    assert not [n for n in names if n.startswith(("loss scale", "skipped steps"))]


def test_training_page_draws_the_probes_loss_scale(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The same fp16 run's overflows, at DeepSpeed's default log level, on the Training page."""
    path = tmp_path / "s.sqlite"
    with open_store(path) as s:
        import_paths(s, [DATA / "probe_fp16_default"], run="fp16")
        import_paths(s, [DATA / "probe_accelerate" / "default"], run="fp32")
    monkeypatch.setenv("DSMON_STORE", str(path))
    probe = "dsmon run's probe"
    for run, scales in (("fp16", {65536.0, 32768.0, 16384.0, 8192.0}), ("fp32", None)):
        at = app_at(str(path), run, "training")
        assert not at.exception
        traces = {
            t["name"]: values(t["y"])
            for c in at.get("plotly_chart")
            for t in json.loads(c.proto.spec)["data"]  # type: ignore[attr-defined]
        }
        if scales is None:  # fp32: the scale never moves, nothing skipped: nothing to draw
            assert not [n for n in traces if probe in n]
            continue
        assert set(traces[f"loss scale · {probe}"]) == scales
        assert max(traces[f"skipped steps · {probe}"]) == 4
