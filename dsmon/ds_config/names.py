"""Names a ds_config may use for optimizer and scheduler types, and names that do not exist.

Advice that circulates with options DeepSpeed never had costs a user a silent no-op or a
crash at ``deepspeed.initialize``. The checklist names such keys and types explicitly, with
what DeepSpeed really does with them (checked against every release's source, see
``tests/unit/ds_config/test_releases.py``, and DeepSpeed's git history), instead of guessing a
nearest key. Which optimizer and scheduler types a release builds itself comes from the data
generated from its source (:mod:`dsmon.ds_config.releases`); torch's classes depend on torch,
not DeepSpeed, and are listed here.
"""

from __future__ import annotations

from dsmon.ds_config.releases import knowledge

Version = tuple[int, int, int]

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


def ds_schedulers(version: Version | None) -> tuple[str, ...]:
    """Scheduler types a release builds itself (its ``runtime/lr_schedules.py`` classes)."""
    return knowledge().schedulers(version)


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


def ds_optimizers(version: Version | None) -> tuple[str, ...]:
    """Optimizer types a release builds itself, lower case (``DEEPSPEED_OPTIMIZERS``).

    DeepSpeed lower-cases the configured type before matching it against these.
    """
    return knowledge().optimizers(version)


def optimizer_releases(kind: str) -> str | None:
    """The releases that build an optimizer type (any case), as text; None when none does."""
    spans = knowledge().optimizer_spans(kind.lower())
    return knowledge().spans_text(spans) if spans else None


#: How DeepSpeed's documentation spells the types it matches in lower case.
OPTIMIZER_SPELLING: dict[str, str] = {
    "adam": "Adam",
    "adamw": "AdamW",
    "adagrad": "Adagrad",
    "lamb": "Lamb",
    "lion": "Lion",
    "muon": "Muon",
    "muadam": "MuAdam",
    "muadamw": "MuAdamW",
    "musgd": "MuSGD",
    "onebitadam": "OneBitAdam",
    "zerooneadam": "ZeroOneAdam",
    "onebitlamb": "OneBitLamb",
}
#: The optimizers that compress gradient communication (1-bit Adam, 0/1 Adam, 1-bit LAMB);
#: the engine refuses them with ZeRO.
COMPRESSED_OPTIMIZERS = frozenset({"onebitadam", "zerooneadam", "onebitlamb"})


def spelled(kind: str) -> str:
    """An optimizer type as DeepSpeed's documentation writes it."""
    return OPTIMIZER_SPELLING.get(kind.lower(), kind)


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
