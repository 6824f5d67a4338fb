"""The store's per-rank tables against the records they summarise, on real probe output.

Every test stores the records ``dsmon run``'s probe wrote in a real job (tests/data/probe_*,
DeepSpeed 0.19.8, 2 ranks; each folder's README says how it was made) and compares what the
store keeps as they arrive (``Store.ranks``: ``step_stats``, ``busy``, ``last_heartbeats``)
with the same figures computed from the records in pandas (``dsmon.analysis.ranks``), on
both backends: in whatever order and batches the records come, and once more after a step
was stored twice. Blocks of four steps are packed (``rank_stat_blocks``), so a first read
unpacks blocks and fetches rows alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

import pandas as pd
import pytest
from lanes import first_fast, sample
from store_support import folder_records

from dsmon.analysis import collectives, ranks
from dsmon.analysis.stragglers import StragglerSummary, straggler_summary
from dsmon.model.frames import records_frame
from dsmon.model.records import RankStepRecord, Record
from dsmon.store import blocks
from dsmon.store.store import Store
from dsmon.view import ranks as rank_views
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import OPEN, Cutoff
from dsmon.view.health_panel import panel

RUN = "r"
#: Real jobs with the probe: a straggler, torchrun, a crash, fp16 overflows, a hang.
FOLDERS = ("probe_straggler", "probe_torchrun", "probe_crash_torchrun", "probe_fp16_default",
           "probe_hang", "probe_slow_data", "probe_monitored")  # fmt: skip
#: Bucket widths read from the steps (1, 2), from each roll-up level, and across levels.
WIDTHS = (1, 2, 8, 16, 64, 128, 512, 4096, 32768)


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of a few steps: these short runs are read from packed blocks and rows alike."""
    monkeypatch.setattr(blocks, "BLOCK_STEPS", 4)
    monkeypatch.setattr(blocks, "SEAL_AFTER", 3)


def probe_records(folder: str) -> list[Record]:
    """The records of a real run folder, read as ``dsmon import`` reads them."""
    return folder_records(folder, RUN)


def assert_tables_match(store: Store, recs: Sequence[Record]) -> None:
    """The store's per-rank tables equal the pandas figures of ``recs``' probe records."""
    steps = records_frame("rank_step", [r for r in recs if r.KIND == "rank_step"])
    beats = records_frame("heartbeat", [r for r in recs if r.KIND == "heartbeat"])
    want = ranks.step_stats(steps)
    got = store.ranks.step_stats(RUN)
    pd.testing.assert_frame_equal(got[list(want.columns)], want, check_dtype=False)
    table = ranks.rank_step_table(steps)
    for width in WIDTHS:
        want_busy = ranks.busy_buckets(table, width)
        got_busy = store.ranks.busy(RUN, width)
        pd.testing.assert_frame_equal(
            got_busy.reset_index(drop=True), want_busy.reset_index(drop=True), check_dtype=False
        )
        want_phases = ranks.phase_buckets(table, width)
        got_phases = store.ranks.phases(RUN, width)
        pd.testing.assert_frame_equal(
            got_phases.reset_index(drop=True), want_phases.reset_index(drop=True),
            check_dtype=False,
        )  # fmt: skip
        want_comm = collectives.bucketed(
            collectives.comm_steps(
                collectives.collective_rows(ranks.rank_step_table(steps, keep_collectives=True))
            ),
            width,
        )
        got_comm = store.ranks.comm(RUN, width)
        pd.testing.assert_frame_equal(
            got_comm.reset_index(drop=True), want_comm.reset_index(drop=True),
            check_dtype=False,
        )  # fmt: skip
    last = ranks.last_beats(beats)
    kept = store.ranks.last_heartbeats(RUN)
    assert [(b.src.rank, b.src.file, b.src.line) for b in kept] == list(
        zip(last["rank"], last["file"], last["line"], strict=True)
    )


@pytest.mark.parametrize("folder", first_fast(FOLDERS))
def test_the_tables_equal_the_records_figures(store: Store, folder: str) -> None:
    recs = probe_records(folder)
    store.add(recs)
    assert_tables_match(store, recs)
    stats = store.ranks.step_stats(RUN)
    assert len(stats) == len({r.step for r in recs if r.KIND == "rank_step"})
    packed = store.backend.read(lambda db: db.rows("SELECT COUNT(*) FROM rank_stat_blocks"))
    assert packed[0][0] > 0  # read from packed blocks too


