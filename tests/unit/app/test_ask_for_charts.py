"""The empty chart a page that draws charts sends first, so the browser loads plotly.js early.

``ui.page.ask_for_charts``: in a session's first run of such a page, an empty chart goes out
before the page judges the run and builds its figures, and is taken off once the page is
drawn; a page without charts sends none, and a session sends it once.
"""

from __future__ import annotations

import json

import pytest
from dashboard_support import app_at, shared_store
from streamlit.testing.v1 import AppTest

from ui.page import CHARTS_ASKED_KEY


@pytest.fixture(autouse=True)
def store_url(monkeypatch: pytest.MonkeyPatch) -> str:
    url = shared_store()
    monkeypatch.setenv("DSMON_STORE", url)
    return url


def _asking_script() -> None:
    """Asks, then leaves the empty chart up (the page's drawing has not ended)."""
    import streamlit as st

    from ui.page import ask_for_charts

    ask_for_charts()
    st.write("the page's work")


def test_the_empty_chart_goes_out_first_and_once() -> None:
    at = AppTest.from_function(_asking_script)
    at.run()
    charts = at.get("plotly_chart")
    assert len(charts) == 1
    spec = json.loads(charts[0].proto.spec)
    assert spec["data"] == [] and spec["layout"]["height"] == 10
    assert at.session_state[CHARTS_ASKED_KEY] is True
    at.run()  # the tab has plotly.js now
    assert not at.get("plotly_chart")


def test_a_chart_page_takes_it_off_and_a_page_without_charts_never_asks(store_url: str) -> None:
    steps = app_at(store_url, "z2", "steps")
    assert not steps.exception
    assert steps.session_state[CHARTS_ASKED_KEY] is True
    specs = [json.loads(c.proto.spec) for c in steps.get("plotly_chart")]
    assert specs and all(s["data"] for s in specs)  # the page's own charts, the empty one gone
    health = app_at(store_url, "z2", "health")
    assert not health.exception
    assert CHARTS_ASKED_KEY not in health.session_state
