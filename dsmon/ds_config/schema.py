"""DeepSpeed's real ds_config schema: keys per section, strict or lenient, defaults by version.

A misspelled key costs a user either a crash at ``deepspeed.initialize`` or, worse, nothing at
all: DeepSpeed reads the top level and the older sections with ``dict.get`` and never looks at
leftover keys, while its pydantic sections (``extra="forbid"``) reject them. The checklist can
only say which of the two happens if it knows the real keys, so they are written down here,
read from DeepSpeed's source (deepspeedai/DeepSpeed @ edaa722, v0.19.6, and its git history).
Keys that look like DeepSpeed options but never existed are listed with the reason, so the
checklist names them instead of guessing a nearest key.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Version = tuple[int, int, int]

#: The newest DeepSpeed whose schema this file was checked against.
LATEST_KNOWN: Version = (0, 19, 8)


#: DeepSpeed before its first public release (0.1.0, 2020): the builds of early 2020 print
#: ``DeepSpeed info: version=2.1`` (two numbers, the "DeepSpeedLight" engine). Every release
#: since prints three numbers and is still 0.x, so that 2.1 is older than all of them.
PRE_RELEASE: Version = (0, 0, 0)


def parse_version(text: str | None) -> Version | None:
    """``"0.19.8"`` / ``"0.10.1+abc"`` -> (0, 19, 8); None for anything else.

    A two-number version above 1 (``"2.1"``) is the early-2020 build, :data:`PRE_RELEASE`:
    read as 2.1.0 it would be judged newer than every release.
    """
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not m:
        return None
    if m[3] is None and int(m[1]) >= 1:
        return PRE_RELEASE
    return int(m[1]), int(m[2]), int(m[3] or 0)


def version_text(v: Version | None) -> str:
    """How evidence names a version; None is judged as the newest known one."""
    if v == PRE_RELEASE:
        return "before 0.1 (an early-2020 build)"
    return ".".join(map(str, v)) if v else f"unknown (judged as {version_text(LATEST_KNOWN)})"


@dataclass(frozen=True, slots=True)
class Section:
    """One config section: its keys (with defaults) and how DeepSpeed treats unknown keys.

    ``strict_since`` is the first version whose pydantic model forbids extra keys; before it
    (or for lenient sections, ``None``) an unknown key is silently ignored. ``aliases`` maps
    accepted alternative spellings to the field name (``populate_by_name``).
    """

    path: str
    keys: Mapping[str, Any]
    strict_since: Version | None = None
    aliases: Mapping[str, str] = field(default_factory=dict)

    def strict_in(self, version: Version | None) -> bool:
        """Whether an unknown key here makes ``deepspeed.initialize`` fail in ``version``."""
        if self.strict_since is None:
            return False
        return (version or LATEST_KNOWN) >= self.strict_since

    def known(self) -> set[str]:
        """Every accepted spelling of every key."""
        return set(self.keys) | set(self.aliases)


_PYDANTIC_ZERO: Version = (0, 7, 0)  # ZeRO config moved to pydantic, extra="forbid" (#2004)
_PYDANTIC_PRECISION: Version = (0, 17, 1)  # fp16/bf16 became strict (#6976)
_PYDANTIC_OTHER: Version = (0, 7, 0)  # comms_logger (0.6.6) and monitor (0.7.0) models

#: Top-level sections DeepSpeed reads (lenient) whose inner keys dsmon does not check.
_FREE_FORM_SECTIONS = (
    "amp",
    "torch_autocast",
    "eigenvalue",
    "progressive_layer_drop",
    "sparse_attention",
    "elasticity",
    "compression_training",
    "data_efficiency",
    "curriculum_learning",
    "expert_parallel",
    "datastates_ckpt",
    "quantize_training",
    "nebula",
)

# fmt: off
_ZERO_KEYS: dict[str, Any] = {
    "stage": 0, "contiguous_gradients": True, "reduce_scatter": True,
    "reduce_bucket_size": 500_000_000, "use_multi_rank_bucket_allreduce": True,
    "allgather_partitions": True, "allgather_bucket_size": 500_000_000,
    "overlap_comm": None,  # validator: True for stage 3, False otherwise
    "load_from_fp32_weights": True, "elastic_checkpoint": False, "offload_param": None,
    "offload_optimizer": None, "zenflow": None, "sub_group_size": 1_000_000_000,
    "cpu_offload_param": None, "cpu_offload_use_pin_memory": None, "cpu_offload": None,
    "prefetch_bucket_size": 50_000_000, "param_persistence_threshold": 100_000,
    "model_persistence_threshold": 2**63 - 1, "max_live_parameters": 1_000_000_000,
    "max_reuse_distance": 1_000_000_000, "gather_16bit_weights_on_model_save": False,
    "module_granularity_threshold": 0, "use_all_reduce_for_fetch_params": False,
    "allgather_sequential": False, "stage3_gather_fp16_weights_on_model_save": False,
    "ignore_unused_parameters": True, "legacy_stage1": False, "round_robin_gradients": False,
    "zero_hpz_partition_size": 1, "zero_quantized_weights": False,
    "zero_quantized_nontrainable_weights": False, "zero_quantized_gradients": False,
    "zeropp_loco_param": None, "mics_shard_size": -1, "mics_hierarchical_params_gather": False,
    "memory_efficient_linear": True, "pipeline_loading_checkpoint": False,
    "override_module_apply": True, "log_trace_cache_warnings": False,
    "enable_sanity_checks": False, "save_muon_momentum_buffer_in_memory": False,
    "leaf_module": None,
}
_ZERO_ALIASES = {
    f"stage3_{k}": k
    for k in (
        "prefetch_bucket_size", "param_persistence_threshold", "model_persistence_threshold",
        "max_live_parameters", "max_reuse_distance", "gather_16bit_weights_on_model_save",
        "module_granularity_threshold", "use_all_reduce_for_fetch_params", "allgather_sequential",
    )
}

_MONITOR_COMMON = {"enabled": False, "output_path": "", "job_name": "DeepSpeedJobName"}

_SECTIONS: tuple[Section, ...] = (
    Section("zero_optimization", _ZERO_KEYS, _PYDANTIC_ZERO, _ZERO_ALIASES),
    Section(
        "zero_optimization.offload_param",
        {
            "device": "none", "nvme_path": None, "buffer_count": 5, "buffer_size": 100_000_000,
            "max_in_cpu": 1_000_000_000, "pin_memory": True,
        },
        _PYDANTIC_ZERO,
    ),
    Section(
        "zero_optimization.offload_optimizer",
        {
            "device": "none", "nvme_path": None, "buffer_count": 4, "pin_memory": True,
            "pipeline_read": False, "pipeline_write": False, "fast_init": False, "ratio": 1.0,
            "super_offload": False, "cpuadam_cores_perc": 0.8,
        },
        _PYDANTIC_ZERO,
    ),
    Section(
        "zero_optimization.zenflow",
        {
            "topk_ratio": 0.1, "select_strategy": "auto", "select_interval": "auto",
            "update_interval": "auto", "overlap_step": False, "offload": False,
            "auto_ratio": 0.99, "full_warm_up_rounds": 0, "pt_reserved_cores_perc": 0.5,
            "steps_per_epoch": None,
        },
        _PYDANTIC_ZERO,
    ),
    Section(
        "zero_optimization.leaf_module",
        {"classes": None, "names": None, "name_suffixes": None},
        _PYDANTIC_ZERO,
    ),
    Section(
        "fp16",
        {
            "enabled": False, "auto_cast": False, "loss_scale": 0, "initial_scale_power": 16,
            "loss_scale_window": 1000, "hysteresis": 2, "consecutive_hysteresis": False,
            "min_loss_scale": 1, "fp16_master_weights_and_grads": False,
        },
        _PYDANTIC_PRECISION,
    ),
    Section(
        "bf16",
        {
            "enabled": False, "immediate_grad_update": False, "check_grad_overflow": True,
            "bf16_master_weights_and_grads": False, "bf16_optimizer_states": False,
        },
        _PYDANTIC_PRECISION,
    ),
    Section(
        "comms_logger",
        {"enabled": False, "verbose": False, "prof_all": True, "debug": False, "prof_ops": []},
        _PYDANTIC_OTHER,
    ),
    Section("tensorboard", _MONITOR_COMMON, _PYDANTIC_OTHER),
    Section("csv_monitor", _MONITOR_COMMON, _PYDANTIC_OTHER),
    Section(
        "wandb",
        {"enabled": False, "group": None, "team": None, "project": "deepspeed"},
        _PYDANTIC_OTHER,
    ),
    Section(
        "comet",
        {
            "enabled": False, "samples_log_interval": 100, "project": None, "workspace": None,
            "api_key": None, "experiment_name": None, "experiment_key": None, "online": None,
            "mode": None,
        },
        _PYDANTIC_OTHER,
    ),
    Section("timers", {"throughput": None}),
    Section("timers.throughput", {"enabled": True, "synchronized": True}, _PYDANTIC_OTHER),
    Section(
        "compile",
        {
            "deepcompile": False, "free_activation": False,
            "free_activation_threshold": 10 << 20, "offload_activation": False,
            "offload_activation_pin_memory": True, "offload_opt_states": False,
            "double_buffer": True, "symmetric_memory": False, "debug_log": False,
            "offload_parameters": False, "sync_before_reduce": False,
            "sync_after_reduce": False, "sync_before_allgather": False,
            "sync_after_allgather": False, "keep_int_input_tensors": True,
            "keep_all_input_tensors": False, "passes": None,
        },
        (0, 16, 6),  # DeepCompile (#7154)
    ),
    Section(
        "hybrid_engine",
        {
            "enabled": False, "max_out_tokens": 512, "inference_tp_size": 1,
            "release_inference_cache": False, "pin_parameters": True,
            "tp_gather_partition_size": 8, "enable_cuda_graph": False,
        },
        (0, 9, 0),  # DeepSpeed Chat (#3186)
    ),
    Section(
        "tensor_parallel",
        {
            "dtype": "fp16", "autotp_size": 0, "tp_overlap_comm": False,
            "tensor_parallel": None, "injection_policy_tuple": None, "partition_config": None,
            "preset_model": None, "keep_module_on_host": False,
            "replace_with_kernel_inject": False,
        },
        _PYDANTIC_OTHER,
        {"tp": "tensor_parallel", "kernel_inject": "replace_with_kernel_inject"},
    ),
    Section(
        "weight_quantization",
        {
            "enabled": True, "num_bits": 8, "q_type": "symmetric", "q_groups": 1,
            "quantized_initialization": None, "post_init_quant": None,
        },
        _PYDANTIC_OTHER,
    ),
    # lenient sections: read with dict.get, unknown keys silently ignored
    Section(
        "activation_checkpointing",
        {
            "partition_activations": False, "contiguous_memory_optimization": False,
            "cpu_checkpointing": False, "number_checkpoints": None,
            "synchronize_checkpoint_boundary": False, "profile": False,
        },
    ),
    Section(
        "flops_profiler",
        {
            "enabled": False, "recompute_fwd_factor": 0.0, "profile_step": 1,
            "module_depth": -1, "top_modules": 1, "detailed": True, "output_file": None,
        },
    ),
    Section(
        "autotuning",
        {
            "enabled": False, "fast": True, "results_dir": "autotuning_results",
            "exps_dir": "autotuning_exps", "overwrite": True, "start_profile_step": 3,
            "end_profile_step": 5, "metric_path": None, "metric": "throughput",
            "tuner_type": "gridsearch", "tuner_early_stopping": 5, "tuner_num_trials": 50,
            "arg_mappings": None, "model_info_path": None, "model_info": None, "mp_size": 1,
            "max_train_batch_size": None, "min_train_batch_size": 1,
            "max_train_micro_batch_size_per_gpu": 1024, "min_train_micro_batch_size_per_gpu": 1,
            "num_tuning_micro_batch_sizes": 3,
        },
    ),
    Section(
        "aio",
        {
            "block_size": 1048576, "queue_depth": 8, "intra_op_parallelism": 1,
            "single_submit": False, "overlap_events": True, "use_gds": False,
        },
    ),
    Section(
        "checkpoint",
        {
            "tag_validation": "WARN", "load_universal": False, "use_node_local_storage": False,
            "parallel_write": None, "writer": None,
        },
    ),
    Section("data_types", {"grad_accum_dtype": None, "param_dtype": None, "buffer_dtype": None}),
    Section(
        "pipeline",
        {
            "stages": "auto", "partition": "best", "seed_layers": False,
            "activation_checkpoint_interval": 0, "pipe_partitioned": True,
            "grad_partitioned": True,
        },
    ),
    Section("optimizer", {"type": None, "params": None, "legacy_fusion": False}),
    Section("scheduler", {"type": None, "params": None}),
)

#: Top-level keys DeepSpeed reads (runtime/constants.py, runtime/config.py _initialize_params).
TOP_LEVEL: dict[str, Any] = {
    "train_batch_size": None, "train_micro_batch_size_per_gpu": None,
    "gradient_accumulation_steps": None, "managed_gradient_accumulation": True,
    "steps_per_print": None, "wall_clock_breakdown": False, "memory_breakdown": False,
    "dump_state": False, "gradient_clipping": 1.0, "prescale_gradients": False,
    "gradient_predivide_factor": 1.0, "gradient_allreduce_op": "mean",
    "communication_data_type": None, "seq_parallel_communication_data_type": "fp32",
    "sparse_gradients": False, "disable_allgather": False,
    "zero_allow_untested_optimizer": False, "zero_force_ds_cpu_optimizer": True,
    "log_level": None, "dataloader_drop_last": False, "vocabulary_size": None,
    "use_data_before_expert_parallelism": False, "graph_harvesting": False,
    "sequence_parallel_size": None,
    "bfloat16": None,  # legacy spelling of bf16
    **{s.path: None for s in _SECTIONS if "." not in s.path},
    **dict.fromkeys(_FREE_FORM_SECTIONS),
}
# fmt: on

#: Sections whose inner keys dsmon does not check (their schemas are large or free-form).
OPAQUE = frozenset(
    {
        "optimizer.params",
        "scheduler.params",
        *_FREE_FORM_SECTIONS,
        "autotuning.arg_mappings",
        "autotuning.model_info",
        "zero_optimization.leaf_module.classes",
        "zero_optimization.zeropp_loco_param",
        "checkpoint.parallel_write",
        "checkpoint.writer",
        "tensor_parallel.tensor_parallel",
        "weight_quantization.quantized_initialization",
        "weight_quantization.post_init_quant",
        "comet",
        "wandb",
    }
)

#: Defaults that changed between versions: path -> ((first version, value), ...), oldest first.
VERSIONED_DEFAULTS: dict[str, tuple[tuple[Version, Any], ...]] = {
    "steps_per_print": (((0, 0, 0), 10), ((0, 15, 2), None)),  # f74ea69 (#6602)
    "gradient_clipping": (((0, 0, 0), 0.0), ((0, 19, 3), 1.0)),  # 4421665 (#8068)
    "bf16.check_grad_overflow": (((0, 0, 0), False), ((0, 19, 3), True)),  # f0253c8 (#8035)
}
#: The workers' logger level by default: INFO up to 0.17.5, WARNING from 0.17.6 (#7526).
LOGGER_DEFAULT_LEVEL: tuple[tuple[Version, str], ...] = (
    ((0, 0, 0), "info"),
    ((0, 17, 6), "warning"),
)
#: First version that reads a key (older ones ignore it as an unknown top-level key).
KEY_SINCE: dict[str, Version] = {"log_level": (0, 19, 3), "compile": (0, 16, 6)}

SECTIONS: dict[str, Section] = {s.path: s for s in _SECTIONS}
SECTIONS["bfloat16"] = SECTIONS["bf16"]


def by_version(table: tuple[tuple[Version, Any], ...], version: Version | None) -> Any:
    """The entry of a versioned table in force for ``version`` (None: the newest)."""
    v = version or LATEST_KNOWN
    value = table[0][1]
    for since, val in table:
        if v >= since:
            value = val
    return value


def default_for(path: str, version: Version | None = None, stage: int | None = None) -> Any:
    """DeepSpeed's default for a dotted config path in ``version``; None when it has none.

    ``zero_optimization.overlap_comm`` depends on the stage (True for stage 3 only).
    """
    if path in VERSIONED_DEFAULTS:
        return by_version(VERSIONED_DEFAULTS[path], version)
    if path == "zero_optimization.overlap_comm":
        return stage == 3
    section_path, _, key = path.rpartition(".")
    if not section_path:
        return TOP_LEVEL.get(key)
    section = SECTIONS.get(section_path)
    if section is None:
        return None
    return section.keys.get(section.aliases.get(key, key))


def nearest_key(key: str, known: set[str] | frozenset[str]) -> str | None:
    """The real key a typo most likely meant, or None when nothing is close."""
    hits = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
    return hits[0] if hits else None
