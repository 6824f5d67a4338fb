"""The store's timer tables against the timer records they summarise, on real DeepSpeed output.

Every test stores the records of a real run of tests/data (each folder's README says how it
was made) and compares the step breakdown the store keeps as they arrive (``Store.timers``,
shaped by ``dsmon.analysis.steps.stored_breakdown``) with ``steps.step_breakdown`` of the
run's whole timer frame, on both backends: stored at once, a few records at a time, in a
shuffled order, twice, as a second copy of the log, and as a live collector sends a run whose
step is named late. Blocks of a few steps are packed here (``timer_blocks``), so these short
runs are read from packed blocks and rows alike. The dashboard's live breakdown (``dsmon.view.timer_steps``) is checked
against the same after every refresh.
"""

from __future__ import annotations

import random
from datetime import datetime

import pandas as pd
import pytest
from lanes import first_fast
from live_feed_support import records_of
from locations import DATA
from store_support import add_in_batches, folder_records

from dsmon.analysis import steps
from dsmon.health.gather import inputs_from_store
from dsmon.health.registry import evaluate
from dsmon.model.records import TimerRecord
from dsmon.parse.log import LogParser
from dsmon.store import blocks
from dsmon.store.store import Store
from dsmon.view import step_views, timer_steps
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import OPEN
from dsmon.view.health_panel import panel

RUN = "r"
#: Real runs with engine timers: ZeRO-2 (optimizer timers), gradient accumulation, ZeRO-3's
#: coordinator (0.10.0), fp16 with skipped steps, two ranks' timers, a slow rank, a relaunch
#: after a crash (its steps come twice), a rotated log, the default log level.
FOLDERS = ("z2", "grad_accum", "zero3_coordinator_v0100", "fp16_zero2", "probe_torchrun",
           "verdict_slow_rank", "events_relaunch_after_crash", "rotated_copytruncate",
           "z0_default_loglevel", "act_ckpt")  # fmt: skip


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blocks, "BLOCK_STEPS", 4)
    monkeypatch.setattr(blocks, "SEAL_AFTER", 3)


