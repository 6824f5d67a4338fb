"""Figure builders: trace types by size, empty states, the step axis, peaks and bands.

Frames come from real output (tests/data/z2: 30 steps, rank-0 timers) through the analysis
functions, as the pages build them; GPU frames from dashboard_support.gpu_samples.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from dashboard_support import gpu_samples, read_records

from dsmon.analysis import comm, flops, gpus, steps
from dsmon.analysis.downsample import downsample
from dsmon.analysis.peaks import A100_REFERENCE
from dsmon.figures import comm as comm_fig
from dsmon.figures import flops as flops_fig
from dsmon.figures import gpus as gpus_fig
from dsmon.figures import steps as steps_fig
from dsmon.figures.common import (
    BARS_MAX,
    CAPPED,
    MARKERS_MAX,
    STEP_BARS_MAX,
    WEBGL_MIN_POINTS,
    empty,
    rank_label,
    scatter_props,
    step_part,
)
from dsmon.model.frames import records_frame
from dsmon.model.records import Record
from dsmon.store.gpu import buckets


@pytest.fixture(scope="module")
def z2() -> list[Record]:
    return read_records("z2", "z2")


@pytest.fixture(scope="module")
def breakdown(z2: list[Record]) -> pd.DataFrame:
    return steps.step_breakdown(records_frame("timer", z2))


def trace_points(fig: go.Figure) -> int:
    """Total number of x values over all traces: what a refresh ships to the browser."""
    return sum(len(t.x) for t in fig.data if getattr(t, "x", None) is not None)


def test_webgl_only_for_markers_past_a_thousand_points() -> None:
    assert scatter_props(WEBGL_MIN_POINTS, x=[1], y=[1], mode="markers")["type"] == "scatter"
    big = scatter_props(WEBGL_MIN_POINTS + 1, x=[1], y=[1], mode="markers")
    assert isinstance(go.Figure(data=[big]).data[0], go.Scattergl)  # a trace plotly takes
    # a line is one SVG path at any size (its markers were dropped past MARKERS_MAX)
    for mode in ("lines", "lines+markers"):
        trace = scatter_props(WEBGL_MIN_POINTS + 1, x=[1], y=[1], mode=mode)
        assert trace["type"] == "scatter" and trace["mode"] == "lines"


def test_a_bar_per_step_while_they_are_few_then_a_filled_line() -> None:
    bar = go.Bar(step_part(STEP_BARS_MAX, [1], [2.0], "fwd", "#4C78A8"))
    assert bar.marker.color == "#4C78A8"
    part = go.Figure().add_trace(step_part(STEP_BARS_MAX + 1, [1], [2.0], "fwd", "#4C78A8", "s"))
    assert isinstance(part.data[0], go.Scatter) and part.data[0].stackgroup == "s"
    assert part.data[0].line.shape == "hv"  # a step's value held until the next one, as a bar
    alone = go.Scatter(step_part(STEP_BARS_MAX + 1, [1], [2.0], "comm", "#E45756", stack=None))
    assert alone.stackgroup is None and alone.fill == "tozeroy"


def test_markers_only_while_they_are_few() -> None:
    assert scatter_props(MARKERS_MAX, x=[1], y=[1], mode="lines+markers")["mode"] == "lines+markers"
    assert scatter_props(MARKERS_MAX + 1, x=[1], y=[1], mode="lines+markers")["mode"] == "lines"
    assert scatter_props(MARKERS_MAX + 1, x=[1], y=[1], mode="markers")["mode"] == "markers"


def test_empty_figure_says_why() -> None:
    fig = empty("No GPU samples in this run.", "GPUs")
    assert fig.layout.annotations[0].text == "No GPU samples in this run."
    assert not fig.data


def test_steps_figure_stacks_split_bwd(breakdown: pd.DataFrame) -> None:
    fig = steps_fig.steps_figure(breakdown)
    names = [t.name for t in fig.data]
    assert names == ["fwd", "bwd_inner", "bwd_allreduce", "step", "loss-scale event"]
    assert fig.data[-1].showlegend is False  # empty, only there so the step axis is drawn
    assert list(fig.data[0].y[:2]) == [350.75, 12.27]
    assert fig.layout.barmode == "stack"
    # step 1 (1295.15 ms) is more than 3 x p90 (82.17 ms): the axis stops at 3 x p90.
    assert fig.layout.yaxis.range[1] == pytest.approx(3 * 82.173 * 1.05, rel=1e-3)
    assert trace_points(fig) == 4 * 30


def test_a_capped_chart_says_it_is_capped(breakdown: pd.DataFrame) -> None:
    # 3,000 steps drawn as at most BARS_MAX bars a part: the chart says how many of how many
    long = pd.concat(
        [breakdown.assign(step=breakdown["step"] + i * len(breakdown)) for i in range(100)],
        ignore_index=True,
    )
    shown = downsample(long, "step", ["total_ms"], BARS_MAX)
    fig = steps_fig.steps_figure(shown, total=len(long))
    assert len(fig.data[0].x) == len(shown) <= 2 * BARS_MAX < len(long)
    # as many steps as that are stacked filled lines, one path a part, not a bar each
    assert [t.type for t in fig.data[:4]] == ["scatter"] * 4
    assert {t.stackgroup for t in fig.data[:4]} == {"parts1.1"}
    notes = [a.text for a in fig.layout.annotations if a.name == CAPPED]
    assert notes == [f"{len(shown):,} of {len(long):,} steps drawn (each stretch's extremes kept)"]
    # drawn whole, it says nothing of the kind
    whole = steps_fig.steps_figure(breakdown, total=len(breakdown))
    assert not [a for a in whole.layout.annotations if a.name == CAPPED]
    micro = steps_fig.micro_figure(shown.assign(micro_step=0), total=len(long))
    assert [a.text for a in micro.layout.annotations if a.name == CAPPED] == [
        f"{len(shown):,} of {len(long):,} micro-batches drawn (each stretch's extremes kept)"
    ]
    assert list(micro.data[0].x) == sorted(micro.data[0].x)  # a filled line, left to right
    share = comm.comm_share(long)
    drawn = downsample(share, "step", ["exposed_comm_ms", "comm_share"], by="rank")
    comm_chart = comm_fig.share_figure(drawn, total=len(share))
    assert [a.text for a in comm_chart.layout.annotations if a.name == CAPPED] == [
        f"{len(drawn):,} of {len(share):,} steps drawn (each stretch's extremes kept)"
    ]
    assert comm_chart.data[0].fill == "tozeroy"


def test_plain_bwd_when_the_split_is_missing(breakdown: pd.DataFrame) -> None:
    no_split = breakdown.assign(bwd_inner_ms=np.nan)
    assert [t.name for t in steps_fig.steps_figure(no_split).data][:3] == ["fwd", "bwd", "step"]


def test_empty_breakdown() -> None:
    fig = steps_fig.steps_figure(pd.DataFrame())
    assert "wall_clock_breakdown" in fig.layout.annotations[0].text


def test_distribution_marks_p50_p90_max(breakdown: pd.DataFrame) -> None:
    fig = steps_fig.distribution_figure(breakdown, steps.step_stats(breakdown))
    labels = [a.text for a in fig.layout.annotations]
    # step 1 (1295.15 ms) is past 3 x p90 = 246.5 ms: left out of the bins, and so is "max".
    assert labels == ["p50 53.9 ms", "p90 81.9 ms", "max 85.0 ms"]
    assert fig.layout.xaxis.title.text == "ms (1 step(s) above 247 ms not binned)"
    assert sum(fig.data[0].y) == 29 and len(fig.data[0].x) == 40  # pre-binned: 40 bars


def test_ranks_side_by_side(breakdown: pd.DataFrame) -> None:
    two = pd.concat([breakdown, breakdown.assign(rank=1, fwd_ms=breakdown["fwd_ms"] * 2)])
    fig = steps_fig.ranks_figure(two, [0, 1])
    assert [a.text for a in fig.layout.annotations][:2] == ["rank 0", "rank 1"]
    # each rank's warm-up step is cut off its own axis and named there
    assert [a.xref for a in fig.layout.annotations][2:] == ["x domain", "x2 domain"]
    assert sum(1 for t in fig.data if t.showlegend is not False) == 4
    assert rank_label(float("nan")) == "" and rank_label(3) == "rank 3"


def test_comm_share_and_ratios(breakdown: pd.DataFrame) -> None:
    fig = comm_fig.share_figure(comm.comm_share(breakdown))
    assert [t.name for t in fig.data] == ["exposed comm ms rank 0", "% of step rank 0"]
    ratios = comm_fig.ratio_figure(comm.timer_ratios(breakdown))
    first = ratios.data[0]
    assert first.name == "bwd_allreduce / bwd (rank 0)"  # named for what it divides
    row = breakdown.iloc[0]
    assert first.y[0] == pytest.approx(100 * row["bwd_allreduce_ms"] / row["bwd_ms"])


def test_bandwidth_against_the_link() -> None:
    ops = pd.DataFrame({"op": ["all_reduce"], "algbw_gbps": [0.47], "busbw_gbps": [0.235]})
    fig = comm_fig.bandwidth_figure(ops, 256.0, "PCIe 4.0 x16")
    assert fig.layout.shapes[0].y0 == 256.0
    assert "expected: PCIe 4.0 x16 (256 Gbps)" in fig.layout.annotations[0].text


def test_gpu_figures() -> None:
    b = buckets.grid_of_samples(records_frame("gpu", gpu_samples()), 5).per_bucket()
    heat = gpus_fig.heatmap_figure(gpus.heatmap(b, "util_gpu_pct"), "util_gpu_pct")
    assert heat.data[0].zmax == 100 and list(heat.data[0].y) == [
        "n0/gpu0",
        "n0/gpu1",
        "n1/gpu0",
        "n1/gpu1",
    ]
    assert "kernel-active" in heat.layout.title.text.lower()
    imb = gpus_fig.imbalance_figure(gpus.imbalance(b, "power_w"), "power_w")
    assert [t.name for t in imb.data] == ["max", "min", "mean", "CV (std/mean)"]
    assert (
        gpus_fig.lines_figure(pd.DataFrame(), "power_w").layout.annotations[0].text
        == "No GPU samples in this run."
    )


def test_gpu_lines_legend_moves_under_the_axis_when_it_would_reach_the_title() -> None:
    b = buckets.grid_of_samples(records_frame("gpu", gpu_samples()), 5).per_bucket()
    four = gpus.lines(b, "power_w")
    eight = pd.concat([four, four.assign(gpu=four["gpu"] + "x")], ignore_index=True)
    assert four["gpu"].nunique() == 4 and eight["gpu"].nunique() == 8
    assert gpus_fig.lines_figure(four, "power_w").layout.legend.y == 1.0  # beside the title
    below = gpus_fig.lines_figure(eight, "power_w").layout
    assert (below.legend.yref, below.legend.y, below.legend.yanchor) == ("container", 0, "bottom")
    assert below.margin.b >= 48 + 22 * 2  # the axis, its date line, two rows of names


def test_tflops_with_peak_and_reference(z2: list[Record], breakdown: pd.DataFrame) -> None:
    profile = [r for r in z2 if r.KIND == "flops_profile"][-1]
    per_step = flops.step_tflops(breakdown, profile, 1)  # type: ignore[arg-type]
    fig = flops_fig.tflops_figure(per_step, 312.0, "(A100, bf16)", A100_REFERENCE)
    assert [s.type for s in fig.layout.shapes] == ["rect", "line"]
    assert fig.layout.shapes[0].y0 == 137.0 and fig.layout.shapes[1].y0 == 312.0
    plain = flops_fig.tflops_figure(per_step)
    assert not plain.layout.shapes
