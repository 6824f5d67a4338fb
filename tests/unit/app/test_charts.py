"""What a chart sends: what lets plotly.js draw it once, and the dashboard's look.

Streamlit's Plotly element hands plotly.js each figure a second time right after mounting it;
``ui/charts.py`` says what makes that second hand-over draw nothing (no template, Streamlit's
theme off, numbers as JSON arrays, a ``datarevision``). Checked on what Streamlit sends
(AppTest), with the figures of a real page and a figure of each kind of array.
"""

from __future__ import annotations

import json
from typing import Any

import plotly.graph_objects as go
import pytest
from dashboard_support import app_at, figures, shared_store
from streamlit.testing.v1 import AppTest

from ui.chart_look import GRID, TEXT, apply_look, missing


def _script() -> None:
    """One chart of numpy and pandas arrays (a 2-D heatmap too), drawn by ui.charts."""
    import numpy as np
    import pandas as pd
    import plotly.graph_objects as go
    import streamlit as st

    from ui.charts import chart

    shift = float(st.session_state.get("shift", 0.0))
    steps = pd.Series(np.arange(500, dtype="int64"))
    fig = go.Figure(
        [
            go.Scatter(x=steps, y=np.linspace(0.5, 9.5, 500) + shift, name="line"),
            go.Heatmap(z=np.arange(12.0).reshape(3, 4), xaxis="x2", yaxis="y2"),
        ],
        layout={"title": {"text": "a chart", "font": {"size": 15}}, "xaxis2": {"anchor": "y2"}},
    )
    chart(fig, "test.chart")


def _sent(at: AppTest) -> tuple[Any, dict[str, Any]]:
    """The chart element's message and its figure."""
    (element,) = at.get("plotly_chart")
    return element.proto, json.loads(element.proto.spec)


def _typed_arrays(value: Any) -> list[Any]:
    """Every base64 typed array (plotly.py's encoding of a numpy array) inside ``value``."""
    if isinstance(value, dict):
        if "bdata" in value:
            return [value]
        return [t for v in value.values() for t in _typed_arrays(v)]
    if isinstance(value, list):
        return [t for v in value for t in _typed_arrays(v)]
    return []


def test_a_chart_is_sent_without_template_theme_or_typed_arrays() -> None:
    at = AppTest.from_function(_script).run()
    assert not at.exception
    proto, spec = _sent(at)
    assert proto.theme == ""  # Streamlit's theme off: it would add a template object
    assert "template" not in spec["layout"]
    assert _typed_arrays(spec) == []
    line, heat = spec["data"]
    assert line["x"] == list(range(500)) and line["y"][-1] == 9.5
    assert heat["z"] == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0], [8.0, 9.0, 10.0, 11.0]]
    assert spec["layout"]["uirevision"] == "dsmon.test.chart"
    # the look, under what the figure set itself
    assert spec["layout"]["title"]["font"]["size"] == 15
    assert spec["layout"]["font"]["color"] == TEXT
    assert spec["layout"]["xaxis2"]["showgrid"] is False
    assert spec["layout"]["yaxis"]["gridcolor"] == GRID


def test_the_data_revision_follows_the_data() -> None:
    at = AppTest.from_function(_script).run()
    _, first = _sent(at)
    at.run()
    _, again = _sent(at)
    at.session_state["shift"] = 1.0
    at.run()
    _, moved = _sent(at)
    assert first["layout"]["datarevision"] == again["layout"]["datarevision"]
    assert moved["layout"]["datarevision"] != first["layout"]["datarevision"]


def test_a_real_page_sends_its_charts_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    url = shared_store()
    monkeypatch.setenv("DSMON_STORE", url)
    at = app_at(url, "z2", "steps")
    assert not at.exception
    specs = figures(at)
    assert len(specs) >= 3
    for spec in specs.values():
        assert "template" not in spec["layout"] and _typed_arrays(spec) == []
        assert spec["layout"]["datarevision"]


def _decoded(value: Any) -> Any:
    """``value`` with each base64 typed array of plotly.py's ``to_dict`` made a list."""
    import base64

    import numpy as np

    if isinstance(value, dict):
        if "bdata" in value and "dtype" in value:
            array = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
            if "shape" in value:
                array = array.reshape([int(n) for n in str(value["shape"]).split(",")])
            return array.tolist()
        return {k: _decoded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_decoded(v) for v in value]
    return value


@pytest.mark.parametrize("page", ["steps", "communication", "training", "flops"])
def test_a_chart_sends_what_plotly_writes_of_its_figure(
    page: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``spec_of`` reads the figure's own properties: the same figure as ``to_dict``'s."""
    import plotly.io as pio

    import ui.charts

    url = shared_store()
    monkeypatch.setenv("DSMON_STORE", url)
    compared: list[str] = []
    spec_of = ui.charts.spec_of

    def checked(fig: go.Figure) -> dict[str, Any]:
        made = spec_of(fig)
        assert pio.to_json(made) == pio.to_json(_decoded(fig.to_dict()))
        compared.append(str(made["layout"].get("title", {}).get("text", "")))
        return made

    monkeypatch.setattr(ui.charts, "spec_of", checked)
    at = app_at(url, "z2", page)
    assert not at.exception
    assert len(compared) == len(at.get("plotly_chart")) > 0, compared


def test_the_look_fills_every_axis_and_keeps_the_figures_own() -> None:
    fig = go.Figure(layout={"xaxis3": {"showgrid": True}, "font": {"size": 9}})
    layout = fig.to_dict()["layout"]
    assert "template" in layout
    apply_look(layout)
    assert "template" not in layout
    assert layout["font"] == {"size": 9, "family": '"Source Sans", sans-serif', "color": TEXT}
    assert layout["xaxis3"]["showgrid"] is True  # the figure's own setting wins
    assert layout["xaxis3"]["gridcolor"] == GRID and layout["xaxis"]["showgrid"] is False
    assert layout["yaxis"]["gridcolor"] == GRID and "showgrid" not in layout["yaxis"]


def test_missing_keeps_only_what_is_not_set() -> None:
    defaults = {"a": 1, "b": {"c": 2, "d": 3}, "e": {"f": 4}}
    assert missing(defaults, {"a": 0, "b": {"c": 0}, "e": None}) == {"b": {"d": 3}, "e": {"f": 4}}
    assert missing(defaults, {"a": 0, "b": {"c": 0, "d": 0}, "e": {"f": 0}}) == {}
