"""Figures of the FLOPS page: top modules, the module tree, achieved TFLOPS against peaks."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

from dsmon.analysis.peaks import ReferenceRange
from dsmon.figures.common import (
    COLORS,
    empty,
    hline,
    plot_figure,
    rank_label,
    scatter_props,
    titled,
)

METRIC_LABELS = {"params": "params", "macs": "fwd MACs", "fwd_latency": "fwd latency (ms)"}


def top_modules_figure(top: pd.DataFrame, metric: str) -> go.Figure:
    """Horizontal bars of the largest modules by one metric (largest on top)."""
    title = f"Top modules by {METRIC_LABELS[metric]}"
    if top.empty:
        return empty("The profile printed no module breakdown.", title)
    rows = top.iloc[::-1]
    labels = [
        m if m == c else f"{m} ({c})"
        for m, c in zip(rows["module"], rows["module_class"], strict=True)
    ]
    bars = {"type": "bar", "x": rows["value"].to_numpy(), "y": labels, "orientation": "h",
            "marker": {"color": COLORS["fwd"]}}  # fmt: skip
    return plot_figure([bars], title, {"showlegend": False}, height=max(240, 28 * len(rows) + 100))


#: The module tree's column per metric.
TREE_COLUMNS = {"params": "params", "macs": "macs", "fwd_latency": "fwd_latency_ms"}


def tree_has_data(tree: pd.DataFrame, metric: str) -> bool:
    """Whether the tree can be drawn sized by ``metric`` (a page draws no empty panel)."""
    col = TREE_COLUMNS[metric]
    return not tree.empty and col in tree.columns and bool(tree[col].fillna(0).sum() > 0)


def tree_figure(tree: pd.DataFrame, metric: str) -> go.Figure:
    """The module tree as an icicle sized by one metric (``module_tree`` output)."""
    col = TREE_COLUMNS[metric]
    title = f"Module tree, sized by {METRIC_LABELS[metric]}"
    if not tree_has_data(tree, metric):
        return empty(
            'No detailed per-module profile (flops_profiler "detailed": true prints it).', title
        )
    labels = [
        p.rsplit(".", 1)[-1] or c for p, c in zip(tree["path"], tree["module_class"], strict=True)
    ]
    text = [f"{c}" for c in tree["module_class"]]
    icicle = {
        "type": "icicle",
        "ids": tree["path"].to_numpy(),
        "parents": tree["parent"].to_numpy(),
        "labels": labels,
        "values": tree[col].fillna(0).to_numpy(),
        "branchvalues": "remainder",
        "text": text,
        "hovertemplate": "%{id}<br>%{text}<br>%{value:,.4g}<extra></extra>",
    }
    return plot_figure([icicle], title, height=480)


def tflops_figure(
    tflops: pd.DataFrame,
    peak: float | None = None,
    peak_label: str = "",
    reference: ReferenceRange | None = None,
) -> go.Figure:
    """Achieved TFLOPS per GPU per step, with the dense peak and a reference band if given."""
    title = "Achieved TFLOPS per GPU (profiled FLOPs / step time)"
    if tflops.empty or tflops["tflops"].isna().all():
        return empty("No flops profile, or no engine timers to scale it by.", title)
    data = [
        scatter_props(
            len(rows),
            x=rows["step"].to_numpy(),
            y=rows["tflops"].to_numpy(),
            name=rank_label(rank) or "TFLOPS",
            mode="lines+markers",
            line={"color": COLORS["tflops"]},
        )
        for rank, rows in tflops.groupby("rank", sort=True, dropna=False)
    ]
    marks = [_band(reference)] if reference is not None else []
    if peak:
        marks.append(hline(peak, f"dense peak {peak:g} TFLOPS {peak_label}"))
    axes = {"xaxis": titled("optimizer step"), "yaxis": titled("TFLOPS", rangemode="tozero")}
    return plot_figure(data, title, axes, marks)


def _band(reference: ReferenceRange) -> tuple[dict[str, Any], dict[str, Any]]:
    """The reference range as a green band across the plot, labelled at its top left.

    As ``Figure.add_hrect`` draws it: a layout shape and an annotation, for a figure built
    as one (:func:`dsmon.figures.common.plot_figure`).
    """
    band = {"type": "rect", "x0": 0, "x1": 1, "xref": "x domain", "y0": reference.low_tflops,
            "y1": reference.high_tflops, "yref": "y", "fillcolor": "#54A24B", "opacity": 0.15,
            "line": {"width": 0}}  # fmt: skip
    label = {"text": f"reference: {reference.label}", "showarrow": False, "x": 0,
             "xref": "x domain", "xanchor": "left", "y": reference.high_tflops, "yref": "y",
             "yanchor": "top"}  # fmt: skip
    return band, label
