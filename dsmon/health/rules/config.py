"""Config rules for ZeRO communication, the optimizer and the batch arithmetic.

These are the common ZeRO performance checks (overlap, buckets, ZeRO-3 parameter management)
judged against what DeepSpeed really does: defaults come from the version in use, and a rule
that does not apply to the configured ZeRO stage says so instead of passing silently.
"""

from __future__ import annotations

import math

from dsmon.ds_config import schema
from dsmon.ds_config.effective import ConfigView
from dsmon.ds_config.read import as_float, ds_bool
from dsmon.ds_config.releases import knowledge
from dsmon.ds_config.schema import default_for
from dsmon.health import measures as m
from dsmon.health import thresholds as th
from dsmon.health.inputs import DP_FROM_WORLD, HealthInputs
from dsmon.health.model import Evidence, Finding, Status, format_value, worst
from dsmon.health.registry import rule
from dsmon.health.verdicts import fix_json, needs_config, not_applicable, range_finding

_Z = "zero_optimization"


@rule(
    "zero.overlap_comm",
    "Communication overlaps computation",
    "zero_optimization.overlap_comm: without it every step pays compute + communication "
    "instead of about max(compute, communication). Its default is true for stage 3 only.",
    "config",
)
@needs_config
def check_overlap_comm(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Warn when ZeRO runs with overlap_comm off, set or by the stage's default."""
    stage = cfg.get(f"{_Z}.stage")
    if cfg.stage == 0:
        return not_applicable("ZeRO is off (stage 0)", Evidence.of(stage))
    s = cfg.get(f"{_Z}.overlap_comm")
    ev = (Evidence.of(stage), Evidence.of(s))
    if cfg.flag(s.path) is True:
        return Finding(Status.PASS, "overlap_comm is on", ev)
    if inputs.facts.device == "cpu":  # its Stream() is None: overlap_comm has nothing to run on
        return not_applicable(
            "on DeepSpeed's CPU accelerator collectives run in line with compute (it has no "
            "streams), so overlap_comm changes nothing",
            *ev,
        )
    how = "set to false" if s.explicit else f"off by default for stage {cfg.stage}"
    summary = f"overlap_comm is {how}: each step pays communication after compute"
    if cfg.stage < 3:
        summary += " (on stages 1-2 it costs about 4.5x the bucket sizes in extra memory)"
    return Finding(Status.WARN, summary, ev, fix_json({_Z: {"overlap_comm": True}}))


@rule(
    "zero.contiguous_gradients",
    "Gradients are copied into a contiguous buffer",
    "zero_optimization.contiguous_gradients (default true from DeepSpeed 0.7.0, false before) "
    "avoids memory fragmentation during backward on ZeRO stages 2 and 3.",
    "config",
)
@needs_config
def check_contiguous_gradients(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Warn when stage 2/3 runs with contiguous_gradients switched off."""
    stage = cfg.get(f"{_Z}.stage")
    if cfg.stage < 2:
        return not_applicable(f"stage {cfg.stage} does not partition gradients", Evidence.of(stage))
    s = cfg.get(f"{_Z}.contiguous_gradients")
    ev = (Evidence.of(stage), Evidence.of(s))
    if cfg.flag(s.path) is not False:
        return Finding(Status.PASS, "contiguous_gradients is on", ev)
    fix = fix_json({_Z: {"contiguous_gradients": True}})
    return Finding(Status.WARN, "contiguous_gradients is off: gradients fragment memory", ev, fix)


@rule(
    "zero.bucket_sizes",
    f"Communication buckets are {format_value(th.BUCKET_MIN)}-{format_value(th.BUCKET_MAX)} "
    "elements",
    "reduce_bucket_size, and on stages 1-2 allgather_bucket_size where the DeepSpeed that ran "
    "still uses it (from 0.12.4 the updated partitions are gathered with one "
    "all_gather_into_tensor per group whatever its value): smaller buckets mean many small "
    "collectives and launch overhead, larger reduce buckets hold more gradient memory.",
    "config",
)
@needs_config
def check_bucket_sizes(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Judge each bucket size the release uses at this stage against BUCKET_MIN-BUCKET_MAX."""
    if cfg.stage == 0:
        return not_applicable("ZeRO is off (stage 0)", Evidence.of(cfg.get(f"{_Z}.stage")))
    reduce = cfg.get(f"{_Z}.reduce_bucket_size")
    findings = [
        range_finding(
            reduce,
            th.BUCKET_MIN,
            th.BUCKET_MAX,
            "many small collectives, launch overhead dominates",
            "buckets hold that many extra gradient elements in memory",
            th.BUCKET_MIN if (as_float(reduce.value) or 0) < th.BUCKET_MIN else th.BUCKET_MAX,
        )
    ]
    notes: list[Evidence] = []
    if cfg.stage < 3:
        gather = cfg.get(f"{_Z}.allgather_bucket_size")
        ignored = knowledge().ignored(gather.path, cfg.version)
        if ignored is not None:
            notes.append(
                Evidence(
                    gather.path,
                    format_value(gather.value),
                    f"{gather.origin}; not used by DeepSpeed {schema.version_text(cfg.version)}",
                )
            )
        else:  # the shards are gathered in place: a large bucket costs no memory
            findings.append(
                range_finding(
                    gather,
                    th.BUCKET_MIN,
                    math.inf,
                    "the updated partitions are gathered in many small shards",
                    "",
                    th.BUCKET_MIN,
                )
            )
    status = worst(f.status for f in findings)
    bad = [f for f in findings if f.status is not Status.PASS]
    summary = "; ".join(f.summary for f in (bad or findings))
    if notes:
        summary += (
            "; allgather_bucket_size is not used: ZeRO-1/2 gather the updated partitions "
            "with all_gather_into_tensor"
        )
    evidence = tuple(e for f in findings for e in f.evidence[:1]) + tuple(notes)
    evidence += (
        Evidence("sane range", f"{format_value(th.BUCKET_MIN)}-{format_value(th.BUCKET_MAX)}"),
    )
    fix = "\n".join(f.fix for f in bad if f.fix) or None
    return Finding(status, summary, evidence, fix)


def _zero3_range(cfg: ConfigView, key: str, why_low: str, why_high: str) -> Finding:
    """A stage-3 parameter against its sane range; not applicable on other stages."""
    path = f"{_Z}.{key}"
    if cfg.stage != 3:
        return not_applicable(f"only read by ZeRO-3 (stage {cfg.stage})")
    low, high = th.ZERO3_RANGES[key]
    value = cfg.number(path)
    default = as_float(default_for(path, cfg.version, 3)) or low
    suggest = default if value is None or low <= default <= high else low
    return range_finding(cfg.get(path), low, high, why_low, why_high, suggest)


@rule(
    "zero3.max_live_parameters",
    "ZeRO-3 keeps a sane number of parameters live",
    "stage3_max_live_parameters: too few forces released parameters to be gathered again; "
    "too many keeps tens of GB of gathered parameters on every GPU.",
    "config",
)
@needs_config
def check_max_live_parameters(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Range check of stage3_max_live_parameters (DeepSpeed's default is 1e9)."""
    return _zero3_range(
        cfg,
        "stage3_max_live_parameters",
        "released parameters are re-gathered",
        "that many gathered parameters (2 bytes each in fp16/bf16) stay on every GPU",
    )


@rule(
    "zero3.prefetch_bucket_size",
    "ZeRO-3 prefetches in sane buckets",
    "stage3_prefetch_bucket_size: tiny buckets serialise the all-gathers, huge ones hold "
    "memory; it cannot usefully exceed stage3_max_live_parameters.",
    "config",
)
@needs_config
def check_prefetch_bucket_size(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Range check, plus prefetch must not exceed the live-parameter budget."""
    found = _zero3_range(
        cfg,
        "stage3_prefetch_bucket_size",
        "all-gathers are issued in tiny pieces",
        "the prefetch holds that many parameters in memory ahead of use",
    )
    prefetch = cfg.number(f"{_Z}.stage3_prefetch_bucket_size")
    live = cfg.number(f"{_Z}.stage3_max_live_parameters")
    if cfg.stage == 3 and prefetch and live and prefetch > live:
        ev = (*found.evidence, Evidence.of(cfg.get(f"{_Z}.stage3_max_live_parameters")))
        fix = fix_json({_Z: {"stage3_prefetch_bucket_size": int(min(live, th.BUCKET_MAX))}})
        return Finding(Status.WARN, "prefetch bucket exceeds stage3_max_live_parameters", ev, fix)
    return found


@rule(
    "zero3.param_persistence_threshold",
    "ZeRO-3 persists only small parameters",
    "stage3_param_persistence_threshold: 0 turns every bias and norm into its own all-gather; "
    "a huge threshold keeps large tensors unpartitioned on every GPU.",
    "config",
)
@needs_config
def check_param_persistence(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Range check of stage3_param_persistence_threshold."""
    return _zero3_range(
        cfg,
        "stage3_param_persistence_threshold",
        "tiny tensors are each gathered separately",
        "large tensors are replicated on every GPU instead of partitioned",
    )


@rule(
    "zero3.sub_group_size",
    "ZeRO-3 optimizer sub-groups are sanely sized",
    "sub_group_size: the optimizer steps over this many elements at a time; small means many "
    "launches, large means a big fp32 working set (it does not defragment memory).",
    "config",
)
@needs_config
def check_sub_group_size(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Range check of sub_group_size."""
    return _zero3_range(
        cfg,
        "sub_group_size",
        "the optimizer step is split into many small launches",
        "the optimizer step works on a very large fp32 slice at once",
    )


@rule(
    "optimizer.fused",
    "A fused optimizer runs the step",
    "Adam/AdamW in the config run as FusedAdam, or DeepSpeedCPUAdam with optimizer offload; "
    "optimizer.params.torch_adam: true falls back to torch.optim (slower on GPUs).",
    "config",
)
@needs_config
def check_fused_optimizer(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Tell which class DeepSpeed builds for the configured optimizer, and judge it."""
    kind = str(cfg.section("optimizer").get("type") or "")
    if kind.lower() not in {"adam", "adamw"}:
        what = f"optimizer {kind}" if kind else "no optimizer in the config (client optimizer)"
        return not_applicable(f"{what}: the rule covers Adam/AdamW")
    # DeepSpeed pops torch_adam from the params and tests it with ``if``; what it built, when
    # the run says, wins (a release that popped it before printing the config hides it).
    configured = ds_bool(cfg.section("optimizer.params").get("torch_adam"), pydantic=False) is True
    built = m.built_optimizer(inputs)
    torch_adam = built[0] in _TORCH_ADAMS if built is not None else configured
    offload = cfg.offload_optimizer_device
    device = inputs.facts.device
    ev = (
        Evidence("optimizer.type", kind, "set"),
        Evidence("optimizer.params.torch_adam", configured, "set" if configured else "default"),
        *([Evidence("optimizer built", built[0], built[1])] if built else []),
        Evidence("offload_optimizer.device", offload or "none"),
        Evidence("device", device or "unknown", inputs.facts.sources.get("device", "")),
    )
    if not torch_adam:
        name = built[0] if built else ("DeepSpeedCPUAdam" if offload else "FusedAdam")
        return Finding(Status.PASS, f"{kind} runs as {name}", ev)
    if device == "cpu" and not offload:
        return Finding(Status.PASS, "torch_adam on a CPU run: torch.optim is the right choice", ev)
    where = "with optimizer offload" if offload else "on GPUs" if device == "gpu" else ""
    where = where or "(device unknown: on GPUs this is slower)"
    fix = fix_json({"optimizer": {"type": kind, "params": {"torch_adam": False}}})
    summary = f"torch_adam: true {where} runs torch.optim.{'AdamW' if kind.lower() == 'adamw' else 'Adam'}"
    summary += f" instead of {'DeepSpeedCPUAdam' if offload else 'FusedAdam'}"
    return Finding(Status.WARN, summary, ev, fix)


_BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
#: torch's own Adam classes, which DeepSpeed builds for ``torch_adam``.
_TORCH_ADAMS = frozenset({"Adam", "AdamW"})


def _batch_evidence(cfg: ConfigView, inputs: HealthInputs) -> tuple[Evidence, ...]:
    """The three batch keys and the data-parallel size, as the batch rules cite them."""
    ev = [
        Evidence(k, "auto", "config") if cfg.raw.get(k) == "auto" else Evidence.of(cfg.get(k))
        for k in _BATCH_KEYS
    ]
    dp = inputs.facts.dp_size
    ev.append(
        Evidence(
            "data-parallel size", dp if dp else "unknown", inputs.facts.sources.get("dp_size", "")
        )
    )
    return tuple(ev)


def _batch_numbers(cfg: ConfigView) -> tuple[float | None, float | None, float | None]:
    """train_batch_size, micro batch, accumulation steps as numbers (None when unset/auto)."""
    tbs, micro, gas = (
        cfg.number(k) if cfg.get(k).explicit else None
        for k in (
            "train_batch_size",
            "train_micro_batch_size_per_gpu",
            "gradient_accumulation_steps",
        )
    )
    return tbs, micro, gas


@rule(
    "batch.arithmetic",
    "train_batch_size = micro x accumulation x data-parallel size",
    "DeepSpeed asserts train_batch_size == train_micro_batch_size_per_gpu x "
    "gradient_accumulation_steps x data-parallel world size at initialize. Without a config "
    "dump the world size stands for it: pipeline or tensor parallelism that makes the keys "
    'agree passes once the job trains. Keys set to "auto" are filled in by the Hugging Face '
    "Trainer or Accelerate so that they agree.",
    "config",
)
@needs_config
def check_batch_arithmetic(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Fail when the batch keys cannot agree with each other and the data-parallel size."""
    tbs, micro, gas = _batch_numbers(cfg)
    dp = inputs.facts.dp_size
    ev = _batch_evidence(cfg, inputs)
    if any(cfg.raw.get(k) == "auto" for k in _BATCH_KEYS):
        return Finding(
            Status.PASS,
            'batch keys set to "auto": the Hugging Face Trainer (or Accelerate) fills them in '
            "from its own arguments, so that they agree",
            ev,
        )
    if tbs is None and micro is None:
        return Finding(
            Status.FAIL,
            "neither train_batch_size nor train_micro_batch_size_per_gpu "
            "is set: deepspeed.initialize refuses the config",
            ev,
            fix_json({"train_micro_batch_size_per_gpu": 1}),
        )
    if tbs is None or micro is None or (gas is None and dp is None):
        return Finding(Status.PASS, "DeepSpeed infers the missing batch key at start-up", ev)
    if gas is None:
        gas = tbs // (micro * (dp or 1))
    product = micro * gas
    if dp is not None and tbs != product * dp:
        mp = _model_parallel(tbs, product, dp) if _dp_guessed(inputs) else None
        if mp is not None:
            agree = f"batch keys agree with a data-parallel size of {dp // mp}"
            if _made_steps(inputs):  # deepspeed.initialize checked them: the job trains
                return Finding(
                    Status.PASS,
                    f"{agree}: the {dp} ranks run {mp}-way pipeline or tensor parallel",
                    ev,
                )
            return Finding(
                Status.WARN,
                f"{agree} only if the {dp} ranks run {mp}-way pipeline or tensor parallel; "
                "with data parallelism alone deepspeed.initialize asserts",
                ev,
                fix_json({"train_batch_size": int(product * dp)}),
            )
        why = (
            f"{format_value(tbs)} != {format_value(micro)} x {format_value(gas)} x {dp}: "
            "deepspeed.initialize asserts"
        )
        fixed = {"train_batch_size": int(product * dp)}
        return Finding(Status.FAIL, why, ev, fix_json(fixed))
    if dp is None and tbs % product:
        why = f"{format_value(tbs)} is not a multiple of micro x accumulation = {format_value(product)}"
        return Finding(Status.FAIL, why, ev, fix_json({"train_batch_size": int(product)}))
    implied = int(tbs // product)
    note = "" if dp else f": implies a data-parallel size of {implied}; other sizes fail"
    return Finding(Status.PASS, f"batch keys agree{note}", ev)


def _dp_guessed(inputs: HealthInputs) -> bool:
    """Whether the data-parallel size is the world size taken for it (no config dump)."""
    return inputs.facts.sources.get("dp_size") == DP_FROM_WORLD


def _made_steps(inputs: HealthInputs) -> bool:
    """Whether the run reported a training step (so ``deepspeed.initialize`` accepted it)."""
    return any(inputs.has_rows(k) for k in ("timer", "step", "iteration", "rank_step"))


def _model_parallel(tbs: float, product: float, world: int) -> int | None:
    """The model-parallel degree under which the batch keys agree on ``world`` ranks, if any.

    A pipeline or tensor-parallel job's data-parallel size is the world size divided by that
    degree; at DeepSpeed's default log level no config dump says what it is.
    """
    if product <= 0 or tbs % product:
        return None
    dp = int(tbs // product)
    return world // dp if 0 < dp < world and world % dp == 0 else None


@rule(
    "batch.clipping_with_accumulation",
    "Long gradient accumulation has gradient clipping",
    f"With more than {th.GAS_CLIP_LIMIT} accumulation steps, gradient_clipping guards against exploding "
    "gradients. Its default became 1.0 in DeepSpeed 0.19.3; before that it was 0 (off).",
    "config",
)
@needs_config
def check_clipping_with_accumulation(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Warn when GAS > GAS_CLIP_LIMIT and clipping is off (set to 0, or unset on DeepSpeed < 0.19.3).

    What the engine resolved (its effective config: the accumulation steps it derived, the
    clipping default of its release) wins over what the file leaves open.
    """
    tbs, micro, gas = _batch_numbers(cfg)
    dp = inputs.facts.dp_size
    eff = inputs.effective if inputs.effective is not cfg else None
    resolved = eff is not None and eff.get("gradient_accumulation_steps").explicit
    if gas is None and resolved and eff is not None:
        gas = eff.number("gradient_accumulation_steps")
    if gas is None and tbs and micro and dp:
        gas = tbs // (micro * dp)
    if gas is None and tbs and micro and tbs / micro <= th.GAS_CLIP_LIMIT:
        bound = Evidence("accumulation steps", f"<= {tbs / micro:g}", "train_batch_size / micro")
        return Finding(Status.PASS, f"at most {tbs / micro:g} accumulation steps", (bound,))
    if gas is None:
        return Finding(Status.UNKNOWN, "accumulation steps unknown (not set, world size unknown)")
    clip = cfg.get("gradient_clipping")
    clip_ev = Evidence.of(clip)
    if not clip.explicit and eff is not None and eff.get("gradient_clipping").explicit:
        clip = eff.get("gradient_clipping")
        clip_ev = Evidence("gradient_clipping", clip.value, "in effect: the engine's config")
    ev = (
        Evidence("gradient_accumulation_steps", gas, "the engine's config" if resolved else ""),
        clip_ev,
        Evidence("DeepSpeed version", inputs.facts.version_label),
    )
    if gas <= th.GAS_CLIP_LIMIT:
        return Finding(Status.PASS, f"{int(gas)} accumulation steps (<= {th.GAS_CLIP_LIMIT})", ev)
    if not clip.explicit and cfg.version is None:
        why = "gradient_clipping unset: 1.0 on DeepSpeed >= 0.19.3 but 0 (off) before"
    elif (as_float(clip.value) or 0.0) > 0:
        how = "" if clip.explicit else f" (DeepSpeed {schema.version_text(cfg.version)}'s default)"
        return Finding(
            Status.PASS, f"{int(gas)} accumulation steps, clipping at {clip.value}{how}", ev
        )
    else:
        why = "gradient clipping is off"
    summary = f"{int(gas)} accumulation steps (> {th.GAS_CLIP_LIMIT}) and {why}"
    return Finding(Status.WARN, summary, ev, fix_json({"gradient_clipping": 1.0}))
