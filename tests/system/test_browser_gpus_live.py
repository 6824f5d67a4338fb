"""End to end: the GPUs page in headless Chromium follows a run's GPU samples as they come.

A run with two hours of samples from four GPUs is open on the GPUs page of ``dsmon
dashboard``; a second of samples is then stored at a time, as a collector sends them, plus
one sample late by an hour. Once the page shows the last one, the grid it drew must be the
one a whole fold of the store gives: a live refresh folds again only the buckets new samples
fell in (``Store.gpu_fold``'s ``since``), and nothing drawn may differ for it.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from browser_support import chromium, dashboard_server, wait_idle
from dashboard_support import GIB, GPUS

from dsmon.analysis import gpus
from dsmon.model.records import GpuSampleRecord, Source
from dsmon.store.store import open_store

pytestmark = pytest.mark.slow

RUN = "live"
T0 = pd.Timestamp("2026-12-02T08:00:00")
#: The GPUs page's grid (``pages/gpus.py``) and its default metric.
GRID_BUCKETS, METRIC = 300, "util_gpu_pct"
#: The heatmap's cells as the browser holds them, one list per GPU.
HEATMAP_Z = """() => {
    const plots = Array.from(document.querySelectorAll('.js-plotly-plot'));
    const heat = plots.map(p => p._fullData).find(d => d && d[0] && d[0].type === 'heatmap');
    return heat ? JSON.stringify(Array.from(heat[0].z, row => Array.from(row))) : null;
}"""


def second(sec: int) -> list[GpuSampleRecord]:
    """One sample of each GPU at second ``sec`` of the run (utilisation moves with time)."""
    ts = (T0 + pd.Timedelta(seconds=sec)).isoformat(timespec="milliseconds")
    return [
        GpuSampleRecord(src=Source(run=RUN, node=node), ts=ts, gpu_index=idx, name=name,
                        util_gpu_pct=float((sec * 7 + idx) % 100), mem_used_bytes=40 * GIB,
                        mem_total_bytes=80 * GIB, power_w=power, power_limit_w=700.0)
        for node, idx, name, _, power in GPUS
    ]  # fmt: skip


def drawn_grid(page: Any) -> np.ndarray | None:
    """The heatmap's cells (NaN where empty), or None before it is drawn."""
    found = page.evaluate(HEATMAP_Z)
    if found is None:
        return None
    return np.array([[np.nan if v is None else v for v in row] for row in json.loads(found)])


def _if_equal(got: np.ndarray | None, want: np.ndarray) -> np.ndarray | None:
    """``got`` when it holds ``want``'s cells (a refresh may not have drawn them yet)."""
    same = got is not None and got.shape == want.shape
    return got if same and np.allclose(got, want, equal_nan=True) else None


def wait_for(find: Callable[[], np.ndarray | None], page: Any, limit_s: float = 60) -> np.ndarray:
    """What ``find`` gives once it gives something (plotly draws after the script ran)."""
    deadline = time.monotonic() + limit_s
    while (found := find()) is None and time.monotonic() < deadline:
        page.wait_for_timeout(250)
    assert found is not None, f"the heatmap drawn is not the one expected after {limit_s} s"
    return found


def test_the_gpus_grid_drawn_live_is_the_whole_folds(tmp_path: Path) -> None:
    store_path = str(tmp_path / "store.sqlite")
    with open_store(store_path) as s:
        s.add([r for sec in range(7200) for r in second(sec)])
    live = [second(sec) for sec in range(7200, 7210)]
    late = [dataclasses.replace(r, ts="2026-12-02T09:00:00.500", util_gpu_pct=100.0)
            for r in second(3600)]  # fmt: skip
    errors: list[str] = []
    with dashboard_server(store_path, tmp_path / "dashboard.log") as url, chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
        page.goto(f"{url}/gpus?run={RUN}")
        wait_idle(page)
        first = wait_for(lambda: drawn_grid(page), page)
        assert first.shape == (4, 120)  # two hours in one-minute buckets
        with open_store(store_path) as s:
            for batch in [*live[:5], late, *live[5:]]:
                s.add(batch, live=True)
                time.sleep(0.5)
            want = gpus.heatmap(s.gpu.buckets(RUN, GRID_BUCKETS), METRIC).to_numpy()
        assert want.shape == (4, 121) and want[:, 60].max() > first[:, 60].max()  # the late one
        got = wait_for(lambda: _if_equal(drawn_grid(page), want), page)
    np.testing.assert_allclose(got, want, equal_nan=True)
    assert not errors
