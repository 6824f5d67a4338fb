"""Figure of the Autotuner page: throughput against micro-batch size, one line per ZeRO stage."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from dsmon.figures.common import empty, plot_figure, titled

TITLE = "Throughput against micro-batch size per ZeRO stage"
#: Marker of each point source: measured experiments as dots, summary bests as stars.
SYMBOLS = {"experiment": "circle", "best of tuning space": "star"}


def throughput_figure(points: pd.DataFrame) -> go.Figure:
    """One trace per ZeRO stage and source (``autotune.throughput_points``), x = micro-batch."""
    if points.empty:
        return empty("No experiment of this run has a throughput and a micro-batch size.", TITLE)
    data = [
        {
            "type": "scatter",
            "x": rows["micro_batch"].to_numpy(),
            "y": rows["throughput_samples_per_s"].to_numpy(),
            "text": rows["name"].to_numpy(),
            "mode": "lines+markers" if source == "experiment" else "markers",
            "marker": {"symbol": SYMBOLS.get(str(source), "circle"), "size": 10},
            "name": f"ZeRO {stage} ({source})",
            "hovertemplate": "%{text}<br>micro-batch %{x}<br>%{y:.4g}<extra></extra>",
        }
        for (stage, source), rows in points.groupby(["zero_stage", "source"], sort=True)
    ]
    axes = {
        "xaxis": titled("micro-batch size per GPU"),
        "yaxis": titled("throughput (samples/s)"),
    }
    return plot_figure(data, TITLE, axes)
