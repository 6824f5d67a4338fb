"""Flops-profiler views: the summary, the top modules, the module tree, achieved TFLOPS and MFU.

DeepSpeed's profiler prints once (at ``profile_step``, rank 0) what one forward of one
micro-batch costs in MACs and FLOPs, and how long fwd/bwd/step took at that one step. Its
backward FLOPs are *estimated* as ``bwd_factor`` (2, plus recompute) times forward, and its
latencies are a single step's. :func:`step_tflops` therefore scales the profiled FLOPs by
the engine timers of every step, which gives an achieved-TFLOPS series for the whole run,
and :func:`mfu_rows` holds it against the dense peak of the GPU model (``dsmon.analysis.peaks``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from dsmon.analysis.peaks import GpuPeak, mfu
from dsmon.model.records import FlopsProfileRecord, ModuleProfile

TERA = 1e12

#: (field, label, unit, scale): the summary rows in the profiler's own order.
SUMMARY_FIELDS: tuple[tuple[str, str, str, float], ...] = (
    ("profile_step", "profiled at step", "", 1.0),
    ("world_size", "world size", "", 1.0),
    ("data_parallel_size", "data parallel size", "", 1.0),
    ("model_parallel_size", "model parallel size", "", 1.0),
    ("batch_size_per_gpu", "batch size per GPU", "samples", 1.0),
    ("params_per_gpu", "params per GPU", "M", 1e6),
    ("params_total", "params of model", "M", 1e6),
    ("fwd_macs_per_gpu", "fwd MACs per GPU", "GMACs", 1e9),
    ("fwd_flops_per_gpu", "fwd FLOPs per GPU", "GFLOPs", 1e9),
    ("fwd_latency_ms", "fwd latency", "ms", 1.0),
    ("fwd_flops_per_s_per_gpu", "fwd TFLOPS per GPU", "TFLOPS", TERA),
    ("bwd_latency_ms", "bwd latency", "ms", 1.0),
    ("bwd_flops_per_s_per_gpu", "bwd TFLOPS per GPU (bwd FLOPs estimated)", "TFLOPS", TERA),
    ("fwd_bwd_flops_per_s_per_gpu", "fwd+bwd TFLOPS per GPU", "TFLOPS", TERA),
    ("step_latency_ms", "step latency", "ms", 1.0),
    ("iter_latency_ms", "iter latency (fwd + bwd + step)", "ms", 1.0),
    ("flops_per_s_per_gpu", "TFLOPS per GPU over the iteration", "TFLOPS", TERA),
    ("samples_per_s", "samples/second", "samples/s", 1.0),
    ("bwd_factor", "bwd FLOPs factor (x fwd)", "", 1.0),
)

METRICS = ("params", "macs", "fwd_latency")
_TREE_COLUMN = {"params": "params", "macs": "macs", "fwd_latency": "fwd_latency_ms"}


def latest_profile(profiles: Sequence[FlopsProfileRecord]) -> FlopsProfileRecord | None:
    """The profile to show: the last whole one printed (GAS > 1 prints one per micro-step).

    A profile cut short (``partial``) is shown only when the run has no whole one.
    """
    whole = [p for p in profiles if not p.partial]
    return (whole or list(profiles))[-1] if profiles else None


def summary(profile: FlopsProfileRecord) -> pd.DataFrame:
    """The profiler's summary as rows ``quantity, value, unit`` with readable scales.

    Fields the profile did not print are left out, not shown as 0.
    """
    rows = []
    for field, label, unit, scale in SUMMARY_FIELDS:
        value = getattr(profile, field)
        if value is not None:
            rows.append({"quantity": label, "value": float(value) / scale, "unit": unit})
    return pd.DataFrame(rows, columns=["quantity", "value", "unit"])


def aggregated(profile: FlopsProfileRecord) -> pd.DataFrame:
    """The "Aggregated Profile per GPU" section: ``depth, metric, module_class, value, rank``.

    ``rank`` is the module's place (1 = largest) within its depth and metric, as printed.
    """
    rows = [
        {"depth": a.depth, "metric": a.metric, "module_class": a.module_class, "value": a.value}
        for a in profile.top_modules
    ]
    out = pd.DataFrame(rows, columns=["depth", "metric", "module_class", "value"])
    out["rank"] = out.groupby(["depth", "metric"]).cumcount() + 1
    return out


def module_tree(profile: FlopsProfileRecord) -> pd.DataFrame:
    """The detailed per-module tree as a frame with ``parent`` paths (empty when not printed).

    Columns: ``path, parent, module_class, depth`` and the ModuleProfile numbers. The root's
    parent is "" so a treemap or icicle can draw it directly.
    """
    cols = [
        "path",
        "parent",
        "module_class",
        "depth",
        "params",
        "macs",
        "fwd_latency_ms",
        "fwd_flops_per_s",
    ]
    rows = [_tree_row(m) for m in profile.modules]
    roots = [r["path"] for r in rows if r["depth"] == 0]
    for row in rows:  # top-level children ("tok") hang under the root ("TinyGPT")
        if row["depth"] != 0 and row["parent"] == "" and roots:
            row["parent"] = roots[0]
    return pd.DataFrame(rows, columns=cols)


def _tree_row(m: ModuleProfile) -> dict[str, object]:
    """One module's row: its parent is the path minus the last dotted part."""
    parent = m.path.rsplit(".", 1)[0] if "." in m.path else ""
    if m.depth == 0:
        parent = ""
    return {
        "path": m.path or m.module_class,
        "parent": parent,
        "module_class": m.module_class,
        "depth": m.depth,
        "params": m.params,
        "macs": m.macs,
        "fwd_latency_ms": m.fwd_latency_ms,
        "fwd_flops_per_s": m.fwd_flops_per_s,
    }


