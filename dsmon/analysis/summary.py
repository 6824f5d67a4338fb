"""The one-screen run summary printed by ``dsmon import`` and ``dsmon demo``.

It answers the first questions about a run without opening the dashboard: how far it got,
how long a step takes and where the time goes (forward, backward, optimizer step), how much
of the step is exposed communication, the throughput, and the config choices that matter
most for speed. Every figure comes from the store through the ``dsmon.analysis`` functions,
so the summary and the dashboard always agree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from dsmon.analysis.comm import exposed_comm_share
from dsmon.analysis.steps import slowest_steps, step_stats, timed_steps
from dsmon.analysis.stragglers import straggler_summary
from dsmon.analysis.summary_scan import breakdown_of, median_of
from dsmon.analysis.waiting import CommSplit
from dsmon.ds_config.read import preferred_config, section, section_enabled, zero_stage
from dsmon.model.records import ENGINE_INFO, EventRecord
from dsmon.store.records.runs import RunInfo
from dsmon.store.store import Store


@dataclass(frozen=True, slots=True)
class RunSummary:
    """The figures of the summary; None where the run's output does not tell."""

    info: RunInfo
    timed_steps: int = 0
    median_ms: Mapping[str, float] = field(default_factory=dict)
    p90_total_ms: float | None = None
    slowest: tuple[tuple[int, float], ...] = ()
    samples_per_s: float | None = None
    #: rank 0's exposed communication share (engine timers): any wait for a slower rank in it
    comm_share: float | None = None
    #: wire time and waiting for the slowest rank, from dsmon run's probe on every rank
    comm_split: CommSplit | None = None
    #: the rank slowest in most steps and that share, and the median straggler score
    slowest_rank: tuple[int, float] | None = None
    straggler_score: float | None = None
    flops_per_s_per_gpu: float | None = None
    config: Mapping[str, str] = field(default_factory=dict)
    ds_version: str | None = None
    world_size: int | None = None
    #: How the run ended or stands, as its state says (``dsmon.health.run_state``, which the
    #: caller judges: this layer reads figures, not verdicts); None leaves the line out.
    outcome: str | None = None


def _num(value: Any) -> float | None:
    """A finite float, or None for NA/NaN/None."""
    if value is None or value is pd.NA:
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def config_highlights(cfg: Mapping[str, Any]) -> dict[str, str]:
    """The settings that shape performance most, from a DeepSpeed config dict.

    Sections are read as DeepSpeed reads them (:mod:`dsmon.ds_config.read`), so
    ``"zero_optimization": true`` is stage 1 here as in the checklist. An effective-config dump
    has no ``zero_optimization`` section: its ``zero_optimization_stage`` attribute is used.
    """
    zero = section(cfg, "zero_optimization")
    if "zero_optimization" in cfg:
        stage: Any = zero_stage(cfg)
    else:
        stage = cfg.get("zero_optimization_stage")
    precision = "bf16" if section_enabled(cfg, "bf16") else None
    precision = precision or ("fp16" if section_enabled(cfg, "fp16") else "fp32")
    out = {
        "zero_stage": stage,
        "precision": precision,
        "train_batch_size": cfg.get("train_batch_size"),
        "micro_batch_per_gpu": cfg.get("train_micro_batch_size_per_gpu"),
        "grad_accum": cfg.get("gradient_accumulation_steps"),
        "optimizer": section(cfg, "optimizer").get("type") or cfg.get("optimizer_name"),
        "offload_optimizer": _device(zero, "offload_optimizer"),
        "offload_param": _device(zero, "offload_param"),
        "overlap_comm": zero.get("overlap_comm"),
    }
    return {k: str(v) for k, v in out.items() if v is not None}


def _device(zero: Mapping[str, Any], offload: str) -> Any:
    """The ``device`` of a ZeRO offload sub-section, or None."""
    sub = zero.get(offload)
    return sub.get("device") if isinstance(sub, Mapping) else None


def _config(store: Store, run: str) -> dict[str, str]:
    """Highlights of the most user-facing config record the run has."""
    chosen = preferred_config(store.records(run, "config"))
    return config_highlights(chosen.config) if chosen is not None else {}


