"""A fix is only offered when it changes the config in effect (dsmon.health.fixes)."""

from __future__ import annotations

import dataclasses
import json

from health_support import check, corpus_inputs

from cli.demo import demo_dir
from dsmon.ds_config.effective import ConfigView
from dsmon.health import HealthInputs, Status
from dsmon.health.fixes import effective_fix, read_at_stage
from dsmon.health.gather import inputs_from_records
from dsmon.health.model import Finding
from dsmon.health.verdicts import fix_json
from dsmon.load.files import read_found
from dsmon.load.kinds import discover
from dsmon.parse.base import Diagnostics

_USE_BF16 = fix_json({"fp16": {"enabled": False}, "bf16": {"enabled": True}})


def _demo_inputs() -> HealthInputs:
    records = [r for f in discover(demo_dir()) for r in read_found(f, "demo", Diagnostics())]
    return inputs_from_records(records, run="demo")


def test_bucket_sizes_already_in_effect_are_not_suggested() -> None:
    # The demo's config dump (train.log line 148): zero_config stage=2
    # reduce_bucket_size=500000000 allgather_bucket_size=500000000 overlap_comm=False.
    # Its run is on the CPU accelerator, where nothing overlaps: no fix is offered there.
    inputs = _demo_inputs()
    assert check(inputs, "comm.phase_share").fix is None
    on_gpu = dataclasses.replace(inputs, facts=dataclasses.replace(inputs.facts, device="gpu"))
    r = check(on_gpu, "comm.phase_share")
    assert r.status is Status.WARN
    assert r.fix == '{"zero_optimization": {"overlap_comm": true}}'


def test_no_zero_fix_on_stage_0() -> None:
    # z0 (train.log line 138: zero_config stage=0 ... overlap_comm=False): the bwd_allreduce
    # share is high, but overlap_comm and the bucket sizes are only read by ZeRO stages 1-3.
    r = check(corpus_inputs("z0"), "comm.phase_share")
    assert r.status is Status.WARN
    assert r.fix is None
    assert not read_at_stage("zero_optimization.overlap_comm", 0)
    assert read_at_stage("zero_optimization.overlap_comm", 1)
    assert not read_at_stage("zero_optimization.stage3_prefetch_bucket_size", 2)
    assert read_at_stage("zero_optimization.stage3_prefetch_bucket_size", 3)
    assert read_at_stage("gradient_clipping", 0)


def _fix_for(raw: dict[str, object], fix: str | None = _USE_BF16) -> str | None:
    finding = Finding(Status.WARN, "steps skipped", fix=fix)
    return effective_fix(finding, HealthInputs(config=ConfigView(raw))).fix


def test_use_bf16_only_where_it_changes_something() -> None:
    assert _fix_for({"bf16": {"enabled": True}}) is None
    assert _fix_for({"bf16": {"enabled": "yes"}}) is None  # DeepSpeed reads "yes" as true
    assert _fix_for({"fp16": {"enabled": True}}) == _USE_BF16
    assert _fix_for({}) == '{"bf16": {"enabled": true}}'  # fp32: fp16 is already off


def test_the_effective_config_wins_over_the_users_defaults() -> None:
    # The user's file leaves the buckets to the default (5e8); the run printed 2e8 in effect.
    fix = fix_json({"zero_optimization": {"overlap_comm": True, "reduce_bucket_size": 500000000}})
    user = ConfigView({"zero_optimization": {"stage": 2}})
    effective = ConfigView(
        {"zero_optimization": {"stage": 2, "overlap_comm": True, "reduce_bucket_size": 200000000}},
        origin="effective",
    )
    got = effective_fix(
        Finding(Status.WARN, "comm", fix=fix), HealthInputs(config=user, effective=effective)
    )
    assert json.loads(got.fix or "") == {"zero_optimization": {"reduce_bucket_size": 500000000}}
    alone = effective_fix(Finding(Status.WARN, "comm", fix=fix), HealthInputs(config=user))
    assert alone.fix == '{"zero_optimization": {"overlap_comm": true}}'


def test_identity_keys_stay_with_a_change_and_other_fixes_pass_through() -> None:
    fix = fix_json({"optimizer": {"type": "AdamW", "params": {"torch_adam": False}}})
    raw = {"optimizer": {"type": "AdamW", "params": {"torch_adam": True, "lr": 1e-4}}}
    assert _fix_for(raw, fix) == fix
    off = {"optimizer": {"type": "AdamW", "params": {"torch_adam": 0}}}
    assert _fix_for(off, fix) is None
    # optimizer params are read with dict.pop and ``if``: the string "no" turns torch_adam on.
    on = {"optimizer": {"type": "AdamW", "params": {"torch_adam": "no"}}}
    assert _fix_for(on, fix) == fix
    text = Finding(Status.WARN, "x", fix="delete the comms_logger section", fix_lang="text")
    assert effective_fix(text, HealthInputs(config=ConfigView({}))) is text
    assert _fix_for({}, None) is None