def assert_breakdown_matches(store: Store) -> None:
    """The breakdown of the store's timer tables is the timer frame's, to the dtype.

    Read whole (packed blocks and rows), and from a step on (rows only).
    """
    want = steps.step_breakdown(store.frames.frame(RUN, "timer"))
    assert store.timers.placed(RUN)
    rows = store.timers.rows(RUN)
    pd.testing.assert_frame_equal(steps.stored_breakdown(rows, store.timers.names(RUN)), want)
    middle = int(rows["step"].iloc[len(rows) // 2])
    pd.testing.assert_frame_equal(
        store.timers.rows(RUN, middle), rows[rows["step"] >= middle].reset_index(drop=True)
    )


@pytest.mark.parametrize("folder", first_fast(FOLDERS))
def test_tables_hold_the_breakdown_of_a_run_stored_at_once_or_in_batches(
    folder: str, store: Store
) -> None:
    recs = folder_records(folder, RUN)
    assert any(isinstance(r, TimerRecord) and r.group == "global" for r in recs)
    add_in_batches(store, recs, 7)
    assert_breakdown_matches(store)
    packed = store.backend.read(lambda db: db.rows("SELECT COUNT(*) FROM timer_blocks"))
    assert packed[0][0] > 0
    store.add(recs)  # the same records again: nothing changes
    assert_breakdown_matches(store)


def test_tables_hold_the_breakdown_at_once_shuffled_and_from_a_second_copy(store: Store) -> None:
    """The last record of a step and rank wins, whatever order the records were stored in."""
    recs = folder_records("events_relaunch_after_crash", RUN)  # steps repeated after the relaunch
    shuffled = list(recs)
    random.Random(5).shuffle(shuffled)
    add_in_batches(store, shuffled, 50)
    assert_breakdown_matches(store)
    store.add(records_of("z2"))  # another run: its rows are its own
    copy = [r for r in records_of("z2") if isinstance(r, TimerRecord)]
    for rec in copy:  # a second copy of the log, read as another file: it wins
        store.add([_renamed(rec)])
    assert_breakdown_matches(store)
    z2 = steps.stored_breakdown(store.timers.rows("z2"), store.timers.names("z2"))
    pd.testing.assert_frame_equal(z2, steps.step_breakdown(store.frames.frame("z2", "timer")))


def _renamed(rec: TimerRecord) -> TimerRecord:
    """The record as read from another copy of its file, its values a little different."""
    import dataclasses

    values = {k: v + 1.0 for k, v in rec.values_ms.items()}
    src = dataclasses.replace(rec.src, file="copy.log")
    return dataclasses.replace(rec, src=src, values_ms=values)


def test_timers_sent_before_their_step_are_placed_when_it_comes(store: Store) -> None:
    """A live collector's timers without a step: the tables wait for it, the view folds."""
    lines = (DATA / "z2" / "train.log").read_text(encoding="utf-8").splitlines()
    start = next(i for i, ln in enumerate(lines) if "[train.py] step 12 " in ln)
    tail = lines[start:]
    anchor = next(i for i, ln in enumerate(tail) if "step=15," in ln)
    parser = LogParser("z2", "train.log", live=True)
    early = [rec for raw in tail[:anchor] for rec in parser.feed(raw)]
    store.add(early)
    frames = RunFrames(store, "z2")
    frames.refresh()
    assert not store.timers.placed("z2")
    unplaced = timer_steps.breakdown(frames, OPEN)  # folded from the records meanwhile
    pd.testing.assert_frame_equal(unplaced, steps.step_breakdown(frames.frame("timer")))
    store.add([rec for raw in tail[anchor:] for rec in parser.feed(raw)] + parser.finish())
    assert store.restamps("z2") > 0
    frames.refresh()
    assert store.timers.placed("z2")
    got = timer_steps.breakdown(frames, OPEN)
    want = steps.step_breakdown(store.frames.frame("z2", "timer"))
    pd.testing.assert_frame_equal(got, want)
    assert timer_steps._live(frames).result is got  # from the tables, not the records
    store.add(early)  # a copy without a step changes nothing
    pd.testing.assert_frame_equal(
        steps.stored_breakdown(store.timers.rows("z2"), store.timers.names("z2")), want
    )


@pytest.mark.parametrize(
    "folder", first_fast(("z2", "events_relaunch_after_crash", "fp16_zero2", "act_ckpt"))
)
def test_the_live_breakdown_and_checklist_follow_the_tables_refresh_by_refresh(
    folder: str, store: Store
) -> None:
    """After every refresh the view's breakdown is the records' one, and the checklist too."""
    recs = folder_records(folder, RUN)
    frames, now = RunFrames(store, RUN), datetime.now()
    for start in range(0, len(recs), 23):
        store.add(recs[start : start + 23])
        frames.refresh()
        got = timer_steps.breakdown(frames, OPEN)
        want = step_views.breakdown(frames, OPEN)  # the fold of the timer records
        if want.empty:
            assert got.empty
            continue
        pd.testing.assert_frame_equal(got, want)
    live = panel(frames, RUN, OPEN, now)
    full = evaluate(inputs_from_store(store, RUN, now=now))
    assert [(r.rule_id, r.status, r.summary, r.evidence) for r in live.checklist.results] == [
        (r.rule_id, r.status, r.summary, r.evidence) for r in full.results
    ]


def test_a_run_without_coordinator_lines_reads_no_timer_record_for_them(store: Store) -> None:
    store.add(records_of("z2"))
    frames = RunFrames(store, "z2")
    frames.refresh()
    assert timer_steps.coordinator_steps(frames, OPEN).empty
    assert "timer" not in frames._frames  # nothing read of the timer records
    store.add(records_of("zero3_coordinator_v0100"))
    other = RunFrames(store, "zero3_coordinator_v0100")
    assert not timer_steps.coordinator_steps(other, OPEN).empty
