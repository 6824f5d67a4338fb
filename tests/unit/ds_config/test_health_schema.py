"""The ds_config schema, the config view and the key check (dsmon.ds_config.schema, config_view)."""

from __future__ import annotations

import pytest
from health_support import SEEDS, check, config_inputs, corpus_config, evidence, seed

from dsmon.ds_config.effective import (
    ConfigFileError,
    ConfigView,
    config_from_text,
    ds_config_from_effective,
)
from dsmon.ds_config.schema import PRE_RELEASE, default_for, nearest_key, parse_version
from dsmon.health import Status
from dsmon.health.model import Evidence, format_value
from dsmon.health.rules.schema import find_key_problems


def test_versioned_defaults_follow_deepspeed_history() -> None:
    assert default_for("steps_per_print", (0, 15, 1)) == 10
    assert default_for("steps_per_print", (0, 15, 2)) is None
    assert default_for("gradient_clipping", (0, 19, 2)) == 0.0
    assert default_for("gradient_clipping", (0, 19, 3)) == 1.0
    assert default_for("gradient_clipping", None) == 1.0  # unknown: the newest known
    assert default_for("zero_optimization.overlap_comm", None, stage=3) is True
    assert default_for("zero_optimization.overlap_comm", None, stage=2) is False
    assert default_for("zero_optimization.stage3_prefetch_bucket_size") == 50_000_000
    assert default_for("fp16.loss_scale_window") == 1000


def test_parse_version() -> None:
    assert parse_version("0.19.8") == (0, 19, 8)
    assert parse_version("v0.10.1+abc") == (0, 10, 1)
    assert parse_version("unknown") is None
    assert parse_version("2.1") == PRE_RELEASE  # the early-2020 build, before 0.1.0
    assert parse_version("1.0.0") == (1, 0, 0)  # three numbers: a release


def test_view_reads_aliases_auto_and_defaults() -> None:
    cfg = ConfigView(
        {
            "zero_optimization": {
                "stage": 3,
                "prefetch_bucket_size": 7,
                "reduce_bucket_size": "auto",
            },
            "bfloat16": {"enabled": True},
        }
    )
    assert cfg.get("zero_optimization.stage3_prefetch_bucket_size").value == 7
    auto = cfg.get("zero_optimization.reduce_bucket_size")
    assert (auto.value, auto.explicit) == (500_000_000, False)
    assert cfg.enabled("bf16") is True  # legacy spelling
    assert cfg.get("zero_optimization.overlap_comm").value is True  # stage 3 default
    assert ConfigView({"zero_optimization": True}).stage == 1  # deprecated boolean form


def test_seed004_invented_keys_are_named() -> None:
    problems = {p.path: p for p in find_key_problems(seed("seed004_heterogeneous.json").raw, None)}
    assert set(problems) == {"heterogeneous_config", "zero_optimization.heterogeneous_offload"}
    top, inner = (
        problems["heterogeneous_config"],
        problems["zero_optimization.heterogeneous_offload"],
    )
    assert top.status is Status.WARN and "silently ignored" in top.message
    assert "not a DeepSpeed option" in top.message
    assert "no DeepSpeed version has this 'heterogeneous' option" in top.message
    assert inner.status is Status.FAIL and "deepspeed.initialize fails" in inner.message


def test_key_rule_fails_on_strict_section_and_names_fix() -> None:
    r = check(config_inputs(seed("seed004_heterogeneous.json")), "schema.keys")
    assert r.status is Status.FAIL
    assert r.fix == "delete heterogeneous_config\ndelete zero_optimization.heterogeneous_offload"


@pytest.mark.parametrize(
    ("name", "path", "status"),
    [
        ("seed004_heterogeneous_memory.json", "heterogeneous_memory", Status.WARN),
        ("seed000_torch_compile.json", "torch_compile", Status.WARN),
        (
            "seed003_partitioned_parameters.json",
            "zero_optimization.partitioned_parameters",
            Status.FAIL,
        ),
    ],
)
def test_each_invented_key(name: str, path: str, status: Status) -> None:
    r = check(config_inputs(seed(name)), "schema.keys")
    assert r.status is status
    assert "not a DeepSpeed option" in evidence(r)[path]


def test_lenient_section_typo_gets_nearest_key() -> None:
    r = check(config_inputs(seed("seed000_max_evals.json")), "schema.keys")
    assert r.status is Status.WARN
    assert r.fix == "rename autotuning.max_evals -> tuner_num_trials"
    cfg = ConfigView({"activation_checkpointing": {"partitioned_activations": True}})
    r = check(config_inputs(cfg), "schema.keys")
    assert (
        r.fix == "rename activation_checkpointing.partitioned_activations -> partition_activations"
    )
    assert nearest_key("gradient_acumulation_steps", {"gradient_accumulation_steps"}) == (
        "gradient_accumulation_steps"
    )


