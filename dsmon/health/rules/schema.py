"""Rules that check a ds_config against DeepSpeed's real schema and its own hard checks.

An unknown key is either fatal (a pydantic section rejects it at ``deepspeed.initialize``) or
silently ignored (the top level and the dict.get sections): the second is the dangerous one,
because the run starts and the user believes a setting is in force. These rules say which
happens, for the version in use, and name the look-alike keys no DeepSpeed version has.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from dsmon.ds_config import names, schema
from dsmon.ds_config.effective import ConfigView
from dsmon.ds_config.read import as_float, refused_sections
from dsmon.health.inputs import HealthInputs
from dsmon.health.model import Evidence, Finding, Status, worst
from dsmon.health.registry import rule
from dsmon.health.verdicts import fix_json, needs_config, not_applicable

_DEPRECATED = {
    "zero_optimization.cpu_offload": "offload_optimizer",
    "zero_optimization.cpu_offload_param": "offload_param",
    "zero_optimization.cpu_offload_use_pin_memory": "offload_param/offload_optimizer.pin_memory",
    "zero_optimization.stage3_gather_fp16_weights_on_model_save": (
        "stage3_gather_16bit_weights_on_model_save"
    ),
}


@dataclass(frozen=True, slots=True)
class KeyProblem:
    """One key DeepSpeed will not honour as written, and what happens to it."""

    path: str
    status: Status
    message: str
    action: str


def _known(section_path: str) -> set[str]:
    """The accepted keys of a section ('' = the top level)."""
    if not section_path:
        return set(schema.TOP_LEVEL)
    return schema.SECTIONS[section_path].known()


def _unknown(path: str, key: str, section_path: str, version: schema.Version | None) -> KeyProblem:
    """Classify one unknown key: fatal in a strict section, silently ignored elsewhere."""
    section = schema.SECTIONS.get(section_path)
    strict = section is not None and section.strict_in(version)
    effect = (
        f"deepspeed.initialize fails: '{section_path}' is a strict pydantic section "
        "(Extra inputs are not permitted)"
        if strict
        else "silently ignored: DeepSpeed never reads it"
    )
    reason = names.INVENTED.get(key)
    near = names.CONFUSIONS.get(key)
    if near is None and reason is None:
        near = schema.nearest_key(key, _known(section_path))
    hint = f"; did you mean '{near}'?" if near else ""
    message = f"not a DeepSpeed option: {reason}" if reason else "unknown key"
    message = f"{message}; {effect}{hint}"
    action = f"rename {path} -> {near}" if near else f"delete {path}"
    return KeyProblem(path, Status.FAIL if strict else Status.WARN, message, action)


def _known_key_problem(path: str, key: str, version: schema.Version | None) -> KeyProblem | None:
    """A real key that is deprecated, or newer than the DeepSpeed in use (hence ignored)."""
    if path in _DEPRECATED:
        new = _DEPRECATED[path]
        return KeyProblem(
            path,
            Status.WARN,
            f"deprecated: DeepSpeed maps it to '{new}' with a warning",
            f"rename {path} -> {new}",
        )
    since = schema.KEY_SINCE.get(key) if "." not in path else None
    if since and version and version < since:
        first = schema.version_text(since)
        return KeyProblem(
            path,
            Status.WARN,
            f"only read from DeepSpeed {first}: ignored by {schema.version_text(version)}",
            f"upgrade DeepSpeed to >= {first} or delete {path}",
        )
    return None


def find_key_problems(raw: Mapping[str, Any], version: schema.Version | None) -> list[KeyProblem]:
    """Every key of a ds_config that DeepSpeed rejects, ignores, or maps to another name."""
    return list(_walk(raw, "", version))


def _walk(holder: Mapping[str, Any], section_path: str, version: Any) -> Iterator[KeyProblem]:
    """Depth-first over the sections dsmon knows; opaque and unknown sections are not entered."""
    known = _known(section_path)
    for key, value in holder.items():
        path = f"{section_path}.{key}" if section_path else str(key)
        if path in schema.OPAQUE:
            continue
        if key not in known:
            yield _unknown(path, str(key), section_path, version)
            continue
        problem = _known_key_problem(path, str(key), version)
        if problem:
            yield problem
        sub = "bf16" if path == "bfloat16" else path
        if sub in schema.SECTIONS and isinstance(value, Mapping) and sub not in schema.OPAQUE:
            yield from _walk(value, sub, version)


@rule(
    "schema.keys",
    "Every key is a real DeepSpeed option",
    "Each key against DeepSpeed's schema: unknown keys in strict (pydantic) sections make "
    "deepspeed.initialize fail; elsewhere DeepSpeed silently ignores them.",
    "config",
)
@needs_config
def check_keys(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Fail on keys a strict section rejects; warn on keys DeepSpeed silently ignores."""
    if cfg.origin == "effective":
        return Finding(
            Status.UNKNOWN,
            "only the effective config dump is available: its "
            "attribute names are not ds_config keys, so key spelling cannot be checked",
        )
    problems = find_key_problems(cfg.raw, cfg.version)
    ev_version = Evidence("judged against DeepSpeed", schema.version_text(cfg.version))
    if not problems:
        return Finding(Status.PASS, "every key is a DeepSpeed option", (ev_version,))
    evidence = tuple(Evidence(p.path, p.message, p.status.value) for p in problems)
    fix = "\n".join(p.action for p in problems)
    status = worst(p.status for p in problems)
    summary = f"{len(problems)} key(s) DeepSpeed will not honour: " + ", ".join(
        p.path for p in problems
    )
    return Finding(status, summary, (*evidence, ev_version), fix, "text")


