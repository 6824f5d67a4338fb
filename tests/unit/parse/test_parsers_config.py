"""ConfigDumpParser and the printed-value reader, on real DeepSpeed config dumps.

Data (see each folder's README.md): flops_z0, comms_z3_overlap_true and config_z2_offload are corpus
runs (DeepSpeed 0.19.8); megatron_ds095_llama is a DeepSpeed 0.9.5 log from a public repository;
config_v03_issue679 is the start of a 0.3.x dump from a GitHub issue.
"""

from __future__ import annotations

import sys

import pytest
from locations import DATA

from dsmon.model.records import ConfigRecord, Record, Source
from dsmon.model.wire import decode, encode
from dsmon.parse.families.config_dump import loads_lenient, printed_words
from dsmon.parse.log import parse_text
from dsmon.parse.pyrepr import parse_value


def configs(text: str, file: str = "train.log") -> tuple[list[ConfigRecord], dict[str, int]]:
    recs, diag = parse_text(text, run="r", file=file)
    return [r for r in recs if isinstance(r, ConfigRecord)], dict(diag.cut)


def read(folder: str) -> str:
    return (DATA / folder / "train.log").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def z0() -> tuple[ConfigRecord, ConfigRecord]:
    recs, cut = configs(read("flops_z0"))
    assert cut == {}
    effective, user = recs
    return effective, user


def test_z0_gives_effective_then_user_record(z0: tuple[ConfigRecord, ConfigRecord]) -> None:
    effective, user = z0
    assert (effective.origin, effective.src.line, effective.src.rank) == ("effective", 37, 0)
    assert effective.ts == "2026-11-29T14:10:22.818"
    assert (user.origin, user.src.line, user.ts) == ("user_json", 142, "2026-11-29T14:10:22.822")
    assert len(effective.config) == 62  # the 62 attribute lines, 38-141


def test_z0_scalars_and_resolved_batch_sizes(z0: tuple[ConfigRecord, ConfigRecord]) -> None:
    cfg = z0[0].config
    assert cfg["train_batch_size"] == 8
    assert cfg["train_micro_batch_size_per_gpu"] == 4  # 29+ chars: two spaces, no dots
    assert cfg["gradient_accumulation_steps"] == 1
    assert cfg["world_size"] == 2
    assert cfg["zero_optimization_stage"] == 0
    assert cfg["wall_clock_breakdown"] is True
    assert cfg["gradient_clipping"] == 1.0
    assert cfg["buffer_dtype"] is None
    assert cfg["optimizer_name"] == "adamw"
    assert cfg["seq_parallel_communication_data_type"] == "torch.float32"
    assert cfg["checkpoint_tag_validation_enabled"] is True


def test_z0_structured_values(z0: tuple[ConfigRecord, ConfigRecord]) -> None:
    cfg = z0[0].config
    assert cfg["optimizer_params"] == {"lr": 0.0001, "torch_adam": True}
    # multi-line JSON value, closed by "}" at column 0 (lines 38-45)
    assert cfg["activation_checkpointing_config"] == {
        "partition_activations": False,
        "contiguous_memory_optimization": False,
        "cpu_checkpointing": False,
        "number_checkpoints": None,
        "synchronize_checkpoint_boundary": False,
        "profile": False,
    }
    assert cfg["autotuning_config"]["max_train_micro_batch_size_per_gpu"] == 1024.0  # 1.024000e+03
    assert cfg["flops_profiler_config"]["profile_step"] == 5
    # pydantic "k=v k=v" reprs, nested Name(...) models
    assert cfg["float16_config"]["initial_scale_power"] == 16
    assert cfg["float16_config"]["loss_scale"] == 0.0
    assert cfg["monitor_config"]["wandb"] == {
        "enabled": False,
        "group": None,
        "team": None,
        "project": "deepspeed",
    }
    assert cfg["zero_config"]["reduce_bucket_size"] == 500000000
    assert cfg["zero_config"]["model_persistence_threshold"] == 9223372036854775807
    assert cfg["zero_config"]["leaf_module"]["names"] == []
    assert cfg["tensor_parallel_config"]["dtype"] == "torch.float16"
    assert cfg["tensor_parallel_config"]["tensor_parallel"]["tp_size"] == 1
    # objects are kept as printed
    assert (
        cfg["comms_config"]
        == "<deepspeed.comm.config.DeepSpeedCommsConfig object at 0x7f4197e77610>"
    )
    assert cfg["expert_parallel_config"]["expert_w3"] == "<object object at 0x7f4199786e50>"
    assert cfg["data_efficiency_config"]["data_sampling"]["dynamic_batching"]["min_batch_size"] == 1


