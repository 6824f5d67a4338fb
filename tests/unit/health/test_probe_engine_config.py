"""The probe's ``engine`` line: a job's config where the log has none (real Accelerate runs).

tests/data/probe_accelerate/ holds two real runs of a training loop on Accelerate's DeepSpeed
plugin, whose config is a dict built in code (see its README.md). ``default/`` ran at
DeepSpeed's default log level, so its log holds no config dump and no version line;
``info/`` ran the same job at INFO, so DeepSpeed's own dump is in its log to compare with.
tests/data/probe_fp16_default/ is a real fp16 job at the default log level, whose overflows and
loss scale only the probe saw.
"""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

from health_support import check, evidence
from shared_fixtures import DATA

from dsmon.health import evaluate
from dsmon.health.gather import inputs_from_records
from dsmon.health.measures import PROBE_STEP_SOURCE
from dsmon.health.model import Status
from dsmon.load.files import read_found
from dsmon.load.kinds import discover
from dsmon.model.records import ConfigRecord, EventRecord, Record
from dsmon.model.wire import decode, encode
from dsmon.parse.base import Diagnostics
from dsmon.parse.log import parse_text
from dsmon.parse.probe import ProbeParser

RUNS = DATA / "probe_accelerate"
#: The dict train_accel.py builds (``--gas 2``), and what Accelerate adds to it.
SCRIPT_CONFIG = {
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 2,
    "gradient_clipping": 1.0,
    "zero_optimization": {"stage": 2, "overlap_comm": False},
}
ACCELERATE_ADDS = {
    "steps_per_print": "inf",
    "fp16": {"enabled": False},
    "bf16": {"enabled": False},
    "zero_allow_untested_optimizer": True,
}


def probe_records(path: Path) -> list[Record]:
    parser = ProbeParser("r", path.name)
    out = [r for line in path.read_text().splitlines() for r in parser.feed(line)]
    assert parser.diag.unparsed == {}
    return out


def configs(recs: list[Record]) -> dict[str, ConfigRecord]:
    return {r.origin: r for r in recs if isinstance(r, ConfigRecord)}


def folder_records(path: Path) -> list[Record]:
    return [r for f in discover(path) for r in read_found(f, "acc", Diagnostics())]


def test_engine_line_reads_as_deepspeeds_own_dump() -> None:
    """Same job, same process: the probe's line and DeepSpeed's INFO dump give equal records."""
    logged, _ = parse_text((RUNS / "info" / "train.log").read_text())
    from_log = configs(logged)
    from_probe = configs(probe_records(RUNS / "info" / "probe" / "rank-0.jsonl"))
    assert set(from_log) == {"effective", "user_json"}
    assert set(from_probe) == {"effective", "engine"}  # the json block's dict, from the engine
    for probed, logged in (("effective", "effective"), ("engine", "user_json")):
        assert from_probe[probed].config == from_log[logged].config, probed
        assert not from_probe[probed].partial
    assert len(from_probe["effective"].config) == 62
    assert from_probe["engine"].config == {
        **SCRIPT_CONFIG,
        "log_level": "info",
        **ACCELERATE_ADDS,
    }


def test_engine_line_is_written_by_rank_0_only_with_the_engine_facts() -> None:
    recs = probe_records(RUNS / "default" / "probe" / "rank-0.jsonl")
    (info,) = [r for r in recs if isinstance(r, EventRecord)]
    assert info.name == "engine_info" and info.src.line == 2  # after the first heartbeat
    assert info.detail == {
        "version": "0.19.8",
        "git_hash": "unknown",
        "git_branch": "unknown",
        "backend": "gloo",
        "world_size": 2,
        "device": "cpu",
        "optimizer": None,  # a probe older than the optimizer field wrote this line
        "optimizer_wrapper": None,
    }
    assert info.message == "DeepSpeed 0.19.8, backend gloo, world size 2, device cpu"
    found = configs(recs)
    assert found["engine"].config == {**SCRIPT_CONFIG, **ACCELERATE_ADDS}
    effective = found["effective"].config
    assert (effective["train_batch_size"], effective["world_size"]) == (32, 2)  # 8 x 2 x 2
    assert len({(r.src.line, r.src.sub) for r in recs}) == len(recs)  # distinct store keys
    for rec in recs[:4]:
        assert decode(encode(rec)) == rec
    others = probe_records(RUNS / "default" / "probe" / "rank-1.jsonl")
    assert not [r for r in others if r.KIND in ("event", "config")]


