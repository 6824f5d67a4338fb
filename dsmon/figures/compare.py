"""The Compare page's figure: each quantity in its own row, one colour per run."""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from dsmon.analysis.compare import METRICS
from dsmon.figures import plain
from dsmon.figures.common import empty, plot_figure, step_line_props

TITLE = "Runs compared, per optimizer step"
ROW_HEIGHT = 190


def compare_figure(series: pd.DataFrame, runs: list[str] | None = None) -> go.Figure:
    """Rows of :func:`dsmon.analysis.compare.overlay`: a run keeps its colour in every row.

    ``runs`` is the order of the legend and colours (the order they were picked). Built as a
    dict and made a figure once (:mod:`dsmon.figures.plain`).
    """
    shown = [m for m in METRICS if not series.empty and m in set(series["metric"])]
    if not shown:
        return empty("None of these runs has step times, throughput or loss yet.", TITLE)
    grid = plain.rows([1.0] * len(shown), spacing=0.05)
    runs = [r for r in (runs or list(dict.fromkeys(series["run"]))) if r in set(series["run"])]
    colors = {run: px.colors.qualitative.Plotly[i % 10] for i, run in enumerate(runs)}
    parts = dict(iter(series.groupby(["metric", "run"], sort=False, observed=True)))
    data = []
    for row, metric in enumerate(shown, start=1):
        for run in runs:
            part = parts.get((metric, run))
            if part is None or part.empty:
                continue
            line = step_line_props(
                part,
                run,
                legendgroup=run,
                showlegend=metric == _first_metric(series, run, shown),
                line={"color": colors[run]},
                marker={"color": colors[run]},
            )
            data.append(grid.on(line, row))
    grid.axis(grid.x[-1])["title"] = {"text": "optimizer step"}
    titles = grid.titles([METRICS[m] for m in shown])
    height = 80 + ROW_HEIGHT * len(shown)
    return plot_figure(data, TITLE, grid.layout, height=height, notes=titles)


def _first_metric(series: pd.DataFrame, run: str, shown: list[str]) -> str | None:
    """The first row a run appears in: its legend entry is drawn there, once."""
    have = set(series[series["run"] == run]["metric"])
    return next((m for m in shown if m in have), None)
