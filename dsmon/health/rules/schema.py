"""Rules that check a ds_config against DeepSpeed's real schema and its own hard checks.

An unknown key is either fatal (a pydantic section rejects it at ``deepspeed.initialize``) or
silently ignored (the top level and the dict.get sections): the second is the dangerous one,
because the run starts and the user believes a setting is in force. These rules say which
happens, for the version in use, and name the look-alike keys no DeepSpeed version has.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from dsmon.ds_config import names, schema
from dsmon.ds_config.effective import ConfigView
from dsmon.ds_config.read import as_float, refused_sections
from dsmon.ds_config.releases import knowledge
from dsmon.health.fixes import read_at_stage
from dsmon.health.inputs import HealthInputs
from dsmon.health.model import Evidence, Finding, Status, worst
from dsmon.health.registry import rule
from dsmon.health.verdicts import fix_json, needs_config, not_applicable

_ZERO = "zero_optimization"
#: Adam's own parameters: what a replacement Adam/AdamW keeps of another optimizer's params
#: (FusedAdam raises on a keyword it does not take, such as 1-bit Adam's ``freeze_step``).
_ADAM_PARAMS = ("lr", "betas", "eps", "weight_decay")
#: DeepSpeed's own refusals at ``deepspeed.initialize``, as a worker's traceback ends.
_UNSUPPORTED_OPTIMIZER = re.compile(r"(\S+) is not a supported DeepSpeed Optimizer")
_UNKNOWN_SCHEDULER = re.compile(r"DeepSpeed does not recognize LR scheduler (\S+)")


@dataclass(frozen=True, slots=True)
class KeyProblem:
    """One key DeepSpeed will not honour as written, and what happens to it."""

    path: str
    status: Status
    message: str
    action: str


def _known(section_path: str, version: schema.Version | None) -> set[str]:
    """The keys a section accepts in this release ('' = the top level)."""
    if not section_path:
        return schema.top_level(version)
    spec = schema.section(section_path, version)
    return spec.known() if spec is not None else set()


def _unknown(path: str, key: str, section_path: str, version: schema.Version | None) -> KeyProblem:
    """Classify a key this release does not read: fatal in a strict section, else ignored.

    A key another release reads says which ones; a key no release reads gets the reason it
    circulates (:data:`names.INVENTED`) or the nearest real key.
    """
    spec = schema.section(section_path, version) if section_path else None
    strict = spec is not None and spec.strict
    effect = (
        f"deepspeed.initialize fails: '{section_path}' is a strict pydantic section "
        "(Extra inputs are not permitted)"
        if strict
        else "silently ignored: DeepSpeed never reads it"
    )
    status = Status.FAIL if strict else Status.WARN
    k = knowledge()
    if k.ever(path):
        first, last = k.first_last(path) or (schema.LATEST_KNOWN, schema.LATEST_KNOWN)
        releases = k.spans_text(k.keys[path].spans)
        here = schema.version_text(version)
        if schema.judged_as(version) < first:
            action = f"upgrade DeepSpeed to >= {schema.version_text(first)} or delete {path}"
        else:
            action = (
                f"delete {path} (DeepSpeed {schema.version_text(last)} was the last to read it)"
            )
        return KeyProblem(
            path, status, f"not read by DeepSpeed {here} (read by {releases}); {effect}", action
        )
    reason = names.INVENTED.get(key)
    near = names.CONFUSIONS.get(key)
    if near is None and reason is None:
        near = schema.nearest_key(key, _known(section_path, version))
    hint = f"; did you mean '{near}'?" if near else ""
    message = f"not a DeepSpeed option: {reason}" if reason else "unknown key"
    action = f"rename {path} -> {near}" if near else f"delete {path}"
    return KeyProblem(path, status, f"{message}; {effect}{hint}", action)


def _known_key_problem(path: str, version: schema.Version | None) -> KeyProblem | None:
    """A real key the release refuses outright, or reads as a deprecated spelling."""
    refused = knowledge().refused(path, version)
    if refused is not None:
        return KeyProblem(
            path,
            Status.FAIL,
            f"refused by DeepSpeed {schema.version_text(version)}: deepspeed.initialize raises "
            f"'{refused}'",
            f"delete {path}",
        )
    new = knowledge().deprecated_for(path, version)
    if new is None:
        return None
    section = path.rpartition(".")[0]
    short = new.removeprefix(f"{section}.") if section else new
    if not short:
        return KeyProblem(
            path, Status.WARN, "deprecated: DeepSpeed warns and ignores it", f"delete {path}"
        )
    return KeyProblem(
        path,
        Status.WARN,
        f"deprecated: DeepSpeed maps it to '{short}' with a warning",
        f"rename {path} -> {short}",
    )


def find_key_problems(raw: Mapping[str, Any], version: schema.Version | None) -> list[KeyProblem]:
    """Every key of a ds_config that DeepSpeed rejects, ignores, or maps to another name."""
    return list(_walk(raw, "", version))


def _walk(holder: Mapping[str, Any], section_path: str, version: Any) -> Iterator[KeyProblem]:
    """Depth-first over the sections this release reads; opaque ones are not entered."""
    known = _known(section_path, version)
    for key, value in holder.items():
        path = f"{section_path}.{key}" if section_path else str(key)
        problem = _known_key_problem(path, version)
        if problem is None and key not in known:
            problem = _unknown(path, str(key), section_path, version)
        if problem is not None:
            yield problem
            if problem.status is Status.FAIL or key not in known:
                continue
        spec = schema.section(path, version)  # bfloat16 is read as bf16 where it exists
        opaque = path in schema.OPAQUE or (spec is not None and spec.path in schema.OPAQUE)
        if isinstance(value, Mapping) and not opaque and spec is not None:
            yield from _walk(value, spec.path, version)


@rule(
    "schema.keys",
    "Every key is a real DeepSpeed option",
    "Each key against the schema of the DeepSpeed that ran (read from its source): unknown keys "
    "in strict (pydantic) sections make deepspeed.initialize fail, removed features are refused "
    "from 0.19.7; elsewhere DeepSpeed silently ignores a key it does not read.",
    "config",
)
@needs_config
def check_keys(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Fail on keys the release rejects; warn on keys it silently ignores or calls deprecated."""
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


