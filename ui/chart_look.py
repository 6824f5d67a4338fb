"""The charts' look, set in each figure's layout: Streamlit's chart theme without its second draw.

Streamlit's own theme for Plotly (``st.plotly_chart(theme="streamlit")``) is applied in the
browser, and its Plotly element applies it again right after the chart is first drawn, to a
copy of the figure that carries a new ``layout.template`` object: plotly.js compares a template
by identity and computes and draws the whole chart a second time (``ui/charts.py`` says how the
charts avoid that). The charts are therefore drawn with ``theme=None`` and this look instead,
written into the figure's layout as defaults under what the figure sets itself, with no
template at all. It follows what Streamlit's theme sets (Source Sans, grey axis text and
legend, grid lines on the y axis only, the categorical colours, the title in bold on the
left), in colours that read on the light theme and the dark one alike, on a transparent
background: the server cannot choose by theme, since ``st.context.theme`` is unknown on a
session's first run and a chart is not redrawn when the user switches themes.
"""

from __future__ import annotations

from typing import Any

FONT = '"Source Sans", sans-serif'
#: Text: Streamlit's grey for axis text (gray70), readable on white and on its dark background.
TEXT = "#808495"
#: Grid lines: the same grey, faint.
GRID = "rgba(128, 132, 149, 0.25)"
#: Streamlit's categorical chart colours (for traces that choose none).
COLORWAY = ["#0068c9", "#83c9ff", "#ff2b2b", "#ffabab", "#29b09d",
            "#7defa1", "#ff8700", "#ffd16a", "#6d3fc0", "#d5dae5"]  # fmt: skip

#: The figure-wide part of the look.
LAYOUT: dict[str, Any] = {
    "font": {"family": FONT, "size": 12, "color": TEXT},
    "title": {"font": {"family": FONT, "size": 16, "weight": "bold"}, "pad": {"l": 4}},
    "legend": {"font": {"size": 12}, "bgcolor": "rgba(0,0,0,0)"},
    "margin": {"pad": 8},
    "paper_bgcolor": "rgba(0,0,0,0)",
    "plot_bgcolor": "rgba(0,0,0,0)",
    "colorway": COLORWAY,
    "hoverlabel": {"font": {"family": FONT, "size": 12}},
}
#: Every axis's part (no tick or line colour: plotly.js draws an axis's ticks and line when
#: it is given one).
AXIS: dict[str, Any] = {
    "gridcolor": GRID,
    "zerolinecolor": GRID,
    "tickfont": {"size": 12},
    "title": {"font": {"size": 14}},
    "automargin": True,
}
#: What x axes add: no vertical grid lines, as Streamlit draws them.
X_AXIS: dict[str, Any] = {**AXIS, "showgrid": False, "zeroline": False}


def missing(defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """The part of ``defaults`` that ``given`` does not set (nested dicts compared key by key)."""
    out: dict[str, Any] = {}
    for key, value in defaults.items():
        if key not in given or given[key] is None:
            out[key] = value
        elif isinstance(value, dict) and isinstance(given[key], dict):
            below = missing(value, given[key])
            if below:
                out[key] = below
    return out


def apply_look(layout: dict[str, Any]) -> None:
    """Give a figure's ``layout`` (a dict) the dashboard's look, in place.

    The figure's own settings win; its template is removed (plotly.py's default one would
    otherwise be sent with every chart and drawn over the look).
    """
    layout.pop("template", None)
    _merge(layout, missing(LAYOUT, layout))
    for key in {key for key in layout if key.startswith(("xaxis", "yaxis"))} | {"xaxis", "yaxis"}:
        axis = layout.setdefault(key, {})
        _merge(axis, missing(X_AXIS if key.startswith("x") else AXIS, axis))


def _merge(into: dict[str, Any], update: dict[str, Any]) -> None:
    """Set each of ``update``'s values in ``into``, merging into the dicts already there."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
