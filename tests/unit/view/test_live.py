"""Frames that grow by only what is new (after_id), memoised views, replay cut-offs.

Uses the real z2 run (tests/data/z2/train.log): its records are written in two halves, as a
live tailer would, and the frames must end up exactly as a one-shot read.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from dashboard_support import gpu_samples, read_records

from dsmon.analysis import gpus
from dsmon.ds_config.read import preferred_config
from dsmon.health.live import is_live
from dsmon.model.records import ConfigRecord, Record, Source
from dsmon.store.frames.pages import Frames
from dsmon.store.store import Store, open_store
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import OPEN, Cutoff, step_cutoff
from dsmon.view.hub import FrameHub


class CountingFrames:
    """A store's frames that record the ``after_id`` of every frame or pages query."""

    def __init__(self, inner: Frames, after: list[tuple[str, int | None]]) -> None:
        self.inner = inner
        self.after = after

    def frame(self, run: str, kind: str, **kw: Any) -> pd.DataFrame:
        self.after.append((kind, kw.get("after_id")))
        return self.inner.frame(run, kind, **kw)

    def pages(self, run: str, kind: str, **kw: Any) -> Iterator[pd.DataFrame]:
        self.after.append((kind, kw.get("after_id")))
        return self.inner.pages(run, kind, **kw)


class CountingStore:
    """A store that records the ``after_id`` of every frame, pages or records query."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.after: list[tuple[str, int | None]] = []
        self.frames = CountingFrames(inner.frames, self.after)

    def records(self, run: str, kind: str | None = None, **kw: Any) -> list[Record]:
        self.after.append((f"rec:{kind}", kw.get("after_id")))
        return self.inner.records(run, kind, **kw)

    def last_id(self, run: str | None = None) -> int:
        return self.inner.last_id(run)

    def restamps(self, run: str) -> int:
        return self.inner.restamps(run)


@pytest.fixture
def halves(tmp_path: Path) -> tuple[Store, list[Record], list[Record]]:
    recs = read_records("z2", "z2")
    cut = next(i for i, r in enumerate(recs) if r.KIND == "timer" and r.step == 15)
    store = open_store(tmp_path / "live.sqlite")
    return store, recs[:cut], recs[cut:]


def test_refresh_fetches_only_new_records(halves: tuple[Store, list[Record], list[Record]]) -> None:
    store, first, rest = halves
    store.add(first)
    counting = CountingStore(store)
    frames = RunFrames(counting, "z2")  # type: ignore[arg-type]
    before = frames.frame("timer")
    assert before["step"].max() == 14
    assert frames.refresh() is False  # nothing new: one last_id query, no frame query
    assert counting.after == [("timer", 0)]
    seen = frames.last_id
    store.add(rest)
    assert frames.refresh() is True
    assert counting.after[-1] == ("timer", seen)
    after = frames.frame("timer")
    full = store.frames.frame("z2", "timer")
    assert after["id"].tolist() == full["id"].tolist()
    assert after["step"].max() == 30


def test_memo_recomputes_only_on_growth(halves: tuple[Store, list[Record], list[Record]]) -> None:
    store, first, rest = halves
    store.add(first)
    frames = RunFrames(store, "z2")
    calls: list[int] = []

    def count() -> int:
        calls.append(1)
        return len(frames.frame("timer"))

    assert frames.memo("n", ["timer"], OPEN, count) == frames.memo("n", ["timer"], OPEN, count)
    assert len(calls) == 1
    store.add(rest)
    frames.refresh()
    assert frames.memo("n", ["timer"], OPEN, count) > 0 and len(calls) == 2
    assert frames.memo("n", ["timer"], Cutoff(step=3), count) and len(calls) == 3


def test_transforms_apply_once_per_chunk(halves: tuple[Store, list[Record], list[Record]]) -> None:
    store, first, rest = halves
    store.add(first + rest)
    seen: list[int] = []

    def mark(chunk: pd.DataFrame) -> pd.DataFrame:
        seen.append(len(chunk))
        return chunk.assign(marked=True)

    hub = FrameHub(store, transforms={"step": mark})
    assert hub.run("z2") is hub.run("z2")
    assert hub.run("z2").frame("step")["marked"].all()
    assert seen == [7]  # the seven step= lines of the run


def test_records_are_not_repeated(halves: tuple[Store, list[Record], list[Record]]) -> None:
    store, first, rest = halves
    store.add(first)
    frames = RunFrames(store, "z2")
    n = len(frames.records("config"))
    store.add(rest)
    frames.refresh()
    frames.refresh()
    assert len(frames.records("config")) == n == 3


def test_cutoff_keeps_what_existed_at_a_step() -> None:
    frame = pd.DataFrame(
        {
            "step": pd.array([1, 2, 3, None], dtype="Int64"),
            "ts": pd.to_datetime(
                [
                    "2026-11-29 14:00:01",
                    "2026-11-29 14:00:02",
                    "2026-11-29 14:00:03",
                    "2026-11-29 14:00:02",
                ]
            ),
        }
    )
    cut = step_cutoff(frame, 2)
    assert cut == Cutoff(step=2, ts=pd.Timestamp("2026-11-29 14:00:02"))
    assert cut.apply(frame).index.tolist() == [0, 1, 3]
    assert OPEN.apply(frame) is frame
    assert step_cutoff(frame, None) is OPEN


def test_live_means_recent() -> None:
    now = datetime(2026, 11, 29, 14, 30, 0)
    assert is_live("2026-11-29T14:29:30.000", now)
    assert not is_live("2026-11-29T14:10:00.000", now)
    assert is_live("2026-11-29T14:30:20.000", now)  # writer's clock slightly ahead
    assert not is_live(None, now)


def test_preferred_config_is_the_users_json() -> None:
    def cfg(origin: str, stage: int) -> ConfigRecord:
        return ConfigRecord(
            src=Source(run="r"), origin=origin, config={"zero_optimization": {"stage": stage}}
        )

    chosen = preferred_config([cfg("effective", 1), cfg("user_json", 2), cfg("file", 3)])
    assert chosen is not None and chosen.origin == "user_json"
    # the engine's dict (dsmon run's probe) beats a file whose "auto" the Trainer filled in
    chosen = preferred_config([cfg("file", 3), cfg("engine", 4), cfg("effective", 1)])
    assert chosen is not None and chosen.origin == "engine"
    assert preferred_config([]) is None


def test_gpu_chunks_keep_one_categorical_label_column(tmp_path: Path) -> None:
    """A GPU that first reports in a later chunk joins the categories (no object fallback)."""
    samples = gpu_samples()  # 4 GPUs x 10 s
    first = [s for s in samples if (s.src.node, s.gpu_index) != ("n1", 1)]
    late = [s for s in samples if (s.src.node, s.gpu_index) == ("n1", 1)]
    store = open_store(tmp_path / "gpu.sqlite")
    store.add(first)
    frames = RunFrames(store, "z2", transforms={"gpu": gpus.prepare})
    assert list(frames.frame("gpu")["gpu"].cat.categories) == ["n0/gpu0", "n0/gpu1", "n1/gpu0"]
    store.add(late)
    frames.refresh()
    labels = frames.frame("gpu")["gpu"]
    assert isinstance(labels.dtype, pd.CategoricalDtype)
    assert list(labels.cat.categories) == ["n0/gpu0", "n0/gpu1", "n1/gpu0", "n1/gpu1"]
    assert labels.value_counts().to_dict() == dict.fromkeys(labels.cat.categories, 10)
