"""Config dumps pasted by users (field corpus 03, 08, 15, 27, 28, 29, 30).

Each excerpt goes through ``dsmon parse``; the expected values are read off the excerpt by hand.
A dump cut short, or met without its header, keeps what it printed with ``partial`` set.
"""

from __future__ import annotations

from field_corpus import dsmon_parse

from dsmon.ds_config.read import preferred_config
from dsmon.ds_config.schema import PRE_RELEASE
from dsmon.health import Status, evaluate
from dsmon.health.gather import inputs_from_records
from dsmon.model.records import ConfigRecord, EventRecord, MemoryRecord, StepRecord


def configs(number: int) -> dict[str, ConfigRecord]:
    parsed = dsmon_parse(number)
    found = parsed.of(ConfigRecord)
    by_origin = {c.origin: c for c in found}
    assert len(by_origin) == len(found)
    return by_origin


def test_03_dump_header_is_the_last_line() -> None:
    parsed = dsmon_parse(3)
    # the excerpt ends on "DeepSpeedEngine configuration:": a dump with nothing in it
    assert parsed.of(ConfigRecord) == []
    assert "cut config_dump: 1" in parsed.report
    assert parsed.one(StepRecord).lr == (5e-05,)  # "step=0, skipped=0, lr=[5e-05], ..."
    assert [m.label for m in parsed.of(MemoryRecord)] == [
        "Stage 3 initialize beginning",
        "Before creating fp16 partitions",
        "After initializing ZeRO optimizer",
    ]


def test_08_deepspeedlight_dump_of_2020_under_pdsh() -> None:
    found = configs(8)
    effective, user = found["effective"], found["user_json"]
    assert not effective.partial and not user.partial
    assert (effective.src.line, effective.src.node, effective.src.rank) == (17, "worker-0", 0)
    cfg = effective.config
    assert len(cfg) == 26  # "allgather_size" (line 18) to "zero_enabled" (line 43)
    assert cfg["allgather_size"] == 500000000
    assert cfg["initial_dynamic_scale"] == 4294967296
    assert cfg["train_batch_size"] == 4
    assert cfg["train_micro_batch_size_per_gpu"] == 4  # 30 characters: no dots
    assert cfg["tensorboard_output_path"] == ""  # "tensorboard_output_path ......" and nothing
    assert cfg["optimizer_params"] == {
        "lr": 0.001,
        "betas": [0.8, 0.999],
        "eps": 1e-08,
        "weight_decay": 3e-07,
    }
    assert cfg["scheduler_params"]["warmup_num_steps"] == 1000
    assert cfg["fp16_enabled"] is False and cfg["dynamic_loss_scale_args"] is None
    # "json = {" with the 2020 style: no space after the colons
    assert user.src.line == 44
    assert user.config == {
        "optimizer": {
            "params": {"betas": [0.8, 0.999], "eps": 1e-08, "lr": 0.001, "weight_decay": 3e-07},
            "type": "Adam",
        },
        "scheduler": {
            "params": {"warmup_max_lr": 0.001, "warmup_min_lr": 0, "warmup_num_steps": 1000},
            "type": "WarmupLR",
        },
        "steps_per_print": 2000,
        "train_batch_size": 4,
        "wall_clock_breakdown": False,
    }


