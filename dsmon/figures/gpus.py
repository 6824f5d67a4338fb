"""Figures of the GPUs page: per-GPU traces, GPUs x time heatmaps, imbalance, throttling."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from dsmon.analysis.gpus import METRIC_BY_KEY
from dsmon.figures import plain
from dsmon.figures.common import empty, epoch_ms, layout_props, plot_figure, scatter_props, titled

NO_SAMPLES = "No GPU samples in this run."


#: GPU traces whose legend still fits beside the title, above the plot.
LEGEND_ABOVE_MAX = 4


def _title(metric: str) -> str:
    """``label (unit)`` of a metric key."""
    m = METRIC_BY_KEY[metric]
    return f"{m.label} ({m.unit})"


def lines_figure(series: pd.DataFrame, metric: str) -> go.Figure:
    """One trace per GPU of one metric (``series`` from ``analysis.gpus.series``).

    The page's first chart: built as a dict and made a figure once
    (:mod:`dsmon.figures.plain`).
    """
    title = _title(metric)
    if series.empty or series["value"].isna().all():
        return empty(
            f"{NO_SAMPLES[:-1]} with this field." if not series.empty else NO_SAMPLES, title
        )
    data = [
        scatter_props(
            len(rows), x=epoch_ms(rows["ts"]), y=rows["value"], name=str(gpu), mode="lines"
        )
        for gpu, rows in series.groupby("gpu", sort=True)
    ]
    props = {**layout_props(title), "xaxis": {"type": "date"}}
    if len(data) > LEGEND_ABOVE_MAX:
        # one row of names above the plot runs into the title: the GPUs go at the foot of
        # the figure, under the axis and the date its first tick carries
        props["legend"].update(yref="container", yanchor="bottom", y=0.0, x=0.0, xanchor="left")
        props["margin"]["b"] = 48 + 22 * math.ceil(len(data) / 6)
    return go.Figure(data=data, layout=props)


def heatmap_figure(grid: pd.DataFrame, metric: str) -> go.Figure:
    """GPUs x time grid of one metric (``grid`` from ``analysis.gpus.heatmap``)."""
    title = f"{_title(metric)}: GPUs x time"
    if grid.empty:
        return empty(NO_SAMPLES, title)
    m = METRIC_BY_KEY[metric]
    pct = m.unit == "%"
    cells = {
        "type": "heatmap",
        "z": grid.to_numpy(),
        "x": epoch_ms(grid.columns),
        "y": [str(g) for g in grid.index],
        "colorscale": "Viridis",
        "zmin": 0 if pct else None,
        "zmax": 100 if pct else None,
        "colorbar": {"title": {"text": m.unit}},
        "hovertemplate": "%{y} at %{x}: %{z:.1f} " + m.unit + "<extra></extra>",
    }
    axes = {
        "xaxis": {"type": "date"},
        "yaxis": {"autorange": "reversed"},  # first GPU on top, as in the tables
    }
    height = max(260, min(900, 22 * len(grid.index) + 120))
    return plot_figure([cells], title, axes, height=height)


def imbalance_figure(imb: pd.DataFrame, metric: str) -> go.Figure:
    """Across-GPU spread over time: min-max band with mean, and the CV on a right axis."""
    title = f"Imbalance across GPUs: {METRIC_BY_KEY[metric].label.split(' (')[0]}"
    if imb.empty:
        return empty(NO_SAMPLES, title)
    unit = METRIC_BY_KEY[metric].unit
    grid = plain.rows([1.0], spacing=0.0, right=[1])
    n, x = len(imb), epoch_ms(imb["ts"])
    # the spread on the default axes (x, y); only the CV names its right-hand axis
    data = [
        scatter_props(n, x=x, y=imb["max"].to_numpy(), name="max", mode="lines",
                      line={"width": 0.5}),
        scatter_props(n, x=x, y=imb["min"].to_numpy(), name="min", mode="lines",
                      line={"width": 0.5}, fill="tonexty"),
        scatter_props(n, x=x, y=imb["mean"].to_numpy(), name="mean", mode="lines"),
    ]  # fmt: skip
    cv = scatter_props(
        n, x=x, y=imb["cv"].to_numpy(), name="CV (std/mean)", mode="lines", line={"dash": "dot"}
    )
    data.append(grid.on(cv, 1, right=True))
    grid.axis(grid.x[0])["type"] = "date"
    grid.axis(grid.y[0])["title"] = {"text": unit}
    grid.axis(grid.right[1]).update(title={"text": "CV"}, rangemode="tozero")
    return plot_figure(data, title, grid.layout)


def throttle_figure(share: pd.DataFrame) -> go.Figure:
    """Per GPU, % of samples with each clock-event reason active (grouped bars)."""
    title = "Clock-event (throttle) reasons: % of samples"
    reasons = [c for c in share.columns if c not in ("gpu", "samples")]
    if share.empty or not reasons:
        return empty("No clock-event reasons reported.", title)
    labels = share["gpu"].to_numpy()
    data = [
        {"type": "bar", "x": labels, "y": share[reason].to_numpy(), "name": reason}
        for reason in reasons
    ]
    axes = {"barmode": "group", "yaxis": titled("% of samples", range=[0, 100])}
    return plot_figure(data, title, axes)
