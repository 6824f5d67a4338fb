"""Per-step analyses updated with new steps only give what computing everything gives.

Real DeepSpeed logs (2 ranks) are stored a few records at a time into a real store, as a
live collector sends them; after each refresh the folded breakdowns must equal the same
functions run over the whole timer frame. ``LATE_STEPS`` is made small so these short runs
exercise finished steps, the open window and late rows.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
from lanes import first_fast
from live_feed_support import records_of
from locations import DATA
from shared_fixtures import read_log

from dsmon.analysis import coordinator, steps, training
from dsmon.health import Status
from dsmon.health.gather import inputs_from_store
from dsmon.health.registry import evaluate
from dsmon.model.joined import concat
from dsmon.model.records import Record
from dsmon.store.frames import pages
from dsmon.store.store import Store, open_store
from dsmon.view import chunks as chunks_module
from dsmon.view import fold, step_views
from dsmon.view.cache import RunFrames
from dsmon.view.chunks import Chunks
from dsmon.view.cutoff import OPEN, Cutoff
from dsmon.view.health_panel import panel

FNS: dict[str, Callable[[pd.DataFrame], pd.DataFrame]] = {
    "breakdown": steps.step_breakdown,
    "micro": steps.micro_breakdown,
    "coordinator": coordinator.coordinator_steps,
    "zero_rows": steps.zero_rows,
}
#: The same, of the ``step=`` lines.
STEP_FNS: dict[str, Callable[[pd.DataFrame], pd.DataFrame]] = {
    "skipped": steps.skipped_counts,
}
#: Runs with ZeRO-2 optimizer timers, gradient accumulation and ZeRO-3 coordinator timers.
RUNS = ("z2", "grad_accum", "zero3_coordinator_v0100", "act_ckpt")


def assert_folds_equal(frames: RunFrames) -> None:
    for kind, fns in (("timer", FNS), ("step", STEP_FNS)):
        whole = frames.frame(kind)
        for name, fn in fns.items():
            got = frames.fold(name, kind, OPEN, fn)
            pd.testing.assert_frame_equal(
                got.reset_index(drop=True), fn(whole).reset_index(drop=True), check_dtype=True
            )


def feed(store: Store, run: str, recs: list[Record], chunk: int) -> RunFrames:
    """Store ``recs`` ``chunk`` at a time, checking the folds after every refresh."""
    frames = RunFrames(store, run)
    store.add(recs[:chunk])
    assert_folds_equal(frames)
    for start in range(chunk, len(recs), chunk):
        store.add(recs[start : start + chunk])
        frames.refresh()
        assert_folds_equal(frames)
    return frames


@pytest.mark.parametrize("name", first_fast(RUNS))
def test_folds_equal_the_whole_computation_as_a_run_grows(
    name: str, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fold, "LATE_STEPS", 2)
    recs = records_of(name)
    frames = feed(store, name, recs, chunk=9)
    bd = frames.fold("breakdown", "timer", OPEN, steps.step_breakdown)
    assert bd["step"].nunique() >= 5  # the run has enough steps to close some
    folded = frames._folds["breakdown"]
    assert folded._incremental and len(folded._done) > 0  # finished steps were kept
    assert folded._buffer is not None  # its result grows in place (dsmon.view.rowbuffer)
    assert frames._folds["skipped"]._incremental  # step= lines fold too


def test_rows_of_a_finished_step_arriving_late_give_the_same_answer(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step 4's lines sent after the rest of the run: every one is late, none is lost."""
    monkeypatch.setattr(fold, "LATE_STEPS", 1)
    recs = records_of("z2")
    late = [r for r in recs if r.step == 4]
    assert late, "the z2 run has a step 4"
    frames = feed(store, "z2", [r for r in recs if r.step != 4] + late, chunk=25)
    assert 4 in set(frames.fold("breakdown", "timer", OPEN, steps.step_breakdown)["step"])


