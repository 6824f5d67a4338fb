"""Figures of the Steps page's per-rank view (the probe of ``dsmon run``): busy time and score.

Busy time (a rank's step time minus what it waited in collectives, see
:mod:`dsmon.analysis.ranks`) is drawn rather than step time: in data-parallel training every
rank's step lasts as long as the slowest one's, so only busy time tells the ranks apart.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from dsmon.figures.common import empty, layout, rank_label, scatter

NO_PROBE = "No per-rank data: start the job with dsmon run -- <launch command>."


def busy_figure(
    table: pd.DataFrame,
    title: str = "Busy time per rank (step time minus waiting in collectives, ms)",
) -> go.Figure:
    """One line per rank of its busy time per step: a straggler is the top line."""
    if table.empty:
        return empty(NO_PROBE, title)
    fig = go.Figure()
    for rank, rows in table.groupby("rank", sort=True):
        fig.add_trace(
            scatter(
                len(rows),
                x=rows["step"],
                y=rows["busy_ms"],
                name=rank_label(rank),
                mode="lines",
            )
        )
    fig.update_xaxes(title_text="optimizer step")
    return layout(fig, title)


def straggler_figure(
    strag: pd.DataFrame,
    warn: float,
    title: str = "Straggler score per step (slowest rank's busy time / the median rank's)",
) -> go.Figure:
    """The score per step, each point labelled with the step's slowest rank."""
    if strag.empty:
        return empty("Needs per-rank times from two or more ranks.", title)
    fig = go.Figure(
        scatter(
            len(strag),
            x=strag["step"],
            y=strag["score"],
            name="score",
            mode="lines+markers",
            customdata=strag["slowest_rank"],
            hovertemplate="step %{x}: %{y:.2f}, slowest rank %{customdata}<extra></extra>",
        )
    )
    fig.add_hline(y=warn, line_dash="dot", annotation_text=f"{warn:g}: worth a look")
    fig.update_xaxes(title_text="optimizer step")
    return layout(fig, title)
