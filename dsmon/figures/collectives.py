"""The Communication page's figures of the probe's collectives: bandwidth over the run."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from dsmon.figures.common import empty, hline, plot_figure, scatter_props, titled

#: Messages smaller than this measure a collective's latency, not a link's bandwidth: a
#: gradient norm's 4-byte all-reduce would draw at a millionth of the link.
MIN_BANDWIDTH_BYTES = 1024


def bandwidth_over_time(
    bw: pd.DataFrame,
    link_gbps: float | None = None,
    link_name: str = "",
    title: str = "Bus bandwidth of every rank's collectives, by op and message size (Gbit/s)",
) -> go.Figure:
    """One line per op and size bucket: its bus bandwidth per bucket of steps.

    The link's expected figure is a dashed line; size buckets under
    :data:`MIN_BANDWIDTH_BYTES` are left out. ``bw``: :func:`dsmon.analysis.collectives.bandwidth` of the bucketed collectives; a
    bucket without bandwidth (a barrier, no bytes) draws nothing.
    """
    shown = bw.dropna(subset=["busbw_gbps"]) if not bw.empty else bw
    shown = shown[shown["bucket_bytes"] >= MIN_BANDWIDTH_BYTES] if not shown.empty else shown
    if shown.empty:
        return empty("No timed collective of 1 KiB or more yet.", title)
    data = []
    for (op, size), part in shown.groupby(["op", "size"], sort=True):
        label = f"{op} {size}"
        hover = [
            f"{label}<br>steps {int(s)}+<br>busbw {b:.3g} Gbit/s, algbw {a:.3g}"
            f"<br>wire {w:.3g} ms, skew {k:.3g} ms per call"
            for s, b, a, w, k in zip(
                part["step"], part["busbw_gbps"], part["algbw_gbps"], part["wire_ms"],
                part["skew_ms"], strict=True,
            )
        ]  # fmt: skip
        data.append(
            scatter_props(
                len(part),
                x=part["step"].to_numpy(),
                y=part["busbw_gbps"].to_numpy(),
                mode="lines+markers" if len(part) < 60 else "lines",
                name=label,
                hovertext=hover,
                hoverinfo="text",
            )
        )
    marks = [hline(link_gbps, f"expected: {link_name} ({link_gbps:g} Gbit/s)")] if link_gbps else []
    axes = {
        "xaxis": titled("optimizer step (first of the bucket)"),
        "yaxis": titled("Gbit/s", type="log"),
    }
    return plot_figure(data, title, axes, marks)
