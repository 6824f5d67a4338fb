"""What every figure shares: trace type by size, an empty-state figure, the layout defaults."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

#: Past this many points a trace of markers is drawn with WebGL (plotly.py switches at the
#: same size). A line is one SVG path whatever its points, and a WebGL context costs a chart
#: more than the path: a chart of three 2,000-point lines took 1.3 s of Chromium's CPU in
#: WebGL, 0.1 s as SVG (``bench/browser_pages.py``; headless Chromium draws WebGL in
#: software, and every chart opens a context of its own even with a GPU).
WEBGL_MIN_POINTS = 1000
#: Steps (or micro-batches) per part a stacked per-step chart draws at most (the downsampled
#: rows: each stretch's extremes kept). 300 fill a chart's width at a few pixels each.
BARS_MAX = 300
#: Up to this many steps a stacked per-step chart draws a bar per step, past it a filled
#: line per part. Every bar is an SVG path the browser lays out and styles on its own (plotly
#: has no WebGL bars): four parts of 300 bars took 170 ms of a chart's 220 ms to draw, the
#: same steps as four filled lines 90 ms, where the bars were too thin to tell apart anyway.
STEP_BARS_MAX = 120
#: Points of a line past which it is drawn without markers (:func:`scatter`).
MARKERS_MAX = 100
HEIGHT = 360
COLORS = {
    "fwd": "#4C78A8",
    "bwd": "#F58518",
    "bwd_inner": "#F58518",
    "bwd_allreduce": "#E45756",
    "step": "#54A24B",
    "comm": "#E45756",
    "throughput": "#72B7B2",
    "tflops": "#B279A2",
    "event": "#9D755D",
}


def scatter_props(n_points: int, **kwargs: Any) -> dict[str, Any]:
    """A line/marker trace as a dict: SVG, but WebGL for markers alone past a thousand points.

    :data:`WEBGL_MIN_POINTS` sets where. Markers are drawn only up to :data:`MARKERS_MAX` points: each is an SVG path the browser
    styles one by one, and a line of a thousand markers shows no more than the line. A line
    stays SVG at any size (one path).
    """
    mode = kwargs.get("mode")
    if n_points > MARKERS_MAX and mode == "lines+markers":
        kwargs["mode"] = mode = "lines"
    kind = "scattergl" if n_points > WEBGL_MIN_POINTS and mode == "markers" else "scatter"
    return {"type": kind, **kwargs}


def step_part(
    n_steps: int, x: Any, y: Any, name: str, color: str, stack: str | None = "parts", **kwargs: Any
) -> dict[str, Any]:
    """One part of a per-step bar chart: a bar per step while they are few, else a filled line.

    Past :data:`STEP_BARS_MAX` steps the part is one filled path (steps held flat until the
    next one drawn, as bars would be), stacked on the parts before it in ``stack`` (a
    ``barmode="stack"`` of bars), or filled down to zero when ``stack`` is None. The trace
    is a dict (``add_trace`` takes it as it is).
    """
    if n_steps <= STEP_BARS_MAX:
        return {"type": "bar", "x": x, "y": y, "name": name, "marker": {"color": color}, **kwargs}
    fill = {"stackgroup": stack} if stack is not None else {"fill": "tozeroy"}
    return {
        "type": "scatter",
        "x": x,
        "y": y,
        "name": name,
        "mode": "lines",
        "line": {"width": 0.5, "color": color, "shape": "hv"},
        "fillcolor": color,
        **fill,
        **kwargs,
    }


def step_line_props(part: pd.DataFrame, name: str, **kwargs: Any) -> dict[str, Any]:
    """A ``value`` against ``step`` trace, as a dict: markers while the points are few."""
    return scatter_props(
        len(part),
        x=part["step"],
        y=part["value"],
        mode="lines+markers" if len(part) < 60 else "lines",
        name=name,
        **kwargs,
    )


def capped_annotation(drawn: int, total: int | None, unit: str = "steps") -> dict[str, Any] | None:
    """The note saying a chart draws ``drawn`` of ``total`` points; None when it draws all.

    The dashboard draws about a screen's width of points per trace
    (:func:`dsmon.analysis.downsample.downsample` keeps each bucket's extremes, so spikes
    stay); a chart that hides it would pass for the whole run.
    """
    if total is None or drawn >= total:
        return None
    return {
        "text": f"{drawn:,} of {total:,} {unit} drawn (each stretch's extremes kept)",
        "showarrow": False,
        "x": 0,
        "y": 1,
        "xref": "paper",
        "yref": "paper",
        "xanchor": "left",
        "yanchor": "bottom",
        "font": {"size": 11, "color": "#666"},
        "name": CAPPED,
    }


#: The name of :func:`capped_annotation`'s note (tests and pages find it by it).
CAPPED = "capped"


def layout(fig: go.Figure, title: str, height: int = HEIGHT, **kwargs: Any) -> go.Figure:
    """Apply the dashboard's layout: title, compact margins, legend above the plot."""
    fig.update_layout(**layout_props(title, height), **kwargs)
    return fig


