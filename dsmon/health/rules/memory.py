"""Runtime rule on ZeRO-3 memory fragmentation, and the setting that eases it.

Two signs in a run's output say the caching allocator is short of contiguous blocks. ZeRO-3's
``step()`` warns "N pytorch allocator cache flushes since last step" when allocations had to
free the cache and retry (it slows every rank, and they flush at different times), and
``see_memory_usage`` lines (``memory_breakdown``) show memory reserved by the allocator (CA)
far above what tensors hold (MA). ZeRO-3's optimizer step works through the fp32 partition in
sub-groups of ``sub_group_size`` elements, allocating each sub-group's buffers in turn:
smaller sub-groups mean smaller blocks to find. The fix lowers ``sub_group_size``; it does not
defragment anything, it asks the allocator for less at a time.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from dsmon.health import thresholds as th
from dsmon.health.fixes import in_effect
from dsmon.health.inputs import HealthInputs
from dsmon.health.model import Evidence, Finding, Status
from dsmon.health.registry import rule
from dsmon.health.verdicts import fix_json, not_applicable

_SUB_GROUP = "zero_optimization.sub_group_size"
_GIB = float(1 << 30)
#: Record kinds any DeepSpeed log yields; with none of them there is no run output to judge.
_RUN_OUTPUT = ("event", "timer", "step", "throughput", "iteration", "memory", "loss_scale")


def _stage(inputs: HealthInputs) -> int | None:
    """The ZeRO stage: the config's, else the ``Creating ... ZeRO stage N optimizer`` line's."""
    config = in_effect(inputs)
    if config is not None:
        return config.stage
    ev = inputs.frame("event")
    if ev.empty or "name" not in ev.columns:
        return None
    details = [d for d in ev[ev["name"] == "zero_stage"]["detail"] if isinstance(d, Mapping)]
    stages = [d.get("stage") for d in details if isinstance(d.get("stage"), int)]
    return stages[-1] if stages else None


def _flushes(inputs: HealthInputs) -> tuple[int, int, str]:
    """(warnings, flushes in total, where the first one is) from ``allocator_flush`` events."""
    ev = inputs.frame("event")
    if ev.empty or "name" not in ev.columns:
        return 0, 0, ""
    rows = ev[ev["name"] == "allocator_flush"]
    if rows.empty:
        return 0, 0, ""
    total = sum(int(d.get("flushes", 0)) for d in rows["detail"] if isinstance(d, Mapping))
    first = rows.iloc[0]
    step = f", step {int(first['step'])}" if pd.notna(first.get("step")) else ""
    return len(rows), total, f"first at {first['file']}:{first['line']}{step}"


def _reserved_gap(inputs: HealthInputs) -> pd.Series | None:
    """The memory line with the largest reserved/allocated ratio past both lines; None if none."""
    mem = inputs.frame("memory")
    if mem.empty or not {"allocated_bytes", "cached_bytes"} <= set(mem.columns):
        return None
    rows = mem.dropna(subset=["allocated_bytes", "cached_bytes"])
    rows = rows[rows["allocated_bytes"] > 0]
    alloc = rows["allocated_bytes"].astype("float64")
    cached = rows["cached_bytes"].astype("float64")
    ratio = cached / alloc
    far = (ratio >= th.RESERVED_OVER_ALLOCATED) & (cached - alloc >= th.RESERVED_GAP_MIN_BYTES)
    if not far.any():
        return None
    ranked = rows[far].assign(ratio=ratio[far])
    return ranked.sort_values("ratio", ascending=False, kind="stable").iloc[0]


def _suggest(inputs: HealthInputs) -> int:
    """A tenth of the sub_group_size in effect, not below the sane range's low end."""
    config = in_effect(inputs)
    current = config.number(_SUB_GROUP) if config is not None else None
    low = th.ZERO3_RANGES["sub_group_size"][0]
    return int(max((current or th.SUB_GROUP_DEFAULT) / th.SUB_GROUP_SHRINK, low))


@rule(
    "zero3.fragmentation",
    "ZeRO-3 runs without allocator cache flushes",
    "ZeRO-3's 'pytorch allocator cache flushes since last step' warnings and see_memory_usage "
    "lines with reserved (CA) far above allocated (MA): signs of a fragmented allocator that a "
    "smaller zero_optimization.sub_group_size eases.",
    "runtime",
    page="training",
)
def check_fragmentation(inputs: HealthInputs) -> Finding:
    """Warn on either sign in a ZeRO-3 run; pass when memory lines show neither."""
    stage = _stage(inputs)
    if stage is not None and stage != 3:
        return not_applicable(f"ZeRO stage {stage}: sub_group_size is a ZeRO-3 setting")
    warnings, total, where = _flushes(inputs)
    gap = _reserved_gap(inputs)
    config = inputs.config or in_effect(inputs)  # the user's config says what they set
    ev: list[Evidence] = []
    if config is not None:
        ev.append(Evidence.of(config.get(_SUB_GROUP)))
    signs: list[str] = []
    if warnings:
        ev.append(Evidence("allocator cache flushes", total, f"{warnings} warnings, {where}"))
        signs.append(f"{total} allocator cache flushes in {warnings} steps")
    if gap is not None:
        alloc, cached = float(gap["allocated_bytes"]), float(gap["cached_bytes"])
        line = f"{gap['label'] or 'memory line'}, {gap['file']}:{gap['line']}"
        ev.append(
            Evidence("reserved / allocated", f"{cached / _GIB:.2f} / {alloc / _GIB:.2f} GiB", line)
        )
        signs.append(f"reserved {cached / alloc:.1f}x allocated ({line})")
    if signs:
        return Finding(
            Status.WARN,
            "; ".join(signs) + ": the allocator is short of contiguous blocks. A smaller "
            "sub_group_size makes the optimizer step allocate less at a time",
            tuple(ev),
            fix_json({"zero_optimization": {"sub_group_size": _suggest(inputs)}}),
        )
    if stage is None:
        return Finding(Status.UNKNOWN, "ZeRO stage unknown (no config, no stage line)", tuple(ev))
    if all(inputs.frame(kind).empty for kind in _RUN_OUTPUT):
        return Finding(Status.UNKNOWN, "no run output to look for flush warnings in", tuple(ev))
    if inputs.frame("memory").empty:
        return Finding(
            Status.PASS,
            "no allocator cache flush warnings (memory_breakdown is off: no reserved figures)",
            tuple(ev),
        )
    return Finding(
        Status.PASS, "no allocator cache flushes; reserved stays near allocated", tuple(ev)
    )
