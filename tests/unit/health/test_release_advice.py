"""Each config rule's advice holds for the DeepSpeed release that ran (issue 38, part 4).

The release data is :mod:`dsmon.ds_config.releases`; these tests give a rule a config and a
version and check that the advice names only what that release has, nothing the run already
has, and the keys the release ignores.
"""

from __future__ import annotations

import dataclasses
import json

from health_support import check, config_inputs, corpus_inputs, evidence, seed

from dsmon.ds_config.effective import ConfigView
from dsmon.health import HealthInputs, RunFacts
from dsmon.health.fixes import effective_fix
from dsmon.health.model import Finding, Status


def _fix(fragment: dict[str, object], cfg: ConfigView) -> str | None:
    finding = Finding(Status.WARN, "x", fix=json.dumps(fragment))
    return effective_fix(finding, HealthInputs(config=cfg)).fix


def test_a_fix_holds_only_what_the_release_reads() -> None:
    old = ConfigView({"train_batch_size": 8}, version=(0, 18, 0))
    assert _fix({"log_level": "info"}, old) is None  # log_level is read from 0.19.3
    new = ConfigView({"train_batch_size": 8}, version=(0, 19, 8))
    assert _fix({"log_level": "info"}, new) == '{"log_level": "info"}'
    assert _fix({"optimizer": {"type": "ZeroOneAdam"}}, new) is None  # gone from 0.19.7
    had = ConfigView({"train_batch_size": 8}, version=(0, 19, 6))
    assert _fix({"optimizer": {"type": "ZeroOneAdam"}}, had) == (
        '{"optimizer": {"type": "ZeroOneAdam"}}'
    )
    # what the run already has is not proposed: 1.0 is 0.19.8's default clipping
    assert _fix({"gradient_clipping": 1.0}, new) is None
    before = ConfigView({"train_batch_size": 8}, version=(0, 19, 2))  # 0 (off) up to 0.19.2
    assert _fix({"gradient_clipping": 1.0}, before) == '{"gradient_clipping": 1.0}'
    # optimizer params are not checked key by key
    assert _fix({"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}, new) is not None


def test_optimizer_the_release_lacks() -> None:
    raw = {"optimizer": {"type": "OneBitAdam", "params": {"lr": 1e-4, "freeze_step": 400}}}
    r = check(config_inputs(ConfigView(raw, version=(0, 19, 8))), "schema.optimizer")
    assert r.status is Status.FAIL
    assert r.summary.startswith(
        "'OneBitAdam' is not in DeepSpeed 0.19.8 (it shipped in 0.3.1-0.19.6): deepspeed."
        "initialize raises 'OneBitAdam is not a supported DeepSpeed Optimizer'"
    )
    assert "drop its own params (freeze_step)" in r.summary
    assert "Muon" in evidence(r)["optimizers DeepSpeed 0.19.8 builds"]
    assert json.loads(r.fix or "")["optimizer"] == {"type": "AdamW"}  # lr is already set
    unknown = check(config_inputs(ConfigView(raw)), "schema.optimizer")
    assert unknown.status is Status.WARN  # an older release would build it
    assert check(config_inputs(ConfigView(raw, version=(0, 19, 6))), "schema.optimizer").status is (
        Status.PASS
    )
    muon = ConfigView({"optimizer": {"type": "Muon"}}, version=(0, 17, 5))
    assert check(config_inputs(muon), "schema.optimizer").status is Status.PASS  # torch's Muon
    lion = ConfigView({"optimizer": {"type": "Lion"}}, version=(0, 10, 3))
    assert check(config_inputs(lion), "schema.optimizer").status is Status.FAIL  # from 0.11.0


def test_scheduler_of_a_later_release() -> None:
    cfg = ConfigView({"scheduler": {"type": "WarmupCosineLR"}}, version=(0, 12, 2))
    r = check(config_inputs(cfg), "schema.scheduler")
    assert r.status is Status.FAIL and "(DeepSpeed 0.12.3-0.19.8 had it)" in r.summary


def test_removed_features_are_refused_and_old_keys_named() -> None:
    raw = {"train_batch_size": 8, "amp": {"enabled": True}, "sparse_gradients": True}
    r = check(config_inputs(ConfigView(raw, version=(0, 19, 8))), "schema.keys")
    assert r.status is Status.FAIL
    assert evidence(r)["amp"].startswith(
        "refused by DeepSpeed 0.19.8: deepspeed.initialize raises 'NVIDIA Apex AMP integration "
        "has been removed."
    )
    assert r.fix == "delete amp\ndelete sparse_gradients"
    assert check(config_inputs(ConfigView(raw, version=(0, 19, 6))), "schema.keys").status is (
        Status.PASS
    )
    gone = ConfigView(
        {"zero_optimization": {"stage": 1, "legacy_stage1": False}}, version=(0, 3, 16)
    )
    r = check(config_inputs(gone), "schema.keys")
    assert r.status is Status.WARN  # 0.3.x read ZeRO with dict.get: ignored
    assert evidence(r)["zero_optimization.legacy_stage1"].startswith(
        "not read by DeepSpeed 0.3.16 (read by 0.4.0-0.19.8)"
    )
    deprecated = ConfigView({"zero_optimization": {"stage": 2, "cpu_offload": True}})
    r = check(config_inputs(deprecated), "schema.keys")
    assert r.fix == "rename zero_optimization.cpu_offload -> offload_optimizer"


def test_keys_that_change_nothing_here() -> None:
    raw = {"zero_optimization": {"stage": 2, "allgather_bucket_size": 2e8, "sub_group_size": 1e8}}
    r = check(config_inputs(ConfigView(raw, version=(0, 19, 8))), "schema.ignored")
    assert r.status is Status.WARN
    assert r.fix == (
        "delete zero_optimization.allgather_bucket_size\ndelete zero_optimization.sub_group_size"
    )
    assert "all_gather_into_tensor" in evidence(r)["zero_optimization.allgather_bucket_size"]
    old = check(config_inputs(ConfigView(raw, version=(0, 12, 3))), "schema.ignored")
    assert old.fix == "delete zero_optimization.sub_group_size"  # 0.12.3 still sizes by it
    r = check(config_inputs(seed("seed003_175b.json")), "schema.ignored")
    assert r.status is Status.PASS and r.summary.startswith("2 key(s) set to their default")


def test_flops_profiler_off_is_not_a_fault() -> None:
    off = ConfigView({"train_batch_size": 8})
    r = check(config_inputs(off), "observe.flops_profiler")
    assert r.status is Status.NOT_APPLICABLE and '"profile_step": 10' in r.summary
    cpu = check(config_inputs(off, device="cpu"), "observe.flops_profiler")
    assert cpu.status is Status.NOT_APPLICABLE and "CPU" in cpu.summary
    assert check(corpus_inputs("z0"), "observe.flops_profiler").status is Status.PASS
    # asked for at step 50 of a run that went to step 20 (no profile): nothing missing yet
    on = ConfigView({"flops_profiler": {"enabled": True, "profile_step": 50}})
    run = dataclasses.replace(corpus_inputs("z3_overlap_true"), config=on)
    assert check(run, "observe.flops_profiler").status is Status.PASS
    early = ConfigView({"flops_profiler": {"enabled": True, "profile_step": 2}})
    r = check(dataclasses.replace(run, config=early), "observe.flops_profiler")
    assert r.status is Status.WARN and "no flops profile of step 2 arrived" in r.summary


def test_no_bf16_advice_on_a_bf16_run() -> None:
    bf16 = ConfigView({"bf16": {"enabled": True}})
    r = check(dataclasses.replace(corpus_inputs("fp16_zero2"), config=bf16), "loss_scale.skipped")
    assert r.status is Status.FAIL
    assert "bf16" not in r.summary and r.fix is None
    fp16 = check(corpus_inputs("fp16_zero2"), "loss_scale.skipped")
    assert fp16.summary.endswith(", or use bf16")


def test_clipping_default_of_the_release() -> None:
    raw = {"train_batch_size": 512, "train_micro_batch_size_per_gpu": 4}
    facts = {"dp_size": 2}
    new = check(
        config_inputs(ConfigView(raw, version=(0, 19, 8)), **facts),
        "batch.clipping_with_accumulation",
    )
    assert new.status is Status.PASS
    assert new.summary == "64 accumulation steps, clipping at 1.0 (DeepSpeed 0.19.8's default)"
    old = check(
        config_inputs(ConfigView(raw, version=(0, 19, 2)), **facts),
        "batch.clipping_with_accumulation",
    )
    assert old.status is Status.WARN and old.summary.endswith("gradient clipping is off")


def test_compile_advice_follows_the_release() -> None:
    raw = {"torch_compile": {"enabled": True}}
    r = check(config_inputs(ConfigView(raw, version=(0, 14, 0))), "compile.zero3_act_ckpt")
    assert r.status is Status.WARN and r.fix is None
    assert "DeepSpeed 0.14.0 has no engine.compile()" in r.summary
    r = check(config_inputs(ConfigView(raw, version=(0, 19, 8))), "compile.zero3_act_ckpt")
    assert r.fix == 'engine.compile(backend="inductor")'


def test_facts_only_inputs_keep_their_version() -> None:
    inputs = HealthInputs(facts=RunFacts(ds_version=(0, 19, 8)))
    assert inputs.facts.version_label == "0.19.8"
