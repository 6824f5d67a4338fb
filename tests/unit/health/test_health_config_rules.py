"""Config rules on the seeds' configs and the corpus runs' ds_config.json files."""

from __future__ import annotations

import json

import pytest
from health_support import (
    DATA,
    check,
    config_inputs,
    corpus_config,
    corpus_dir,
    corpus_runs,
    evidence,
    seed,
)

from dsmon.ds_config.effective import ConfigView
from dsmon.health import Status, evaluate
from dsmon.health.gather import inputs_from_records
from dsmon.health.inputs import DP_FROM_WORLD
from dsmon.load.files import read_found
from dsmon.load.kinds import discover
from dsmon.model.records import Record
from dsmon.parse.base import Diagnostics

# Every corpus run's config (checked alone: version and device unknown) and the verdicts it
# should get; every config rule not listed passes or does not apply. Why, per rule:
# - zero.overlap_comm: stages 1-2 default to overlap_comm false; z3_overlap_false sets it off.
# - optimizer.fused: the corpus runs on CPU with torch_adam: true; from the config alone the
#   device is unknown, so dsmon warns (on GPUs this means torch.optim instead of FusedAdam).
#   z2_offload_optimizer has no torch_adam: DeepSpeedCPUAdam, a pass.
# - precision.bf16: fp16/fp32 with the GPU model unknown -> unknown; bf16_zero0 uses bf16.
# - observe.wall_clock_breakdown: warned where the config lacks it (observe.flops_profiler off is
#   not a fault: it does not apply).
# - observe.log_level: only z0_default_loglevel leaves it unset (0.19 hides INFO lines).
# - fp16.loss_scaler: fp16_zero0 starts at 2^32 with a window of 5 (its log shows the churn).
_F, _B = "optimizer.fused", "precision.bf16"
W, U = Status.WARN, Status.UNKNOWN
CORPUS_VERDICTS: dict[str, dict[str, Status]] = {
    "act_ckpt": {"zero.overlap_comm": W, _F: W, _B: U},
    "bf16_zero0": {_F: W},
    "comms_logger": {
        "zero.overlap_comm": W,
        _F: W,
        _B: U,
        "observe.wall_clock_breakdown": W,
    },
    "comms_logger_verbose": {
        "zero.overlap_comm": W,
        _F: W,
        _B: U,
        "observe.wall_clock_breakdown": W,
    },
    "crash_rank1_step17": {"zero.overlap_comm": W, _F: W, _B: U},
    "crash_step17": {"zero.overlap_comm": W, _F: W, _B: U},
    "csv_tensorboard": {"zero.overlap_comm": W, _F: W, _B: U},
    "flops_detailed_file": {"zero.overlap_comm": W, _F: W, _B: U},
    "flops_detailed_stdout": {_F: W, _B: U},
    "fp16_zero0": {_F: W, "fp16.loss_scaler": W, _B: U},
    "fp16_zero2": {"zero.overlap_comm": W, _F: W, _B: U},
    "fp16_zero3": {_F: W, _B: U},
    "grad_accum": {"zero.overlap_comm": W, _F: W, _B: U},
    "jit_fresh_cache": {_F: W, _B: U, "observe.wall_clock_breakdown": W},
    "memory_breakdown": {"zero.overlap_comm": W, _F: W, _B: U},
    "pipeline_wallclock_crash": {_F: W, _B: U},
    "sigkill_all": {"zero.overlap_comm": W, _F: W, _B: U},
    "torchrun": {"zero.overlap_comm": W, _F: W, _B: U},
    "warmup_lr": {"zero.overlap_comm": W, _F: W, _B: U, "observe.wall_clock_breakdown": W},
    "z0": {_F: W, _B: U},
    "z0_default_loglevel": {_F: W, _B: U, "observe.log_level": W},
    "z1": {"zero.overlap_comm": W, _F: W, _B: U},
    "z2": {"zero.overlap_comm": W, _F: W, _B: U},
    "z2_offload_optimizer": {"zero.overlap_comm": W, _B: U},
    "z3": {_F: W, _B: U},
    "z3_overlap_false": {"zero.overlap_comm": W, _F: W, _B: U},
    "z3_overlap_true": {_F: W, _B: U},
}


