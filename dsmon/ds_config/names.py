"""Names a ds_config may use for optimizer and scheduler types, and names that do not exist.

Advice that circulates with options DeepSpeed never had costs a user a silent no-op or a
crash at ``deepspeed.initialize``. The checklist names such keys and types explicitly, with
what DeepSpeed really does with them (checked with ``git grep``/``git log -S`` on DeepSpeed's
whole history), instead of guessing a nearest key.
"""

from __future__ import annotations

_NEVER_EXISTED = (
    "no DeepSpeed version has this 'heterogeneous' option, in its source or its git history"
)
#: Keys that look like DeepSpeed options but are not, and what DeepSpeed does with them.
INVENTED: dict[str, str] = {
    "heterogeneous_config": f"{_NEVER_EXISTED}; there is no load-balancing or 'compute_aware' mode",
    "heterogeneous_offload": (
        f"{_NEVER_EXISTED}; real offload is zero_optimization.offload_optimizer / offload_param "
        '{"device": "cpu"|"nvme"}'
    ),
    "heterogeneous_memory": f"{_NEVER_EXISTED}; DeepSpeed has no adaptive HBM memory pool",
    "torch_compile": (
        "no such key in any DeepSpeed version: torch.compile is turned on by calling "
        "engine.compile(backend=...); the 'compile' section configures DeepCompile"
    ),
    "partitioned_parameters": (
        "not a config key: the name only appears inside private ZeRO-3 method names"
    ),
    "partitioned_activations": (
        "misspelling of 'partition_activations' (DeepSpeed's own help text has this typo)"
    ),
    "check_overflow": "stale constant name: the bf16 field is 'check_grad_overflow'",
    "max_evals": "not an autotuning key: the number of experiments is 'tuner_num_trials'",
}

#: Real keys that invented or stale spellings stand for (a rename fixes them).
CONFUSIONS: dict[str, str] = {
    "partitioned_activations": "partition_activations",
    "check_overflow": "check_grad_overflow",
    "max_evals": "tuner_num_trials",
}

#: Scheduler types DeepSpeed builds itself (runtime/lr_schedules.py VALID_LR_SCHEDULES).
DS_SCHEDULERS = ("LRRangeTest", "OneCycle", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR")
#: torch.optim.lr_scheduler classes DeepSpeed falls back to (case-sensitive getattr).
TORCH_SCHEDULERS = (
    "LambdaLR",
    "MultiplicativeLR",
    "StepLR",
    "MultiStepLR",
    "ConstantLR",
    "LinearLR",
    "ExponentialLR",
    "SequentialLR",
    "CosineAnnealingLR",
    "ChainedScheduler",
    "ReduceLROnPlateau",
    "CyclicLR",
    "CosineAnnealingWarmRestarts",
    "OneCycleLR",
    "PolynomialLR",
    "LRScheduler",
)
INVENTED_SCHEDULERS: dict[str, str] = {
    "compute_aware": (
        "not a DeepSpeed scheduler: deepspeed.initialize raises "
        "'AssertionError: DeepSpeed does not recognize LR scheduler compute_aware'"
    ),
}
#: Optimizer types DeepSpeed matches case-insensitively (runtime/config.py DEEPSPEED_OPTIMIZERS).
DS_OPTIMIZERS = (
    "adam",
    "adamw",
    "adagrad",
    "lamb",
    "onebitadam",
    "zerooneadam",
    "onebitlamb",
    "muadam",
    "muadamw",
    "musgd",
    "lion",
    "muon",
)
#: torch.optim classes (case-sensitive getattr) a config may name instead.
TORCH_OPTIMIZERS = (
    "SGD",
    "Adam",
    "AdamW",
    "Adagrad",
    "Adadelta",
    "Adamax",
    "ASGD",
    "LBFGS",
    "NAdam",
    "RAdam",
    "RMSprop",
    "Rprop",
    "SparseAdam",
    "Adafactor",
    "Muon",
)