def test_z0_user_json_in_file_order(z0: tuple[ConfigRecord, ConfigRecord]) -> None:
    user = z0[1].config
    assert user == {
        "train_batch_size": 8,
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 5,
        "log_level": "info",
        "wall_clock_breakdown": True,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.0001, "torch_adam": True}},
        "zero_optimization": {"stage": 0},
        "flops_profiler": {
            "enabled": True,
            "profile_step": 5,
            "module_depth": -1,
            "top_modules": 3,
            "detailed": False,
        },
    }
    assert list(user)[:3] == [
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
    ]


def test_config_records_survive_the_wire(z0: tuple[ConfigRecord, ConfigRecord]) -> None:
    for rec in z0:
        back: Record = decode(encode(rec))
        assert back == rec


def test_user_json_e_notation_numbers() -> None:
    (effective, user), cut = configs(read("comms_z3_overlap_true"))
    assert cut == {}
    zero = user.config["zero_optimization"]
    assert zero["reduce_bucket_size"] == 500000000.0  # printed 5.000000e+08
    assert zero["stage3_param_persistence_threshold"] == 10000.0  # 1.000000e+04
    assert zero["overlap_comm"] is True
    assert effective.config["zero_config"]["overlap_comm"] is True
    assert effective.config["zero_config"]["stage"] == 3


def test_nested_offload_model_in_zero_config() -> None:
    (effective, user), _ = configs(read("config_z2_offload"))
    offload = effective.config["zero_config"]["offload_optimizer"]
    assert offload["device"] == "cpu"
    assert offload["buffer_count"] == 4
    assert offload["ratio"] == 1.0
    assert offload["nvme_path"] is None
    assert user.config["zero_optimization"]["offload_optimizer"] == {
        "device": "cpu",
        "pin_memory": False,
    }


def test_deepspeed_095_dump_with_pydantic_v1_values() -> None:
    (effective, user), cut = configs(read("megatron_ds095_llama"))
    assert cut == {}
    assert (effective.src.line, effective.ts) == (11, "2023-08-15T06:31:35.632")
    cfg = effective.config
    assert len(cfg) == 69
    assert cfg["zero_config"]["reduce_bucket_size"] == 500000000  # printed 500,000,000
    assert cfg["zero_config"]["model_persistence_threshold"] == sys.maxsize  # "sys.maxsize"
    assert cfg["monitor_config"]["enabled"] is False
    assert cfg["dynamic_loss_scale_args"]["init_scale"] == 65536
    assert cfg["gradient_accumulation_steps"] == 4
    assert cfg["eigenvalue_layer_name"] == "bert.encoder.layer"
    assert cfg["nebula_config"]["persistent_time_interval"] == 100
    assert user.src.line == 127
    assert user.config["fp16"]["initial_scale_power"] == 16


def test_dump_cut_inside_attributes_keeps_what_was_read() -> None:
    """z0 up to line 100: the dump stops inside flops_profiler_config's JSON (lines 93-100)."""
    head = "\n".join(read("flops_z0").splitlines()[:100])
    (effective,), cut = configs(head, file="z0.log")
    assert cut == {"config_dump": 1}
    assert effective.partial and effective.origin == "effective"
    assert effective.src.line == 37
    cfg = effective.config
    assert cfg["autotuning_config"]["max_train_micro_batch_size_per_gpu"] == 1024.0
    assert cfg["bfloat16_config"]["check_grad_overflow"] is True
    # the JSON value in progress keeps its complete lines
    assert cfg["flops_profiler_config"]["profile_step"] == 5
    assert cfg["flops_profiler_config"]["output_file"] is None  # line 100, the last one read
    assert "train_batch_size" not in cfg  # printed after the cut