@rule(
    "schema.scheduler",
    "The LR scheduler type exists",
    "scheduler.type must be a DeepSpeed schedule or a torch.optim.lr_scheduler class "
    "(case-sensitive); anything else fails at deepspeed.initialize.",
    "config",
)
@needs_config
def check_scheduler(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Fail on a scheduler type DeepSpeed cannot build (an AssertionError at initialize)."""
    kind = cfg.section("scheduler").get("type")
    if kind is None:
        return not_applicable("no scheduler in the config (the client may pass its own)")
    ev = Evidence("scheduler.type", kind, "set")
    if kind in names.DS_SCHEDULERS or kind in names.TORCH_SCHEDULERS:
        return Finding(Status.PASS, f"scheduler {kind} exists", (ev,))
    reason = names.INVENTED_SCHEDULERS.get(str(kind))
    valid = {s.lower(): s for s in (*names.DS_SCHEDULERS, *names.TORCH_SCHEDULERS)}
    near = valid.get(str(kind).lower())
    why = reason or (
        f"deepspeed.initialize raises AssertionError: DeepSpeed does not recognize LR scheduler "
        f"{kind}" + (f" (names are case-sensitive: '{near}')" if near else "")
    )
    fix = {
        "scheduler": {
            "type": near or "WarmupLR",
            "params": cfg.section("scheduler").get("params", {}),
        }
    }
    return Finding(Status.FAIL, f"scheduler '{kind}': {why}", (ev,), fix_json(fix))


@rule(
    "schema.optimizer",
    "The optimizer type exists and its params are accepted",
    "optimizer.type must be a DeepSpeed optimizer (any case) or a torch.optim class "
    "(exact case); max_grad_norm in its params is rejected in favour of gradient_clipping.",
    "config",
)
@needs_config
def check_optimizer_type(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Fail on an optimizer DeepSpeed cannot build or params it rejects at initialize."""
    opt = cfg.section("optimizer")
    kind = opt.get("type")
    if kind is None:
        return not_applicable("no optimizer in the config (the client passes its own)")
    ev = [Evidence("optimizer.type", kind, "set")]
    problems: list[str] = []
    if str(kind).lower() not in names.DS_OPTIMIZERS and kind not in names.TORCH_OPTIMIZERS:
        problems.append(
            f"'{kind}' is neither a DeepSpeed optimizer nor a torch.optim class "
            "(AttributeError at initialize)"
        )
    params = opt.get("params")
    if isinstance(params, Mapping) and "max_grad_norm" in params:
        ev.append(Evidence("optimizer.params.max_grad_norm", params["max_grad_norm"], "set"))
        problems.append("optimizer.params.max_grad_norm is rejected: use gradient_clipping")
    if not problems:
        return Finding(Status.PASS, f"optimizer {kind} exists", tuple(ev))
    fix = {"optimizer": {"type": "AdamW"}, "gradient_clipping": 1.0}
    return Finding(Status.FAIL, "; ".join(problems), tuple(ev), fix_json(fix))


def _hard_check_failures(cfg: ConfigView) -> Iterator[tuple[str, Evidence]]:
    """DeepSpeed's own asserts and validators on value combinations (reference 11.1)."""
    for key in refused_sections(cfg.raw):
        yield (
            f"{key} must be a JSON object: deepspeed.initialize raises on a bare value",
            Evidence(key, cfg.raw[key], "set"),
        )
    if cfg.enabled("fp16") and cfg.enabled("bf16"):
        yield "fp16 and bf16 cannot both be enabled (assert)", Evidence("fp16+bf16", True, "set")
    if cfg.stage > 3:
        yield "ZeRO stage must be 0-3", Evidence.of(cfg.get("zero_optimization.stage"))
    op = cfg.get("gradient_allreduce_op")
    if op.value == "sum" and cfg.stage == 3:
        yield "gradient_allreduce_op 'sum' is invalid with ZeRO-3", Evidence.of(op)
    ratio = as_float(cfg.section("zero_optimization.offload_optimizer").get("ratio"))
    if ratio is not None and ratio < 1 and cfg.stage != 3:
        yield "offload_optimizer.ratio < 1 requires ZeRO-3", Evidence("offload ratio", ratio)
    if cfg.flag("zero_optimization.legacy_stage1") is True:
        yield "legacy_stage1 was removed: true raises", Evidence("legacy_stage1", True, "set")
    yield from _fp16_hard_checks(cfg)


def _fp16_hard_checks(cfg: ConfigView) -> Iterator[tuple[str, Evidence]]:
    """fp16 validators: finite non-negative loss_scale; dynamic scaling needs window, min > 0."""
    if not cfg.enabled("fp16"):
        return
    scale = cfg.number("fp16.loss_scale")
    if scale is None or scale < 0:
        yield (
            "fp16.loss_scale must be a finite number >= 0",
            Evidence.of(cfg.get("fp16.loss_scale")),
        )
        return
    for key in ("loss_scale_window", "min_loss_scale"):
        value = cfg.number(f"fp16.{key}")
        if scale == 0 and (value is None or value <= 0):
            yield (
                f"fp16.{key} must be > 0 with dynamic loss scaling",
                Evidence.of(cfg.get(f"fp16.{key}")),
            )


@rule(
    "schema.hard_checks",
    "Values pass DeepSpeed's own consistency checks",
    "The combinations deepspeed.initialize asserts on: fp16 with bf16, stage > 3, 'sum' "
    "all-reduce with ZeRO-3, partial offload without ZeRO-3, fp16 scaler limits, a section "
    "such as fp16 written as a bare value instead of an object.",
    "config",
)
@needs_config
def check_hard_checks(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Fail on the value combinations DeepSpeed itself refuses."""
    failures = list(_hard_check_failures(cfg))
    if not failures:
        return Finding(Status.PASS, "no combination DeepSpeed refuses")
    summary = "; ".join(msg for msg, _ in failures)
    return Finding(Status.FAIL, summary, tuple(ev for _, ev in failures))