def test_the_table_covers_every_corpus_config() -> None:
    assert set(CORPUS_VERDICTS) == corpus_runs()


@pytest.mark.parametrize("run", sorted(CORPUS_VERDICTS))
def test_corpus_config_verdicts(run: str) -> None:
    checklist = evaluate(config_inputs(corpus_config(run)))
    got = {
        r.rule_id: r.status
        for r in checklist.results
        if r.category == "config" and r.status not in (Status.PASS, Status.NOT_APPLICABLE)
    }
    assert got == CORPUS_VERDICTS[run]


def test_overlap_comm_off_by_default_on_stage_2_and_set_off() -> None:
    r = check(config_inputs(corpus_config("z2")), "zero.overlap_comm")
    assert r.summary.startswith("overlap_comm is off by default for stage 2")
    assert evidence(r)["zero_optimization.overlap_comm"] == "false (default)"
    assert r.fix == '{"zero_optimization": {"overlap_comm": true}}'
    r = check(config_inputs(corpus_config("z3_overlap_false")), "zero.overlap_comm")
    assert r.summary == "overlap_comm is set to false: each step pays communication after compute"
    assert (
        check(config_inputs(seed("seed000_overlap.json")), "zero.overlap_comm").status
        is Status.PASS
    )
    z0 = check(config_inputs(corpus_config("z0")), "zero.overlap_comm")
    assert (z0.status, z0.summary) == (Status.NOT_APPLICABLE, "ZeRO is off (stage 0)")


def test_contiguous_gradients() -> None:
    assert (
        check(config_inputs(seed("seed003_175b.json")), "zero.contiguous_gradients").status
        is Status.PASS
    )
    off = ConfigView({"zero_optimization": {"stage": 2, "contiguous_gradients": False}})
    r = check(config_inputs(off), "zero.contiguous_gradients")
    assert (r.status, r.fix) == (
        Status.WARN,
        '{"zero_optimization": {"contiguous_gradients": true}}',
    )


def test_bucket_sizes_seed_175b_passes_and_small_bucket_warns() -> None:
    r = check(config_inputs(seed("seed003_175b.json")), "zero.bucket_sizes")
    assert r.status is Status.PASS
    assert evidence(r)["zero_optimization.reduce_bucket_size"] == "5e8 (set)"
    small = ConfigView({"zero_optimization": {"stage": 2, "reduce_bucket_size": 5e7}})
    r = check(config_inputs(small), "zero.bucket_sizes")
    assert r.status is Status.WARN
    assert r.summary.startswith("zero_optimization.reduce_bucket_size = 5e7 is small")
    assert r.fix == '{"zero_optimization": {"reduce_bucket_size": 200000000}}'
    # the updated partitions are gathered in place: a large all-gather bucket costs no memory,
    # and from 0.12.4 ZeRO-1/2 do not use it at all (one all_gather_into_tensor per group)
    raw = {"zero_optimization": {"stage": 1, "allgather_bucket_size": 2e9}}
    big = check(config_inputs(ConfigView(raw, version=(0, 12, 3))), "zero.bucket_sizes")
    assert big.status is Status.PASS and "memory" not in big.summary
    small_ag = {"zero_optimization": {"stage": 2, "allgather_bucket_size": 1e7}}
    old = check(config_inputs(ConfigView(small_ag, version=(0, 12, 3))), "zero.bucket_sizes")
    assert old.status is Status.WARN and "gathered in many small shards" in old.summary
    new = check(config_inputs(ConfigView(small_ag, version=(0, 19, 8))), "zero.bucket_sizes")
    assert new.status is Status.PASS
    assert "allgather_bucket_size is not used" in new.summary
    assert evidence(new)["zero_optimization.allgather_bucket_size"] == (
        "1e7 (set; not used by DeepSpeed 0.19.8)"
    )


