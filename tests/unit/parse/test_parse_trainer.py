"""Hugging Face Trainer's log dicts, from real runs: the loss curve of a Trainer-driven job.

The runs (tests/data/hf_trainer_*, README.md in each) trained on 4,000 samples, 4 per device
on 2 ranks: 500 optimizer steps per epoch. The dicts print ``epoch`` to two decimals, so
``epoch x 500`` is each dict's true step (logging every 5 steps): read independently of the
progress bars and timer lines the parser numbers them by.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from dashboard_support import app_at, figures, values
from field_logs import field_path
from shared_fixtures import DATA

from dsmon.analysis import training as tr
from dsmon.load.files import import_paths, read_found
from dsmon.load.kinds import discover
from dsmon.model.frames import records_frame
from dsmon.model.records import IterationRecord, Record
from dsmon.parse.base import Diagnostics
from dsmon.parse.log import LogParser
from dsmon.store.store import open_store

STEPS_PER_EPOCH = 500
_DICT = re.compile(r"\{'(loss|eval_loss|train_runtime)'.*'epoch': '([\d.]+)'\}")


def records(path: Path) -> list[Record]:
    (found,) = discover(path)
    return list(read_found(found, "hf", Diagnostics()))


def dicts(path: Path) -> list[tuple[str, int, float | None]]:
    """(first key, true step, first value) of every Trainer dict in the file, in order."""
    out = []
    for m in _DICT.finditer(path.read_text()):
        first = re.search(r"'[a-z_]+': '([\d.]+)'", m.group(0))
        assert first is not None
        out.append((m.group(1), round(float(m.group(2)) * STEPS_PER_EPOCH), float(first.group(1))))
    return out


def trainer_records(recs: list[Record]) -> list[IterationRecord]:
    return [r for r in recs if isinstance(r, IterationRecord) and r.fmt.startswith("trainer")]


@pytest.mark.parametrize("folder", ["hf_trainer_tqdm", "hf_trainer_timers"])
def test_every_dict_is_a_record_at_its_true_step(folder: str) -> None:
    """tqdm: the bar drawn after the dict (the one before lags: ten redraws a second at most);
    no bar (``disable_tqdm``): the engine's global timer line just before the dict."""
    path = DATA / folder / "train.log"
    got = trainer_records(records(path))
    want = dicts(path)
    assert len(got) == len(want) >= 8
    fmts = {"loss": "trainer", "eval_loss": "trainer_eval", "train_runtime": "trainer_summary"}
    for rec, (key, step, value) in zip(got, want, strict=True):
        assert rec.fmt == fmts[key]
        assert rec.step == step, (rec.src.line, key)
        if key == "loss":
            assert rec.loss == value and rec.losses == {"loss": value}
            assert rec.lr == 0.0005 and rec.grad_norm is not None
        if key == "eval_loss":
            assert rec.loss == value and rec.losses == {"eval_loss": value}
        if key == "train_runtime":
            assert rec.loss is None and set(rec.losses) == {"train_loss"}


def test_live_parser_gives_the_same_records() -> None:
    """The collector's parser (``live``) holds a dict until the next line, like import does."""
    path = DATA / "hf_trainer_tqdm" / "train.log"
    offline = trainer_records(records(path))
    parser = LogParser("hf", "train.log", live=True, from_start=True)
    live: list[Record] = []
    for raw in path.read_bytes().decode().split("\n"):  # tqdm's \r stays inside a line
        live.extend(parser.feed(raw))
    live.extend(parser.finish())
    assert [(r.src.line, r.step, r.loss) for r in trainer_records(live)] == [
        (r.src.line, r.step, r.loss) for r in offline
    ]


def test_transformers_4_float_dicts_glued_to_the_bar() -> None:
    """Field excerpt 25 (2023, transformers 4): floats, not strings; the bar says 380/2724."""
    (rec,) = trainer_records(records(field_path(25)))
    assert (rec.step, rec.total_iterations, rec.loss) == (380, 2724, 2.0491)
    assert rec.lr == pytest.approx(0.0001961913563176343)