def test_checklist_judges_the_config_that_only_the_probe_saw() -> None:
    """At the default log level the log alone leaves every config rule UNKNOWN."""
    recs = folder_records(RUNS / "default")
    inputs = inputs_from_records(recs, run="acc")
    assert inputs.config is not None and inputs.config.origin == "engine"
    assert inputs.facts.ds_version == (0, 19, 8) and inputs.facts.world_size == 2
    assert inputs.facts.device == "cpu"
    overlap = check(inputs, "zero.overlap_comm")  # read from the engine's config: a CPU run
    assert overlap.status is Status.NOT_APPLICABLE and "no streams" in overlap.summary
    assert evidence(overlap)["zero_optimization.overlap_comm"] == "false (set)"
    spp = check(inputs, "observe.steps_per_print")
    assert spp.status is Status.NOT_APPLICABLE and "steps_per_print is inf" in spp.summary
    assert check(inputs, "batch.arithmetic").status is Status.PASS
    config_rules = [r for r in evaluate(inputs).results if r.category == "config"]
    assert config_rules and all(r.status is not Status.UNKNOWN for r in config_rules)


def test_without_the_probe_files_the_config_rules_cannot_judge(tmp_path: Path) -> None:
    shutil.copy(RUNS / "default" / "train.log", tmp_path / "train.log")
    inputs = inputs_from_records(folder_records(tmp_path), run="acc")
    assert inputs.config is None and inputs.facts.ds_version is None
    overlap = check(inputs, "zero.overlap_comm")
    assert overlap.status is Status.UNKNOWN and "dsmon run" in overlap.summary


def test_step_rules_use_the_probes_wall_time_without_timer_lines() -> None:
    inputs = inputs_from_records(folder_records(RUNS / "default"), run="acc")
    regression = check(inputs, "steps.regression")
    assert regression.status is Status.PASS, regression.summary
    spikes = check(inputs, "steps.spikes")
    assert spikes.status is Status.PASS, spikes.summary
    # the median over steps 3-12 (after warm-up, before the last 8) of the slower rank's
    # total_ms, from the files
    per_step: dict[int, float] = {}
    for path in (RUNS / "default" / "probe").glob("rank-*.jsonl"):
        for line in path.read_text().splitlines():
            obj = json.loads(line)
            if obj["kind"] == "rank_step" and 3 <= obj["step"] <= 12:
                per_step[obj["step"]] = max(per_step.get(obj["step"], 0.0), obj["total_ms"])
    earlier = evidence(regression)["earlier median"]
    assert (
        earlier
        == f"{statistics.median(per_step.values()):.2f} ms (steps 3-12, {PROBE_STEP_SOURCE})"
    )


def test_engine_line_with_a_bad_part_is_counted_and_skipped() -> None:
    """A line whose parts have the wrong shape names its field (hand-broken copy of a real one)."""
    real = (RUNS / "default" / "probe" / "rank-0.jsonl").read_text().splitlines()[1]
    obj = json.loads(real)
    parser = ProbeParser("r", "rank-0.jsonl")
    for field, bad in (("config", [1]), ("effective", {"x": 1}), ("world_size", "2")):
        assert parser.feed(json.dumps({**obj, field: bad})) == []
    assert parser.diag.unparsed["probe"] == 3
    examples = parser.diag.examples["probe"]
    assert [e.split(": ")[1] for e in examples] == [
        "field 'config'",
        "field 'effective'",
        "field 'world_size'",
    ]


