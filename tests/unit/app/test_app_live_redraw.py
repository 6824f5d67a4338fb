"""A live redraw sends every chart its new data, and every page refreshes its data.

Each chart is drawn under a stable key with a fixed Plotly ``uirevision``, and a redraw after
new records must send the figure with the new steps (in Streamlit 1.67 that is a new chart
element: ``ui/charts.py`` says why an element kept by key would keep its first figure in the
browser). Checked with the real app (AppTest) on the real z2 run growing between two redraws,
as a live run does.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from dashboard_support import app_at, read_records
from locations import ROOT

from dsmon.load.playback import TimeShifter
from dsmon.store.store import open_store

PAGES = ["steps", "training", "autotuner", "compare", "communication", "gpus", "flops"]


def charts(at: Any) -> dict[str, dict[str, Any]]:
    """Element id -> figure spec of every plotly chart on the page."""
    return {c.proto.id: json.loads(c.proto.spec) for c in at.get("plotly_chart")}


def steps_shown(spec: dict[str, Any]) -> int:
    """The largest step any trace of a figure reaches (its numeric x values)."""
    top = 0.0
    for trace in spec["data"]:
        x = trace.get("x")
        if isinstance(x, dict) and "bdata" in x:  # plotly's typed-array encoding
            values = np.frombuffer(base64.b64decode(x["bdata"]), dtype=x["dtype"])
        else:
            values = np.asarray([v for v in x or [] if isinstance(v, int | float)], dtype=float)
        if values.size and values.dtype.kind in "fiu":
            top = max(top, float(np.nanmax(values)))
    return int(top)


@pytest.mark.parametrize("page", ["steps", "communication"])
def test_charts_are_sent_the_new_steps_as_the_run_grows(
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
    assert len(after) == len(before)
    revisions = sorted(spec["layout"]["uirevision"] for spec in after.values())
    assert revisions == sorted(spec["layout"]["uirevision"] for spec in before.values())
    # a chart whose figure changed is a new element: the browser draws the new figure
    changed = [e for e, spec in after.items() if before.get(e) != spec]
    assert all(e not in before for e in changed) and changed
    assert max(map(steps_shown, after.values())) > max(map(steps_shown, before.values())) >= 14


def test_a_compared_run_being_written_is_redrawn_whatever_the_sidebar_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compare refreshed its runs only when the sidebar's run was live."""
    recs = read_records("z2", "z2")
    cut = next(i for i, r in enumerate(recs) if r.KIND == "timer" and r.step == 15)
    path = tmp_path / "s.sqlite"
    shifter = TimeShifter()  # z2 is written now: its times moved to now, as the demo moves them
    with open_store(path) as store:
        store.add(read_records("fp16_zero2", "fp16_zero2"))  # finished: stamped in 2026-11
        store.add(shifter.shift(recs[:cut], datetime.now()), live=True)
    monkeypatch.setenv("DSMON_STORE", str(path))
    at = app_at(str(path), "fp16_zero2", "compare", runs="z2,fp16_zero2")
    assert not at.exception
    assert [c.value.split(" · ")[0] for c in at.caption if " · last step " in c.value] == [
        "z2: training: step 14",
        "fp16_zero2: finished: exit status 0 (the launcher: 2 worker(s) exited successfully)",
    ]
    before = max(map(steps_shown, charts(at).values()))
    with open_store(path) as store:
        store.add(shifter.shift(recs[cut:], datetime.now()), live=True)
    at.run()
    assert max(map(steps_shown, charts(at).values())) > before


def test_every_page_renders_through_the_shared_live_fragment() -> None:
    """A page that drew its own fragment could forget to refresh its data (Health did)."""
    for page in [*PAGES, "health"]:
        text = (ROOT / "pages" / f"{page}.py").read_text(encoding="utf-8")
        shared = "runs_body(view," if page == "compare" else "live_body(view,"
        assert shared in text, page
        assert "st.fragment" not in text and ".plotly_chart(" not in text, page