def test_times_with_a_zone_are_read_as_pandas_reads_them(store: Store) -> None:
    """The probe writes plain times, packed as numbers; a time with a zone is kept as text."""
    recs = [
        dataclasses.replace(r, ts=f"{r.ts}+02:00") if r.KIND == "rank_step" and r.ts else r
        for r in probe_records("probe_straggler")
    ]
    store.add(recs)
    assert_tables_match(store, recs)
    got = store.ranks.step_stats(RUN)["ts"]
    assert str(got.dt.tz) == "UTC+02:00"


def test_records_arriving_rank_by_rank_in_small_batches_fold_the_same(store: Store) -> None:
    """Live, each rank's file is tailed apart: rank 1 lags, batches are a few lines each."""
    recs = probe_records("probe_straggler")
    by_rank = {0: [r for r in recs if r.src.rank == 0], 1: [r for r in recs if r.src.rank == 1]}
    others = [r for r in recs if r.src.rank not in (0, 1)]
    store.add(others)
    store.add(by_rank[0][:12])
    got = store.ranks.step_stats(RUN)
    assert set(got["ranks"]) == {1.0}  # rank 0 alone so far
    assert ranks.stragglers(got).empty  # a step one rank reported names no straggler
    sent = 12
    for start in range(0, len(by_rank[1]), 5):
        store.add(by_rank[1][start : start + 5])
        store.add(by_rank[0][sent : sent + 3])
        sent += 3
    store.add(by_rank[0][sent:])
    assert_tables_match(store, recs)
    strag = ranks.stragglers(store.ranks.step_stats(RUN))
    assert set(strag["slowest_rank"]) == {1}  # the run's straggler, as its README says


def test_a_step_stored_again_counts_once_with_its_last_times(store: Store) -> None:
    """A job resumed from a checkpoint redoes steps: the later record of a step wins."""
    recs = probe_records("probe_straggler")
    store.add(recs)
    redone = [
        dataclasses.replace(
            r,
            src=dataclasses.replace(r.src, file=r.src.file + ".resumed"),
            total_ms=(r.total_ms or 0.0) * 3,
        )
        for r in recs
        if isinstance(r, RankStepRecord) and r.step is not None and r.step >= 15
    ]
    store.add(redone)
    assert_tables_match(store, [*recs, *redone])
    got = store.ranks.step_stats(RUN)
    assert set(got["ranks"]) == {2.0}  # still two ranks a step


def test_a_live_reader_is_given_only_the_steps_changed_since(store: Store) -> None:
    recs = probe_records("probe_straggler")
    store.add(recs)
    first = store.ranks.step_stats(RUN)
    after = int(first["id"].max())
    assert store.ranks.step_stats(RUN, after).empty  # nothing new
    late = [
        dataclasses.replace(r, src=dataclasses.replace(r.src, line=(r.src.line or 0) + 1000,
                                                       offset=(r.src.offset or 0) + 10**6),
                            step=(r.step or 0) + 20)
        for r in recs
        if isinstance(r, RankStepRecord) and r.step == 20 and r.src.rank == 0
    ]  # fmt: skip
    store.add(late)
    new = store.ranks.step_stats(RUN, after)
    assert list(new["step"]) == [40.0] and list(new["ranks"]) == [1.0]


def test_the_dashboard_reads_the_summaries_not_the_probe_records(store: Store) -> None:
    """Live, the checklist and the Steps page's figures never load the probe's records."""
    recs = probe_records("probe_hang")
    store.add(recs)
    frames = RunFrames(store, RUN)
    checklist = panel(frames, RUN, OPEN, datetime(2026, 12, 4, 22, 16)).checklist
    stats = rank_views.stats(frames)
    busy = rank_views.busy(frames)
    beats = rank_views.beats(frames)
    assert not {"rank_step", "heartbeat"} & set(frames._frames)
    steps = records_frame("rank_step", [r for r in recs if r.KIND == "rank_step"])
    want = ranks.step_stats(steps)
    pd.testing.assert_frame_equal(stats[list(want.columns)], want, check_dtype=False)
    assert sorted(busy["rank"].unique()) == [0.0, 1.0] and list(beats["rank"]) == [0, 1]
    hang = next(r for r in checklist.results if r.rule_id == "ranks.hang")
    assert hang.status.value == "fail" and hang.summary.startswith("rank 1 sent no heartbeat")


