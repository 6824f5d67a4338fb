"""Names a ds_config may use for optimizer and scheduler types, and names that do not exist.

A tuning guide that invents an option costs its readers a silent no-op or a crash at
``deepspeed.initialize``. The checklist names such keys and types explicitly, with what
DeepSpeed really does with them (``shared/reference/deepspeed-formats.md`` section 12, checked
with ``git grep``/``git log -S`` on DeepSpeed's whole history), instead of guessing a nearest key.
"""

from __future__ import annotations

_SEED_004 = (
    "invented by a tuning guide (seed 004's 'heterogeneous' feature set): no DeepSpeed version "
    "has it, in its source or its git history"
)
#: Keys that look like DeepSpeed options but are not, and what DeepSpeed does with them.
INVENTED: dict[str, str] = {
    "heterogeneous_config": f"{_SEED_004}; there is no load-balancing or 'compute_aware' mode",
    "heterogeneous_offload": (
        f"{_SEED_004}; real offload is zero_optimization.offload_optimizer / offload_param "
        '{"device": "cpu"|"nvme"}'
    ),
    "heterogeneous_memory": f"{_SEED_004}; DeepSpeed has no adaptive HBM memory pool",
    "torch_compile": (
        "no such key (a tuning guide's invention): torch.compile is turned on by calling "
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
        "not a DeepSpeed scheduler (invented by a tuning guide): deepspeed.initialize raises "
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
