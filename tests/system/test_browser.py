"""End to end: ``dsmon dashboard`` as a real server, every page opened in headless Chromium.

The store holds real DeepSpeed runs from tests/data/ plus GPU samples built in
dashboard_support. The test fails on any Streamlit exception box and on any browser console
error (a failed request, a JavaScript error), and saves one screenshot per page under
``artifacts/screenshots/`` (gitignored) for a person to look at.

It needs Debian's ``chromium`` (``/usr/bin/chromium``) and the ``playwright`` Python package
(no ``playwright install``: the system browser is used). Without them the test is skipped,
unless ``DSMON_REQUIRE_BROWSER=1`` (CI) makes their absence a failure.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_support import chromium, dashboard_server, wait_idle
from dashboard_support import build_store
from locations import ROOT

SHOTS = ROOT / "artifacts" / "screenshots"
RUN = "z2"
CONSOLE_404 = "Failed to load resource: the server responded with a status of 404 (Not Found)"
#: (url path, menu title, page heading) of every page, the front page (health) first.
PAGES = [
    (slug, title, title if slug == "compare" else f"{title} · {RUN}")  # Compare: runs picked
    for slug, title in (
        ("health", "Health"),
        ("steps", "Steps"),
        ("training", "Training"),
        ("autotuner", "Autotuner"),
        ("compare", "Compare"),
        ("communication", "Communication"),
        ("gpus", "GPUs"),
        ("flops", "FLOPS"),
    )
]
WIDTH = 1400
#: Pages with nothing to draw for RUN: z2 has no autotuner results, and Compare wants a
#: second run picked (tests/unit/app/test_app_autotuner.py and tests/unit/app/test_app_compare.py draw them).
NO_CHART = {"autotuner", "compare"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``dsmon dashboard`` on a free loopback port, stopped after the module."""
    tmp = tmp_path_factory.mktemp("browser")
    with dashboard_server(build_store(tmp / "store.sqlite"), tmp / "dashboard.log") as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium driven by Playwright."""
    with chromium() as b:
        yield b


def _screenshot(page: Any, name: str) -> Path:
    """The whole page: grow the viewport to the content, let lazy tables draw, shoot."""
    height = page.evaluate(
        "Math.max(...Array.from(document.querySelectorAll('[data-testid=stMain], section'))"
        ".map(e => e.scrollHeight), document.body.scrollHeight)"
    )
    page.set_viewport_size({"width": WIDTH, "height": min(int(height) + 40, 12_000)})
    for table in page.locator('[data-testid="stDataFrame"]').all():
        table.scroll_into_view_if_needed()
    page.wait_for_timeout(800)
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size({"width": WIDTH, "height": 1000})
    return path


def _watch(page: Any) -> list[str]:
    """Collect console errors, uncaught exceptions and failed requests of a page."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    page.on(
        "response",
        lambda r: errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None,
    )
    return errors


def _without_base_path_probes(errors: list[str], slug: str) -> list[str]:
    """Errors left once Streamlit's base-path probing is set aside.

    Opened at ``/<slug>``, Streamlit's frontend first asks ``/<slug>/_stcore/health`` and
    ``/<slug>/_stcore/host-config`` (in case the app is served under that prefix) and takes
    the 404s as the answer; Chromium logs one console error per 404. Only those exact probes
    are set aside, one console line for each.
    """
    probes = [
        e for e in errors if re.fullmatch(rf"HTTP 404: .*/{slug}/_stcore/(health|host-config)", e)
    ]
    rest = [e for e in errors if e not in probes]
    logged = [e for e in rest if e == "console: " + CONSOLE_404]
    if len(logged) <= len(probes):
        rest = [e for e in rest if e != "console: " + CONSOLE_404]
    return rest


def test_every_page_renders_without_errors(server: str, browser: Any) -> None:
    page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
    errors = _watch(page)
    page.goto(f"{server}/?run={RUN}")
    wait_idle(page)
    for slug, title, heading in PAGES:
        page.locator('[data-testid="stSidebarNav"] a', has_text=title).first.click()
        page.get_by_role("heading", name=heading).wait_for(timeout=60_000)
        wait_idle(page)
        assert page.locator('[data-testid="stException"]').count() == 0, f"exception on {slug}"
        assert f"/{slug}" in page.url or slug == "health"  # the default page is at /
        assert f"run={RUN}" in page.url
        if slug in NO_CHART:  # says what it needs instead
            page.wait_for_selector('[data-testid="stAlert"]', timeout=30_000)
        elif slug != "health":  # charts draw after the script run ends: wait for the first
            page.wait_for_selector(".js-plotly-plot", timeout=30_000)
            assert page.locator(".js-plotly-plot").count() >= 1, f"no chart on {slug}"
        assert _screenshot(page, slug).stat().st_size > 10_000
    assert errors == []


def test_a_link_opens_the_same_view(server: str, browser: Any) -> None:
    """A URL straight to a page (run in the query) opens that page on that run, error-free."""
    page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
    errors = _watch(page)
    page.goto(f"{server}/communication?run=comms_logger")
    page.get_by_role("heading", name="Communication · comms_logger").wait_for(timeout=60_000)
    wait_idle(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    assert page.get_by_text("synchronises the device after every collective").count() == 1
    _screenshot(page, "communication_comms_logger")
    # The run picker switches the run and writes it to the URL.
    page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').first.click()
    page.get_by_role("option", name="z2 · imported").click()
    page.get_by_role("heading", name="Communication · z2").wait_for(timeout=60_000)
    wait_idle(page)
    assert "run=z2" in page.url
    assert _without_base_path_probes(errors, "communication") == []
