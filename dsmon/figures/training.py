"""The Training page's figure: one row per quantity the run printed, on a shared step axis."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from dsmon.analysis.training import METRICS
from dsmon.figures import plain
from dsmon.figures.common import empty, layout_props, step_line_props

ROW_HEIGHT = 170
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
    The page's chart, redrawn at every refresh: built as a dict and made a figure once
    (:mod:`dsmon.figures.plain`).
    """
    shown = [m for m in (metrics or list(METRICS)) if m in set(series["metric"])]
    if series.empty or not shown:
        return empty("No loss, learning rate, loss scale, memory or throughput lines yet.")
    grid = plain.rows([1.0] * len(shown), spacing=0.04)
    data = []
    for row, metric in enumerate(shown, start=1):
        rows = series[series["metric"] == metric]
        for source, part in rows.groupby("source", sort=False, observed=True):
            data.append(grid.on(step_line_props(part, f"{metric} · {source}"), row))
        if metric in MARKED_METRICS and len(skipped):
            data.append(grid.on(_skipped_marks(rows, skipped, metric), row))
        grid.axis(grid.y[row - 1]).update(_y_axis(metric, rows["value"]))
    grid.axis(grid.x[-1])["title"] = {"text": "optimizer step"}
    props = layout_props("Training curves", height=80 + ROW_HEIGHT * len(shown))
    # Several rows of named sources: the legend goes beside the plot, off the row titles.
    props["legend"].update(orientation="v", x=1.02, xanchor="left", y=1.0)
    titles = grid.titles([f"{m} ({METRICS[m]})" if METRICS[m] else m for m in shown])
    return go.Figure(data=data, layout={**grid.layout, "annotations": titles, **props})


def _skipped_marks(rows: pd.DataFrame, skipped: Sequence[float], metric: str) -> dict[str, Any]:
    """Red crosses at the skipped steps: at the row's value there, else at its lowest."""
    at = rows.groupby("step")["value"].last()
    floor = float(rows["value"].min()) if len(rows) else 0.0
    ys = [float(at[s]) if s in at.index else floor for s in skipped]
    return {
        "type": "scatter",
        "x": list(skipped),
        "y": ys,
        "mode": "markers",
        "marker": {"symbol": "x", "size": 9, "color": "#E45756"},
        "name": f"step skipped (overflow) · {metric}",
        "legendgroup": "skipped",
    }


def _y_axis(metric: str, values: pd.Series) -> dict[str, Any]:
    """Log scale for a learning rate or loss scale over decades; a visible range when flat.

    Plotly centres a constant series on a +-1 range, which draws a learning rate of 1e-4 as
    a line at zero.
    """
    positive = values[values > 0]
    if metric in LOG_METRICS and len(positive) and positive.max() / positive.min() > 100:
        return {"type": "log"}
    if len(values) and values.max() == values.min() and values.max() != 0:
        v = float(values.max())
        return {"range": sorted((0.0, 2 * v))}
    return {}
