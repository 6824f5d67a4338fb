"""A live redraw keeps what the user did to a chart, and every page refreshes its data.

Each chart is drawn under a stable key with a fixed Plotly ``uirevision``: Streamlit then
updates the same chart element with the new data instead of building a new one, and Plotly
keeps the zoom, pan and hidden traces. Checked with the real app (AppTest) on the real z2 run
growing between two redraws, as a live run does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dashboard_support import app_at, read_records

from dsmon.store.sqlite import open_store

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["steps", "training", "autotuner", "compare", "communication", "gpus", "flops"]


def charts(at: Any) -> dict[str, dict[str, Any]]:
    """Element id -> figure spec of every plotly chart on the page."""
    return {c.proto.id: json.loads(c.proto.spec) for c in at.get("plotly_chart")}


@pytest.mark.parametrize("page", ["steps", "communication"])
def test_charts_keep_their_identity_and_zoom_state_as_the_run_grows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, page: str
) -> None:
    recs = read_records("z2", "z2")
    cut = next(i for i, r in enumerate(recs) if r.KIND == "timer" and r.step == 15)
    path = tmp_path / "s.sqlite"
    with open_store(path) as store:
        store.add(recs[:cut], live=True)
    monkeypatch.setenv("DSMON_STORE", str(path))
    at = app_at(str(path), "z2", page)
    assert not at.exception
    before = charts(at)
    assert before
    with open_store(path) as store:
        store.add(recs[cut:], live=True)
    at.run()
    assert not at.exception
    after = charts(at)
    assert set(after) == set(before)  # the same elements, updated in place
    for element, spec in after.items():
        rev = spec["layout"].get("uirevision")
        assert rev and rev == before[element]["layout"]["uirevision"], element
    assert json.dumps(after, sort_keys=True) != json.dumps(before, sort_keys=True)


def test_every_page_renders_through_the_shared_live_fragment() -> None:
    """A page that drew its own fragment could forget to refresh its data (Health did)."""
    for page in [*PAGES, "health"]:
        text = (ROOT / "pages" / f"{page}.py").read_text(encoding="utf-8")
        assert "live_body(view," in text, page
        assert "st.fragment" not in text and ".plotly_chart(" not in text, page
