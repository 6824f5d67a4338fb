"""Config rules for mixed precision: the fp16 loss scaler, ZeRO++ with fp16, bf16 where it helps.

fp16 needs a dynamic loss scaler that is neither too eager (many skipped steps) nor too timid
(underflowing gradients), and it mixes badly with ZeRO++'s int4 gradient quantization. On GPUs
with native bf16 (compute capability 8.0+) the whole problem disappears, so the checklist says
so when it knows the GPU model.
"""

from __future__ import annotations

import math
import re

from dsmon.ds_config.effective import ConfigView
from dsmon.health import thresholds as th
from dsmon.health.inputs import HealthInputs
from dsmon.health.model import Evidence, Finding, Status
from dsmon.health.registry import rule
from dsmon.health.verdicts import fix_json, needs_config, not_applicable

#: GPU name patterns with native bf16 (Ampere and newer: compute capability >= 8.0).
_BF16_YES = re.compile(
    r"\b(A100|A800|A10G?|A16|A2|A30|A40|A[4-6]000|L4|L40S?|L20|H100|H200|H800|H20|GH200|"
    r"B100|B200|GB200|B300|RTX (30|40|50)\d\d|RTX 6000 Ada|RTX PRO)\b",
    re.IGNORECASE,
)
#: GPU name patterns without it (Volta, Turing, Pascal and older).
_BF16_NO = re.compile(
    r"\b(V100|T4|P100|P40|P4|K80|M60|TITAN V|RTX 20\d\d|Quadro RTX|GTX)\b", re.IGNORECASE
)


def bf16_capable(gpu_name: str) -> bool | None:
    """Whether a GPU (NVML name) computes bf16 natively; None for a model not listed."""
    if _BF16_YES.search(gpu_name):
        return True
    if _BF16_NO.search(gpu_name):
        return False
    return None


def _or(value: float | None, default: float) -> float:
    """A config number, or ``default`` when it is not a number."""
    return default if value is None else value


def _scaler_problems(cfg: ConfigView) -> tuple[list[str], dict[str, float], bool]:
    """What is wrong with the dynamic scaler settings, the fixed values, and whether fatal."""
    power, window, hyst, floor = (
        _or(cfg.number(f"fp16.{k}"), d)
        for k, d in (
            ("initial_scale_power", 16.0),
            ("loss_scale_window", 0.0),
            ("hysteresis", 0.0),
            ("min_loss_scale", 0.0),
        )
    )
    problems: list[str] = []
    fixes: dict[str, float] = {}
    lo, hi = th.INITIAL_SCALE_POWER_RANGE
    if not lo <= power <= hi:
        problems.append(
            f"initial_scale_power {power:g} outside {lo}-{hi}: "
            + (
                "many skipped steps while the scale comes down"
                if power > hi
                else "small gradients underflow"
            )
        )
        fixes["initial_scale_power"] = 16
    if window < th.LOSS_SCALE_WINDOW_MIN:
        skip = hyst / (window + hyst) if window + hyst > 0 else 1.0
        problems.append(
            f"loss_scale_window {window:g} < {th.LOSS_SCALE_WINDOW_MIN}: the scale "
            f"re-grows and overflows again, about {skip:.0%} of steps skipped"
        )
        fixes["loss_scale_window"] = 1000
    h_lo, h_hi = th.HYSTERESIS_RANGE
    if not h_lo <= hyst <= h_hi:
        problems.append(f"hysteresis {hyst:g} outside {h_lo}-{h_hi}")
        fixes["hysteresis"] = 2
    headroom = power - math.log2(floor) if floor > 0 else math.inf
    fatal = headroom <= 0
    if headroom < th.MIN_SCALE_HEADROOM_HALVINGS:
        problems.append(
            f"min_loss_scale {floor:g} leaves {max(headroom, 0):g} halvings below "
            "the initial scale: the run exits with 'Current loss scale already at "
            "minimum'"
        )
        fixes["min_loss_scale"] = 1
    return problems, fixes, fatal


