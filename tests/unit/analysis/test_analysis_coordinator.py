"""ZeRO-3 coordinator timers per step, on real DeepSpeed 0.10.0 output (tests/data/zero3_coordinator_v0100).

Expected figures are the printed timer values of ``train.log`` added by hand: the coordinator
line of each step (lines 226 ... 372) and that step's engine line after it.
"""

from __future__ import annotations

import pandas as pd
import pytest
from locations import DATA
from shared_fixtures import read_log

from dsmon.analysis import coordinator, steps
from dsmon.model.frames import records_frame
from dsmon.model.records import Source, TimerRecord

LOG = DATA / "zero3_coordinator_v0100" / "train.log"


@pytest.fixture(scope="module")
def frames() -> dict[str, pd.DataFrame]:
    recs = read_log(LOG, "coord")
    kinds = ("timer", "coordinator_event")
    return {k: records_frame(k, [r for r in recs if k == r.KIND]) for k in kinds}


def test_parts_of_each_step(frames: dict[str, pd.DataFrame]) -> None:
    per = coordinator.coordinator_steps(frames["timer"])
    assert per["step"].tolist() == [2, 3, 4, 5, 6, 7, 8]
    first = per.iloc[0]  # line 226: the trace step 1 and step 2 together
    assert first["wait_ms"] == pytest.approx(48.82 + 17.35)
    assert first["gather_ms"] == pytest.approx(4.03 + 1.90)
    # submit = fetch 2.90 + 2.05, prefetch 1.35; the all-gather launch is timed inside it
    assert first["submission_ms"] == pytest.approx(2.90 + 2.05 + 1.35 - (4.03 + 1.90))
    assert first["coordinator_ms"] == pytest.approx(48.82 + 17.35 + 2.90 + 2.05 + 1.35)
    assert pd.isna(first["backward_prefetch_submit_ms"])  # never fired in this run
    step5 = per[per["step"] == 5].iloc[0]  # line 294: prefetch 3.13 around a 0.42 launch
    assert step5["submission_ms"] == pytest.approx(3.13 - 0.42)
    assert step5["wait_share"] == pytest.approx((1.02 + 0.10) / (1.02 + 0.10 + 3.13))
    shares = per[["wait_share", "gather_share", "submission_share"]].sum(axis=1)
    assert shares.tolist() == pytest.approx([1.0] * 7)


def test_summary_over_steady_steps(frames: dict[str, pd.DataFrame]) -> None:
    per = coordinator.coordinator_steps(frames["timer"])
    bd = steps.step_breakdown(frames["timer"])
    s = coordinator.summarize(per, bd, frames["coordinator_event"], warmup=2)
    assert s is not None
    assert (s.steps, s.step_range) == (6, (3, 8))
    wait = (24.72 + 0.09) + (11.30 + 0.10) + (1.02 + 0.10) + (6.55 + 0.11) + (4.07 + 0.09)
    wait += 2.52 + 0.11
    gather = 1.32 + 0.47 + 0.42 + 2.41 + 1.19 + 5.09
    submit = 1.37 + 0.51 + 3.13 + 2.46 + 1.23 + 5.14
    assert s.wait_share == pytest.approx(wait / (wait + submit))
    assert s.gather_share == pytest.approx(gather / (wait + submit))
    assert s.submission_share == pytest.approx((submit - gather) / (wait + submit))
    # per-step fetch times 26.18, 11.91, 4.25, 9.12, 5.39, 7.77: median of the middle two
    assert s.coordinator_ms == pytest.approx((7.77 + 9.12) / 2)
    # against fwd + bwd of each step's engine line: the middle two are steps 8 (line 377), 6 (329)
    assert s.fetch_share == pytest.approx((7.77 / (30.98 + 58.23) + 9.12 / (36.33 + 43.73)) / 2)
    assert (s.submissions_per_step, s.numel_per_submission) == (1.0, 932608.0)
    assert coordinator.leading_part(s, 0.5) == "wait"


def _line(step: int, values: dict[str, float]) -> TimerRecord:
    return TimerRecord(
        src=Source(run="r", line=step), step=step, group="zero3_coordinator", values_ms=values
    )


def test_leading_part_without_waiting() -> None:
    """Record objects: a run whose fetches are all submission bookkeeping, then all launch."""
    busy = {"forward_fetch_wait": 0.5, "forward_fetch_submit": 9.0, "forward_all_gather": 1.0}
    timers = records_frame("timer", [_line(s, busy) for s in range(1, 6)])
    s = coordinator.summarize(coordinator.coordinator_steps(timers))
    assert s is not None and s.fetch_share is None and s.submissions_per_step is None
    assert s.share("submission") == pytest.approx(8.0 / 9.5)
    assert coordinator.leading_part(s, 0.5) == "submission"
    launch = {"backward_fetch_wait": 1.0, "backward_fetch_submit": 4.0, "backward_all_gather": 3.9}
    timers = records_frame("timer", [_line(s, launch) for s in range(1, 6)])
    s2 = coordinator.summarize(coordinator.coordinator_steps(timers))
    assert s2 is not None and coordinator.leading_part(s2, 0.5) == "gather"


def test_no_coordinator_lines() -> None:
    engine = TimerRecord(
        src=Source(run="r", line=1), step=1, group="global", values_ms={"fwd": 1.0, "bwd": 2.0}
    )
    per = coordinator.coordinator_steps(records_frame("timer", [engine]))
    assert per.empty and list(per.columns) == list(coordinator.COLUMNS)
    assert coordinator.summarize(per) is None
