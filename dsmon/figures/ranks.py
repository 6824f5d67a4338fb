"""Figures of the Steps page's per-rank view (the probe of ``dsmon run``): busy time and score.

Busy time (a rank's step time minus what it waited in collectives, see
:mod:`dsmon.analysis.ranks`) is drawn rather than step time: in data-parallel training every
rank's step lasts as long as the slowest one's, so only busy time tells the ranks apart.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from dsmon.analysis.ranks import LINE_RANKS
from dsmon.figures.common import (
    COLORS,
    empty,
    hline,
    plot_figure,
    rank_label,
    scatter_props,
    titled,
)

NO_PROBE = "No per-rank data: start the job with dsmon run -- <launch command>."


def busy_figure(
    buckets: pd.DataFrame,
    title: str = "Busy time per rank (step time minus waiting in collectives, ms)",
) -> go.Figure:
    """Each rank's busy time per step bucket: a straggler is the top line, or the bright row.

    ``buckets``: ``dsmon.analysis.ranks.BUSY_COLUMNS`` (the mean per bucket, its first
    step). Past ``LINE_RANKS`` ranks, lines hide each other: a heatmap shows them all.
    """
    if buckets.empty:
        return empty(NO_PROBE, title)
    n_ranks = buckets["rank"].nunique()
    if n_ranks > LINE_RANKS:
        return _busy_heatmap(buckets, title)
    data = [
        scatter_props(
            len(rows),
            x=rows["step"].to_numpy(),
            y=rows["busy_ms"].to_numpy(),
            name=rank_label(rank),
            mode="lines",
            customdata=rows[["min_ms", "max_ms"]].to_numpy(),
            hovertemplate="step %{x}: %{y:.1f} ms (min %{customdata[0]:.1f}, "
            "max %{customdata[1]:.1f})<extra>%{fullData.name}</extra>",
        )
        for rank, rows in buckets.groupby("rank", sort=True)
    ]
    return plot_figure(data, title, {"xaxis": titled("optimizer step")})


def _busy_heatmap(buckets: pd.DataFrame, title: str) -> go.Figure:
    """Ranks x step buckets of the mean busy time."""
    grid = buckets.pivot_table(index="rank", columns="step", values="busy_ms", aggfunc="mean")
    cells = {
        "type": "heatmap",
        "z": grid.to_numpy(dtype="float32"),  # sent as 4 bytes a cell, not 8
        "x": grid.columns.to_numpy(),
        "y": [rank_label(r) for r in grid.index],
        "colorscale": "Viridis",
        "colorbar": {"title": {"text": "ms"}},
        "hovertemplate": "%{y}, steps from %{x}: %{z:.1f} ms<extra></extra>",
    }
    axes = {"xaxis": titled("optimizer step"), "yaxis": {"autorange": "reversed"}}  # rank 0 on top
    height = max(260, min(900, 14 * len(grid.index) + 120))
    return plot_figure([cells], title, axes, height=height)


def straggler_figure(
    strag: pd.DataFrame,
    warn: float,
    title: str = "Straggler score per step (slowest rank's busy time / the median rank's)",
) -> go.Figure:
    """The score per step, each point labelled with the step's slowest rank."""
    if strag.empty:
        return empty("Needs per-rank times from two or more ranks.", title)
    score = scatter_props(
        len(strag),
        x=strag["step"].to_numpy(),
        y=strag["score"].to_numpy(),
        name="score",
        mode="lines+markers",
        customdata=strag["slowest_rank"].to_numpy(),
        hovertemplate="step %{x}: %{y:.2f}, slowest rank %{customdata}<extra></extra>",
    )
    marks = [hline(warn, f"{warn:g}: worth a look", dash="dot")]
    return plot_figure([score], title, {"xaxis": titled("optimizer step")}, marks)


#: The phases of a rank's step drawn side by side, in the order they happen, and their colours.
PHASES = (
    ("input_ms", "input (before the forwards)", "#9D755D"),
    ("fwd_ms", "fwd", COLORS["fwd"]),
    ("bwd_ms", "bwd", COLORS["bwd"]),
    ("step_ms", "step", COLORS["step"]),
    ("other_ms", "other (outside the engine)", "#BAB0AC"),
)


def phases_figure(
    phases: pd.DataFrame, title: str = "Where each rank's step goes (mean ms)"
) -> go.Figure:
    """One stacked bar per rank: its time before the forwards beside fwd, bwd and step.

    ``phases``: ``dsmon.view.ranks.phases`` over the run (one row per rank); ``other`` is
    the rest of the rank's step (the script's own work between backward and step). The
    time in collectives, inside bwd and step, is in the hover text.
    """
    if phases.empty:
        return empty("No per-rank step times yet (dsmon run's probe).", title)
    rows = phases.sort_values("rank")
    known = rows[["input_ms", "fwd_ms", "bwd_ms", "step_ms"]].sum(axis=1)
    rows = rows.assign(other_ms=(rows["total_ms"] - known).clip(lower=0.0))
    ranks = [f"rank {int(r)}" for r in rows["rank"]]
    data = []
    for col, name, color in PHASES:
        hover = [
            f"{rank}: {name} {v:.1f} ms of {t:.1f} ms ({c:.1f} ms in collectives)"
            for rank, v, t, c in zip(
                ranks, rows[col], rows["total_ms"], rows["coll_ms"].fillna(0.0), strict=True
            )
        ]
        data.append({"type": "bar", "y": ranks, "x": rows[col].to_numpy(), "name": name,
                     "orientation": "h", "marker": {"color": color}, "hovertext": hover,
                     "hoverinfo": "text"})  # fmt: skip
    axes = {
        "barmode": "stack",
        "xaxis": titled("ms per step (mean over the run)"),
        "yaxis": {"autorange": "reversed"},
    }
    return plot_figure(data, title, axes, height=max(220, 120 + 28 * len(ranks)))
