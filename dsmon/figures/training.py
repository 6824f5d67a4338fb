"""The Training page's figure: one row per quantity the run printed, on a shared step axis."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dsmon.analysis.training import METRICS
from dsmon.figures.common import empty, layout, step_line

ROW_HEIGHT = 170
LOG_METRICS = ("learning rate", "loss scale")
LOG_METRICS = ("learning rate", "loss scale")


def training_figure(series: pd.DataFrame, metrics: list[str] | None = None) -> go.Figure:
    """Curves of :func:`dsmon.analysis.training.training_series`, one row per metric.

    Each source gets its own trace (a loss from iteration lines and one from csv_monitor are
    not the same series); the learning rate and loss scale are drawn on log axes when they
    span more than two decades.
    """
    shown = [m for m in (metrics or list(METRICS)) if m in set(series["metric"])]
    if series.empty or not shown:
        return empty("No loss, learning rate, loss scale, memory or throughput lines yet.")
    fig = make_subplots(
        rows=len(shown),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.04,
        subplot_titles=[f"{m} ({METRICS[m]})" if METRICS[m] else m for m in shown],
    )
    for row, metric in enumerate(shown, start=1):
        rows = series[series["metric"] == metric]
        for source, part in rows.groupby("source", sort=False, observed=True):
            fig.add_trace(step_line(part, f"{metric} · {source}"), row=row, col=1)
        _y_axis(fig, row, metric, rows["value"])
    fig.update_xaxes(title_text="optimizer step", row=len(shown), col=1)
    fig = layout(fig, "Training curves", height=80 + ROW_HEIGHT * len(shown))
    # Several rows of named sources: the legend goes beside the plot, off the row titles.
    fig.update_layout(legend={"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1.0})
    return fig


def _y_axis(fig: go.Figure, row: int, metric: str, values: pd.Series) -> None:
    """Log scale for a learning rate or loss scale over decades; a visible range when flat.

    Plotly centres a constant series on a +-1 range, which draws a learning rate of 1e-4 as
    a line at zero.
    """
    positive = values[values > 0]
    if metric in LOG_METRICS and len(positive) and positive.max() / positive.min() > 100:
        fig.update_yaxes(type="log", row=row, col=1)
    elif len(values) and values.max() == values.min() and values.max() != 0:
        v = float(values.max())
        fig.update_yaxes(range=sorted((0.0, 2 * v)), row=row, col=1)