@rule(
    "fp16.loss_scaler",
    "The fp16 dynamic loss scaler is sanely tuned",
    "fp16 initial_scale_power, loss_scale_window, hysteresis and min_loss_scale: too high a "
    "start or too short a window skips steps; too high a floor ends the run.",
    "config",
)
@needs_config
def check_loss_scaler(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Judge the four dynamic-scaler settings together (they interact)."""
    if not cfg.enabled("fp16"):
        return not_applicable("fp16 is off", Evidence.of(cfg.get("fp16.enabled")))
    keys = (
        "loss_scale",
        "initial_scale_power",
        "loss_scale_window",
        "hysteresis",
        "min_loss_scale",
    )
    ev = tuple(Evidence.of(cfg.get(f"fp16.{k}")) for k in keys)
    static = cfg.number("fp16.loss_scale")
    if static:
        return Finding(Status.PASS, f"static loss scale {static:g}: no dynamic scaler to tune", ev)
    problems, fixes, fatal = _scaler_problems(cfg)
    if not problems:
        return Finding(Status.PASS, "dynamic loss scaler settings are sane", ev)
    status = Status.FAIL if fatal else Status.WARN
    return Finding(status, "; ".join(problems), ev, fix_json({"fp16": fixes}))


@rule(
    "fp16.zeropp_quantized_gradients",
    "ZeRO++ gradient quantization is not combined with fp16",
    "zero_quantized_gradients sends int4 gradients between nodes; the quantization error "
    "hurts fp16 training noticeably, bf16 usually tolerates it.",
    "config",
)
@needs_config
def check_fp16_quantized_gradients(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Warn on fp16 together with ZeRO++ quantized gradients."""
    q = cfg.get("zero_optimization.zero_quantized_gradients")
    fp16 = cfg.get("fp16.enabled")
    ev = (Evidence.of(fp16), Evidence.of(q))
    if cfg.flag(q.path) is not True:
        return not_applicable("ZeRO++ quantized gradients are off", *ev)
    if not cfg.enabled("fp16"):
        return Finding(Status.PASS, "quantized gradients without fp16", ev)
    fix = fix_json({"fp16": {"enabled": False}, "bf16": {"enabled": True}})
    return Finding(
        Status.WARN,
        "fp16 with int4-quantized gradients: expect accuracy loss; "
        "prefer bf16, or turn zero_quantized_gradients off",
        ev,
        fix,
    )


@rule(
    "precision.bf16",
    "bf16 is used where the GPU supports it",
    "On GPUs with native bf16 (A100, H100, L40, RTX 30/40...) bf16 needs no loss scaling "
    "and skips no steps; fp16 or fp32 there leaves speed or stability on the table.",
    "config",
)
@needs_config
def check_bf16_suggested(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Suggest bf16 for fp16/fp32 runs on bf16-capable GPUs."""
    mode = "bf16" if cfg.enabled("bf16") else "fp16" if cfg.enabled("fp16") else "fp32"
    ev = [Evidence("precision", mode, "config")]
    if mode == "bf16":
        return Finding(Status.PASS, "bf16 is on", tuple(ev))
    if inputs.facts.device == "cpu":
        return not_applicable("the run is on CPU", *ev)
    names = inputs.facts.gpu_names
    if not names:
        return Finding(
            Status.UNKNOWN, f"{mode} in use; GPU model unknown (no NVML samples)", tuple(ev)
        )
    ev.append(Evidence("GPUs", ", ".join(sorted(set(names))), "NVML"))
    capable = [bf16_capable(n) for n in names]
    if all(c is True for c in capable):
        fix = fix_json({"fp16": {"enabled": False}, "bf16": {"enabled": True}})
        return Finding(
            Status.WARN, f"{mode} on GPUs with native bf16: switch to bf16", tuple(ev), fix
        )
    if any(c is None for c in capable):
        return Finding(
            Status.UNKNOWN, "bf16 support of this GPU model is not known to dsmon", tuple(ev)
        )
    return Finding(Status.PASS, f"{mode}: these GPUs lack native bf16", tuple(ev))
