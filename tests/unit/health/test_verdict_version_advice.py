"""Advice true for the DeepSpeed that ran, on real 2-rank DeepSpeed 0.19.8 jobs, post-mortem.

Three runs recorded with ``tests/scenarios.py`` (their READMEs say how): bf16 with ZeRO-1, a
config of DeepSpeed's defaults (only the batch size, the script's own AdamW), and OneBitAdam,
which DeepSpeed 0.19.7 removed (``deepspeed.initialize`` fails on both ranks). Each is judged as
``dsmon check FOLDER`` judges it; the tests name the findings that must appear and those that
must not: no advice the run already follows, and no key or optimizer 0.19.8 lacks in any fix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from typing import Any

from health_support import evidence
from locations import DATA

from dsmon.ds_config import names, schema
from dsmon.ds_config.releases import knowledge
from dsmon.health import HealthInputs, evaluate
from dsmon.health.gather import inputs_from_records
from dsmon.health.model import Checklist, CheckResult, Status
from dsmon.health.triage import triage
from dsmon.load.files import read_found
from dsmon.load.kinds import discover
from dsmon.parse.base import Diagnostics

V0198 = (0, 19, 8)


@cache
def judged(name: str) -> tuple[HealthInputs, Checklist]:
    """A recorded run folder's inputs and checklist, as ``dsmon check FOLDER`` makes them."""
    folder = DATA / f"verdict_{name}"
    records = [r for found in discover(folder) for r in read_found(found, name, Diagnostics())]
    inputs = inputs_from_records(records, run=name)
    return inputs, evaluate(inputs)


def result(name: str, rule_id: str) -> CheckResult:
    return next(r for r in judged(name)[1].results if r.rule_id == rule_id)


def leaf_paths(node: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value and path not in schema.OPAQUE:
            out += leaf_paths(value, f"{path}.")
        else:
            out.append((path, value))
    return out


def assert_fixes_hold_for_0198(checklist: Checklist) -> None:
    """Every JSON fix names keys DeepSpeed 0.19.8 reads and optimizers it builds."""
    k = knowledge()
    for r in checklist.results:
        if not r.fix or r.fix_lang != "json":
            continue
        for path, value in leaf_paths(json.loads(r.fix)):
            assert k.exists(path, V0198), (r.rule_id, path)
            if path == "optimizer.type":
                assert str(value).lower() in names.ds_optimizers(V0198), (r.rule_id, value)
        text = f"{r.summary} {r.fix}"
        for gone in ("OneBitAdam", "ZeroOneAdam", "OneBitLamb", "1-bit", "0/1 Adam"):
            assert gone not in text or r.rule_id == "schema.optimizer", (r.rule_id, gone)


def problems(checklist: Checklist) -> list[tuple[str, Status]]:
    """Failures then warnings, in checklist order: what a user reads first."""
    bad = [r for r in checklist.results if r.status in (Status.FAIL, Status.WARN)]
    return [(r.rule_id, r.status) for r in sorted(bad, key=lambda r: -r.status.severity)]


def test_bf16_run_gets_no_bf16_advice() -> None:
    inputs, checklist = judged("bf16")
    assert inputs.facts.ds_version == V0198  # from the probe's engine line
    assert inputs.config is not None and inputs.config.origin == "engine"
    precision = result("bf16", "precision.bf16")
    assert (precision.status, precision.summary) == (Status.PASS, "bf16 is on")
    for r in checklist.results:
        assert "use bf16" not in r.summary and "switch to bf16" not in r.summary, r.rule_id
        assert '"bf16"' not in (r.fix or ""), r.rule_id
    assert_fixes_hold_for_0198(checklist)
    buckets = result("bf16", "zero.bucket_sizes")
    assert buckets.status is Status.PASS
    assert "allgather_bucket_size is not used" in buckets.summary
    assert evidence(buckets)["zero_optimization.allgather_bucket_size"] == (
        "5e8 (default; not used by DeepSpeed 0.19.8)"
    )
    assert result("bf16", "observe.flops_profiler").status is Status.NOT_APPLICABLE
    keys = result("bf16", "schema.keys")
    assert keys.status is Status.PASS
    assert evidence(keys)["judged against DeepSpeed"] == "0.19.8"


def test_defaults_run_is_judged_by_0198s_defaults() -> None:
    inputs, checklist = judged("defaults")
    assert inputs.facts.ds_version == V0198
    clip = result("defaults", "batch.clipping_with_accumulation")
    assert clip.status is Status.PASS  # 1 accumulation step, from the engine's config
    assert evidence(clip)["gradient_accumulation_steps"] == "1 (the engine's config)"
    spp = result("defaults", "observe.steps_per_print")
    assert spp.status is Status.WARN and "no default since 0.15.2" in spp.summary
    assert result("defaults", "schema.optimizer").status is Status.NOT_APPLICABLE
    for r in checklist.results:
        assert "gradient_clipping" not in (r.fix or ""), r.rule_id  # 1.0 is 0.19.8's default
        assert not (r.rule_id == "observe.flops_profiler" and r.status is Status.WARN)
    assert_fixes_hold_for_0198(checklist)
    assert ("zero.overlap_comm", Status.WARN) not in problems(checklist)  # stage 0


def test_missing_optimizer_names_what_0198_builds() -> None:
    inputs, checklist = judged("missing_optimizer")
    # initialize failed: no engine, so no engine line and no version; the refusal says enough
    assert inputs.facts.ds_version is None
    opt = result("missing_optimizer", "schema.optimizer")
    assert opt.status is Status.FAIL
    assert opt.summary == (
        "'OneBitAdam' is not in the DeepSpeed that ran: its initialize refused it "
        "(train.log:30); it shipped in DeepSpeed 0.3.1-0.19.6 only"
    )
    ev = evidence(opt)
    assert ev["optimizers DeepSpeed 0.19.8 builds"].startswith(
        "Adagrad, Adam, AdamW, Lamb, Lion, MuAdam, MuAdamW, Muon, MuSGD, or a torch.optim class"
    )
    assert ev["deepspeed.initialize"] == (
        "OneBitAdam is not a supported DeepSpeed Optimizer (train.log:30)"
    )
    assert json.loads(opt.fix or "") == {"optimizer": {"type": "AdamW"}}  # lr 0.001 stays
    assert problems(checklist)[:3] == [
        ("schema.optimizer", Status.FAIL),
        ("run.state", Status.FAIL),  # crashed at start-up: shown under schema.optimizer
        ("run.errors", Status.FAIL),
    ]
    assert triage(checklist).headline().rule_id == "schema.optimizer"
    assert_fixes_hold_for_0198(checklist)
    net = result("missing_optimizer", "network.compression")
    assert net.status is Status.NOT_APPLICABLE  # one node