def test_shuffled_arrival_and_replay_positions_agree(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fold, "LATE_STEPS", 3)
    recs = records_of("grad_accum")
    random.Random(7).shuffle(recs)
    frames = feed(store, "grad_accum", recs, chunk=40)
    cut = Cutoff(step=5)
    replay = frames.fold("breakdown", "timer", cut, steps.step_breakdown)
    pd.testing.assert_frame_equal(replay, steps.step_breakdown(frames.frame("timer", cut)))
    assert replay["step"].max() == 5


def test_chunks_join_categoricals_without_losing_values() -> None:
    chunks = Chunks()
    chunks.append(pd.DataFrame({"g": pd.Categorical(["global", "micro"]), "v": [1, 2]}))
    chunks.append(pd.DataFrame({"g": pd.Categorical(["zero_optimizer"]), "v": [3]}))
    chunks.append(pd.DataFrame({"g": ["micro", None], "v": [4, 5]}))
    assert chunks.since(3)["v"].tolist() == [4, 5]
    assert chunks.since(1)["v"].tolist() == [2, 3, 4, 5]
    whole = chunks.whole()
    assert isinstance(whole["g"].dtype, pd.CategoricalDtype)
    assert whole["g"].tolist()[:4] == ["global", "micro", "zero_optimizer", "micro"]
    assert pd.isna(whole["g"].iloc[4])
    assert len(chunks.parts) == 1 and chunks.since(2)["v"].tolist() == [3, 4, 5]
    assert concat([pd.DataFrame(), whole]).equals(whole)
    assert concat([]).empty and Chunks().whole().empty and Chunks().since(0).empty


def tiny_refreshes(store: Store, run: str, recs: list[Record], join: int) -> RunFrames:
    """``recs`` stored three at a time, each refresh's folds asked for (never the whole
    frame, which joins every part), with the small parts joined ``join`` at a time."""
    old = chunks_module.JOIN_PARTS
    chunks_module.JOIN_PARTS = join
    try:
        frames = RunFrames(store, run)
        for start in range(0, len(recs), 3):
            store.add(recs[start : start + 3])
            frames.refresh()
            for name, fn in FNS.items():
                frames.fold(name, "timer", OPEN, fn)
            assert len(frames._frames["timer"].parts) <= join  # all small here: one join
        return frames
    finally:
        chunks_module.JOIN_PARTS = old


