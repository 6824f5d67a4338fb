"""Figures of the Communication page: exposed-comm share, per-op bandwidth, timer ratios."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from dsmon.analysis import comm
from dsmon.figures import plain
from dsmon.figures.common import (
    COLORS,
    capped_annotation,
    empty,
    hline,
    plot_figure,
    rank_label,
    scatter_props,
    step_part,
    titled,
)


def share_figure(
    share: pd.DataFrame, title: str = "Exposed communication per step", total: int | None = None
) -> go.Figure:
    """Exposed comm ms (bars, filled past a few steps) and its share of the step, per rank.

    The share is a line on the right axis. ``total``: the rows before downsampling; the
    chart says when it draws fewer. The page's first chart: built as a dict and made a
    figure once (:mod:`dsmon.figures.plain`).
    """
    if share.empty:
        return empty("No engine timer lines: the comm share needs wall_clock_breakdown.", title)
    grid = plain.rows([1.0], spacing=0.0, right=[1])
    data = []
    for rank, rows in share.groupby("rank", sort=True, dropna=False):
        label = rank_label(rank, " rank {}")
        bars = step_part(
            len(rows),
            rows["step"],
            rows["exposed_comm_ms"],
            f"exposed comm ms{label}",
            COLORS["comm"],
            stack=None,  # ranks side by side, never summed
            opacity=0.6,
        )
        line = scatter_props(
            len(rows), x=rows["step"], y=100.0 * rows["comm_share"], name=f"% of step{label}",
            mode="lines",
        )  # fmt: skip
        data += [grid.on(bars, 1), grid.on(line, 1, right=True)]
    grid.axis(grid.y[0])["title"] = {"text": "ms"}
    grid.axis(grid.right[1]).update(title={"text": "% of step"}, rangemode="tozero")
    grid.axis(grid.x[0])["title"] = {"text": "optimizer step"}
    unit = "steps" if share["rank"].nunique() <= 1 else "rank-steps"
    capped = capped_annotation(len(share), total, unit)
    notes = [capped] if capped is not None else []
    return plot_figure(data, title, grid.layout, notes=notes)


def bandwidth_figure(
    ops: pd.DataFrame,
    link_gbps: float | None = None,
    link_name: str = "",
    title: str = "Bandwidth per collective (Gbps)",
) -> go.Figure:
    """Bars of each op's algbw and busbw, with the link's nominal bandwidth as a line."""
    if ops.empty:
        return empty(
            'No comms-logger output in this run (enable "comms_logger" and call log_summary()).',
            title,
        )
    data = []
    for col, name in (("algbw_gbps", "algbw"), ("busbw_gbps", "busbw")):
        text = None
        if link_gbps:  # each bar labelled with its share of the link, the number that matters
            text = [f"{100 * v / link_gbps:.1f} % of link" if pd.notna(v) else "" for v in ops[col]]
        data.append({"type": "bar", "x": ops["op"].to_numpy(), "y": ops[col].to_numpy(),
                     "name": name, "text": text, "textposition": "outside"})  # fmt: skip
    marks = [hline(link_gbps, f"expected: {link_name} ({link_gbps:g} Gbps)")] if link_gbps else []
    return plot_figure(data, title, {"barmode": "group", "yaxis": titled("Gbps")}, marks)


def size_figure(
    by_size: pd.DataFrame,
    link_gbps: float | None = None,
    title: str = "Bus bandwidth by message size (Gbps)",
) -> go.Figure:
    """Busbw against message size, one line per collective, on a log size axis.

    Small messages are latency-bound and reach little of the link; only the sizes of the
    buckets the run really moves tell whether the link delivers.
    """
    rows = by_size[by_size["msg_size_bytes"] > 0] if not by_size.empty else by_size
    if rows.empty:
        return empty("No comms-logger sizes in this run.", title)
    data = [
        {
            "type": "scatter",
            "x": g["msg_size_bytes"].to_numpy(),
            "y": g["busbw_gbps"].to_numpy(),
            "mode": "lines+markers",
            "name": str(op),
            "customdata": g[["count", "avg_latency_ms"]],
            "hovertemplate": "%{x:.3s}B: %{y:.2f} Gbps, %{customdata[0]} calls, "
            "avg %{customdata[1]:.2f} ms<extra>%{fullData.name}</extra>",
        }
        for op, g in rows.groupby("op", sort=True)
    ]
    axes = {"xaxis": titled("message size (bytes)", type="log"), "yaxis": titled("busbw (Gbps)")}
    marks = [hline(link_gbps, f"link {link_gbps:g} Gbps")] if link_gbps else []
    return plot_figure(data, title, axes, marks)


def latency_figure(
    ops: pd.DataFrame, title: str = "Total latency per collective (ms)"
) -> go.Figure:
    """Where communication time went, op by op, with call counts in the hover."""
    if ops.empty:
        return empty("No comms-logger output in this run.", title)
    bars = {
        "type": "bar",
        "x": ops["op"].to_numpy(),
        "y": ops["total_latency_ms"].to_numpy(),
        "customdata": ops[["count", "avg_latency_ms"]],
        "hovertemplate": "%{x}: %{y:.2f} ms over %{customdata[0]:.0f} calls (avg %{customdata[1]:.2f} ms)<extra></extra>",
        "marker": {"color": COLORS["comm"]},
    }
    return plot_figure([bars], title, {"yaxis": titled("ms"), "showlegend": False})


def ratio_figure(
    ratios: pd.DataFrame, title: str = "Communication timers against the timer that holds them (%)"
) -> go.Figure:
    """bwd_allreduce as % of bwd and optimizer_allgather as % of the step, per step.

    The shares of :data:`dsmon.analysis.comm.PHASE_SHARES`, named for what they divide, as
    the checklist and the phase lines above the chart quote them.
    """
    names = {ratio: f"{label} / {phase}" for label, _, ratio, phase, _ in comm.PHASE_SHARES}
    cols = [c for c in names if c in ratios.columns and ratios[c].notna().any()]
    if ratios.empty or not cols:
        return empty("No engine timer lines.", title)
    data = []
    for rank, by_rank in ratios.groupby("rank", sort=True, dropna=False):
        suffix = rank_label(rank, " (rank {})")
        for col in cols:
            rows = by_rank.dropna(subset=[col])
            if not rows.empty:
                data.append(
                    scatter_props(len(rows), x=rows["step"].to_numpy(),
                                  y=100.0 * rows[col].to_numpy(),
                                  name=names[col] + suffix, mode="lines+markers")
                )  # fmt: skip
    axes = {"xaxis": titled("optimizer step"), "yaxis": titled("%", rangemode="tozero")}
    return plot_figure(data, title, axes)


#: The coordinator's three parts as the chart names and colours them.
COORDINATOR_PARTS = (
    ("wait_ms", "wait for in-flight parameters", "#E45756"),
    ("gather_ms", "all-gather launch", "#4C78A8"),
    ("submission_ms", "submission bookkeeping", "#F58518"),
)


def coordinator_figure(
    per_step: pd.DataFrame, title: str = "ZeRO-3 parameter fetch time per step"
) -> go.Figure:
    """Stacked ms of wait, all-gather and submission per step, and the wait share (right axis).

    ``per_step`` is :func:`dsmon.analysis.coordinator.coordinator_steps` (rank 0 prints the
    timers, so there is one row per step).
    """
    if per_step.empty:
        return empty("No ZeRO-3 coordinator timer lines (DeepSpeed 0.10.0 printed them).", title)
    grid = plain.rows([1.0], spacing=0.0, right=[1])
    # the parts on the default axes (x, y); only the wait share names its right-hand axis
    data = [step_part(len(per_step), per_step["step"], per_step[col], name, color)
            for col, name, color in COORDINATOR_PARTS]  # fmt: skip
    wait = scatter_props(
        len(per_step),
        x=per_step["step"],
        y=100.0 * per_step["wait_share"],
        name="wait, % of fetch time",
        mode="lines+markers",
        line={"color": "#333333", "dash": "dot"},
    )
    data.append(grid.on(wait, 1, right=True))
    grid.axis(grid.y[0])["title"] = {"text": "ms"}
    grid.axis(grid.right[1]).update(
        title={"text": "% wait"}, range=[0, 100], tickvals=[0, 25, 50, 75, 100], showgrid=False
    )
    grid.axis(grid.x[0])["title"] = {"text": "optimizer step"}
    return plot_figure(data, title, {**grid.layout, "barmode": "stack"})
