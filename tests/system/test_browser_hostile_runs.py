"""Runs a user can make that once broke or hijacked the dashboard, opened in headless Chromium.

Issue 41, case 4: text from the run is text. A run named with Markdown (an image, a bare URL,
an e-mail address, emphasis, a backslash) and a log whose error message holds the same are
shown as typed on every page: no image is fetched (a local server counts every request),
no link is made, no stray backslash shows. The run is long, so that the Steps page's "Reading run ..."
spinner shows, and it must show the name as typed too.

Case 3: a step of 2^53 or more broke every page of its run (``StreamlitJSNumberBoundsError``
from the replay slider). Such a step can no longer enter (tests/unit/model, tests/unit/parse);
a store written before may hold one, and its pages draw all the same.
"""

from __future__ import annotations

import dataclasses
import http.server
import shutil
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from browser_support import chromium, dashboard_server, page_text, wait_idle
from locations import DATA

from dsmon.load.files import import_paths
from dsmon.model.records import Record, TimerRecord
from dsmon.store.store import open_store
from ui.text import NO_LINK

pytestmark = pytest.mark.slow

#: Copies of z2's 30 steps in the long run: enough for the first look to take over 0.5 s
#: (Streamlit's spinner delay) with room to spare. At 1,500 copies the spinner once never
#: showed on an idle machine, once the reads had got faster.
COPIES = 4500
PAGES = ("health", "steps", "training", "communication", "gpus", "flops", "autotuner")


class Tracker:
    """An HTTP server on loopback that answers everything with 404 and counts the requests."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        tracker = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                tracker.paths.append(self.path)
                self.send_error(404)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def hostile(port: int, what: str) -> str:
    """Text with every kind of markup, its addresses on the tracker."""
    here = f"http://127.0.0.1:{port}"
    backslash = " a\\b" if what == "name" else ""  # one, in the name: no other may show
    return (
        f"{what} ![x]({here}/{what}.png) {here}/{what}-bare www.example.org me@example.org "
        f"*b*{backslash} `c` <img src={here}/{what}-tag.png> x_y_ [here]({here}/{what}-link)"
    )


def shown(text: str) -> str:
    """Text as a person reads it: without the invisible joiners that keep it from linking."""
    return text.replace(NO_LINK, "")


def long_copies(records: list[Record], run: str) -> Iterator[Record]:
    """z2's timer and step records again and again, 30 steps later each time, in long.log."""
    size = max(r.src.offset or 0 for r in records) + 1
    for copy in range(COPIES):
        for rec in records:
            if rec.KIND not in ("timer", "step"):
                continue
            src = dataclasses.replace(
                rec.src, run=run, file="long.log", offset=(rec.src.offset or 0) + copy * size,
                line=(rec.src.line or 0) + copy * 1000,
            )  # fmt: skip
            step = None if rec.step is None else rec.step + 30 * copy
            yield dataclasses.replace(rec, src=src, step=step)


@pytest.fixture(scope="module")
def tracker() -> Iterator[Tracker]:
    t = Tracker()
    yield t
    t.close()


@pytest.fixture(scope="module")
def setup(
    tmp_path_factory: pytest.TempPathFactory, tracker: Tracker, z2_log_records: list[Record]
) -> Iterator[tuple[str, str]]:
    tmp = tmp_path_factory.mktemp("hostile")
    run = hostile(tracker.port, "name")
    crash = tmp / "crash"
    shutil.copytree(DATA / "events_crash_step17", crash)
    log = crash / "train.log"
    message = hostile(tracker.port, "log")
    log.write_text(log.read_text().replace("[train.py] deliberate crash", message))
    store = tmp / "store.sqlite"
    with open_store(store) as s:
        import_paths(s, [crash], run=run)
        s.add(long_copies(z2_log_records, run))
        import_paths(s, [DATA / "z2"], run="huge")
        # A store written before steps were bounded: a step a browser cannot hold.
        far = TimerRecord(
            src=dataclasses.replace(z2_log_records[0].src, run="huge", file="old.log", line=1),
            step=2**53 + 7,
            group="global",
            values_ms={"fwd": 1.0},
        )
        s.add([far])
    with dashboard_server(str(store), tmp / "dashboard.log") as url:
        yield url, run


def test_markup_in_a_run_name_and_its_log_is_shown_as_typed(
    setup: tuple[str, str], tracker: Tracker
) -> None:
    url, run = setup
    with chromium() as browser:
        page: Any = browser.new_page(viewport={"width": 1400, "height": 1000})
        # Steps: Health reads the store's per-step tables, too fast for the spinner
        page.goto(f"{url}/steps")
        spinner = page.locator('[data-testid="stSpinner"]')
        spinner.wait_for(timeout=60_000)  # the first look at the long run
        assert shown(spinner.inner_text()).startswith(f"Reading run {run} (")
        assert spinner.locator("img, a").count() == 0
        wait_idle(page)
        for slug in PAGES:
            page.goto(f"{url}/{slug}")
            wait_idle(page)
            page.wait_for_timeout(500)  # images a page would fetch are asked for by now
            assert page.locator('[data-testid="stException"]').count() == 0, slug
            main = page.locator('[data-testid="stMain"]')
            heading = shown(main.get_by_role("heading").first.inner_text())
            assert heading.endswith(f" · {run}"), (slug, heading)
            links = page.locator("a[href]").evaluate_all("es => es.map(e => e.href)")
            hosts = {urllib.parse.urlsplit(h).netloc for h in links}
            bad = {h for h in hosts if h.endswith(f":{tracker.port}") or "example." in h}
            bad |= {h for h in links if h.startswith("mailto:")}
            assert bad == set(), (slug, bad)
            assert page.locator(f'img[src*=":{tracker.port}"]').count() == 0, slug
            text = shown(page_text(page)).replace(run, "")  # the name's one backslash, as typed
            assert "\\" not in text, (slug, [ln for ln in text.splitlines() if "\\" in ln])
        assert tracker.paths == []


def test_a_step_past_2_53_in_the_store_breaks_no_page(setup: tuple[str, str]) -> None:
    url, _ = setup
    with chromium() as browser:
        page: Any = browser.new_page(viewport={"width": 1400, "height": 1000})
        for slug in ("health", "steps", "training"):
            page.goto(f"{url}/{slug}?run=huge")
            wait_idle(page)
            page.get_by_role("heading", name=f"{slug.capitalize()} · huge").wait_for(timeout=60_000)
            assert page.locator('[data-testid="stException"]').count() == 0, slug
            assert "JSNumberBounds" not in page_text(page)
        slider = page.locator('[data-testid="stSlider"]', has_text="Replay")
        assert slider.count() == 1  # the replay slider of the finished run, drawn
        assert str(2**53 - 1) in slider.inner_text().replace(",", "")