FP16 = DATA / "probe_fp16_default"


def test_skipped_steps_and_loss_scale_come_from_the_probe_when_the_log_hides_them() -> None:
    """A real fp16 job at the default log level: no OVERFLOW or step= line reaches the log."""
    recs = folder_records(FP16)
    assert not [r for r in recs if r.KIND in ("loss_scale", "step")]
    inputs = inputs_from_records(recs, run="fp16")
    skipped = check(inputs, "loss_scale.skipped")
    assert skipped.status is Status.FAIL, skipped.summary  # 4 of 30 (13.3 %)
    assert skipped.summary.startswith("4 of 30 steps skipped (13.3%)")
    assert "engine.skipped_steps at step 30" in evidence(skipped)["skipped steps"]
    scale = check(inputs, "loss_scale.collapse")
    assert scale.status is Status.PASS  # 8192 against min_loss_scale 1: 13 halvings
    assert evidence(scale)["latest loss scale"] == "8192 (dsmon run's probe, step 30)"
    assert evidence(scale)["halvings left"] == "13"


def test_without_the_probe_the_hidden_overflows_are_unknown(tmp_path: Path) -> None:
    for name in ("train.log", "ds_config.json"):
        shutil.copy(FP16 / name, tmp_path / name)
    inputs = inputs_from_records(folder_records(tmp_path), run="fp16")
    assert check(inputs, "loss_scale.skipped").status is Status.UNKNOWN
    assert check(inputs, "loss_scale.collapse").status is Status.UNKNOWN


def test_values_the_trainer_filled_in_for_auto_are_judged_and_named() -> None:
    """tests/data/probe_hf_zero3_auto: the file says "auto"; the engine got hidden-size values."""
    inputs = inputs_from_records(folder_records(DATA / "probe_hf_zero3_auto"), run="hf3")
    assert inputs.config is not None and inputs.config.origin == "engine"
    buckets = check(inputs, "zero.bucket_sizes")
    assert buckets.status is Status.WARN, buckets.summary
    filled = '"auto" in the config file, filled in by the Trainer'
    assert evidence(buckets)["zero_optimization.reduce_bucket_size"] == f"4096 ({filled})"
    prefetch = check(inputs, "zero3.prefetch_bucket_size")
    assert evidence(prefetch)["zero_optimization.stage3_prefetch_bucket_size"] == f"3686 ({filled})"
    overlap = check(inputs, "zero.overlap_comm")  # written in the file: plain "set"
    assert evidence(overlap)["zero_optimization.overlap_comm"] == "true (set)"
    assert check(inputs, "batch.arithmetic").status is Status.PASS


def test_the_optimizer_deepspeed_built_is_what_the_rule_judges() -> None:
    """The probe names the class (probe_fp16_default: torch's AdamW, from torch_adam); a
    DeepSpeed 0.10.0 log (zero3_coordinator_v0100) printed its config after taking torch_adam
    out, and only its ``DeepSpeed Basic Optimizer = AdamW`` line tells."""
    recs = probe_records(FP16 / "probe" / "rank-0.jsonl")
    (info,) = [r for r in recs if isinstance(r, EventRecord)]
    assert info.detail["optimizer"] == "torch.optim.adamw.AdamW"
    assert info.detail["optimizer_wrapper"].endswith(".DeepSpeedZeroOptimizer")
    fused = check(inputs_from_records(folder_records(FP16), run="fp16"), "optimizer.fused")
    assert evidence(fused)["optimizer built"] == "AdamW (dsmon run's probe)"
    old = inputs_from_records(folder_records(DATA / "zero3_coordinator_v0100"), run="v0100")
    assert old.config is not None and "torch_adam" not in old.config.section("optimizer.params")
    fused = check(old, "optimizer.fused")
    assert evidence(fused)["optimizer built"] == "AdamW (log: DeepSpeed Basic Optimizer)"
    assert fused.summary == "torch_adam on a CPU run: torch.optim is the right choice"
