"""Runtime rules on fp16 loss scaling: overflow-skipped steps and a collapsing loss scale.

Apart from the communication rules of :mod:`dsmon.health.rules.communication` because they read
other records (step lines' skipped= counter, loss-scale messages, the probe's engine
counters) and share none of those rules' caveats about what timers and the comms logger can
see. :data:`dsmon.health.registry.RULE_MODULES` lists this module right after
``runtime_rules``, so the checklist keeps its order.
"""

from __future__ import annotations

import math

import pandas as pd

from dsmon.analysis import steps
from dsmon.health import measures as m
from dsmon.health import probe_measures as pm
from dsmon.health import thresholds as th
from dsmon.health.inputs import LAST_SKIPPED, SKIPPED, HealthInputs
from dsmon.health.model import Evidence, Finding, Status
from dsmon.health.registry import rule
from dsmon.health.verdicts import fix_json, not_applicable


@rule(
    "loss_scale.skipped",
    "Few optimizer steps are skipped for overflow",
    "The share of optimizer steps skipped because gradients overflowed (the step line's "
    "cumulative skipped= counter, DeepSpeed's most reliable overflow count; without step= "
    "lines, its OVERFLOW messages against the steps made, or the engine's own counter read by "
    "dsmon run's probe).",
    "runtime",
    page="steps",
)
def check_skipped(inputs: HealthInputs) -> Finding:
    """Skipped share against SKIPPED_WARN and SKIPPED_FAIL."""
    rows = inputs.frames.get(LAST_SKIPPED)
    if rows is None:
        rows = m.step_view(inputs, SKIPPED, steps.skipped_counts, kind="step")
    if not rows.empty:
        n, skipped = int(rows.iloc[-1]["step"]), int(rows.iloc[-1]["skipped"])
        where = f"step line at step {n}"
    elif counted := m.overflow_skips(inputs):
        (skipped, n), where = counted, "OVERFLOW messages"
    elif probed := pm.probe_progress(inputs, "skipped_steps"):
        (count, n), where = probed, f"dsmon run's probe (engine.skipped_steps at step {probed[1]})"
        skipped = int(count)
    else:
        why = (
            "Accelerate sets steps_per_print to inf"
            if m.trainer_formats(inputs)
            else ("steps_per_print / log_level")
        )
        return Finding(Status.UNKNOWN, f"no step= lines ({why})")
    share = skipped / n
    ev = (
        Evidence("skipped steps", skipped, where),
        Evidence("skipped share", f"{share:.1%}", f"steps 1-{n}"),
    )
    if share <= th.SKIPPED_WARN:
        return Finding(
            Status.PASS, f"{skipped} of {n} steps skipped ({share:.1%})", ev, steps=(1, n)
        )
    status = Status.FAIL if share > th.SKIPPED_FAIL else Status.WARN
    fp16 = inputs.config is None or inputs.config.enabled("fp16")
    fix = fix_json({"fp16": {"enabled": False}, "bf16": {"enabled": True}}) if fp16 else None
    return Finding(
        status,
        f"{skipped} of {n} steps skipped ({share:.1%}): look for inf/nan "
        "sources (learning rate, data)" + (", or use bf16" if fp16 else ""),
        ev,
        fix,
        steps=(1, n),
    )


@rule(
    "loss_scale.collapse",
    "The fp16 loss scale stays well above its minimum",
    "The latest dynamic loss scale (from the log's loss-scale lines, or the optimizer's "
    "read by dsmon run's probe) against fp16.min_loss_scale: at the minimum, the next "
    "overflow ends the run ('Current loss scale already at minimum').",
    "runtime",
    page="steps",
)
def check_scale_collapse(inputs: HealthInputs) -> Finding:
    """Fail at the minimum, warn within a few halvings of it."""
    cfg = inputs.config
    if cfg is not None and not cfg.enabled("fp16"):
        return not_applicable("fp16 is off (bf16/fp32 use no loss scale)")
    ls = inputs.frame("loss_scale")
    floor = (cfg.number("fp16.min_loss_scale") if cfg else None) or 1.0
    if not ls.empty and (ls["event"] == "min_scale").any():
        return Finding(
            Status.FAIL,
            "the loss scale hit its minimum and the run stopped",
            (Evidence("min_loss_scale", floor),),
        )
    if not ls.empty:  # parsers may release held records late: order by time, then line
        ls = ls.sort_values(["ts", "line"], kind="stable", na_position="first")
    scales = ls["new_scale"].dropna() if not ls.empty else pd.Series(dtype="float64")
    probed = pm.probe_progress(inputs, "loss_scale")
    if scales.empty and probed is not None and cfg is not None:  # fp16 on: checked above
        latest, at = probed
        return _scale_finding(latest, floor, f"dsmon run's probe, step {at}", "config")
    if scales.empty:
        if not inputs.has_rows("step"):
            return Finding(Status.UNKNOWN, "no loss-scale or step lines (INFO hidden?)")
        return Finding(Status.PASS, "no loss-scale reductions in the log (increases are silent)")
    row = ls.loc[scales.index[-1]]
    where = f"{row['file']}:{row['line']}"
    where += f", step {int(row['step'])}" if pd.notna(row["step"]) else ""
    return _scale_finding(float(scales.iloc[-1]), floor, where, "config" if cfg else "default")


def _scale_finding(latest: float, floor: float, where: str, floor_from: str) -> Finding:
    """The latest loss scale against its floor: how many halvings are left."""
    halvings = math.log2(latest / floor) if latest > 0 else 0.0
    ev = (
        Evidence("latest loss scale", latest, where),
        Evidence("min_loss_scale", floor, floor_from),
        Evidence("halvings left", f"{halvings:.0f}"),
    )
    if halvings <= 0:
        return Finding(
            Status.FAIL,
            "the loss scale is at its minimum: the next overflow ends the run",
            ev,
            fix_json({"bf16": {"enabled": True}}),
        )
    if halvings < th.SCALE_COLLAPSE_HALVINGS:
        return Finding(
            Status.WARN,
            f"the loss scale is {halvings:.0f} halvings from its minimum",
            ev,
            fix_json({"bf16": {"enabled": True}}),
        )
    return Finding(
        Status.PASS, f"loss scale {latest:g}, {halvings:.0f} halvings above the floor", ev
    )