def layout_props(title: str, height: int = HEIGHT) -> dict[str, Any]:
    """:func:`layout`'s properties as a dict, for a figure built as one."""
    return {
        "title": {"text": title, "x": 0.0, "font": {"size": 15}},
        "height": height,
        "margin": {"l": 50, "r": 20, "t": 60, "b": 40},
        "legend": {
            "orientation": "h",
            "yanchor": "bottom",
            "y": 1.0,
            "x": 1.0,
            "xanchor": "right",
            "traceorder": "normal",
        },
    }


def empty(message: str, title: str = "", height: int = 200) -> go.Figure:
    """A figure that says why there is nothing to draw instead of showing blank axes."""
    note = {"text": message, "showarrow": False, "x": 0.5, "y": 0.5, "xref": "paper",
            "yref": "paper"}  # fmt: skip
    hidden = {"visible": False}
    return plot_figure([], title, {"xaxis": hidden, "yaxis": dict(hidden)}, height=height,
                       notes=[note])  # fmt: skip


def fmt_ms(value: Any) -> str:
    """A millisecond figure as the pages print it; a dash when unknown."""
    return "—" if value is None or pd.isna(value) else f"{float(value):.2f} ms"


def fmt_pct(fraction: Any) -> str:
    """A fraction (0.25) as a percentage (``25.0 %``); a dash when unknown."""
    return "—" if fraction is None or pd.isna(fraction) else f"{100 * float(fraction):.1f} %"


def rounded(frame: pd.DataFrame, digits: int = 2) -> pd.DataFrame:
    """A table for display: float columns rounded, everything else as is."""
    floats = frame.select_dtypes("float").columns
    return frame.round({c: digits for c in floats})


def rank_label(rank: Any, template: str = "rank {}") -> str:
    """A rank as trace names show it; "" when the rank is unknown (never shown as 0)."""
    return "" if rank is None or pd.isna(rank) else template.format(int(rank))


#: Values above this many times the p90 are cut at that height and listed, so a warm-up
#: step (step 1 is often 20x the rest: allocation, JIT) does not flatten every other bar.
OFF_SCALE = 3.0


def clip_outliers(
    fig: go.Figure,
    frame: pd.DataFrame,
    x: str,
    y: str,
    row: int | None = None,
    col: int | None = None,
    unit: str = "ms",
) -> None:
    """Cap a y axis at OFF_SCALE x p90 of ``frame[y]`` and name the points past it.

    Nothing changes for fewer than 10 points or when no point is that far out. The listed
    points stay in the data (hover, tables); only the axis range is cut.
    """
    axis = fig.get_subplot(row, col) if row is not None and col is not None else None
    x_ref = axis.xaxis.plotly_name.replace("axis", "") if axis is not None else "x"
    y_ref = axis.yaxis.plotly_name.replace("axis", "") if axis is not None else "y"
    cut = off_scale(frame, x, y, x_ref, y_ref, unit)
    if cut is not None:
        fig.update_yaxes(range=cut[0], row=row, col=col)
        fig.add_annotation(cut[1])