@pytest.mark.parametrize("folder", first_fast(["probe_straggler", "probe_torchrun", "probe_hang"]))
def test_a_replay_position_is_read_from_the_tables_up_to_its_step(
    store: Store, folder: str
) -> None:
    recs = probe_records(folder)
    store.add(recs)
    steps = records_frame("rank_step", [r for r in recs if r.KIND == "rank_step"])
    beats = records_frame("heartbeat", [r for r in recs if r.KIND == "heartbeat"])
    frames = RunFrames(store, RUN)
    for upto in sample((1, 3, 9, 10, 17, 37, 64, 65), every=2):  # the fast lane: 1, 9, 17, 64
        at = Cutoff(step=upto)
        want = ranks.step_stats(at.apply(steps))
        got = rank_views.stats(frames, at)
        pd.testing.assert_frame_equal(got[list(want.columns)], want, check_dtype=False)
        table = ranks.rank_step_table(at.apply(steps))
        for width in sample((1, 2, 8, 16, 64, 128), every=2):
            got_busy = store.ranks.busy(RUN, width, upto)
            pd.testing.assert_frame_equal(
                got_busy, ranks.busy_buckets(table, width).reset_index(drop=True), check_dtype=False
            )
        panel(frames, RUN, at, None)  # the checklist as of the position
        last = ranks.last_beats(at.apply(beats))
        kept = rank_views.beats(frames, at)
        assert list(zip(kept["rank"], kept["line"], strict=True)) == list(
            zip(last["rank"], last["line"], strict=True)
        )
    assert not {"rank_step", "heartbeat"} & set(frames._frames)  # never the records


def _summary_figures(s: StragglerSummary) -> tuple[object, ...]:
    medians = (s.score.median(), s.slowest_ms.median(), s.median_ms.median(), s.step_ms.median())
    return (s.steps, s.step_range(), s.counts, s.waited, s.score.n, s.step_ms.n,
            *(None if m != m else m for m in medians))  # fmt: skip


def _refreshed(store: Store, frames: RunFrames, batch: list[Record]) -> StragglerSummary:
    """Store ``batch``, refresh: the live table and summary equal the store's and a fresh one."""
    store.add(batch)
    frames.refresh()
    live = rank_views.stragglers(frames)
    table = store.ranks.step_stats(RUN)
    assert _summary_figures(live) == _summary_figures(straggler_summary(table))
    pd.testing.assert_frame_equal(rank_views.stats(frames), table)
    return live


def test_the_live_straggler_summary_equals_the_whole_runs_at_every_refresh(store: Store) -> None:
    """Kept step by step as ranks report, redone steps and all, it says what a fresh one says."""
    recs = probe_records("probe_straggler")
    by_rank = [[r for r in recs if r.src.rank == k] for k in (0, 1)]
    redone = [
        dataclasses.replace(r, src=dataclasses.replace(r.src, file=r.src.file + ".resumed"),
                            total_ms=(r.total_ms or 0.0) * 2)
        for r in by_rank[1] if isinstance(r, RankStepRecord) and r.step in (12, 13)
    ]  # fmt: skip
    batches = [[r for r in recs if r.src.rank not in (0, 1)], by_rank[0][:6], by_rank[1][:4]]
    batches += [by_rank[0][6:20], by_rank[1][4:25], by_rank[0][20:], by_rank[1][25:], redone]
    frames = RunFrames(store, RUN)
    for batch in batches:
        live = _refreshed(store, frames, batch)
    assert live.steps == 18 and live.counts == {1: 18}  # steps 3-20, rank 1 the slowest


def test_steps_a_silent_rank_never_reports_are_taken_in_by_age(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank that stops reporting leaves the steps after it waiting: they are not kept forever.

    Rank 1's lines stop at step 8 while rank 0 goes on one step a refresh; the run passes
    steps by more than ``OPEN_STEPS`` (three here), so each is taken in as it is and the
    steps kept aside stay bounded, where they grew by one a step. Then rank 1's lines of
    steps 9-12 come late: steps taken in by age change, and the figures are made again.
    At every refresh they equal a fresh summary of the table.
    """
    monkeypatch.setattr(rank_views, "OPEN_STEPS", 3)
    recs = [r for r in probe_records("probe_straggler") if r.KIND == "rank_step"]
    by_rank = {k: sorted((r for r in recs if r.src.rank == k), key=lambda r: r.step or 0)
               for k in (0, 1)}  # fmt: skip
    batches = [by_rank[0][:8] + by_rank[1][:8]]
    batches += [[r] for r in by_rank[0][8:]]
    batches += [by_rank[1][8:12], by_rank[1][12:]]
    frames = RunFrames(store, RUN)
    kept_aside = []
    for batch in batches:
        live = _refreshed(store, frames, batch)
        kept_aside.append(rank_views._live(frames).stragglers.open_steps)
    assert max(kept_aside[:13]) <= 4, kept_aside  # steps 9-20 waited on rank 1, 3 at a time
    assert live.steps == 18 and live.counts == {1: 18}  # every step reported again in the end