def _timing(breakdown: pd.DataFrame) -> dict[str, Any]:
    """Median phase times, p90 total and the slowest steps of a breakdown."""
    if breakdown.empty:
        return {}
    stats = step_stats(breakdown)
    medians = {c: float(stats.loc[c, "p50"]) for c in stats.index if stats.loc[c, "n"] > 0}
    known = breakdown["step"].notna()
    slow = slowest_steps(breakdown if known.all() else breakdown[known], 3)
    return {
        "timed_steps": timed_steps(breakdown),
        "median_ms": medians,
        "p90_total_ms": _num(stats.loc["total_ms", "p90"]),
        "slowest": tuple(
            (int(s), float(t)) for s, t in zip(slow["step"], slow["total_ms"], strict=True)
        ),
    }


def _events(store: Store, run: str) -> dict[str, Any]:
    """Version and world size from the run's event records.

    The version and world size the probe read from the engine count where the log's lines
    (hidden at DeepSpeed's default log level) do not give them.
    """
    out: dict[str, Any] = {}
    engine: Mapping[str, Any] = {}
    for rec in store.scan(run, "event"):
        if not isinstance(rec, EventRecord):
            continue
        detail = rec.detail
        if rec.name == ENGINE_INFO:
            engine = detail
        elif rec.name == "deepspeed_version" and "version" in detail:
            out["ds_version"] = str(detail["version"])
        elif rec.name == "world_info" and isinstance(detail.get("dist_world_size"), int):
            out["world_size"] = detail["dist_world_size"]
    if engine.get("version") is not None:
        out.setdefault("ds_version", str(engine["version"]))
    if isinstance(engine.get("world_size"), int):
        out.setdefault("world_size", engine["world_size"])
    return out


def _ranks(store: Store, run: str) -> dict[str, Any]:
    """The probe's view of every rank: the wire/waiting split and the slowest rank, if any.

    From the store's per-step figures (``Store.ranks.step_stats``), as the checklist reads them.
    """
    summary = straggler_summary(store.ranks.step_stats(run))
    if not summary.steps:
        return {}
    return {
        "comm_split": summary.split(),
        "slowest_rank": summary.named(),
        "straggler_score": summary.score.median(),
    }


