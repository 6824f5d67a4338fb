"""End to end: an open tab follows its run, in headless Chromium on ``dsmon dashboard``.

The store starts with the real z2 run (DeepSpeed 0.19.8, ZeRO-2) up to step 14, imported: a
finished run. The test then stores the rest as a collector would send it, the batch noted as
received 105 s ago, so the run is live for the 15 s left of its two-minute window and then
stops by itself. The tab must go live, then finished, with no click: status line, run picker
and "Live refresh" toggle each time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from browser_support import chart_bars, chromium, dashboard_server, wait_idle
from dashboard_support import read_records

import dsmon.store.records.log as record_log
from dsmon.model.records import Record
from dsmon.store.store import open_store

pytestmark = pytest.mark.slow

#: How long ago the resumed run's batch is noted as received: live for 15 s more.
RECEIVED_AGO_S = 105.0
SIDEBAR = '[data-testid="stSidebar"]'


def shown(page: Any) -> tuple[str, bool, str]:
    """The run picker's choice, the "Live refresh" toggle, and the page's status line."""
    picked = page.locator(f'{SIDEBAR} [data-testid="stSelectbox"] input').first.input_value()
    toggle = page.locator(f'{SIDEBAR} input[type="checkbox"]').first.is_checked()
    lines = str(page.evaluate("document.body.innerText")).splitlines()
    status = next((line for line in lines if "rank(s) sent records" in line), "")
    return picked, toggle, status


def wait_until(page: Any, ok: Callable[[tuple[str, bool, str]], bool], limit_s: float) -> Any:
    """What the tab shows once ``ok`` holds; fails with what it showed after ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        now = shown(page)
        if ok(now):
            return now
        page.wait_for_timeout(250)
    pytest.fail(f"after {limit_s} s the tab still shows {shown(page)}")


@dataclass
class Tab:
    """A Chromium tab on the Steps page of z2, its store, and the records not stored yet."""

    page: Any
    store: str
    rest: list[Record]
    errors: list[str]

    def resume(self) -> None:
        """Store the rest as a collector sends it: DeepSpeed went on from its checkpoint.

        Without the launcher's exit lines: the run goes on (with them it would be over).
        """
        going = [r for r in self.rest if not (r.KIND == "event" and r.name == "worker_exit")]  # type: ignore[attr-defined]
        with open_store(self.store) as s:
            s.add(going, live=True)


@pytest.fixture
def tab(tmp_path: Path) -> Iterator[Tab]:
    """The tab, opened on z2 up to step 14 imported (a finished run) and drawn."""
    recs = read_records("z2", "z2")
    cut = next(i for i, r in enumerate(recs) if r.KIND == "timer" and r.step == 15)
    store = str(tmp_path / "store.sqlite")
    with open_store(store) as s:
        s.add(recs[:cut])
    with dashboard_server(store, tmp_path / "dashboard.log") as url, chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{url}/steps?run=z2")
        wait_idle(page)
        first = wait_until(page, lambda s: s[2] != "", 60)
        assert first[:2] == ("z2 · imported", False)
        # imported: a complete record that stops at step 14 with no exit status
        assert first[2].startswith("ended: the record ends without an exit status")
        yield Tab(page, store, recs[cut:], errors)


def test_an_open_tab_follows_its_run_going_on_and_stopping(
    tab: Tab, monkeypatch: pytest.MonkeyPatch
) -> None:
    ago = datetime.now() - timedelta(seconds=RECEIVED_AGO_S)
    monkeypatch.setattr(record_log, "received_now", lambda: ago.isoformat(timespec="milliseconds"))
    tab.resume()
    # the picker, the toggle and the status line arrive as separate updates: each must
    # come round, not all at the instant the first one does
    wait_until(
        tab.page,
        lambda s: s[0] == "z2 · live" and s[1] and s[2].startswith("training: step 30 · "),
        12,
    )
    # the live window passes: the page stops following it; no end was witnessed, so its state
    # is not "finished", in the picker or the status line (steps arrived moments ago: still
    # training, then silent)
    wait_until(
        tab.page,
        lambda s: (
            s[0] == "z2 · not live"
            and not s[1]
            and s[2].startswith(("training: step 30 · ", "silent: no step for "))
        ),
        30,
    )
    assert tab.errors == []


def test_the_charts_of_a_resumed_run_take_its_new_steps(tab: Tab) -> None:
    assert chart_bars(tab.page) == 14
    tab.resume()  # received now: live for two minutes, redrawn every 2 s
    wait_until(tab.page, lambda s: s[2].startswith("training: step 30 · "), 15)
    tab.page.wait_for_timeout(3000)  # a redraw or two
    assert chart_bars(tab.page) == 30
