"""GPUs: NVML telemetry per node and GPU, grids over time, imbalance and throttling."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dsmon.analysis import gpus
from dsmon.figures import gpus as fig
from dsmon.figures.common import rounded
from ui.charts import chart
from ui.page import live_body, page_header, page_view
from ui.text import md_escape

view = page_view(__file__)
MAX_LINES = 8
UTIL_NOTE = (
    "NVML's utilization.gpu is **kernel-active time**: the share of each sample period in which "
    "any kernel ran, however few SMs it used. 100 % means busy, not efficient; SM occupancy needs "
    "DCGM or NVML GPM (Hopper+)."
)


def header(samples_inv: tuple[dict[str, int], int]) -> None:
    """GPU count, models (mixed models flagged) and the utilisation caveat."""
    models, n = samples_inv
    cols = st.columns(3)
    cols[0].metric("GPUs", n)
    cols[1].metric("GPU models", len(models))
    cols[2].metric("Nodes", view.frames.memo("gpus.nodes", ["gpu"], view.cutoff, nodes))
    listed = ", ".join(f"{count} x {name}" for name, count in models.items())
    if len(models) > 1:
        st.warning(
            f"Mixed GPU models in this run: {listed}. The slowest model paces every synchronous step."
        )
    else:
        st.caption(md_escape(f"Model: {listed}"))
    st.info(UTIL_NOTE)


def nodes() -> int:
    """Distinct nodes among the samples."""
    return int(view.frames.frame("gpu", view.cutoff)["node"].nunique())


def metric_section(selected: list[str], metric: str) -> None:
    """One metric: chosen GPUs' traces, the GPUs x time grid and the across-GPU imbalance."""
    f, cut = view.frames, view.cutoff
    key = f"gpus.{metric}.{','.join(selected)}"
    series = f.memo(key, ["gpu"], cut, lambda: gpus.series(f.frame("gpu", cut), metric, selected))
    chart(fig.lines_figure(series, metric), f"gpus.lines.{metric}")
    grid = f.memo(
        f"gpus.grid.{metric}", ["gpu"], cut, lambda: gpus.heatmap(buckets(metric), metric)
    )
    chart(fig.heatmap_figure(grid, metric), f"gpus.heatmap.{metric}")
    imb = f.memo(
        f"gpus.imb.{metric}", ["gpu"], cut, lambda: gpus.imbalance(buckets(metric), metric)
    )
    chart(fig.imbalance_figure(imb, metric), f"gpus.imbalance.{metric}")


def buckets(metric: str) -> pd.DataFrame:
    """Per-GPU time-bucket means of every metric (shared by the grids and imbalance)."""
    f, cut = view.frames, view.cutoff
    return f.memo(
        f"gpus.buckets.{metric}",
        ["gpu"],
        cut,
        lambda: gpus.buckets(f.frame("gpu", cut), metrics=[metric]),
    )


def body() -> None:
    """The page; re-run alone every ``refresh_s`` seconds when live (``ui.page.live_body``)."""
    f, cut = view.frames, view.cutoff
    samples = f.frame("gpu", cut)
    if samples.empty:
        st.info(
            "No GPU samples in this run. Run `dsmon collect` with NVML on each node to record them."
        )
        return
    inv = f.memo("gpus.inventory", ["gpu"], cut, lambda: gpus.inventory(samples))
    header((f.memo("gpus.models", ["gpu"], cut, lambda: gpus.models(samples)), len(inv)))
    names = [str(g) for g in inv["gpu"]]
    selected = st.multiselect(
        "GPUs drawn as lines (all GPUs are in the grids)", names, default=names[:MAX_LINES]
    )
    labels = {m.key: f"{m.label} ({m.unit})" for m in gpus.METRICS}
    metric = st.radio("Metric", list(labels), format_func=labels.__getitem__, horizontal=True)
    metric_section(selected, metric)
    st.subheader("Clock-event (throttle) reasons")
    chart(
        fig.throttle_figure(
            f.memo("gpus.throttle", ["gpu"], cut, lambda: gpus.throttle_share(samples))
        ),
        "gpus.throttle_figure",
    )
    st.subheader("Latest sample per GPU")
    st.dataframe(
        rounded(f.memo("gpus.latest", ["gpu"], cut, lambda: gpus.latest(samples)), 1),
        hide_index=True,
        width="stretch",
    )
    st.subheader("Inventory")
    st.dataframe(rounded(inv, 1), hide_index=True, width="stretch")


page_header("GPUs", view)
live_body(view, body)
