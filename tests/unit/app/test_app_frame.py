"""The dashboard frame (app.py): run picker, URL state, live/replay controls, empty store."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from dashboard_support import RUNS, app_at, shared_store
from locations import ROOT
from streamlit.testing.v1 import AppTest

from dsmon.model.records import Source, StepRecord
from dsmon.store.store import open_store


@pytest.fixture
def store_url(monkeypatch: pytest.MonkeyPatch) -> str:
    url = shared_store()
    monkeypatch.setenv("DSMON_STORE", url)
    return url


def test_run_picker_follows_the_url(store_url: str) -> None:
    at = app_at(store_url, "comms_logger")
    assert not at.exception
    picker = at.sidebar.selectbox[0]
    assert picker.label == "Run"
    assert sorted(picker.options) == sorted(f"{r} · imported" for r in RUNS)
    assert picker.value == "comms_logger"
    assert at.header[0].value == "Health · comms_logger"  # the checklist is the front page
    # the run's status is drawn with the page (its live fragment), not in the sidebar
    status = next(c.value for c in at.caption if "rank(s) sent records" in c.value)
    # its state, from its evidence: the launcher reported both workers' exit
    assert status.startswith("finished: exit status 0 (the launcher: ")
    assert " · last step 20 · " in status
    assert "1 rank(s)" in status
    assert "Store: " in at.sidebar.caption[0].value
    # Picking another run in the browser is covered by tests/system/test_browser.py: AppTest drops
    # the sidebar of st.navigation apps after a rerun, so it cannot drive the picker.


def test_an_unknown_run_in_the_url_is_said_so_not_replaced(store_url: str) -> None:
    at = app_at(store_url, "no_such_run")
    assert not at.exception
    assert at.sidebar.selectbox[0].value is None  # nothing picked for the user
    assert "No run named no_such_run in this store" in at.error[0].value
    assert not at.header  # no page drawn for another run


def test_finished_run_gets_a_replay_slider_not_live(store_url: str) -> None:
    at = app_at(store_url, "z2")
    assert at.sidebar.toggle[0].value is False
    slider = at.sidebar.slider[0]
    assert (slider.min, slider.max, slider.value) == (1, 30, 30)


def test_page_param_lands_on_that_page(store_url: str) -> None:
    """A page opened by URL before the frame ran comes back through ``?page=``."""
    at = app_at(store_url, "z2", page="gpus")
    assert at.header[0].value == "GPUs · z2"
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params.update({"run": "z2", "page": "flops"})
    at.run()
    assert not at.exception
    assert at.header[0].value == "FLOPS · z2"


def test_a_live_run_refreshes_and_has_no_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = str(tmp_path / "live.sqlite")
    now = datetime.now().isoformat(timespec="milliseconds")
    with open_store(url) as store:  # a collector sends the run's first step line
        store.add([StepRecord(src=Source(run="now", file="f", line=1), ts=now, step=1)], live=True)
        # the same line imported (dsmon import): a saved record, never live however recent
        store.add([StepRecord(src=Source(run="saved", file="f", line=1), ts=now, step=1)])
    monkeypatch.setenv("DSMON_STORE", url)
    front = app_at(url, "now")  # AppTest keeps the sidebar on the first page only
    assert sorted(front.sidebar.selectbox[0].options) == ["now · live", "saved · imported"]
    assert front.sidebar.toggle[0].value is True
    assert not front.sidebar.slider
    at = app_at(url, "now", "steps")
    assert "No engine timer lines" in at.info[0].value


def test_empty_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = str(tmp_path / "empty.sqlite")
    monkeypatch.setenv("DSMON_STORE", url)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=30).run()
    assert not at.exception
    assert at.info[0].value.startswith(f"No runs in the store `{url}` yet.")
