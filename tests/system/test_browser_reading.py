"""A long run's first look in the browser: the page says what it is reading, not a blank page.

The first look at a long run reads all of it, seconds at a hundred thousand steps and longer
beyond. The page must say so while it works (Streamlit's spinner, which shows after half a
second) and then draw the checklist. The store holds the real ZeRO-2 run of tests/data,
its timer and step records repeated with the steps moved on, as a long run's log repeats them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from browser_support import chromium, dashboard_server, page_text, wait_idle

from dsmon.model.records import Record
from dsmon.store.store import open_store

pytestmark = pytest.mark.slow
RUN = "long"
#: Copies of the run's 30 steps: 90,000 steps, 270,000 timer records.
COPIES = 3000


def _long_run(records: list[Record]) -> Iterator[Record]:
    """The run once as it is, then its timer and step records again, 30 steps later each time."""
    size = max(r.src.offset or 0 for r in records) + 1
    for copy in range(COPIES):
        for rec in records:
            if copy and rec.KIND not in ("timer", "step"):
                continue
            src = dataclasses.replace(
                rec.src, run=RUN, offset=(rec.src.offset or 0) + copy * size,
                line=(rec.src.line or 0) + copy * 1000,
            )  # fmt: skip
            step = None if rec.step is None else rec.step + 30 * copy
            yield dataclasses.replace(rec, src=src, step=step)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, z2_log_records: list[Record]) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("reading")
    with open_store(tmp / "store.sqlite") as store:
        store.add(_long_run(z2_log_records))
    with dashboard_server(str(tmp / "store.sqlite"), tmp / "dashboard.log") as url:
        yield url


def test_first_look_at_a_long_run_says_what_it_reads(server: str) -> None:
    with chromium() as browser:
        page: Any = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{server}/health")
        spinner = page.locator('[data-testid="stSpinner"]')
        spinner.wait_for(timeout=30_000)
        assert spinner.inner_text().startswith(f"Reading run {RUN} (")
        wait_idle(page)
        assert spinner.count() == 0
        text = page_text(page)
        assert f"Health · {RUN}" in text
        assert "last step 90,000" in text