def top_modules(profile: FlopsProfileRecord, metric: str, n: int = 10) -> pd.DataFrame:
    """The ``n`` largest leaf modules by ``params``, ``macs`` or ``fwd_latency``.

    Leaves (modules with no child in the tree) are the layers that hold the weights and do
    the work; their parents only add them up. Uses the detailed tree when it was printed,
    else the aggregated section (class names at its deepest printed depth).
    """
    tree = module_tree(profile)
    col = _TREE_COLUMN[metric]
    if not tree.empty and tree[col].notna().any():
        leaves = tree[~tree["path"].isin(set(tree["parent"]))]
        top = leaves.nlargest(n, col)
        return pd.DataFrame(
            {"module": top["path"], "module_class": top["module_class"], "value": top[col]}
        )
    agg = aggregated(profile)
    agg = agg[agg["metric"] == metric]
    if agg.empty:
        return pd.DataFrame(columns=["module", "module_class", "value"])
    deepest = agg[agg["depth"] == agg["depth"].max()].nlargest(n, "value")
    return pd.DataFrame(
        {
            "module": deepest["module_class"],
            "module_class": deepest["module_class"],
            "value": deepest["value"],
        }
    )


def step_tflops(
    breakdown: pd.DataFrame, profile: FlopsProfileRecord, micro_per_step: int = 1
) -> pd.DataFrame:
    """Achieved TFLOPS per GPU for every step, from the profiled FLOPs and that step's timers.

    FLOPs per step = (1 + bwd_factor) x fwd FLOPs per GPU x micro-batches per step (the
    profiler's own estimate: backward = ``bwd_factor`` x forward); time = fwd + bwd + step
    from the engine timers. Returns ``step, rank, tflops``; empty when the profile lacks the
    forward FLOPs.
    """
    cols = ["step", "rank", "tflops"]
    fwd = profile.fwd_flops_per_gpu
    if fwd is None or breakdown.empty:
        return pd.DataFrame(columns=cols)
    factor = 1.0 + (profile.bwd_factor if profile.bwd_factor is not None else 2.0)
    iter_ms = breakdown[["fwd_ms", "bwd_ms", "step_ms"]].sum(axis=1, min_count=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        tflops = factor * fwd * micro_per_step / (iter_ms.where(iter_ms > 0) / 1000.0) / TERA
    return pd.DataFrame({"step": breakdown["step"], "rank": breakdown["rank"], "tflops": tflops})[
        cols
    ]


def mfu_rows(achieved_tflops: float | None, peak: GpuPeak | None, dtype: str) -> pd.DataFrame:
    """One table row per known figure: achieved, the dtype's dense peak, MFU, with sources.

    A figure the run does not give is left out rather than shown as an empty cell:
    :func:`mfu_missing` says in words what would fill it.
    """
    peak_value = None if peak is None else peak.tflops.get(dtype)
    share = mfu(achieved_tflops, peak_value)
    rows = [
        {"quantity": "achieved TFLOPS per GPU", "value": achieved_tflops, "source": "this run"},
        {
            "quantity": f"dense {dtype} peak TFLOPS ({peak.model if peak else 'unknown GPU'})",
            "value": peak_value,
            "source": peak.source if peak else "",
        },
        {
            "quantity": "MFU %",
            "value": None if share is None else 100.0 * share,
            "source": "achieved / peak",
        },
    ]
    known = [r for r in rows if r["value"] is not None]
    return pd.DataFrame(known, columns=["quantity", "value", "source"])


def mfu_missing(achieved_tflops: float | None, peak: GpuPeak | None, dtype: str) -> str | None:
    """What the MFU figure lacks, in one line (None when it is complete)."""
    if achieved_tflops is None:
        return (
            "MFU needs the achieved TFLOPS: engine timers (wall_clock_breakdown) with the profile"
        )
    if peak is None:
        return "MFU needs the GPU's peak: pick the GPU model above"
    if peak.tflops.get(dtype) is None:
        return f"MFU needs a dense {dtype} peak, which the table has not for {peak.model}"
    return None


def micro_batches_per_step(micro: pd.DataFrame) -> int:
    """Micro-batches per optimizer step (gradient accumulation) from the micro timer rows.

    The median count per step and rank, so one cut-off step at the end does not change it;
    1 when the log has no micro timer lines.
    """
    if micro.empty or "step" not in micro.columns:
        return 1
    counts = micro.dropna(subset=["step"]).groupby(["step", "rank"], dropna=False).size()
    return max(1, int(counts.median())) if not counts.empty else 1


def throughput(tp: pd.DataFrame, iterations: pd.DataFrame | None = None) -> pd.DataFrame:
    """Samples/s per step from ThroughputTimer lines, else from framework iteration lines.

    Returns ``step, samples_per_s`` sorted by step (the ThroughputTimer's ``global_step``
    when the record's step is unknown).
    """
    cols = ["step", "samples_per_s"]
    for frame, alt in ((tp, "global_step"), (iterations, "iteration")):
        if frame is None or frame.empty or "samples_per_s" not in frame.columns:
            continue
        step = frame["step"].astype("Float64")
        if alt in frame.columns:
            step = step.fillna(frame[alt].astype("Float64"))
        out = pd.DataFrame(
            {"step": step, "samples_per_s": frame["samples_per_s"].astype("float64")}
        )
        out = out.dropna().sort_values("step", kind="stable")
        if not out.empty:
            return out.reset_index(drop=True)[cols]
    return pd.DataFrame(columns=cols)