def test_dump_cut_inside_user_json_keeps_the_whole_dump(
    z0: tuple[ConfigRecord, ConfigRecord],
) -> None:
    """z0 up to line 150: every attribute arrived; the user JSON (from line 142) is cut."""
    lines = read("flops_z0").splitlines()
    recs, diag = parse_text("\n".join(lines[:150]), run="r", file="z0.log")
    effective, user = [r for r in recs if isinstance(r, ConfigRecord)]
    assert diag.cut["config_dump"] == 1
    assert diag.examples["config_dump"] == ["z0.log:37: DeepSpeedEngine configuration:"]
    assert not effective.partial and effective.config == z0[0].config
    assert user.partial and user.src.line == 142
    # the first six keys of the whole JSON, and of "optimizer" only line 150's "type"
    first_six = dict(list(z0[1].config.items())[:6])
    assert user.config == {**first_six, "optimizer": {"type": "AdamW"}}
    assert list(first_six)[-1] == "wall_clock_breakdown"


def test_old_dump_cut_by_end_of_paste() -> None:
    (rec,), cut = configs(read("config_v03_issue679"))
    assert cut == {"config_dump": 1}
    assert rec.partial and rec.origin == "effective"
    assert len(rec.config) == 10  # the ten attribute lines, 3-12
    assert rec.config["checkpoint_tag_validation_enabled"] is True
    assert rec.config["dynamic_loss_scale_args"]["min_scale"] == 1e-24
    assert rec.config["elasticity_enabled"] is False


def test_interleaved_line_of_another_rank_is_passed_on() -> None:
    lines = read("flops_z0").splitlines()
    other = lines[20]  # rank 1's "Config mesh_device None world_size = 2" (line 21)
    # one inside autotuning_config's JSON lines (47-71), one between attribute lines 90 and 91
    spliced = lines[:60] + [other] + lines[60:90] + [other] + lines[90:]
    recs, cut = configs("\n".join(spliced))
    whole, _ = configs("\n".join(lines))
    assert cut == {}
    assert [r.config for r in recs] == [r.config for r in whole]


def test_printed_values_of_old_versions() -> None:
    assert parse_value(
        "{'init_scale': 0.25, 'scale_window': 100, 'delayed_shift': 2, 'min_scale': 1e-24}"
    ) == {
        "init_scale": 0.25,
        "scale_window": 100,
        "delayed_shift": 2,
        "min_scale": 1e-24,
    }
    obj = "<deepspeed.runtime.activation_checkpointing.config.DeepSpeedActivationCheckpointingConfig object at 0x7fe0f0994a60>"
    assert parse_value(obj) == obj
    # the launcher's global_rank_mapping: a call with positional arguments stays text
    mapping = "defaultdict(<class 'list'>, {'localhost': [0, 1]})"
    assert parse_value(mapping) == mapping
    assert parse_value(" ") == ""
    assert parse_value("[0.9, 0.999]") == [0.9, 0.999]
    assert parse_value("(0.9, 0.999)") == [0.9, 0.999]
    assert parse_value("{'a': 1") == "{'a': 1"  # unreadable: kept as printed


def test_lenient_json_accepts_what_deepspeed_prints() -> None:
    assert loads_lenient('{\n    "a": inf, \n    "b": [1, 2, ], \n}') == {
        "a": float("inf"),
        "b": [1, 2],
    }
    assert loads_lenient('{"s": "inf, ]"}') == {"s": "inf, ]"}
    with pytest.raises(ValueError):
        loads_lenient('{"a": ')


def test_non_finite_values_keep_the_word_deepspeed_printed() -> None:
    """JSON has no inf: as a number it would reach the store as null, as if never printed."""
    value = loads_lenient('{\n    "a": inf, \n    "b": [-inf, 1.5], \n    "c": {"d": nan}\n}')
    kept = printed_words(value)
    assert kept == {"a": "inf", "b": ["-inf", 1.5], "c": {"d": "nan"}}
    rec = ConfigRecord(src=Source(run="r"), origin="user_json", config=kept)
    assert decode(encode(rec)) == rec
