"""GPUs: NVML telemetry per node and GPU, grids over time, imbalance and throttling."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
import streamlit as st

from dsmon.analysis import gpus
from dsmon.analysis.downsample import N_OUT
from dsmon.figures import gpus as fig
from dsmon.figures.common import rounded
from dsmon.store.store import Store
from dsmon.view.gpu_buckets import GRID, GRID_BUCKETS
from ui.charts import chart
from ui.page import live_body, live_store_part, page_header, page_view
from ui.text import md_escape

view = page_view(__file__)
MAX_LINES = 8
#: Seconds between two redraws of the live tiles: a sample is on screen within a second of
#: reaching the store, however long the page's charts take to redraw (every ``refresh_s``).
TILES_S = 1.0
UTIL_NOTE = (
    "NVML's utilization.gpu is **kernel-active time**: the share of each sample period in which "
    "any kernel ran, however few SMs it used. 100 % means busy, not efficient; SM occupancy needs "
    "DCGM or NVML GPM (Hopper+)."
)


def header(summary: pd.DataFrame) -> None:
    """GPU count, models (mixed models flagged) and the utilisation caveat."""
    models = gpus.models(summary)
    cols = st.columns(3)
    cols[0].metric("GPUs", len(summary))
    cols[1].metric("GPU models", len(models))
    cols[2].metric("Nodes", int(summary["node"].nunique()))
    listed = ", ".join(f"{count} x {name}" for name, count in models.items())
    if len(models) > 1:
        st.warning(
            f"Mixed GPU models in this run: {listed}. The slowest model paces every synchronous step."
        )
    else:
        st.caption(md_escape(f"Model: {listed}"))
    st.info(UTIL_NOTE)


def query(name: str, fn: Callable[[Store, Any], pd.DataFrame]) -> pd.DataFrame:
    """A GPU query of the store at the replay position, asked again only when samples came."""
    return view.frames.gpu(name, view.cutoff, fn)


def metric_section(selected: list[str], metric: str) -> None:
    """One metric: chosen GPUs' traces, the GPUs x time grid and the across-GPU imbalance."""
    frames, cutoff = view.frames, view.cutoff
    fine = frames.gpu_buckets(f"fine.{','.join(selected)}", cutoff, N_OUT // 2, selected)
    chart(fig.lines_figure(gpus.lines(fine, metric, selected), metric), f"gpus.lines.{metric}")
    grid = frames.gpu_buckets(GRID, cutoff, GRID_BUCKETS)
    chart(fig.heatmap_figure(gpus.heatmap(grid, metric), metric), f"gpus.heatmap.{metric}")
    chart(fig.imbalance_figure(gpus.imbalance(grid, metric), metric), f"gpus.imbalance.{metric}")


def body() -> None:
    """The page; re-run alone every ``refresh_s`` seconds when live (``ui.page.live_body``)."""
    run = view.run
    summary = view.frames.gpu_summary(view.cutoff)
    if summary.empty:
        st.info(
            "No GPU samples in this run. Run `dsmon collect` with NVML on each node to record them."
        )
        return
    inv = gpus.inventory(summary)
    header(summary)
    names = [str(g) for g in inv["gpu"]]
    selected = st.multiselect(
        "GPUs drawn as lines (all GPUs are in the grids)", names, default=names[:MAX_LINES]
    )
    labels = {m.key: f"{m.label} ({m.unit})" for m in gpus.METRICS}
    metric = st.radio("Metric", list(labels), format_func=labels.__getitem__, horizontal=True)
    metric_section(selected, metric)
    st.subheader("Clock-event (throttle) reasons")
    chart(fig.throttle_figure(gpus.throttle_share(summary)), "gpus.throttle_figure")
    st.subheader("Latest sample per GPU")
    latest = query("latest", lambda s, cut: gpus.latest_of(s.gpu.latest(run, cut)))
    st.dataframe(rounded(latest, 1), hide_index=True, width="stretch")
    st.subheader("Inventory")
    st.dataframe(rounded(inv, 1), hide_index=True, width="stretch")


def tiles() -> None:
    """The newest sample of each GPU, summed up; read from the store at every redraw.

    One indexed read of the newest samples, not the page's frames: cheap enough for every
    second, and it shows the sample as soon as it is stored.
    """
    rows = gpus.latest_of(view.frames.store.gpu.latest(view.run, view.cutoff.ts))
    shown = gpus.live_tiles(rows)
    if shown is None:
        return
    for col, (label, value) in zip(st.columns(5), shown.values(), strict=True):
        col.metric(label, value)
    every = " · redrawn every second" if view.live else ""
    st.caption(f"Newest GPU sample {shown.newest:%Y-%m-%d %H:%M:%S}{every}")


page_header("GPUs", view)
live_store_part(view, TILES_S, tiles)
live_body(view, body, charts=True)
