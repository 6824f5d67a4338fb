"""What every DeepSpeed release prints, read back: the oracle of scripts/deepspeed_formats.py.

tests/oracle/deepspeed/<kind>.json holds the lines each release's own print code printed in a
sandbox (the timers' ``log``, ``_report_progress``, ``ThroughputTimer.stop``, the loss scalers,
``see_memory_usage``, the config dump, the comms logger, the autotuner's summary, the pipeline
engine's lines, and the flops profiler run on a tiny model with the real torch), each form with
the releases that print it and the inputs the code was given (``expect``). Each form is parsed
here as ``dsmon parse`` reads a log, and its records must give those inputs back: no release's
wording, columns or units may go unread. The script is run by hand; the data is committed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from locations import TESTS

from dsmon.model.records import (
    AutotuneSummaryRecord,
    CommOpRecord,
    CommSummaryRecord,
    ConfigRecord,
    EventRecord,
    FlopsProfileRecord,
    IterationRecord,
    LossScaleRecord,
    MemoryRecord,
    Record,
    StepRecord,
    ThroughputRecord,
    TimerRecord,
)
from dsmon.parse.base import Diagnostics
from dsmon.parse.families.timers import LEGACY_NAMES
from dsmon.parse.log import parse_text
from dsmon.parse.side_files import parse_autotune_summary

ORACLE = TESTS / "oracle" / "deepspeed"
GiB = 1024**3

Form = dict[str, Any]


def oracle(kind: str) -> dict[str, Any]:
    return json.loads((ORACLE / f"{kind}.json").read_text())  # type: ignore[no-any-return]


def forms(kind: str) -> Iterator[Any]:
    """Each form of a kind as a test case, named by its source, case and releases."""
    for n, f in enumerate(oracle(kind)["forms"]):
        first, last = f["releases"][0], f["releases"][-1]
        where = f["source"].rsplit("/", 1)[-1]
        yield pytest.param(f, id=f"{n}-{where}-{f['case']}-{first}..{last}")


def parse(f: Form) -> tuple[list[Record], Diagnostics]:
    recs, diag = parse_text("\n".join(f["lines"]), run="oracle", file="train.log")
    return recs, diag


def of(recs: list[Record], cls: type[Any]) -> list[Any]:
    return [r for r in recs if isinstance(r, cls)]


def clean(diag: Diagnostics) -> None:
    assert not diag.unparsed, diag.examples
    assert not diag.cut, diag.examples


# --- every kind has been run on every release that has it ---------------------------------------

#: The first release that prints each kind (the others in the cache all must have been read).
#: ``see_memory_usage`` returned at once before 0.3.12; 0.3.11's profiler is the first, but its
#: source does not compile under Python 3.9+ (``new_empty((*input_res))``), so 0.3.12's is the first rendered.
FIRST = {
    "timers": "0.3.1", "step": "0.3.1", "throughput": "0.3.1", "loss_scale": "0.3.1",
    "memory": "0.3.12", "config": "0.3.1", "pipeline": "0.3.1", "comms": "0.7.0",
    "autotuner": "0.5.8", "flops": "0.3.12",
}  # fmt: skip


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


@pytest.mark.parametrize("kind", sorted(FIRST))
def test_every_release_that_has_the_kind_was_rendered(kind: str) -> None:
    data = oracle(kind)
    assert len(data["releases"]) >= 125
    covered = {v for f in data["forms"] for v in f["releases"]}
    expected = {v for v in data["releases"] if _key(v) >= _key(FIRST[kind])}
    assert expected - covered == set(), data["missing"]


# --- timers -------------------------------------------------------------------------------------

#: The group dsmon files each timer list under, by where DeepSpeed logs it.
TIMER_GROUPS = {
    "activation_checkpointing/checkpointing.py": "act_ckpt",
    "pipe/engine.py:train_batch": "pipeline",
    "zero/stage2.py": "zero_optimizer",
    "zero/stage_1_and_2.py": "zero_optimizer",
    "zenflow/zenflow_stage_1_and_2.py:wait_last_update_and_copy": "zero_optimizer",
    "fp16/fused_optimizer.py": "fp16_optimizer",
    "zero/stage3.py": "zero3_optimizer",
    "zenflow/engine_stage3.py": "zero3_optimizer",
    "swap_tensor/": "swap",
}


def _timer_group(f: Form) -> str | None:
    names = set(f["expect"]["names"])
    if f["source"].endswith(("engine.py:step", "pipe/engine.py:_exec_optimizer_step")):
        if names & {"batch_input"}:
            return "pipeline"
        return "micro" if all(n.endswith("microstep") for n in names) else "global"
    for where, group in TIMER_GROUPS.items():
        if where in f["source"]:
            return group
    return None


@pytest.mark.parametrize("f", list(forms("timers")))
def test_timer_line(f: Form) -> None:
    recs, diag = parse(f)
    clean(diag)
    (rec,) = of(recs, TimerRecord)
    assert list(rec.values_ms.values()) == f["expect"]["values_ms"]
    printed = [LEGACY_NAMES.get(n, n) if rec.legacy else n for n in f["expect"]["names"]]
    assert list(rec.values_ms) in (printed, f["expect"]["names"])
    want = _timer_group(f)
    if want is not None:
        assert rec.group == want
    else:  # a timer group of its own: never one that ends an optimizer step
        assert rec.group not in ("global", "micro")
    if f["lines"][0].startswith("rank=0 ") or "rank=0 time" in f["lines"][0]:
        assert rec.legacy and rec.src.rank == 0


# --- step= and the ThroughputTimer ---------------------------------------------------------------


@pytest.mark.parametrize("f", list(forms("step")))
def test_step_line(f: Form) -> None:
    recs, diag = parse(f)
    clean(diag)
    (rec,) = of(recs, StepRecord)
    want = f["expect"]
    assert (rec.step, rec.skipped, rec.src.rank) == (want["step"], want["skipped"], 0)
    assert list(rec.lr) == want["lr"]
    mom = [tuple(m) if isinstance(m, list) else (m,) for m in want["mom"]]
    assert list(rec.mom) == mom


@pytest.mark.parametrize("f", list(forms("throughput")))
def test_throughput_line(f: Form) -> None:
    recs, diag = parse(f)
    clean(diag)
    (rec,) = of(recs, ThroughputRecord)
    want = f["expect"]
    assert (rec.epoch, rec.micro_step, rec.global_step) == (
        want["epoch"],
        want["micro_step"],
        want["global_step"],
    )
    assert rec.running_avg_samples_per_s == want["running_avg_samples_per_s"]
    if "CurrSamplesPerSec" in f["lines"][0]:
        assert rec.samples_per_s == pytest.approx(want["samples_per_s"], rel=1e-5)
    if "MemAllocated" in f["lines"][0]:
        assert rec.mem_allocated_bytes == pytest.approx(want["mem_allocated_gb"] * GiB, rel=1e-9)
        assert rec.max_mem_allocated_bytes == pytest.approx(
            want["max_mem_allocated_gb"] * GiB, rel=1e-9
        )


# --- loss scale ---------------------------------------------------------------------------------

#: Messages with loss-scale words that carry no loss-scale event (start-up notes, a debug
#: message naming the tensor), read as no record, on purpose.
NO_EVENT = (
    "Creating fp16",
    "detected overflow",
    "No Grad overflow for",
    "Grad overflow on iteration",  # its numbers come on the next line (Reducing / static)
    "has_overflow",
    "error buffer with overflow",  # ZeRO++'s LoCo note
)
#: What each executed scaler case must give: event and figures.
SCALER = {
    ("loss_scaler.py:update_scale", "overflow"): ("overflow", 65536, 32768, None),
    ("loss_scaler.py:update_scale", "hysteresis"): ("hysteresis", 65536, None, 2),
    ("loss_scaler.py:update_scale", "minimum"): ("min_scale", None, None, None),
}


@pytest.mark.parametrize("f", list(forms("loss_scale")))
def test_loss_scale_message(f: Form) -> None:
    recs, diag = parse(f)
    clean(diag)
    scales = of(recs, LossScaleRecord)
    text = "\n".join(f["lines"])
    if f["case"] == "rendered" and any(words in text for words in NO_EVENT):
        if "Grad overflow on iteration" not in text:
            assert scales == []
        return
    assert scales, f"no loss-scale record from {f['lines']}"
    key = (f["source"].rsplit("/", 1)[-1], f["case"])
    if key in SCALER:
        event, attempted, new, hysteresis = SCALER[key]
        (rec,) = scales
        assert rec.event == event
        assert (rec.attempted_scale, rec.new_scale) == (attempted, new)
        if hysteresis is not None:
            assert rec.hysteresis is not None
        return
    printed = set(f["expect"].get("values", {}).values()) | {
        f["expect"].get("scale"),
        f["expect"].get("iteration"),
        65536.0,
        32768.0,
        131072.0,
    }
    for rec in scales:  # every figure read is one the message printed
        for value in (rec.attempted_scale, rec.new_scale, rec.iteration):
            assert value is None or value in printed, (value, f["lines"])


# --- see_memory_usage -------------------------------------------------------------------------


@pytest.mark.parametrize("f", list(forms("memory")))
def test_memory_block(f: Form) -> None:
    recs, diag = parse(f)
    clean(diag)
    (rec,) = of(recs, MemoryRecord)
    want = f["expect"]
    assert rec.label == want["label"]
    assert rec.allocated_bytes == pytest.approx(want["ma_gb"] * GiB, rel=1e-9)
    assert rec.max_allocated_bytes == pytest.approx(want["max_ma_gb"] * GiB, rel=1e-9)
    assert rec.cached_bytes == pytest.approx(want["ca_gb"] * GiB, rel=1e-9)
    ca = next(ln for ln in f["lines"] if "Max_CA" in ln)
    max_ca = want["max_ca_gb"] if "Max_CA 6.25" in ca else round(want["max_ca_gb"])
    assert rec.max_cached_bytes == pytest.approx(max_ca * GiB, rel=1e-9)


# --- the config dump ----------------------------------------------------------------------------


@pytest.mark.parametrize("f", list(forms("config")))
def test_config_dump(f: Form) -> None:
    recs, diag = parse(f)
    clean(diag)
    configs = {r.origin: r.config for r in of(recs, ConfigRecord)}
    want = f["expect"]
    effective = configs["effective"]
    for name, value in want["attributes"].items():
        assert effective[name] == value, name
    if any("json = " in ln for ln in f["lines"]):
        assert configs["user_json"] == want["json"]


# --- the comms logger ---------------------------------------------------------------------------


@pytest.mark.parametrize("f", list(forms("comms")))
def test_comms_logger(f: Form) -> None:
    recs, diag = parse(f)
    clean(diag)
    if f["case"] == "verbose":
        ops = of(recs, CommOpRecord)
        calls = f["expect"]["calls"]
        assert [o.op for o in ops] == [c["op"] for c in calls]
        assert [o.latency_ms for o in ops] == [c["latency_ms"] for c in calls]
        for op, call in zip(ops, calls, strict=True):
            assert op.msg_size_bytes == pytest.approx(call["msg_size_bytes"], rel=0.01)
            assert op.algbw_gbps is not None and op.busbw_gbps is not None
        return
    rows = of(recs, CommSummaryRecord)
    want = f["expect"]["rows"]
    assert [(r.op, r.count) for r in rows] == [(w["op"], w["count"]) for w in want]
    for row, w in zip(rows, want, strict=True):
        assert row.msg_size_bytes == pytest.approx(w["msg_size_bytes"], rel=0.01)
        assert row.total_latency_ms == pytest.approx(w["total_latency_ms"], abs=0.005)


# --- the autotuner ------------------------------------------------------------------------------


@pytest.mark.parametrize("f", list(forms("autotuner")))
def test_autotuner_summary(f: Form) -> None:
    if f["case"] == "summary.txt":
        rows, diag = parse_autotune_summary("\n".join(f["lines"]), "oracle", "summary.txt")
    else:
        recs, diag = parse(f)
        rows = of(recs, AutotuneSummaryRecord)
    clean(diag)
    want = f["expect"]
    got = [
        {
            "tuning_space": r.tuning_space,
            "num_experiments": r.num_experiments,
            "best_metric_val": r.best_metric_val,
            "best_exp_name": r.best_exp_name,
        }
        for r in rows
    ]
    assert got == want["rows"]
    assert all(r.tuning_duration_s == want["tuning_duration_s"] for r in rows)
    if f["case"] == "summary.txt":
        assert all(r.total_experiments == want["total_experiments"] for r in rows)


# --- the pipeline engine ----------------------------------------------------------------------


@pytest.mark.parametrize("f", list(forms("pipeline")))
def test_pipeline_engine_line(f: Form) -> None:
    recs, diag = parse(f)
    clean(diag)
    values = f["expect"]["values"]
    if "STAGE_PARAMS" in f["lines"][0]:
        (ev,) = [e for e in of(recs, EventRecord) if e.name == "pipeline_stage"]
        assert ev.detail["stage_params"] == values["num_params"]
        assert ev.detail["total_params"] == values["total_params"]
        assert ev.detail["layers"] == ev.detail["end_layer"] - ev.detail["first_layer"]
        return
    (it,) = of(recs, IterationRecord)
    assert it.fmt == "pipeline" and it.iteration == values["self.global_steps"]
    assert it.loss == pytest.approx(values["self.agg_train_loss"], abs=5e-5)
    assert it.elapsed_ms == pytest.approx(values["iter_time"] * 1000.0)
    if "loss_value.item()" in values:  # 0.14+: each additional loss by name
        assert it.losses["moe_loss"] == pytest.approx(values["loss_value.item()"], abs=5e-5)


# --- the flops profiler -------------------------------------------------------------------------


@pytest.mark.parametrize("f", list(forms("flops")))
def test_flops_profile(f: Form) -> None:
    recs, diag = parse(f)
    clean(diag)
    (rec,) = of(recs, FlopsProfileRecord)
    want = f["expect"]
    assert not rec.partial
    assert rec.params_per_gpu == pytest.approx(want["params"], rel=0.01)
    assert [(m.path, m.module_class) for m in rec.modules] == [tuple(m) for m in want["modules"]]
    root = rec.modules[0]
    assert root.params == pytest.approx(want["params"], rel=0.01)
    assert all(m.params is not None for m in rec.modules if m.module_class != "ModuleList")
    assert rec.top_modules
    assert rec.fwd_latency_ms is not None and rec.fwd_latency_ms > 0
    if f["case"] == "engine":
        assert rec.profile_step == want["profile_step"]
    if want["engine"] and any("world size" in ln for ln in f["lines"]):
        assert (rec.world_size, rec.data_parallel_size, rec.model_parallel_size) == (
            want["world_size"],
            want["data_parallel_size"],
            want["model_parallel_size"],
        )
        assert rec.batch_size_per_gpu == want["batch_size_per_gpu"]
    if want["engine"] and any("bwd latency" in ln for ln in f["lines"]):
        assert rec.fwd_latency_ms == pytest.approx(want["fwd_latency_ms"])
        assert rec.bwd_latency_ms == pytest.approx(want["bwd_latency_ms"])
        assert rec.step_latency_ms == pytest.approx(want["step_latency_ms"])
        iter_ms = want["fwd_latency_ms"] + want["bwd_latency_ms"] + want["step_latency_ms"]
        assert rec.iter_latency_ms == pytest.approx(iter_ms)
        assert rec.flops_per_s_per_gpu is not None and math.isfinite(rec.flops_per_s_per_gpu)