def test_15_dump_of_2025_with_other_ranks_inside() -> None:
    found = configs(15)
    effective, user = found["effective"], found["user_json"]
    assert not effective.partial and not user.partial
    cfg = effective.config
    assert len(cfg) == 72  # the "config.py:1003:print" lines; "Config mesh_device" ones are not
    assert "Config" not in cfg
    assert (cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"]) == (32, 2)
    assert cfg["gradient_accumulation_steps"] == 2 and cfg["world_size"] == 8
    assert cfg["fp16_enabled"] is True and cfg["zero_optimization_stage"] == 0
    zero = cfg["zero_config"]  # pydantic repr: "stage=0 contiguous_gradients=True ..."
    assert zero["reduce_bucket_size"] == 500000000
    assert zero["offload_param"]["device"] == "none"
    assert zero["model_persistence_threshold"] == 9223372036854775807
    assert zero["mics_shard_size"] == -1
    assert cfg["timers_config"] == {"enabled": True, "synchronized": True}
    assert cfg["monitor_config"]["wandb"]["project"] == "deepspeed"
    assert cfg["autotuning_config"]["max_train_micro_batch_size_per_gpu"] == 1024.0  # 1.024000e+03
    assert cfg["flops_profiler_config"]["recompute_fwd_factor"] == 0.0
    assert (
        cfg["comms_config"]
        == "<deepspeed.comm.config.DeepSpeedCommsConfig object at 0x7fad8c82e5c0>"
    )
    assert cfg["use_data_before_expert_parallel_"] is False
    assert user.src.line == 126
    assert user.config["zero_optimization"]["stage3_param_persistence_threshold"] == 10000.0
    assert user.config["fp16"] == {"enabled": True, "loss_scale_window": 100}
    assert user.config["tensorboard"]["job_name"] == "step2_model_tensorboard"


def test_27_object_repr_dump_cut_by_the_paste() -> None:
    effective = configs(27)["effective"]
    assert effective.partial and effective.src.line == 6
    assert effective.config == {
        "activation_checkpointing_config": "<deepspeed.runtime.activation_checkpointing.config."
        "DeepSpeedActivationCheckpointingConfig object at 0x7fb79d0bec10>",
        "allreduce_always_fp32": False,
        "amp_enabled": False,
        "amp_params": False,
        "disable_allgather": False,
        "dump_state": False,
        "dynamic_loss_scale_args": None,
    }


def test_28_tail_of_a_2021_dump_without_its_header() -> None:
    effective = configs(28)["effective"]
    assert effective.partial and effective.src.line == 1
    cfg = effective.config
    assert cfg["steps_per_print"] == 10
    assert cfg["tensorboard_job_name"] == "DeepSpeedJobName"
    assert cfg["tensorboard_output_path"] == ""  # "tensorboard_output_path ...... "
    assert (cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"]) == (4, 4)
    assert cfg["world_size"] == 1 and cfg["zero_allow_untested_optimizer"] is False
    # the sorted-key JSON of zero_config, cut after "overlap_comm": its complete lines
    assert cfg["zero_config"] == {
        "allgather_bucket_size": 200000000.0,
        "allgather_partitions": True,
        "contiguous_gradients": True,
        "cpu_offload": True,
        "cpu_offload_params": False,
        "cpu_offload_use_pin_memory": False,
        "elastic_checkpoint": True,
        "load_from_fp32_weights": True,
        "max_live_parameters": 1000000000,
        "max_reuse_distance": 1000000000,
        "overlap_comm": True,
    }


def test_29_middle_of_a_dump_under_torchrun_prefixes() -> None:
    parsed = dsmon_parse(29)
    effective = parsed.one(ConfigRecord)
    assert effective.partial and effective.origin == "effective"
    assert effective.src.line == 2  # line 1 is the tail of compression_config, not readable
    assert effective.ts == "2022-12-08T16:39:29.812"
    cfg = effective.config
    assert len(cfg) == 10
    assert cfg["curriculum_enabled"] is False
    assert cfg["dynamic_loss_scale_args"] == {
        "init_scale": 4096,
        "scale_window": 500,
        "delayed_shift": 2,
        "min_scale": 1,
    }
    assert cfg["eigenvalue_gas_boundary_resolution"] == 1
    assert cfg["eigenvalue_layer_name"] == "bert.encoder.layer"
    assert cfg["eigenvalue_layer_num"] == 0


def test_30_start_of_a_2024_dump_cut_inside_autotuning_config() -> None:
    effective = configs(30)["effective"]
    assert effective.partial and effective.ts == "2024-12-11T17:41:48.135"
    cfg = effective.config
    assert list(cfg) == [
        "activation_checkpointing_config",
        "aio_config",
        "amp_enabled",
        "amp_params",
        "autotuning_config",
    ]
    assert cfg["activation_checkpointing_config"]["number_checkpoints"] is None
    assert cfg["aio_config"]["use_gds"] is False and cfg["aio_config"]["block_size"] == 1048576
    auto = cfg["autotuning_config"]
    assert auto["metric"] == "throughput" and auto["tuner_num_trials"] == 50
    assert list(auto)[-1] == "mp_size" and auto["mp_size"] == 1  # the last complete line


def test_settings_are_never_read_from_a_partial_dump() -> None:
    """Health checks and pages read preferred_config: a cut dump (28) would read as defaults."""
    cut = configs(28)["effective"]
    whole = configs(15)["effective"]
    assert preferred_config([cut]) is None
    assert preferred_config([whole, cut]) is whole


def test_08_version_line_of_the_same_run() -> None:
    (version,) = [e for e in dsmon_parse(8).of(EventRecord) if e.name == "deepspeed_version"]
    assert version.detail["version"] == "2.1" and version.detail["git_hash"] == "fa937e7"


def test_08_version_2_1_is_judged_older_than_every_release() -> None:
    """``version=2.1`` predates DeepSpeed's public numbering (0.1.0 onwards): read as 2.1.0
    the checklist named it "DeepSpeed 2.1.0" and judged keys as a version newer than 0.19."""
    inputs = inputs_from_records(dsmon_parse(8).records, run="field")
    assert inputs.facts.ds_version == PRE_RELEASE
    assert inputs.facts.version_label == "before 0.1 (an early-2020 build)"
    r = evaluate(inputs)
    (steps_per_print,) = [c for c in r.results if c.rule_id == "observe.steps_per_print"]
    assert ("DeepSpeed version", "before 0.1 (an early-2020 build)") in [
        (e.label, e.value) for e in steps_per_print.evidence
    ]


def test_08_info_lines_in_the_log_are_visible_whatever_the_version_says() -> None:
    """The workers' INFO lines in the log make observe.log_level pass, whatever the version:
    the 2020 engine's ``rank:0 step=0, skipped=0, ...`` lines are read behind their prefix."""
    parsed = dsmon_parse(8)
    assert [(s.step, s.src.rank) for s in parsed.of(StepRecord)] == [(0, 0)]
    r = evaluate(inputs_from_records(parsed.records, run="field"))
    (log_level,) = [c for c in r.results if c.rule_id == "observe.log_level"]
    assert log_level.status is Status.PASS
    assert log_level.summary.startswith("step= lines are in the log")
