"""The gradient reduction's wire share, kept live as steps settle, equals the whole run's figure.

A real DeepSpeed 0.19.8 job run through ``dsmon run`` (``tests/data/probe_torchrun``: rank 0's
engine timers and both ranks' probe records) is stored a few records at a time, as collectors
send them. After each refresh the figure ``comm.phase_share`` quotes, read from the values the
dashboard keeps (``dsmon.view.wire_steps``), must equal to the last bit the figure computed
from the whole timer frame and the store's per-step table. The thresholds are made small so
this short run keeps its values sorted, merges them, and sees steps settle and come late.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

import numpy as np
import pandas as pd
import pytest
from store_support import folder_records

from dsmon.analysis import ranks, steps, waiting
from dsmon.analysis.percentiles import Percentiles
from dsmon.health.gather import inputs_from_store
from dsmon.health.registry import evaluate
from dsmon.model.frames import records_frame
from dsmon.model.records import Record
from dsmon.store.store import Store
from dsmon.view import fold, quantiles, step_views, wire_steps
from dsmon.view import ranks as rank_views
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import OPEN
from dsmon.view.health_panel import panel

RUN = "r"


@pytest.fixture(autouse=True)
def keep_sorted_from_the_first_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(step_views, "KEEP_SORTED_ROWS", 0)
    monkeypatch.setattr(quantiles, "MERGE_VALUES", 3)
    monkeypatch.setattr(fold, "LATE_STEPS", 2)
    monkeypatch.setattr(rank_views, "OPEN_STEPS", 3)


def _records() -> list[Record]:
    """The run's records in the order they were written: by time, the log's before a rank's."""
    recs = folder_records("probe_torchrun", RUN)
    return sorted(recs, key=lambda r: (r.ts or "", r.src.rank is not None))


def _whole(store: Store, frames: RunFrames) -> Percentiles:
    """The figure from every timer record and the store's per-step table, as a rule takes it."""
    bd = steps.step_breakdown(frames.frame("timer"))
    split = waiting.comm_split(steps.steady(store.ranks.step_stats(RUN)))
    return Percentiles.of(waiting.reduction_wire_shares(bd, split))


def _settled_values(frames: RunFrames) -> int:
    """Values the live figure holds of settled steps (taken once, not computed again)."""
    live = frames.companion("wire_steps.live", wire_steps._LiveWire)
    return live.kept._taken


def _feed(store: Store, batches: list[list[Record]]) -> tuple[RunFrames, list[int]]:
    """Store each batch, refresh, compare the live figure with the whole run's; values held."""
    frames, held = RunFrames(store, RUN), []
    for batch in batches:
        store.add(batch)
        frames.refresh()
        live = wire_steps.stat(frames, OPEN)
        if live is None:
            continue
        want = _whole(store, frames)
        assert (live.n, live.median()) == (want.n, want.median()) or (live.n == want.n == 0), (
            f"after {sum(map(len, batches[: len(held) + 1]))} records"
        )
        held.append(_settled_values(frames))
    return frames, held


def test_the_live_figure_equals_the_whole_runs_as_the_job_writes(store: Store) -> None:
    recs = _records()
    frames, held = _feed(store, [recs[i : i + 7] for i in range(0, len(recs), 7)])
    assert len(held) > 20 and max(held) > 40  # answered live, most steps' values kept
    assert not np.isnan(_whole(store, frames).median())


def test_a_rank_late_by_many_steps_and_a_step_stored_again(store: Store) -> None:
    """Rank 1's lines come 20 steps late, then all at once; then a step of it is stored again.

    Steps it had not reported were taken in by age (some rank missing: no value); its late
    lines change them, and the redone step changes a settled one: the values start again.
    Before that, both ranks' lines of steps 20-22 come once the run is well past them: steps
    no rank had reported, settled without a value, now have one.
    """
    recs = _records()
    late = [r for r in recs if r.src.rank == 1 and r.KIND == "rank_step" and (r.step or 0) > 30]
    lost = [r for r in recs if r.KIND == "rank_step" and 20 <= (r.step or 0) <= 22]
    first = [r for r in recs if not any(r is x for x in late + lost)]
    batches = [first[i : i + 5] for i in range(0, len(first), 5)]
    batches += [lost, late[:10], late[10:]]
    redone = [
        dataclasses.replace(r, src=dataclasses.replace(r.src, file=r.src.file + ".again"))
        for r in late[:1]
    ]
    frames, held = _feed(store, [*batches, redone])
    live = frames.companion("wire_steps.live", wire_steps._LiveWire)
    assert live.generation > 2 and held[-1] > 0


def test_the_live_checklist_says_what_the_store_says(store: Store) -> None:
    """The panel's comm.phase_share (from the kept values) is the one a fresh reading gives."""
    recs, now = _records(), datetime.now()
    frames = RunFrames(store, RUN)
    for start in range(0, len(recs), 25):
        store.add(recs[start : start + 25])
        frames.refresh()
        live = panel(frames, RUN, OPEN, now)
    assert _settled_values(frames) > 0
    full = evaluate(inputs_from_store(store, RUN, now=now))
    phase = [r for r in live.checklist.results if r.rule_id == "comm.phase_share"]
    want = [r for r in full.results if r.rule_id == "comm.phase_share"]
    assert phase[0].evidence == want[0].evidence
    assert any("less waiting" in e.label for e in phase[0].evidence)  # the split was made


def _joined_definition(timers: pd.DataFrame, split: pd.DataFrame) -> np.ndarray:
    """The figure's per-step values as pandas says them: a join of the two tables by step."""
    rows = timers[["step", "bwd_allreduce_ms", "bwd_ms"]].dropna()
    per_step = rows.groupby("step")[["bwd_allreduce_ms", "bwd_ms"]].max()
    joined = per_step.join(split.set_index("step")["wait_ms"], how="inner")
    taken = joined[["bwd_allreduce_ms", "wait_ms"]].min(axis=1)
    base = joined["bwd_ms"] - taken
    return ((joined["bwd_allreduce_ms"] - taken) / base.where(base > 0)).dropna().to_numpy()


def test_each_steps_value_is_the_join_of_the_timers_and_the_split() -> None:
    """The steps of both tables, in step order and shuffled; an unknown wait takes nothing
    out, and a step all waiting has no value."""
    recs = _records()
    bd = steps.step_breakdown(records_frame("timer", [r for r in recs if r.KIND == "timer"]))
    split = waiting.comm_split(ranks.step_stats(records_frame("rank_step", recs)))
    assert len(split) > 40
    split.loc[split.index[3], "wait_ms"] = np.nan
    split.loc[split.index[5:7], "wait_ms"] = 1e9  # more than the all-reduce took
    all_waiting = bd["step"] == split["step"].iloc[6]
    bd.loc[all_waiting, "bwd_ms"] = bd.loc[all_waiting, "bwd_allreduce_ms"]
    for case in (split, split.sample(frac=1.0, random_state=2)):
        got = waiting.reduction_wire_shares(bd, case)
        np.testing.assert_array_equal(got, _joined_definition(bd, case))
    assert len(got) == len(split) - 1 and got[5] == 0.0
