"""Finding and reading saved DeepSpeed output: real run folders copied from the corpus.

tests/data/z2, csv_tensorboard and flops_detailed_file are corpus runs copied whole (see the
README.md in each). Rank logs and damaged logs are built in tmp_path from the real z2 log.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from shared_fixtures import DATA, Z2, read_log

from dsmon.load.files import import_paths, plan
from dsmon.load.files import (
    read_log as read_log_stream,
)
from dsmon.load.kinds import (
    AUTOTUNE_EXP,
    AUTOTUNE_SUMMARY,
    CSV_MONITOR,
    DS_CONFIG,
    LOG,
    PROFILE,
    InputError,
    discover,
)
from dsmon.model.records import (
    AutotuneExperimentRecord,
    AutotuneSummaryRecord,
    FlopsProfileRecord,
    MonitorPointRecord,
    Record,
    TimerRecord,
)
from dsmon.parse.log import LogParser
from dsmon.parse.run_files import run_name
from dsmon.store.store import Store


def kinds(folder: Path) -> list[tuple[str, str, int | None]]:
    return [(f.label, f.kind, f.rank) for f in discover(folder)]


def test_discover_z2_folder() -> None:
    assert kinds(Z2) == [("ds_config.json", DS_CONFIG, None), ("train.log", LOG, None)]


def test_discover_csv_monitor_folder() -> None:
    found = kinds(DATA / "csv_tensorboard")
    csvs = [label for label, kind, _ in found if kind == CSV_MONITOR]
    assert len(csvs) == 8
    assert "csv_monitor/tiny_gpt_csv/Train_Samples_lr.csv" in csvs
    others = [(label, kind) for label, kind, _ in found if kind != CSV_MONITOR]
    # NOTES.md, README.md and the TensorBoard event file are not read
    assert others == [("ds_config.json", DS_CONFIG), ("train.log", LOG)]


def test_discover_profiler_output_file() -> None:
    assert kinds(DATA / "flops_detailed_file") == [
        ("ds_config.json", DS_CONFIG, None),
        ("flops_profile.txt", PROFILE, None),
        ("train.log", LOG, None),
    ]


def test_a_config_under_another_name_is_known_by_its_keys(tmp_path: Path) -> None:
    """``ds_z3.json`` (tests/data/probe_hf_zero3_auto), as repos name theirs ``zero3.json``;
    the Trainer's own ``trainer_state.json`` and a model's ``config.json`` are not configs."""
    assert ("ds_z3.json", DS_CONFIG, None) in kinds(DATA / "probe_hf_zero3_auto")
    shutil.copy(DATA / "probe_hf_zero3_auto" / "ds_z3.json", tmp_path / "zero3.json")
    (found,) = discover(tmp_path / "zero3.json")  # named on the command line
    assert found.kind == DS_CONFIG
    for name in ("config.json", "trainer_state.json"):
        shutil.copy(DATA / "hf_output_files" / name, tmp_path / name)
    assert kinds(tmp_path) == [("zero3.json", DS_CONFIG, None)]


def test_rank_logs_and_foreign_text(tmp_path: Path) -> None:
    run = tmp_path / "myrun"
    (run / "rank_logs").mkdir(parents=True)
    shutil.copy(Z2 / "train.log", run / "rank_logs" / "20261129141059_rank1.log")
    (run / "notes.txt").write_text("remember to buy milk\n")
    (run / ".hidden").mkdir()
    shutil.copy(Z2 / "train.log", run / ".hidden" / "train.log")
    assert kinds(run) == [("rank_logs/20261129141059_rank1.log", LOG, 1)]
    # a file named explicitly is read as a log whatever it looks like
    assert [(f.label, f.kind) for f in discover(run / "notes.txt")] == [("notes.txt", LOG)]
    assert run_name(run) == "myrun"
    assert run_name(run / "notes.txt") == "myrun"


def test_rank_log_records_carry_the_files_rank(tmp_path: Path) -> None:
    path = tmp_path / "x_rank1.log"
    shutil.copy(Z2 / "train.log", path)
    recs = read_log(path, "r")
    timers = [r for r in recs if isinstance(r, TimerRecord)]
    assert len(timers) == 90
    # timer lines say [Rank 0] themselves; lines with no rank of their own get the file's
    assert {r.src.rank for r in timers} == {0}
    assert {r.src.rank for r in recs} == {0, 1}


def _line_offsets(data: bytes) -> list[int]:
    offsets, pos = [], 0
    for raw in data.splitlines(keepends=True):
        offsets.append(pos)
        pos += len(raw)
    return offsets


def test_records_carry_byte_offsets_of_their_lines(z2_log_records: list[Record]) -> None:
    data = (Z2 / "train.log").read_bytes()
    offsets = _line_offsets(data)
    assert z2_log_records
    for rec in z2_log_records:
        assert rec.src.line is not None and rec.src.offset is not None
        assert rec.src.offset == offsets[rec.src.line - 1]
    first = next(r for r in z2_log_records if isinstance(r, TimerRecord))
    assert data[first.src.offset :].startswith(b"[Rank 0] time (ms) | optimizer_allgather: 11.76")


def test_non_utf8_bytes_are_replaced_not_fatal(tmp_path: Path) -> None:
    data = (Z2 / "train.log").read_bytes()
    bad = data.replace(b"[train.py] step 3 loss", b"[train.py] \xff\xfe\xc3 step 3 loss", 1)
    assert bad != data
    parser = LogParser("r", "train.log")
    recs = list(read_log_stream(io.BytesIO(bad), parser))
    timers = [r for r in recs if isinstance(r, TimerRecord)]
    assert len(timers) == 90
    # the 4 extra bytes (3 invalid + a space) shift every later line's offset by 4
    last = timers[-1]
    assert last.src.offset == _line_offsets(bad)[last.src.line - 1]
    assert last.src.offset == _line_offsets(data)[last.src.line - 1] + 4


def test_import_is_idempotent(store: Store) -> None:
    (first,) = import_paths(store, [Z2])
    assert first.run == "z2"
    assert first.records > 90
    assert first.inserted == first.records
    (again,) = import_paths(store, [Z2])
    assert (again.records, again.inserted) == (first.records, 0)
    (info,) = store.runs()
    assert info.n_records == first.records
    assert info.kinds["timer"] == 90
    assert info.kinds["config"] >= 1


def test_import_csv_monitor_series(store: Store) -> None:
    (res,) = import_paths(store, [DATA / "csv_tensorboard"], run="csv")
    points = [r for r in store.records("csv", "monitor") if isinstance(r, MonitorPointRecord)]
    assert len(points) == 200  # 8 files x 25 rows
    lr = [p for p in points if p.tag == "Train/Samples/lr"]
    # Train_Samples_lr.csv: "8,0.0" then "16,3.0102999566398115e-05"
    assert (lr[0].samples, lr[0].value) == (8, 0.0)
    assert (lr[1].samples, lr[1].value) == (16, 3.0102999566398115e-05)
    assert res.inserted == res.records


def test_import_with_run_name_and_progress(store: Store) -> None:
    seen: list[int] = []
    totals: list[int] = []

    def factory(total: int) -> object:
        totals.append(total)
        return seen.append

    import_paths(store, [Z2 / "train.log"], run="named", progress_factory=factory)  # type: ignore[arg-type]
    size = (Z2 / "train.log").stat().st_size
    assert totals == [size]
    assert sum(seen) == size
    assert [r.name for r in store.runs()] == ["named"]


def test_missing_path_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"cannot read .*nope: No such file or directory"):
        plan([tmp_path / "nope"])


def test_autotuner_results_folder(tmp_path: Path, store: Store) -> None:
    """A results folder assembled from real autotuner output (see the README.md of each source).

    tests/data/autotune_gpt2_large/summary.txt is the summary, autotune_pr2711's metrics.json one
    experiment; the experiment folder also gets a ds_config.json and a stdout.log (the real z2 run)
    as the autotuner writes them, which belong to the experiment, not to the imported run.
    """
    results = tmp_path / "autotuning_results"
    exp = results / "z1_gas1_tmbspg35"
    exp.mkdir(parents=True)
    shutil.copy(DATA / "autotune_gpt2_large" / "summary.txt", results / "summary.txt")
    shutil.copy(
        DATA / "autotune_pr2711" / "z1_gas1_tmbspg35" / "metrics.json", exp / "metrics.json"
    )
    shutil.copy(Z2 / "ds_config.json", exp / "ds_config.json")
    shutil.copy(Z2 / "train.log", exp / "stdout.log")
    assert kinds(results) == [
        ("summary.txt", AUTOTUNE_SUMMARY, None),
        ("z1_gas1_tmbspg35/metrics.json", AUTOTUNE_EXP, None),
    ]
    (res,) = import_paths(store, [results])
    assert res.run == "autotuning_results"
    rows = [
        r
        for r in store.records(res.run, "autotune_summary")
        if isinstance(r, AutotuneSummaryRecord)
    ]
    # | z1 | 5 | 87.3017 | z1_gas1_tmbspg3 |  ...  | global | 13 | 87.3017 | z1_gas1_tmbspg3 |
    assert [r.tuning_space for r in rows] == ["z0", "z1", "z2", "z3", "global"]
    assert (rows[1].num_experiments, rows[1].best_metric_val, rows[1].best_exp_name) == (
        5,
        87.3017,
        "z1_gas1_tmbspg3",
    )
    (e,) = [
        r for r in store.records(res.run, "autotune_exp") if isinstance(r, AutotuneExperimentRecord)
    ]
    # "forward": 1314155.8837890625 (µs) -> ms
    assert (e.name, e.fwd_ms) == ("z1_gas1_tmbspg35", pytest.approx(1314.1558837890625))
    assert e.ds_config is not None and e.ds_config["zero_optimization"] == {"stage": 2}
    assert store.records(res.run, "timer") == []
    assert store.records(res.run, "config") == []


def test_bad_ds_config_is_counted_not_fatal(tmp_path: Path, store: Store) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(Z2 / "train.log", run / "train.log")
    text = (Z2 / "ds_config.json").read_text()
    (run / "ds_config.json").write_text(text[: len(text) // 2])  # cut while being written
    (res,) = import_paths(store, [run])
    assert res.diag.unparsed["ds_config"] == 1
    assert res.diag.examples["ds_config"][0].startswith("ds_config.json: ds_config.json:")
    assert len(store.records("run", "timer")) == 90


def test_import_profiler_output_file(store: Store) -> None:
    (res,) = import_paths(store, [DATA / "flops_detailed_file"])
    profiles = [
        r for r in store.records(res.run, "flops_profile") if isinstance(r, FlopsProfileRecord)
    ]
    from_file = [p for p in profiles if p.src.file == "flops_profile.txt"]
    # flops_profile.txt: "Profile Summary at step 6:", "fwd latency: 11.62 ms", "samples/second: 148.17"
    assert len(from_file) == 1
    (p,) = from_file
    assert (p.profile_step, p.fwd_latency_ms, p.samples_per_s) == (6, 11.62, 148.17)
    assert len(p.modules) > 0
