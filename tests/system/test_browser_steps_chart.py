"""The Steps page's charts in Chromium: the main chart's bars are drawn, and each chart once.

At DeepSpeed's default log level no ThroughputTimer line is printed, while the flops
profiler still gives each step's TFLOPS. The chart then had a right-hand TFLOPS axis over a
row with no trace of its own, which the plotly.js Streamlit bundles laid over the whole
figure: the step-time bars were not drawn at all (tests/data/z0_default_loglevel). A figure
test cannot see that; only the browser's own drawing can.

Streamlit's Plotly element hands plotly.js each figure a second time right after drawing it;
``ui/charts.py`` sends figures that this second hand-over does not compute again. Only the
browser tells whether plotly.js computed a chart once or twice.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from browser_support import chromium, dashboard_server, wait_idle
from dashboard_support import DATA
from PIL import Image, ImageColor

from dsmon.figures.common import COLORS
from dsmon.load.files import import_paths
from dsmon.store.store import open_store

pytestmark = pytest.mark.slow

#: Counts, on each chart's element, the times plotly.js set its computed data: once per full
#: computation and drawing of the chart (``Plotly.newPlot``, or ``Plotly.react`` finding new
#: data).
COUNT_CALCS = """
Object.defineProperty(HTMLElement.prototype, 'calcdata', {
  configurable: true,
  get() { return this.__calcdata; },
  set(value) { this.__calcdata = value; if (value) this.__calcs = (this.__calcs || 0) + 1; },
});
"""
#: run -> folder: z2 prints throughput lines, z0_default_loglevel does not.
RUNS = {"z0": "z0_default_loglevel", "z2": "z2"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("steps_chart")
    path = tmp / "store.sqlite"
    with open_store(path) as store:
        for run, folder in RUNS.items():
            import_paths(store, [DATA / folder], run=run)
    with dashboard_server(str(path), tmp / "dashboard.log") as url:
        yield url


def _bar_pixels(png: bytes) -> int:
    """Pixels of the chart's screenshot in the breakdown's bar colours (legend swatches too).

    The DOM holds the bars even when something is drawn over them: only what is on screen
    tells that they can be seen.
    """
    image = Image.open(io.BytesIO(png)).convert("RGB")
    wanted = [ImageColor.getrgb(COLORS[p]) for p in ("fwd", "bwd_inner", "bwd_allreduce", "step")]
    count = 0
    for n, rgb in image.getcolors(image.width * image.height) or []:
        if any(max(abs(a - b) for a, b in zip(rgb, c, strict=True)) <= 6 for c in wanted):
            count += n
    return count


@pytest.mark.parametrize("run", sorted(RUNS))
def test_the_step_breakdown_bars_are_drawn(server: str, run: str) -> None:
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        page.goto(f"{server}/steps?run={run}")
        page.get_by_role("heading", name=f"Steps · {run}").wait_for(timeout=60_000)
        wait_idle(page)
        page.wait_for_selector(".js-plotly-plot .barlayer", timeout=30_000)
        chart = page.locator(".js-plotly-plot").first
        assert "TFLOPS per GPU" in chart.inner_text()  # both runs have a flops profile
        page.wait_for_timeout(500)  # plotly's transitions
        pixels = _bar_pixels(chart.screenshot())
    # the four legend swatches alone are about 4 x 150 pixels
    assert pixels > 5_000, f"{run}: {pixels} pixels in the bar colours"


def test_each_chart_is_computed_and_drawn_once(server: str) -> None:
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        page.add_init_script(COUNT_CALCS)
        page.goto(f"{server}/steps?run=z2")
        page.get_by_role("heading", name="Steps · z2").wait_for(timeout=60_000)
        wait_idle(page)
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)
        page.wait_for_timeout(2_000)  # the second hand-over follows the first drawing
        calcs = page.evaluate(
            "[...document.querySelectorAll('.js-plotly-plot')].map(p => p.__calcs || 0)"
        )
    assert len(calcs) >= 4 and calcs == [1] * len(calcs)