def run_summary(store: Store, run: str, outcome: str | None = None) -> RunSummary:
    """Compute the summary of one run from the store; ``outcome`` is its state's line.

    Raises:
        KeyError: the store has no run of that name.
    """
    info = next((r for r in store.runs() if r.name == run), None)
    if info is None:
        raise KeyError(run)
    # The figures of the other kinds first: the timers' breakdown is the most the summary holds
    # (70 MiB at 800,000 steps), and nothing else is read while it is held. One streaming pass
    # per kind (dsmon.analysis.summary_scan): a big import's summary never holds every record.
    others: dict[str, Any] = {
        **(_ranks(store, run) if "rank_step" in info.kinds else {}),
        "samples_per_s": median_of(store, run, "throughput", "samples_per_s"),
        "flops_per_s_per_gpu": median_of(store, run, "flops_profile", "flops_per_s_per_gpu"),
        "config": _config(store, run) if "config" in info.kinds else {},
        **(_events(store, run) if "event" in info.kinds else {}),
    }
    breakdown = breakdown_of(store, run) if "timer" in info.kinds else pd.DataFrame()
    share = exposed_comm_share(breakdown) if not breakdown.empty else None
    return RunSummary(
        info=info,
        **others,
        comm_share=share.p50 if share is not None else None,
        **_timing(breakdown),
        outcome=outcome,
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _rate(flops: float) -> str:
    """FLOPS with a unit prefix, as DeepSpeed's profiler prints them."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if flops >= scale:
            return f"{flops / scale:.2f} {prefix}FLOPS"
    return f"{flops:.0f} FLOPS"


def _span(info: RunInfo) -> str:
    """``first -> last (duration)`` of the run's timestamps."""
    if info.first_ts is None or info.last_ts is None:
        return "-"
    seconds = (pd.Timestamp(info.last_ts) - pd.Timestamp(info.first_ts)).total_seconds()
    return f"{info.first_ts} -> {info.last_ts} ({seconds:.1f} s)"


def _where(info: RunInfo) -> str:
    """Nodes and ranks seen, e.g. ``ranks 0, 1`` or ``2 nodes, 16 ranks``."""
    parts = []
    if info.nodes:
        parts.append(
            f"nodes {', '.join(info.nodes)}" if len(info.nodes) <= 4 else f"{len(info.nodes)} nodes"
        )
    if info.ranks:
        rs = info.ranks
        parts.append(f"ranks {', '.join(map(str, rs))}" if len(rs) <= 8 else f"{len(rs)} ranks")
    return "; ".join(parts) or "-"


def _step_lines(s: RunSummary) -> list[str]:
    """The step count, the median breakdown and the slowest steps."""
    steps = "-" if s.info.last_step is None else str(s.info.last_step)
    lines = [f"Steps       {steps} (with timer breakdown: {s.timed_steps})"]
    if s.median_ms:
        m = s.median_ms
        phases = " | ".join(
            f"{name} {_ms(m.get(f'{name}_ms'))}" for name in ("fwd", "bwd", "step", "total")
        )
        lines.append(
            f"Step time   median {phases} (p90 total {_ms(s.p90_total_ms)}, steps after warm-up)"
        )
    if s.slowest:
        slow = ", ".join(f"step {step} {_ms(ms)}" for step, ms in s.slowest)
        lines.append(f"Slowest     {slow}")
    return lines


def _deepspeed(s: RunSummary) -> str:
    version = s.ds_version or "version unknown"
    return version if s.world_size is None else f"{version}, world size {s.world_size}"


def _comm_lines(s: RunSummary) -> list[str]:
    """Communication as the checklist judges it, and which rank the others wait for.

    With the probe's split the wire time comes first and rank 0's timer figure, which holds
    the wait, after it; without it the timer figure says that it may hold waiting.
    """
    lines = []
    timers = (
        f"exposed communication {s.comm_share:.1%} of step time on rank 0's timers"
        if s.comm_share is not None
        else None
    )
    if s.comm_split is not None:
        also = f"; {timers}, waiting included" if timers else ""
        lines.append(f"Comm        {s.comm_split.text()} (median over steps, every rank){also}")
    elif timers is not None:
        lines.append(
            f"Comm        {timers} (median over steps, warm-up left out; any wait for a slower "
            "rank included)"
        )
    if s.straggler_score is not None:
        score = f"straggler score {s.straggler_score:.2f}, median"
        if s.slowest_rank is not None:
            rank, share = s.slowest_rank
            lines.append(
                f"Ranks       rank {rank} was the slowest in {share:.0%} of steps ({score})"
            )
        else:
            lines.append(f"Ranks       no rank was the slowest in most steps ({score})")
    return lines


def render_summary(s: RunSummary) -> str:
    """The summary as plain text, one figure per line, fitting one terminal screen."""
    info = s.info
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(info.kinds.items()))
    lines = [
        f"Run         {info.name}",
        f"Time        {_span(info)}",
        f"Sources     {_where(info)}",
        f"DeepSpeed   {_deepspeed(s)}",
        *([f"Outcome     {s.outcome}"] if s.outcome is not None else []),
        f"Records     {info.n_records} ({kinds})",
        *_step_lines(s),
    ]
    lines += _comm_lines(s)
    if s.samples_per_s is not None:
        lines.append(f"Throughput  {s.samples_per_s:.1f} samples/s (median)")
    if s.flops_per_s_per_gpu is not None:
        lines.append(f"FLOPS       {_rate(s.flops_per_s_per_gpu)} per GPU (flops profiler)")
    if s.config:
        lines.append("Config      " + " ".join(f"{k}={v}" for k, v in s.config.items()))
    return "\n".join(lines)


def summary_text(store: Store, run: str, outcome: str | None = None) -> str:
    """The run's one-screen summary, or one line saying the run holds no records.

    ``outcome`` is the run's state as ``dsmon check`` says it (the caller judges it:
    ``dsmon.health.run_state.stored_state``), so the import summary and the checklist agree.
    """
    try:
        return render_summary(run_summary(store, run, outcome))
    except KeyError:
        return f"Run         {run}: no records"