def test_zero3_ranges_on_corpus_and_seeds() -> None:
    cfg = corpus_config("z3_overlap_true")  # persistence 1e4, prefetch 5e8, max_live 1e9
    for rule in (
        "zero3.max_live_parameters",
        "zero3.prefetch_bucket_size",
        "zero3.param_persistence_threshold",
        "zero3.sub_group_size",
    ):
        assert check(config_inputs(cfg), rule).status is Status.PASS, rule
    assert (
        check(config_inputs(seed("seed003_max_live.json")), "zero3.max_live_parameters").status
        is Status.PASS
    )
    assert (
        check(config_inputs(seed("seed003_sub_group.json")), "zero3.sub_group_size").status
        is Status.PASS
    )
    zero = ConfigView({"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}})
    r = check(config_inputs(zero), "zero3.param_persistence_threshold")
    assert (
        r.status is Status.WARN
        and r.fix == '{"zero_optimization": {"stage3_param_persistence_threshold": 100000}}'
    )
    over = ConfigView(
        {
            "zero_optimization": {
                "stage": 3,
                "stage3_prefetch_bucket_size": 3e8,
                "stage3_max_live_parameters": 1e8,
            }
        }
    )
    r = check(config_inputs(over), "zero3.prefetch_bucket_size")
    assert r.summary == "prefetch bucket exceeds stage3_max_live_parameters"
    z2 = check(config_inputs(corpus_config("z2")), "zero3.sub_group_size")
    assert (z2.status, z2.summary) == (Status.NOT_APPLICABLE, "only read by ZeRO-3 (stage 2)")


def test_fused_optimizer_by_device() -> None:
    cfg = corpus_config("z2")
    assert check(config_inputs(cfg), "optimizer.fused").summary == (
        "torch_adam: true (device unknown: on GPUs this is slower) runs torch.optim.AdamW "
        "instead of FusedAdam"
    )
    assert check(config_inputs(cfg, device="cpu"), "optimizer.fused").status is Status.PASS
    r = check(config_inputs(cfg, device="gpu"), "optimizer.fused")
    assert r.status is Status.WARN and r.summary.startswith("torch_adam: true on GPUs")
    assert r.fix == '{"optimizer": {"type": "AdamW", "params": {"torch_adam": false}}}'
    offload = check(config_inputs(seed("seed003_175b.json")), "optimizer.fused")
    assert offload.summary == "AdamW runs as DeepSpeedCPUAdam"
    assert (
        check(config_inputs(corpus_config("z2_offload_optimizer")), "optimizer.fused").status
        is Status.PASS
    )


def test_batch_arithmetic() -> None:
    r = check(config_inputs(seed("seed003_gas.json")), "batch.arithmetic")
    assert r.summary == "batch keys agree: implies a data-parallel size of 1; other sizes fail"
    r = check(config_inputs(seed("seed003_gas.json"), dp_size=8), "batch.arithmetic")
    assert r.status is Status.FAIL
    assert r.summary == "1024 != 8 x 128 x 8: deepspeed.initialize asserts"
    assert r.fix == '{"train_batch_size": 8192}'
    grad = check(config_inputs(corpus_config("grad_accum"), dp_size=2), "batch.arithmetic")
    assert grad.status is Status.PASS  # 16 = 2 x 4 x 2
    none = check(config_inputs(seed("seed000_overlap.json")), "batch.arithmetic")
    assert none.status is Status.FAIL and none.summary.startswith("neither train_batch_size")


def test_batch_arithmetic_of_a_pipeline_job() -> None:
    """A real 2-stage pipeline job at the default log level: no config dump names dp = 1."""
    recs: list[Record] = []
    for found in discover(DATA / "probe_pipeline"):
        recs.extend(read_found(found, "pipe", Diagnostics()))
    ran = check(inputs_from_records(recs, run="pipe"), "batch.arithmetic")
    assert (ran.status, ran.summary) == (
        Status.PASS,
        "batch keys agree with a data-parallel size of 1: the 2 ranks run 2-way pipeline or "
        "tensor parallel",
    )
    assert evidence(ran)["data-parallel size"] == f"2 ({DP_FROM_WORLD})"
    # before its first step the job may yet fail deepspeed.initialize's check
    started = [r for r in recs if r.KIND not in ("iteration", "step", "timer", "rank_step")]
    early = check(inputs_from_records(started, run="pipe"), "batch.arithmetic")
    assert early.status is Status.WARN
    assert early.summary.endswith("with data parallelism alone deepspeed.initialize asserts")
    # no model-parallel degree makes 16 = 2 x 4 x dp hold on 3 ranks
    guess = {"dp_size": 3, "sources": {"dp_size": DP_FROM_WORLD}}
    odd = check(config_inputs(corpus_config("grad_accum"), **guess), "batch.arithmetic")
    assert (odd.status, odd.summary) == (
        Status.FAIL,
        "16 != 2 x 4 x 3: deepspeed.initialize asserts",
    )


def test_clipping_with_long_accumulation_and_the_0_19_3_default() -> None:
    gas = seed("seed003_gas.json")  # GAS 128, no gradient_clipping
    r = check(config_inputs(gas), "batch.clipping_with_accumulation")
    assert r.status is Status.WARN
    assert r.summary == (
        "128 accumulation steps (> 32) and gradient_clipping unset: 1.0 on "
        "DeepSpeed >= 0.19.3 but 0 (off) before"
    )
    raw = dict(gas.raw)
    assert (
        check(
            config_inputs(ConfigView(raw, version=(0, 19, 3))), "batch.clipping_with_accumulation"
        ).status
        is Status.PASS
    )
    assert (
        check(
            config_inputs(ConfigView(raw, version=(0, 18, 0))), "batch.clipping_with_accumulation"
        ).status
        is Status.WARN
    )
    clipped = ConfigView({**raw, "gradient_clipping": 1.0})
    assert check(config_inputs(clipped), "batch.clipping_with_accumulation").status is Status.PASS
    small = check(config_inputs(corpus_config("fp16_zero2")), "batch.clipping_with_accumulation")
    assert small.summary == "at most 2 accumulation steps"


def test_fp16_loss_scaler() -> None:
    r = check(config_inputs(corpus_config("fp16_zero0")), "fp16.loss_scaler")
    assert r.status is Status.WARN
    assert "initial_scale_power 32 outside 8-24" in r.summary
    assert "about 29% of steps skipped" in r.summary
    assert json.loads(r.fix or "") == {
        "fp16": {"initial_scale_power": 16, "loss_scale_window": 1000}
    }
    for good in (
        corpus_config("fp16_zero2"),
        corpus_config("fp16_zero3"),
        seed("seed003_fp16.json"),
    ):
        assert check(config_inputs(good), "fp16.loss_scaler").status is Status.PASS
    floor = ConfigView(
        {"fp16": {"enabled": True, "initial_scale_power": 16, "min_loss_scale": 65536}}
    )
    assert check(config_inputs(floor), "fp16.loss_scaler").status is Status.FAIL


def test_fp16_with_zeropp_quantized_gradients() -> None:
    raw = json.loads((corpus_dir("fp16_zero3") / "ds_config.json").read_text())
    raw["zero_optimization"]["zero_quantized_gradients"] = True
    r = check(config_inputs(ConfigView(raw)), "fp16.zeropp_quantized_gradients")
    assert r.status is Status.WARN
    raw["fp16"]["enabled"] = False
    assert (
        check(config_inputs(ConfigView(raw)), "fp16.zeropp_quantized_gradients").status
        is Status.PASS
    )


def test_bf16_suggested_on_capable_gpus() -> None:
    cfg = corpus_config("fp16_zero2")
    r = check(config_inputs(cfg, gpu_names=("NVIDIA A100-SXM4-80GB",)), "precision.bf16")
    assert (r.status, r.fix) == (
        Status.WARN,
        '{"fp16": {"enabled": false}, "bf16": {"enabled": true}}',
    )
    assert (
        check(config_inputs(cfg, gpu_names=("Tesla V100-SXM2-32GB",)), "precision.bf16").status
        is Status.PASS
    )
    assert check(config_inputs(corpus_config("bf16_zero0")), "precision.bf16").status is Status.PASS


def test_hpz_on_a_single_node() -> None:
    raw = {"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}}
    one = check(config_inputs(ConfigView(raw), nodes=1, world_size=8), "zeropp.hpz_nodes")
    assert (one.status, one.summary) == (
        Status.WARN,
        "hpZ on a single node: no inter-node traffic to save",
    )
    two = check(config_inputs(ConfigView(raw), nodes=2, world_size=16), "zeropp.hpz_nodes")
    assert two.status is Status.PASS
    assert check(config_inputs(ConfigView(raw)), "zeropp.hpz_nodes").status is Status.UNKNOWN


def test_torch_compile_with_zero3_and_activation_checkpointing() -> None:
    raw = {**seed("seed000_torch_compile.json").raw, **seed("seed003_175b.json").raw}
    r = check(config_inputs(ConfigView(raw)), "compile.zero3_act_ckpt")
    assert r.status is Status.WARN
    assert "('torch_compile' itself does nothing: call engine.compile())" in r.summary
    alone = check(config_inputs(seed("seed000_torch_compile.json")), "compile.zero3_act_ckpt")
    assert alone.status is Status.WARN and alone.fix == 'engine.compile(backend="inductor")'
    assert (
        check(config_inputs(seed("seed003_175b.json")), "compile.zero3_act_ckpt").status
        is Status.NOT_APPLICABLE
    )


def test_activation_checkpointing_settings() -> None:
    assert (
        check(config_inputs(seed("seed003_act_ckpt.json")), "act_ckpt.settings").status
        is Status.PASS
    )
    assert (
        check(config_inputs(corpus_config("act_ckpt")), "act_ckpt.settings").status is Status.PASS
    )
    typo = ConfigView(
        {"activation_checkpointing": {"partitioned_activations": True, "cpu_checkpointing": True}}
    )
    r = check(config_inputs(typo), "act_ckpt.settings")
    assert r.status is Status.WARN
    assert json.loads(r.fix or "") == {
        "activation_checkpointing": {"partition_activations": True, "cpu_checkpointing": False}
    }


def test_observability_of_the_seed_snippet_and_versions() -> None:
    obs = seed("seed000_observability.json")
    for rule in (
        "observe.wall_clock_breakdown",
        "observe.steps_per_print",
        "observe.flops_profiler",
    ):
        assert check(config_inputs(obs), rule).status is Status.PASS
    log = check(config_inputs(obs), "observe.log_level")
    assert log.status is Status.WARN and log.fix == '{"log_level": "info"}'
    old = check(
        config_inputs(ConfigView(obs.raw, version=(0, 16, 0)), ds_version=(0, 16, 0)),
        "observe.log_level",
    )
    assert old.status is Status.PASS  # INFO was the default before 0.17.6
    mid = check(config_inputs(ConfigView(obs.raw, version=(0, 18, 0))), "observe.log_level")
    assert mid.fix_lang == "python" and "set_log_level_from_string" in (mid.fix or "")
    unset = check(config_inputs(ConfigView({"train_batch_size": 8})), "observe.steps_per_print")
    assert unset.status is Status.WARN
    old_spp = ConfigView({"train_batch_size": 8}, version=(0, 14, 0))
    assert check(config_inputs(old_spp), "observe.steps_per_print").status is Status.PASS


def test_comms_logger_presence_trap() -> None:
    off = ConfigView({"comms_logger": {"enabled": False}})
    r = check(config_inputs(off), "observe.comms_logger")
    assert r.status is Status.WARN and "presence turns logging on" in r.summary
    assert (
        check(config_inputs(corpus_config("comms_logger")), "observe.comms_logger").status
        is Status.PASS
    )


def test_no_config_means_unknown_not_pass() -> None:
    from dsmon.health import HealthInputs

    checklist = evaluate(HealthInputs())
    config_rules = [r for r in checklist.results if r.category == "config"]
    assert config_rules and all(r.status is Status.UNKNOWN for r in config_rules)