def test_a_bar_drawn_before_an_earlier_dict_numbers_no_later_one() -> None:
    """transformers#14531 (v0.5): dicts of epochs 0.08 and 0.1 follow the 1999/24128 redraw of
    the 0.06 one with no bar between: their steps are unknown, not 1999 again."""
    recs = trainer_records(records(DATA / "progress_old_versions" / "transformers14531_v05.log"))
    assert [r.step for r in recs] == [None, None, 1999, None, None]


def test_dicts_of_a_script_are_not_trainer_logs() -> None:
    """Field excerpt 04: six ranks' end-of-training dicts, and the config dump's dicts."""
    recs = records(field_path(4))
    summaries = trainer_records(recs)
    assert [r.src.line for r in summaries] == list(range(11, 17))
    assert all(r.fmt == "trainer_summary" and r.step is None for r in summaries)
    lines = [r.src.line for r in recs]
    assert lines == sorted(lines)  # the last dict, released at the end, keeps its place


def test_training_page_draws_trainer_loss_and_eval_loss(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "s.sqlite"
    with open_store(path) as s:
        import_paths(s, [DATA / "hf_trainer_tqdm"], run="hf")
    monkeypatch.setenv("DSMON_STORE", str(path))
    at = app_at(str(path), "hf", "training")
    assert not at.exception
    (spec,) = figures(at).values()
    traces = {t["name"]: t for t in spec["data"]}
    assert {"loss · Trainer log", "loss · Trainer evaluation", "grad norm · Trainer log"} <= set(
        traces
    )
    want = [(s, v) for k, s, v in dicts(DATA / "hf_trainer_tqdm" / "train.log") if k == "eval_loss"]
    ev = traces["loss · Trainer evaluation"]
    assert list(zip(values(ev["x"]), values(ev["y"]), strict=True)) == want


def test_series_keeps_megatron_and_trainer_apart() -> None:
    recs = records(DATA / "hf_trainer_tqdm" / "train.log")
    frame = records_frame("iteration", [r for r in recs if r.KIND == "iteration"])
    s = tr.training_series({"iteration": frame})
    assert set(s["source"].astype(str)) == {"Trainer log", "Trainer evaluation"}
    assert not (s["source"].astype(str) == "iteration line").any()
    assert pd.api.types.is_float_dtype(s["value"])


def test_transformers_4_bare_nan_and_inf_keep_the_dict() -> None:
    """hf_trainer_v4_diverged (transformers 4.46.3): ``'grad_norm': inf`` and
    ``'eval_loss': nan`` are not Python literals; the dicts were lost whole."""
    path = DATA / "hf_trainer_v4_diverged" / "train.log"
    recs = trainer_records(records(path))
    want = [(k, s) for k, s, _ in dicts_v4(path)]
    assert [(r.fmt, r.step) for r in recs] == [
        ({"loss": "trainer", "eval_loss": "trainer_eval", "train_runtime": "trainer_summary"}[k], s)
        for k, s in want
    ]
    train = [r for r in recs if r.fmt == "trainer"]
    assert [r.loss for r in train] == [5.6334] + [0.0] * 7
    assert all(r.grad_norm is None and r.nan_iterations == 1 for r in train)  # inf
    evals = [r for r in recs if r.fmt == "trainer_eval"]
    assert all(r.loss is None and r.losses == {} and r.nan_iterations == 1 for r in evals)
    assert recs[-1].nan_iterations == 0 and recs[-1].losses["train_loss"] > 0


def dicts_v4(path: Path) -> list[tuple[str, int, str]]:
    """(first key, true step, first value as printed) of transformers 4's number dicts."""
    found = re.finditer(
        r"\{'(loss|eval_loss|train_runtime)': ([^,]+),.*'epoch': ([\d.]+)\}", path.read_text()
    )
    return [(m.group(1), round(float(m.group(3)) * STEPS_PER_EPOCH), m.group(2)) for m in found]
