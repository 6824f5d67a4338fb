"""The GPUs page's buckets, live: the store's answer, read again only where samples fell."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from gpu_support import RUN, day, sample

from dsmon.store.store import Store, open_store
from dsmon.view import gpu_buckets
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import OPEN, Cutoff


def spied_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arg: int
) -> tuple[Store, list[tuple[Any, bool]]]:
    """A store whose ``gpu.grid`` calls are listed: (its argument ``arg``, handed a grid)."""
    store = open_store(tmp_path / "s.sqlite")
    asked: list[tuple[Any, bool]] = []
    real = store.gpu.grid

    def spy(*args: Any, **kwargs: Any) -> Any:
        asked.append((args[arg], kwargs.get("since") is not None))
        return real(*args, **kwargs)

    monkeypatch.setattr(store.gpu, "grid", spy)
    return store, asked


def test_live_buckets_are_the_stores_from_the_grid_handed_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each query keeps its own grid (at most ``KEEP``); a replay position reads whole."""
    monkeypatch.setattr(gpu_buckets, "KEEP", 2)
    store, handed = spied_store(tmp_path, monkeypatch, arg=3)
    store.add(day(300))
    frames = RunFrames(store, RUN)
    late = dataclasses.replace(sample(70, 1, "n1"), ts="2026-11-29T10:01:10.500", power_w=699.0)
    asked_anew = [(None, False), (["n1/gpu1"], False)]
    asked_since = [(None, True), (["n1/gpu1"], True)]
    steps = [
        ([], asked_anew),  # the page opens
        ([sample(s, 0) for s in range(300, 330)], asked_since),  # the run goes on
        ([late], asked_since),  # a sample late by minutes
        ([], []),  # nothing new: the memo answers, the store is not asked
    ]
    for recs, asked in steps:
        store.add(recs)
        frames.refresh()
        handed.clear()
        grid = frames.gpu_buckets("grid", OPEN, 30)
        one = frames.gpu_buckets("one", OPEN, 30, ["n1/gpu1"])
        assert handed == asked
        pd.testing.assert_frame_equal(grid, store.gpu.buckets(RUN, 30))
        pd.testing.assert_frame_equal(one, store.gpu.buckets(RUN, 30, gpus=["n1/gpu1"]))
    assert one["power_w_max"].max() == 699.0
    frames.gpu_buckets("third", OPEN, 30, ["n0/gpu0"])  # a third query: the grid's let go
    store.add([sample(330, 0)])
    frames.refresh()
    handed.clear()
    frames.gpu_buckets("grid", OPEN, 30)
    assert handed == [(None, False)]
    cut = Cutoff(ts=pd.Timestamp("2026-11-29T10:02:00"))
    replay = frames.gpu_buckets("grid", cut, 30)
    pd.testing.assert_frame_equal(replay, store.gpu.buckets(RUN, 30, "2026-11-29T10:02:00.000"))


def test_live_summary_is_the_stores_from_its_grid_handed_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Live, the per-GPU summary is the store's one-bucket grid, handed back on each tick like
    the GPUs page's (its own query); it equals the store's summary through a growing run."""
    store, asked = spied_store(tmp_path, monkeypatch, arg=1)
    store.add(day(300))
    frames = RunFrames(store, RUN)
    late = dataclasses.replace(sample(70, 1, "n1"), ts="2026-11-29T10:01:10.500", power_w=699.0)
    new_gpu = [sample(s, 2, "n2", power_w=123.456) for s in range(300, 320)]
    grows = [[], [sample(s, 0) for s in range(300, 330)], [late], new_gpu, []]
    for i, recs in enumerate(grows):
        store.add(recs)
        frames.refresh()
        asked.clear()
        summary = frames.gpu_summary(OPEN)
        grid = frames.gpu_buckets(gpu_buckets.GRID, OPEN, gpu_buckets.GRID_BUCKETS)
        want = [] if i and not recs else [(None, i > 0), (gpu_buckets.GRID_BUCKETS, i > 0)]
        assert asked == want  # a grid each, then handed back (nothing new: not asked)
        pd.testing.assert_frame_equal(
            summary, store.gpu.summary(RUN), check_exact=False, rtol=1e-12
        )
        pd.testing.assert_frame_equal(grid, store.gpu.buckets(RUN, gpu_buckets.GRID_BUCKETS))
    by_gpu = summary.set_index("gpu")
    assert by_gpu.loc["n1/gpu1", "power_w_max"] == 699.0  # the late sample is in
    assert by_gpu.loc["n2/gpu2", "samples"] == 20  # and the GPU first seen live
    cut = Cutoff(ts=pd.Timestamp("2026-11-29T10:02:00"))
    replay = frames.gpu_summary(cut)
    pd.testing.assert_frame_equal(replay, store.gpu.summary(RUN, "2026-11-29T10:02:00.000"))
