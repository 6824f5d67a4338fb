"""Figures of the FLOPS page: top modules, the module tree, achieved TFLOPS against peaks."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from dsmon.analysis.peaks import ReferenceRange
from dsmon.figures.common import COLORS, empty, layout, rank_label, scatter

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
    fig = go.Figure(go.Bar(x=rows["value"], y=labels, orientation="h", marker_color=COLORS["fwd"]))
    return layout(fig, title, height=max(240, 28 * len(rows) + 100), showlegend=False)


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
    fig = go.Figure(
        go.Icicle(
            ids=tree["path"],
            parents=tree["parent"],
            labels=labels,
            values=tree[col].fillna(0),
            branchvalues="remainder",
            text=text,
            hovertemplate="%{id}<br>%{text}<br>%{value:,.4g}<extra></extra>",
        )
    )
    return layout(fig, title, height=480)


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
    fig = go.Figure()
    for rank, rows in tflops.groupby("rank", sort=True, dropna=False):
        name = rank_label(rank) or "TFLOPS"
        fig.add_trace(
            scatter(
                len(rows),
                x=rows["step"],
                y=rows["tflops"],
                name=name,
                mode="lines+markers",
                line={"color": COLORS["tflops"]},
            )
        )
    if reference is not None:
        fig.add_hrect(
            y0=reference.low_tflops,
            y1=reference.high_tflops,
            fillcolor="#54A24B",
            opacity=0.15,
            line_width=0,
            annotation_text=f"reference: {reference.label}",
            annotation_position="top left",
        )
    if peak:
        fig.add_hline(
            y=peak, line_dash="dash", annotation_text=f"dense peak {peak:g} TFLOPS {peak_label}"
        )
    fig.update_xaxes(title_text="optimizer step")
    fig.update_yaxes(title_text="TFLOPS", rangemode="tozero")
    return layout(fig, title)