@pytest.mark.parametrize("name", first_fast(["z2", "grad_accum"]))
def test_a_live_runs_small_parts_are_joined_and_read_the_same(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refresh appends a part of a few rows. Thousands of them made every full garbage
    collection slower, so every ``JOIN_PARTS`` small ones are joined: the folds, the rows
    since a count and the whole frame read the same as from the parts as they came."""
    monkeypatch.setattr(fold, "LATE_STEPS", 2)
    recs = records_of(name)[:48]  # a few steps: 16 refreshes, 5 joins
    stores = [open_store(tmp_path / "a.sqlite"), open_store(tmp_path / "b.sqlite")]
    try:
        _read_the_same(
            tiny_refreshes(stores[0], name, recs, join=3),
            tiny_refreshes(stores[1], name, recs, join=10**6),
        )
    finally:
        for s in stores:
            s.close()


def _read_the_same(joined: RunFrames, apart: RunFrames) -> None:
    """Joined small parts read as the parts as they came: folds, rows since, whole frame."""
    assert len(apart._frames["timer"].parts) > 4 * len(joined._frames["timer"].parts)
    for n, fn in FNS.items():
        pd.testing.assert_frame_equal(
            joined.fold(n, "timer", OPEN, fn), apart.fold(n, "timer", OPEN, fn)
        )
    rows = joined._frames["timer"].rows
    for seen in (0, rows // 3, rows - 5):
        pd.testing.assert_frame_equal(  # the same columns; their order is each part's own
            joined._frames["timer"].since(seen).reset_index(drop=True),
            apart._frames["timer"].since(seen).reset_index(drop=True),
            check_like=True,
        )
    pd.testing.assert_frame_equal(joined.frame("timer"), apart.frame("timer"))


@pytest.mark.parametrize("name", first_fast(["z2", "zero3_coordinator_v0100"]))
def test_live_checklist_from_folds_equals_the_checklist_of_the_store(
    name: str, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dashboard's checklist (folded views, lazily read frames) says what ``dsmon check
    --store`` says, and a live refresh never joins the run's raw timer rows."""
    monkeypatch.setattr(fold, "LATE_STEPS", 2)
    recs = read_log(DATA / name / "train.log", name)  # whole: the checklist judges its end
    half = len(recs) // 2
    store.add(recs[:half], live=True)  # a collector sends it: judged against the clock
    frames = RunFrames(store, name)
    now = datetime.now()
    panel(frames, name, OPEN, now)
    store.add(recs[half:], live=True)
    frames.refresh()
    live = panel(frames, name, OPEN, now)
    assert len(frames._frames["timer"].parts) == 2  # grown, never joined whole
    full = evaluate(inputs_from_store(store, name, now=now))
    shown = [(r.rule_id, r.status, r.summary) for r in live.checklist.results]
    stored = [(r.rule_id, r.status, r.summary) for r in full.results]
    if name == "zero3_coordinator_v0100":  # no launcher exit lines: judged by the clock
        # the dashboard saw the second half arrive just now (RunFrames.newest_ts), where the
        # store has only the lines' own times, days old
        (i,) = [i for i, r in enumerate(shown) if r[0] == "run.stalled"]
        assert shown.pop(i) == ("run.stalled", Status.PASS, "last step 0 s ago (limit 30 s)")
        assert stored.pop(i)[1] is Status.UNKNOWN
        (i,) = [i for i, r in enumerate(shown) if r[0] == "run.state"]  # and so its state
        assert shown.pop(i) == ("run.state", Status.PASS, "training: step 8")
        assert stored.pop(i)[2].startswith("silent: no step for ")
    assert shown == stored


@pytest.mark.parametrize("name", first_fast(["z2", "fp16_zero2", "memory_breakdown"]))
def test_training_points_folded_per_kind_equal_the_whole_series(
    name: str, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fold, "LATE_STEPS", 1)
    recs = records_of(name)
    frames = RunFrames(store, name)
    for start in range(0, len(recs), 11):
        store.add(recs[start : start + 11])
        frames.refresh()
        got = step_views.training_series(frames, OPEN, None)
        whole = {k: frames.frame(k) for k in training.SERIES_KINDS}
        key = ["metric", "source", "step", "value"]
        expect = training.training_series(whole).sort_values(key, kind="stable")
        pd.testing.assert_frame_equal(
            got.sort_values(key, kind="stable").reset_index(drop=True),
            expect.reset_index(drop=True),
        )
    assert set(got["metric"]) >= {"learning rate"}
    assert frames._folds["training.step"]._incremental
    assert frames._folds["training.step"]._buffer is not None  # categoricals grow in place


@pytest.mark.parametrize("name", first_fast(RUNS))
def test_a_run_loaded_in_pages_folds_page_by_page_to_the_whole_answer(
    name: str, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored run opened at once is read in pages; the folds never join its timer rows."""
    monkeypatch.setattr(fold, "LATE_STEPS", 2)
    monkeypatch.setattr(pages, "FRAME_PAGE_ROWS", 7)
    store.add(records_of(name))
    frames = RunFrames(store, name)
    parts = len(frames._chunks("timer").parts)
    got = {n: frames.fold(n, "timer", OPEN, fn) for n, fn in FNS.items()}
    assert parts > 3 and len(frames._frames["timer"].parts) == parts  # never joined
    whole = frames.frame("timer")
    assert len(whole) == len(store.frames.frame(name, "timer"))
    for n, fn in FNS.items():
        pd.testing.assert_frame_equal(
            got[n].reset_index(drop=True), fn(whole).reset_index(drop=True)
        )