def test_fp16_unknown_key_strict_only_from_0_17_1() -> None:
    raw = {"fp16": {"enabled": True, "loss_scael": 0}}
    new = check(config_inputs(ConfigView(raw, version=(0, 19, 8))), "schema.keys")
    old = check(config_inputs(ConfigView(raw, version=(0, 16, 0))), "schema.keys")
    assert (new.status, old.status) == (Status.FAIL, Status.WARN)
    assert "did you mean 'loss_scale'?" in evidence(new)["fp16.loss_scael"]


def test_log_level_is_ignored_before_0_19_3() -> None:
    raw = {"train_batch_size": 8, "log_level": "info"}
    r = check(config_inputs(ConfigView(raw, version=(0, 18, 0))), "schema.keys")
    assert r.status is Status.WARN
    assert evidence(r)["log_level"].startswith("not read by DeepSpeed 0.18.0 (read by 0.19.3-")
    assert r.fix == "upgrade DeepSpeed to >= 0.19.3 or delete log_level"


def test_every_corpus_config_has_only_real_keys() -> None:
    for run in ("z3_overlap_false", "csv_tensorboard", "torchrun", "act_ckpt", "warmup_lr"):
        assert check(config_inputs(corpus_config(run)), "schema.keys").status is Status.PASS


def test_scheduler_compute_aware_fails_and_real_ones_pass() -> None:
    r = check(config_inputs(seed("seed004_scheduler.json")), "schema.scheduler")
    assert r.status is Status.FAIL
    assert "does not recognize LR scheduler compute_aware" in r.summary
    assert check(config_inputs(seed("seed003_175b.json")), "schema.scheduler").status is Status.PASS
    lower = ConfigView({"scheduler": {"type": "warmuplr"}})
    assert "case-sensitive: 'WarmupLR'" in check(config_inputs(lower), "schema.scheduler").summary


def test_optimizer_type_and_max_grad_norm() -> None:
    bad = ConfigView({"optimizer": {"type": "FusedAdamW", "params": {"max_grad_norm": 1.0}}})
    r = check(config_inputs(bad), "schema.optimizer")
    assert r.status is Status.FAIL
    assert "use gradient_clipping" in r.summary and "'FusedAdamW' is neither" in r.summary
    assert check(config_inputs(corpus_config("z2")), "schema.optimizer").status is Status.PASS


def test_hard_checks() -> None:
    both = ConfigView({"fp16": {"enabled": True}, "bf16": {"enabled": True}})
    assert check(config_inputs(both), "schema.hard_checks").status is Status.FAIL
    zero_window = ConfigView({"fp16": {"enabled": True, "loss_scale_window": 0}})
    r = check(config_inputs(zero_window), "schema.hard_checks")
    assert r.summary == "fp16.loss_scale_window must be > 0 with dynamic loss scaling"
    assert (
        check(config_inputs(corpus_config("fp16_zero2")), "schema.hard_checks").status
        is Status.PASS
    )


def test_config_file_errors_name_the_position() -> None:
    seed_path = SEEDS / "seed004_heterogeneous_as_printed.json"
    text = seed_path.read_text()
    with pytest.raises(
        ConfigFileError, match=r"^line 2 column 1: not JSON: Expecting ',' delimiter$"
    ):
        config_from_text(text, str(seed_path))
    with pytest.raises(
        ConfigFileError, match=r"not a DeepSpeed config: none of its keys \(name, version\)"
    ):
        config_from_text('{"name": "x", "version": "1"}', "package.json")
    with pytest.raises(ConfigFileError, match=r"line 1: field 'stage': duplicate key"):
        config_from_text('{"zero_optimization": {"stage": 1, "stage": 2}}', "dup.json")


def test_effective_dump_maps_to_ds_config_keys() -> None:
    eff = {
        "zero_config": {"stage": 3, "overlap_comm": False},
        "float16_config": {"enabled": False},
        "optimizer_name": "adamw",
        "optimizer_params": {"lr": 1e-4},
        "world_size": 2,
        "activation_checkpointing_config": {"partition_activations": False, "profile": False},
    }
    out = ds_config_from_effective(eff)
    assert out == {
        "zero_optimization": {"stage": 3, "overlap_comm": False},
        "fp16": {"enabled": False},
        "optimizer": {"type": "adamw", "params": {"lr": 1e-4}},
    }


def test_format_value_and_evidence_text() -> None:
    assert format_value(500_000_000) == "5e8"
    assert format_value(5e8) == "5e8"
    assert format_value(123456789) == "123456789"
    assert format_value(True) == "true"
    assert Evidence("x", 0.125, "set").text() == "x = 0.125 (set)"
