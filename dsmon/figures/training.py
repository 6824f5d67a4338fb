"""The Training page's figure: one row per quantity the run printed, on a shared step axis."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dsmon.analysis.training import METRICS
from dsmon.figures.common import empty, layout, step_line

ROW_HEIGHT = 170
LOG_METRICS = ("learning rate", "loss scale")
LOG_METRICS = ("learning rate", "loss scale")


#: The rows on which steps skipped for overflow are marked.
MARKED_METRICS = ("loss", "grad norm")


def training_figure(
    series: pd.DataFrame, metrics: list[str] | None = None, skipped: Sequence[float] = ()
) -> go.Figure:
    """Curves of :func:`dsmon.analysis.training.training_series`, one row per metric.

    Each source gets its own trace (a loss from iteration lines and one from csv_monitor are
    not the same series); the learning rate and loss scale are drawn on log axes when they
    span more than two decades. ``skipped``: steps skipped for overflow, marked on the loss's
    and the gradient norm's row (at the loss where it is known, else at the row's bottom).
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
        if metric in MARKED_METRICS and len(skipped):
            fig.add_trace(_skipped_marks(rows, skipped, metric), row=row, col=1)
        _y_axis(fig, row, metric, rows["value"])
    fig.update_xaxes(title_text="optimizer step", row=len(shown), col=1)
    fig = layout(fig, "Training curves", height=80 + ROW_HEIGHT * len(shown))
    # Several rows of named sources: the legend goes beside the plot, off the row titles.
    fig.update_layout(legend={"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1.0})
    return fig


def _skipped_marks(rows: pd.DataFrame, skipped: Sequence[float], metric: str) -> go.Scatter:
    """Red crosses at the skipped steps: at the row's value there, else at its lowest."""
    at = rows.groupby("step")["value"].last()
    floor = float(rows["value"].min()) if len(rows) else 0.0
    ys = [float(at[s]) if s in at.index else floor for s in skipped]
    return go.Scatter(
        x=list(skipped),
        y=ys,
        mode="markers",
        marker={"symbol": "x", "size": 9, "color": "#E45756"},
        name=f"step skipped (overflow) · {metric}",
        legendgroup="skipped",
    )


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
