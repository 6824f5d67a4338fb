"""The Compare page's figure: each quantity in its own row, one colour per run."""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dsmon.analysis.compare import METRICS
from dsmon.figures.common import empty, layout, step_line

TITLE = "Runs compared, per optimizer step"
ROW_HEIGHT = 190


def compare_figure(series: pd.DataFrame, runs: list[str] | None = None) -> go.Figure:
    """Rows of :func:`dsmon.analysis.compare.overlay`: a run keeps its colour in every row.

    ``runs`` is the order of the legend and colours (the order they were picked).
    """
    shown = [m for m in METRICS if not series.empty and m in set(series["metric"])]
    if not shown:
        return empty("None of these runs has step times, throughput or loss yet.", TITLE)
    fig = make_subplots(
        rows=len(shown),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.05,
        subplot_titles=[METRICS[m] for m in shown],
    )
    runs = [r for r in (runs or list(dict.fromkeys(series["run"]))) if r in set(series["run"])]
    colors = {run: px.colors.qualitative.Plotly[i % 10] for i, run in enumerate(runs)}
    for row, metric in enumerate(shown, start=1):
        for run in runs:
            part = series[(series["metric"] == metric) & (series["run"] == run)]
            if part.empty:
                continue
            fig.add_trace(
                step_line(
                    part,
                    run,
                    legendgroup=run,
                    showlegend=metric == _first_metric(series, run, shown),
                    line={"color": colors[run]},
                    marker={"color": colors[run]},
                ),
                row=row,
                col=1,
            )
    fig.update_xaxes(title_text="optimizer step", row=len(shown), col=1)
    return layout(fig, TITLE, height=80 + ROW_HEIGHT * len(shown))


def _first_metric(series: pd.DataFrame, run: str, shown: list[str]) -> str | None:
    """The first row a run appears in: its legend entry is drawn there, once."""
    have = set(series[series["run"] == run]["metric"])
    return next((m for m in shown if m in have), None)