def _ignored_keys(cfg: ConfigView) -> Iterator[tuple[Evidence, bool]]:
    """Keys set that the release reads but that change nothing in this configuration.

    ZeRO keys on a stage that does not read them (all of them on stage 0), and a key the
    release reads but does not use (ZeRO-1/2's ``allgather_bucket_size`` from 0.12.4). Each
    with whether its value differs from the default (the user then expects an effect).
    """
    zero = cfg.section(_ZERO)
    stage = cfg.stage
    version_text = schema.version_text(cfg.version)
    for key, value in zero.items():
        path = f"{_ZERO}.{key}"
        if key == "stage" or key not in _known(_ZERO, cfg.version):
            continue
        why = None
        if stage == 0:
            why = "ZeRO is off (stage 0)"
        elif not read_at_stage(path, stage):
            why = f"stage {stage} does not read it"
        elif stage < 3:
            why = knowledge().ignored(path, cfg.version)
            why = f"DeepSpeed {version_text}: {why}" if why else None
        if why is not None:
            default = schema.default_for(path, cfg.version, stage)
            differs = cfg.get(path).value != default and as_float(value) != as_float(default)
            yield Evidence(path, value, f"set; ignored: {why}"), differs


@rule(
    "schema.ignored",
    "Every key set takes effect",
    "A real key can still change nothing: ZeRO keys on a stage that does not read them, and "
    "ZeRO-1/2's allgather_bucket_size from DeepSpeed 0.12.4 (the updated partitions are "
    "gathered with all_gather_into_tensor). Warns when such a key is set to a value other than "
    "its default, since the user then expects an effect.",
    "config",
)
@needs_config
def check_ignored(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Name the keys set that this release, at this stage, does not act on."""
    if cfg.origin == "effective":
        return not_applicable("only the effective config dump is available: it lists every key")
    found = list(_ignored_keys(cfg))
    if not found:
        return Finding(Status.PASS, "every key set is read at this ZeRO stage")
    evidence = tuple(e for e, _ in found)
    changed = [e.label for e, differs in found if differs]
    if not changed:
        return Finding(
            Status.PASS,
            f"{len(found)} key(s) set to their default have no effect here: "
            + ", ".join(e.label for e in evidence),
            evidence,
        )
    return Finding(
        Status.WARN,
        f"{len(changed)} key(s) set to a non-default value change nothing here: "
        + ", ".join(changed),
        evidence,
        "\n".join(f"delete {path}" for path in changed),
        "text",
    )


def _refusal(inputs: HealthInputs, pattern: re.Pattern[str], kind: str) -> Evidence | None:
    """The worker traceback in which this DeepSpeed refused ``kind``, when the log holds one."""
    events = inputs.frame("event")
    if events.empty or "name" not in events.columns:
        return None
    for _, row in events[events["name"] == "traceback"].iterrows():
        found = pattern.search(str(row["message"]))
        if found and found[1] == kind:
            return Evidence("deepspeed.initialize", found[0], f"{row['file']}:{row['line']}")
    return None


@rule(
    "schema.scheduler",
    "The LR scheduler type exists",
    "scheduler.type must be a scheduler of the DeepSpeed that ran or a "
    "torch.optim.lr_scheduler class (case-sensitive); anything else fails at "
    "deepspeed.initialize.",
    "config",
)
@needs_config
def check_scheduler(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Fail on a scheduler type DeepSpeed cannot build (an AssertionError at initialize)."""
    kind = cfg.section("scheduler").get("type")
    if kind is None:
        return not_applicable("no scheduler in the config (the client may pass its own)")
    ours = names.ds_schedulers(cfg.version)
    ev = [Evidence("scheduler.type", kind, "set")]
    if kind in ours or kind in names.TORCH_SCHEDULERS:
        return Finding(Status.PASS, f"scheduler {kind} exists", tuple(ev))
    ev.append(
        Evidence(f"DeepSpeed {schema.version_text(cfg.version)}'s schedulers", ", ".join(ours))
    )
    refused = _refusal(inputs, _UNKNOWN_SCHEDULER, str(kind))
    ev += [refused] if refused else []
    reason = names.INVENTED_SCHEDULERS.get(str(kind))
    valid = {s.lower(): s for s in (*ours, *names.TORCH_SCHEDULERS)}
    near = valid.get(str(kind).lower())
    spans = knowledge().scheduler_spans(str(kind))
    where = f" (DeepSpeed {knowledge().spans_text(spans)} had it)" if spans else ""
    why = reason or (
        f"deepspeed.initialize raises AssertionError: DeepSpeed does not recognize LR scheduler "
        f"{kind}{where}" + (f" (names are case-sensitive: '{near}')" if near else "")
    )
    fix = {
        "scheduler": {
            "type": near or "WarmupLR",
            "params": cfg.section("scheduler").get("params", {}),
        }
    }
    return Finding(Status.FAIL, f"scheduler '{kind}': {why}", tuple(ev), fix_json(fix))


@rule(
    "schema.optimizer",
    "The optimizer type exists and its params are accepted",
    "optimizer.type must be an optimizer the DeepSpeed that ran builds (any case; the 1-bit "
    "optimizers OneBitAdam, ZeroOneAdam and OneBitLamb are gone from 0.19.7) or a torch.optim "
    "class (exact case); max_grad_norm in its params is rejected in favour of gradient_clipping.",
    "config",
)
@needs_config
def check_optimizer_type(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Fail on an optimizer the release cannot build or params it rejects at initialize."""
    opt = cfg.section("optimizer")
    kind = opt.get("type")
    if kind is None:
        return not_applicable("no optimizer in the config (the client passes its own)")
    version = cfg.version
    judged = schema.version_text(schema.judged_as(version))
    here = judged if version is not None else f"{judged}, the newest known (the run's is unknown)"
    ours = names.ds_optimizers(version)
    ev = [Evidence("optimizer.type", kind, "set")]
    params = opt.get("params")
    problems: list[str] = []
    status = Status.FAIL
    if str(kind).lower() not in ours and kind not in names.TORCH_OPTIMIZERS:
        ev.append(
            Evidence(
                f"optimizers DeepSpeed {judged} builds",
                ", ".join(names.spelled(n) for n in ours) + ", or a torch.optim class",
                "the release's DEEPSPEED_OPTIMIZERS" + ("" if version else f" ({here})"),
            )
        )
        refused = _refusal(inputs, _UNSUPPORTED_OPTIMIZER, str(kind))
        ev += [refused] if refused else []
        shipped = names.optimizer_releases(str(kind))
        raises = f"deepspeed.initialize raises '{kind} is not a supported DeepSpeed Optimizer'"
        if shipped and version is not None:
            problems.append(
                f"'{kind}' is not in DeepSpeed {here} (it shipped in {shipped}): {raises}"
            )
        elif shipped and refused is not None:
            problems.append(
                f"'{kind}' is not in the DeepSpeed that ran: its initialize refused it "
                f"({refused.where}); it shipped in DeepSpeed {shipped} only"
            )
        elif shipped:
            status = Status.WARN  # the release is not known: it may be one that has it
            problems.append(
                f"'{kind}' shipped in DeepSpeed {shipped} only: on a newer release {raises}"
            )
        else:
            problems.append(
                f"'{kind}' is neither a DeepSpeed optimizer nor a torch.optim class "
                "(AttributeError at initialize)"
            )
        own = sorted(set(params) - set(_ADAM_PARAMS)) if isinstance(params, Mapping) else []
        if own:
            problems.append(f"drop its own params ({', '.join(own)}) with it: Adam refuses them")
    if isinstance(params, Mapping) and "max_grad_norm" in params:
        ev.append(Evidence("optimizer.params.max_grad_norm", params["max_grad_norm"], "set"))
        problems.append("optimizer.params.max_grad_norm is rejected: use gradient_clipping")
        status = Status.FAIL
    if not problems:
        return Finding(Status.PASS, f"optimizer {kind} exists in DeepSpeed {here}", tuple(ev))
    kept = {k: params[k] for k in _ADAM_PARAMS if isinstance(params, Mapping) and k in params}
    fix: dict[str, Any] = {"optimizer": {"type": "AdamW", **({"params": kept} if kept else {})}}
    fix["gradient_clipping"] = 1.0
    return Finding(status, "; ".join(problems), tuple(ev), fix_json(fix))


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
