"""Derived views kept per query and version: a live page keeps one, not a history of them."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import lanes
import numpy as np
import pandas as pd
from locations import DATA
from shared_fixtures import read_log

from dsmon.store.store import open_store
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import OPEN, Cutoff
from dsmon.view.health_panel import panel
from dsmon.view.memo import Memo, approx_bytes


def test_a_newer_version_of_a_query_replaces_the_older_one() -> None:
    memo, calls = Memo(3), []

    def value(tag: str) -> str:
        calls.append(tag)
        return tag

    assert memo.get(("checklist", "open", (1,)), lambda: value("v1")) == "v1"
    assert memo.get(("checklist", "open", (1,)), lambda: value("again")) == "v1"  # kept
    assert memo.get(("checklist", "step 5", (1,)), lambda: value("replay")) == "replay"
    assert memo.get(("checklist", "open", (2,)), lambda: value("v2")) == "v2"
    assert calls == ["v1", "replay", "v2"] and len(memo) == 2  # v1 dropped, replay kept
    for i in range(3):  # other queries: the least recently used goes past the bound
        memo.get(("table", i, (1,)), lambda: value("t"))
    assert len(memo) == 3
    assert memo.get(("checklist", "open", (2,)), lambda: value("v2 again")) == "v2 again"


def test_a_live_health_page_keeps_one_checklist_per_position(tmp_path: Path) -> None:
    """Each refresh of a growing real run is a new version of the checklist; a live page kept
    32 of them before (each with the run's per-step series). A replay position is its own."""
    recs = read_log(DATA / "z2" / "train.log", "z2")
    store = open_store(tmp_path / "s.sqlite")
    frames = RunFrames(store, "z2")
    step = len(recs) // (4 if lanes.FAST else 12)  # refreshes of a checklist each
    for start in range(0, len(recs), step):
        store.add(recs[start : start + step])
        frames.refresh()
        panel(frames, "z2", OPEN, datetime.now())
    panel(frames, "z2", Cutoff(step=3), None)
    kept = [key for key in frames._memo._values if key[0] == "health.checklist"]
    assert [key[1] for key in kept] == [OPEN, Cutoff(step=3)]


def test_values_past_the_byte_bound_go_least_recently_used_first() -> None:
    """Replay positions are queries of their own: a count alone let 64 long-run checklists stay."""
    mib = pd.DataFrame({"x": np.zeros(1 << 17)})  # 1 MiB of float64
    assert (1 << 20) <= approx_bytes(mib) < (1 << 20) + 1024
    memo = Memo(64, max_bytes=int(2.5 * (1 << 20)))
    for step in range(1, 6):  # five replay positions of one query
        memo.get(("checklist", Cutoff(step=step), (1,)), lambda: mib.copy())
    assert [key[1] for key in memo._values] == [Cutoff(step=4), Cutoff(step=5)]
    assert 2 << 20 <= memo.nbytes <= int(2.5 * (1 << 20))
    huge = pd.DataFrame({"x": np.zeros(1 << 19)})  # 4 MiB: over the bound alone, yet kept
    assert memo.get(("big", OPEN, (1,)), lambda: huge) is huge
    assert len(memo) == 1 and memo.nbytes == approx_bytes(huge)
    assert memo.get(("big", OPEN, (1,)), lambda: huge.copy()) is huge  # not computed again


def test_approx_bytes_counts_the_buffers_inside_containers() -> None:
    frame = pd.DataFrame({"x": np.zeros(1000)})  # 8,000 bytes and an index
    inner = approx_bytes(frame)
    assert approx_bytes({"a": frame, "b": (frame, frame)}) >= 3 * inner
    assert 1000 * inner <= approx_bytes([frame] * 1000) < 1001 * inner + 10_000  # sampled
    assert approx_bytes(Cutoff(step=3)) < 1000