def off_scale(
    frame: pd.DataFrame, x: str, y: str, x_ref: str = "x", y_ref: str = "y", unit: str = "ms"
) -> tuple[list[float], dict[str, Any]] | None:
    """:func:`clip_outliers` as dicts: the y axis range and the note on axes ``x_ref``/``y_ref``.

    None when nothing is cut (fewer than 10 points, or none that far out).
    """
    values = frame[y].dropna() if y in frame.columns else pd.Series(dtype="float64")
    if len(values) < 10:
        return None
    cap = OFF_SCALE * float(values.quantile(0.9))
    over = frame[frame[y] > cap]
    if over.empty or cap <= 0:
        return None
    pairs = list(zip(over[x], over[y], strict=True))[:3]
    listed = ", ".join(f"{x} {float(px):g}: {float(py):.0f} {unit}" for px, py in pairs)
    more = f" and {len(over) - 3} more" if len(over) > 3 else ""
    note = {
        "text": f"off scale: {listed}{more}",
        "showarrow": False,
        "x": 1,
        "y": 1,
        "xref": f"{x_ref} domain",
        "yref": f"{y_ref} domain",
        "xanchor": "right",
        "yanchor": "top",
        "bgcolor": "rgba(255,255,255,0.8)",
    }
    return [0, cap * 1.05], note


def epoch_ms(values: Any) -> Any:
    """Datetimes as milliseconds since the epoch, for a ``type="date"`` axis.

    Plotly serialises datetimes as ~26-character strings, and a number of milliseconds as
    15 characters at most (the dashboard sends numbers as JSON arrays, see ``ui/charts.py``).
    Naive times stay the wall clock they were (plotly draws epoch numbers as UTC, which is
    the same digits).
    """
    stamps = pd.to_datetime(pd.Series(values))
    return stamps.astype("datetime64[ms]").astype("int64").to_numpy(dtype="float64")


def titled(text: str, **props: Any) -> dict[str, Any]:
    """An axis's layout entry with the title ``text`` (and ``props``), for a figure built as one."""
    return {"title": {"text": text}, **props}


def hline(y: float, text: str, dash: str = "dash") -> tuple[dict[str, Any], dict[str, Any]]:
    """A line across the plot at ``y`` and its label, as ``Figure.add_hline`` draws them.

    The line is a layout shape, the label an annotation at its right end, just above it
    (``add_hline``'s default place); :func:`plot_figure` draws the pair.
    """
    line = {"type": "line", "x0": 0, "x1": 1, "xref": "x domain", "y0": y, "y1": y, "yref": "y",
            "line": {"dash": dash}}  # fmt: skip
    label = {"text": text, "showarrow": False, "x": 1, "xref": "x domain", "xanchor": "right",
             "y": y, "yref": "y", "yanchor": "bottom"}  # fmt: skip
    return line, label


def vline(x: float, text: str, side: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A dashed line up the plot at ``x`` and its label at its top, as ``add_vline`` draws them.

    ``side`` anchors the label: ``"left"`` puts its text to the line's right
    (``annotation_position="top right"``), ``"right"`` to its left (``"top left"``).
    """
    line = {"type": "line", "x0": x, "x1": x, "xref": "x", "y0": 0, "y1": 1, "yref": "y domain",
            "line": {"dash": "dash"}}  # fmt: skip
    label = {"text": text, "showarrow": False, "x": x, "xref": "x", "y": 1, "yref": "y domain",
             "xanchor": side, "yanchor": "top"}  # fmt: skip
    return line, label


def plot_figure(
    data: list[dict[str, Any]],
    title: str,
    props: dict[str, Any] | None = None,
    marks: list[tuple[dict[str, Any], dict[str, Any]]] | None = None,
    height: int = HEIGHT,
    notes: list[dict[str, Any]] | None = None,
) -> go.Figure:
    """A figure built as dicts, made once, with the dashboard's layout.

    ``data``: the traces (dicts with their ``type``); ``props``: the rest of the layout
    (axes, ``barmode``); ``marks``: shapes over the plot, each with its label (:func:`hline`,
    :func:`vline`); ``notes``: annotations of their own (:func:`capped_annotation`, the
    ``off_scale`` note), before the marks' labels.
    plotly checks every property at each ``add_trace``, ``update_layout`` or ``add_hline``
    (milliseconds each); a ``Figure`` made from the dicts checks them once
    (:mod:`dsmon.figures.plain`).
    """
    return go.Figure(
        data=data,
        layout={
            **(props or {}),
            "shapes": [shape for shape, _ in marks or []],
            "annotations": [*(notes or []), *(label for _, label in marks or [])],
            **layout_props(title, height),
        },
    )
