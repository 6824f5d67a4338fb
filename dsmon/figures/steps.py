"""Figures of the Steps page: the per-step breakdown, micro-steps, distribution, ZeRO timers.

The step axis is shared: the stacked fwd/bwd/step bars, throughput and TFLOPS, and the
loss-scale events are rows of one figure, so a slow step lines up with the overflow or the
throughput dip that explains it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dsmon.analysis.downsample import histogram
from dsmon.figures import plain
from dsmon.figures.common import (
    COLORS,
    HEIGHT,
    OFF_SCALE,
    capped_annotation,
    clip_outliers,
    empty,
    layout,
    off_scale,
    plot_figure,
    scatter_props,
    step_part,
    titled,
    vline,
)

#: Stack order of the breakdown: bwd split into inner/allreduce when both were printed.
SPLIT_PARTS = (
    ("fwd_ms", "fwd"),
    ("bwd_inner_ms", "bwd_inner"),
    ("bwd_allreduce_ms", "bwd_allreduce"),
    ("step_ms", "step"),
)
PLAIN_PARTS = (("fwd_ms", "fwd"), ("bwd_ms", "bwd"), ("step_ms", "step"))


def breakdown_parts(breakdown: pd.DataFrame) -> tuple[tuple[str, str], ...]:
    """The columns to stack: bwd as inner + allreduce when every step has both, else bwd."""
    split = all(
        c in breakdown.columns and breakdown[c].notna().all()
        for c in ("bwd_inner_ms", "bwd_allreduce_ms")
    )
    return SPLIT_PARTS if split and not breakdown.empty else PLAIN_PARTS


def _parts(bd: pd.DataFrame, stack: str, legend: bool = True) -> list[dict[str, Any]]:
    """The stacked per-step parts of one rank (bars, or filled lines past a few steps)."""
    return [
        step_part(
            len(bd),
            bd["step"],
            bd[column],
            name,
            COLORS[name],
            stack=stack,
            legendgroup=name,
            showlegend=legend,
        )
        for column, name in breakdown_parts(bd)
        if column in bd.columns
    ]


def _stack(
    fig: go.Figure, bd: pd.DataFrame, row: int = 1, col: int = 1, legend: bool = True
) -> None:
    """Add the stacked per-step parts of one rank to a subplot of ``fig``."""
    for part in _parts(bd, f"parts{row}.{col}", legend):
        fig.add_trace(part, row=row, col=col)


def steps_figure(
    breakdown: pd.DataFrame,
    throughput: pd.DataFrame | None = None,
    tflops: pd.DataFrame | None = None,
    loss_events: pd.DataFrame | None = None,
    title: str = "Per optimizer step (ms)",
    total: int | None = None,
) -> go.Figure:
    """Stacked breakdown, throughput/TFLOPS and loss-scale events on one step axis.

    The throughput/TFLOPS row is drawn only when the run has one of them: a run without
    throughput lines and flops profile would keep a tall empty panel (the page says in one
    line what would fill it). TFLOPS takes that row's right-hand axis only beside throughput:
    an overlaying axis over a row with no trace of its own is laid over the whole figure by
    the plotly.js that Streamlit bundles, hiding the bars (DeepSpeed's default log level
    prints no throughput line, while the flops profiler's figures still give TFLOPS).

    The Steps page's first chart, redrawn at every refresh: built as a dict and made a
    figure once (:mod:`dsmon.figures.plain`).

    Args:
        breakdown: one rank's rows of ``step_breakdown`` (already downsampled).
        throughput: ``step``, ``samples_per_s`` (ThroughputTimer lines), optional.
        tflops: ``step``, ``tflops`` (achieved TFLOPS per GPU), optional.
        loss_events: ``step``, ``event``, ``new_scale``, optional.
        title: the figure title (names the rank shown).
        total: the rank's steps before downsampling; the chart says when it draws fewer.
    """
    if breakdown.empty:
        return empty("No engine timer lines (wall_clock_breakdown) in this run.", title)
    has_throughput = throughput is not None and not throughput.empty
    has_tflops = tflops is not None and not tflops.empty
    speed = has_throughput or has_tflops
    grid = plain.rows(
        [0.6, 0.25, 0.15] if speed else [0.82, 0.18], spacing=0.04, right=[2] if speed else []
    )
    data = [grid.on(part, 1) for part in _parts(breakdown, "parts1.1")]
    speed_lines = (
        (throughput, "samples_per_s", "samples/s", "lines+markers", "throughput", False),
        (tflops, "tflops", "TFLOPS per GPU", "lines", "tflops", has_throughput),
    )
    for frame, column, name, mode, color, right in speed_lines:
        if frame is not None and not frame.empty:
            line = scatter_props(
                len(frame), x=frame["step"], y=frame[column], name=name, mode=mode,
                line={"color": COLORS[color]},
            )  # fmt: skip
            data.append(grid.on(line, 2, right=right))
    loss_row = 3 if speed else 2
    loss, no_events = _loss_row(loss_events, grid.x[loss_row - 1], grid.y[loss_row - 1])
    data.append(grid.on(loss, loss_row))
    notes = [no_events] if no_events is not None else []
    grid.axis(grid.y[0])["title"] = {"text": "ms"}
    cut = off_scale(breakdown, "step", "total_ms", grid.x[0], grid.y[0])
    if cut is not None:
        grid.axis(grid.y[0])["range"] = cut[0]
        notes.append(cut[1])
    if speed:
        grid.axis(grid.y[1])["title"] = {"text": "samples/s" if has_throughput else "TFLOPS"}
        grid.axis(grid.right[2])["title"] = {"text": "TFLOPS"}
    grid.axis(grid.y[loss_row - 1])["visible"] = False
    grid.axis(grid.x[loss_row - 1])["title"] = {"text": "optimizer step"}
    capped = capped_annotation(len(breakdown), total)
    notes += [capped] if capped is not None else []
    return _stacked(data, notes, grid.layout, title, height=560 if speed else 440)


def _stacked(
    data: list[dict[str, Any]],
    notes: list[dict[str, Any]],
    axes: dict[str, dict[str, Any]],
    title: str,
    height: int = HEIGHT,
) -> go.Figure:
    """A figure of stacked per-step parts: its traces, notes and axes."""
    props = {**axes, "barmode": "stack", "bargap": 0.05}
    return plot_figure(data, title, props, height=height, notes=notes)


def _loss_row(
    loss_events: pd.DataFrame | None, x: str, y: str
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Loss-scale events as labelled markers for the bottom row (axes ``x``, ``y``).

    With the note that says there are none, when there are none. The trace is drawn even
    without events: plotly draws no axis for a row without a trace, and the bottom row's x
    axis is the one that carries the step labels.
    """
    events = loss_events if loss_events is not None else pd.DataFrame()
    note = None
    if events.empty:
        events = pd.DataFrame({"step": [], "event": [], "new_scale": []})
        note = {
            "text": "no loss-scale events",
            "showarrow": False,
            "x": 0.5,
            "y": 0.5,
            "xref": f"{x} domain",
            "yref": f"{y} domain",
        }
    text = [
        f"{e}" + (f" → {s:g}" if pd.notna(s) else "")
        for e, s in zip(events["event"], events["new_scale"], strict=True)
    ]
    trace = {
        "type": "scatter",
        "x": events["step"],
        "y": [0] * len(events),
        "mode": "markers",
        "name": "loss-scale event",
        "marker": {"symbol": "x", "size": 10, "color": COLORS["event"]},
        "text": text,
        "hovertemplate": "step %{x}: %{text}<extra></extra>",
        "showlegend": not events.empty,
    }
    return trace, note


def ranks_figure(
    breakdown: pd.DataFrame, ranks: Sequence[int], title: str = "Per rank, side by side (ms)"
) -> go.Figure:
    """The stacked breakdown of several ranks in columns with one shared y axis."""
    if breakdown.empty or not ranks:
        return empty("Timer lines come from one rank only in this run.", title)
    fig = make_subplots(
        rows=1, cols=len(ranks), shared_yaxes=True, subplot_titles=[f"rank {r}" for r in ranks]
    )
    for i, rank in enumerate(ranks, start=1):
        rows = breakdown[breakdown["rank"] == rank]
        _stack(fig, rows, col=i, legend=i == 1)
        clip_outliers(fig, rows, "step", "total_ms", row=1, col=i)
    fig.update_layout(barmode="stack", bargap=0.05)
    return layout(fig, title, height=380)


def rank_totals_figure(
    breakdown: pd.DataFrame, title: str = "Step time per rank (fwd + bwd + step, ms)"
) -> go.Figure:
    """One line per rank of the total step time: stragglers stand out as the top line."""
    if breakdown.empty:
        return empty("No timer lines.", title)
    data = [
        scatter_props(
            len(rows), x=rows["step"], y=rows["total_ms"], name=f"rank {rank}", mode="lines"
        )
        for rank, rows in breakdown.groupby("rank", sort=True)
    ]
    return plot_figure(data, title, {"xaxis": titled("optimizer step")})


def micro_figure(
    micro: pd.DataFrame, title: str = "Micro-steps (ms per micro-batch)", total: int | None = None
) -> go.Figure:
    """Stacked micro-step timers, a bar per micro-batch (filled past a few), x = step + micro.

    The micro index spreads a step's micro-batches within it. ``total``: the micro-batches before downsampling; the chart says when it draws fewer.
    """
    if micro.empty:
        return empty("No *_microstep timer lines in this run.", title)
    n = micro.groupby("step")["micro_step"].transform("max").fillna(0) + 1
    x = micro["step"] + micro["micro_step"].fillna(0) / n
    ordered = x.to_numpy().argsort(kind="stable")  # a filled line is drawn left to right
    micro, x = micro.iloc[ordered], x.iloc[ordered]
    data = [
        step_part(
            len(micro),
            x,
            micro[column],
            name,
            COLORS[name],
            customdata=micro["micro_step"],
            hovertemplate="step %{x:.2f} (micro %{customdata}): %{y:.2f} ms",
        )
        for column, name in breakdown_parts(micro)
        if column in micro.columns
    ]
    notes = []
    y_axis: dict[str, Any] = {}
    cut = off_scale(micro, "step", "total_ms")
    if cut is not None:
        y_axis["range"] = cut[0]
        notes.append(cut[1])
    capped = capped_annotation(len(micro), total, "micro-batches")
    notes += [capped] if capped is not None else []
    x_axis = {"title": {"text": "optimizer step (micro-batches spread within it)"}}
    return _stacked(data, notes, {"xaxis": x_axis, "yaxis": y_axis}, title)


def distribution_figure(
    breakdown: pd.DataFrame,
    stats: pd.DataFrame | None = None,
    title: str = "Step-time distribution (fwd + bwd + step)",
) -> go.Figure:
    """Histogram of total step time with the p50 / p90 / max lines (``step_stats`` rows) on it.

    Steps past OFF_SCALE x p90 (warm-up) are left out of the bins and counted in a note, so
    the bins resolve the steps the run normally takes.
    """
    if breakdown.empty:
        return empty("No timer lines.", title)
    total = breakdown["total_ms"].dropna()
    cap = OFF_SCALE * float(total.quantile(0.9)) if len(total) >= 10 else float("inf")
    shown = total[total <= cap]
    bins = histogram(shown, 40)
    bars = {
        "type": "bar",
        "x": bins["center"].to_numpy(),
        "y": bins["count"].to_numpy(),
        "width": (bins["right"] - bins["left"]).to_numpy(),
        "name": "steps",
        "marker": {"color": COLORS["fwd"]},
        "customdata": bins[["left", "right"]].to_numpy(),
        "hovertemplate": "%{customdata[0]:.1f}-%{customdata[1]:.1f} ms: %{y} steps<extra></extra>",
    }
    dropped = len(total) - len(shown)
    note = f" ({dropped} step(s) above {cap:.0f} ms not binned)" if dropped else ""
    row = (
        stats.loc["total_ms"].astype("float64").to_dict()
        if stats is not None and "total_ms" in stats.index
        else {}
    )
    marks = []
    for label, side in (("p50", "right"), ("p90", "left"), ("max", "left")):
        value = float(row.get(label, float("nan")))
        if value == value and value <= cap:  # known and on the axis
            marks.append(vline(value, f"{label} {value:.1f} ms", side))
    axes = {"xaxis": titled(f"ms{note}"), "yaxis": titled("steps"), "showlegend": False}
    return plot_figure([bars], title, axes, marks)


def zero_timers_figure(
    zero: pd.DataFrame, names: Sequence[str], title: str = "ZeRO optimizer timers (ms)"
) -> go.Figure:
    """One line per ZeRO optimizer timer (``optimizer_allgather`` ...) against the step."""
    if zero.empty or not names:
        return empty("No ZeRO optimizer timer lines (ZeRO-0, or wall_clock_breakdown off).", title)
    data = []
    for name in names:
        column = f"{name}_ms"
        if column in zero.columns:
            rows = zero.dropna(subset=[column])
            data.append(
                scatter_props(len(rows), x=rows["step"], y=rows[column], name=name,
                              mode="lines+markers")
            )  # fmt: skip
    return plot_figure(data, title, {"xaxis": titled("optimizer step")})
