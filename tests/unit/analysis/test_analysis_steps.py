"""Step breakdowns of the real ZeRO-2 run in tests/data/z2 (30 steps, GAS 1, rank 0 timers).

Expected values were read by hand from tests/data/z2/train.log: the 30 global timer lines
``[Rank 0] time (ms) | fwd: ... | bwd: ... | bwd_inner: ... | bwd_allreduce: ... | step: ...``
(lines 184, 188, ...), the micro lines just before them and the ZeRO optimizer lines
``optimizer_allgather: ... | optimizer_gradients: ... | optimizer_step: ...``.
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from lanes import sampled
from shared_fixtures import DATA, read_log

from dsmon.analysis import steps
from dsmon.analysis.downsample import N_OUT
from dsmon.analysis.steps import (
    BREAKDOWN_COLUMNS,
    MICRO_COLUMNS,
    micro_breakdown,
    slowest_steps,
    step_breakdown,
    step_stats,
)
from dsmon.model.frames import records_frame
from dsmon.model.records import Record, Source, TimerRecord


@pytest.fixture(scope="module")
def timers(z2_log_records: list[Record]) -> pd.DataFrame:
    return records_frame("timer", [r for r in z2_log_records if r.KIND == "timer"])


@pytest.fixture(scope="module")
def breakdown(timers: pd.DataFrame) -> pd.DataFrame:
    return step_breakdown(timers)


def test_one_row_per_step(breakdown: pd.DataFrame) -> None:
    assert list(breakdown.columns) == [
        *BREAKDOWN_COLUMNS,
        "optimizer_allgather_ms",
        "optimizer_gradients_ms",
        "optimizer_step_ms",
    ]
    assert breakdown["step"].tolist() == list(range(1, 31))
    assert set(breakdown["rank"]) == {0}


def test_first_and_last_step_values(breakdown: pd.DataFrame) -> None:
    first = breakdown.iloc[0]
    # line 184: fwd: 350.75 | bwd: 754.18 | bwd_inner: 675.36 | bwd_allreduce: 78.63 | step: 190.22
    assert first[list(BREAKDOWN_COLUMNS[2:7])].tolist() == [350.75, 754.18, 675.36, 78.63, 190.22]
    assert first["total_ms"] == pytest.approx(350.75 + 754.18 + 190.22)
    # line 182: optimizer_allgather: 11.76 | optimizer_gradients: 51.28 | optimizer_step: 77.51
    assert first[
        ["optimizer_allgather_ms", "optimizer_gradients_ms", "optimizer_step_ms"]
    ].tolist() == [
        11.76,
        51.28,
        77.51,
    ]
    last = breakdown.iloc[-1]
    # line 362: fwd: 10.95 | bwd: 30.49 | bwd_inner: 21.92 | bwd_allreduce: 8.55 | step: 14.94
    assert (last["step"], last["fwd_ms"], last["bwd_ms"], last["step_ms"]) == (
        30,
        10.95,
        30.49,
        14.94,
    )
    assert last["optimizer_allgather_ms"] == 5.74


def test_step_stats(breakdown: pd.DataFrame) -> None:
    """Over the 28 steps after the two warm-up steps: the figures every page quotes."""
    stats = step_stats(breakdown)
    assert list(stats.columns) == ["n", "p50", "p90", "max"]
    # fwd of steps 3-30 sorted: ... 10.95 | 10.99 ...: median of 28 = (10.95 + 10.99) / 2
    assert stats.loc["fwd_ms", "p50"] == pytest.approx(10.97)
    assert stats.loc["fwd_ms", "max"] == 19.78  # step 1's 350.75 is warm-up
    assert stats.loc["bwd_ms", "p50"] == pytest.approx((29.69 + 30.49) / 2)
    assert stats.loc["step_ms", "p50"] == pytest.approx((13.36 + 13.44) / 2)
    assert stats.loc["total_ms", "max"] == pytest.approx(84.99)
    assert stats.loc["fwd_ms", "n"] == 28
    # the Communication page's bwd_allreduce p50 (tests/unit/app/test_app_communication.py)
    assert stats.loc["bwd_allreduce_ms", "p50"] == pytest.approx(8.54)


def test_slowest_steps(breakdown: pd.DataFrame) -> None:
    slow = slowest_steps(breakdown, 3)
    # step 1 (warm-up), step 21 (18.42 + 49.25 + 17.32), step 27 (19.78 + 48.92 + 15.66)
    assert slow["step"].tolist() == [1, 21, 27]
    assert slow["total_ms"].tolist() == pytest.approx([1295.15, 84.99, 84.36])


def test_micro_breakdown(timers: pd.DataFrame) -> None:
    micro = micro_breakdown(timers)
    assert list(micro.columns) == list(MICRO_COLUMNS)
    assert len(micro) == 30
    first = micro.iloc[0]
    # line 183: fwd_microstep: 350.74 | bwd_microstep: 754.18 | ... | step_microstep: 190.22
    assert (first["step"], first["micro_step"], first["fwd_ms"], first["step_ms"]) == (
        1,
        0,
        350.74,
        190.22,
    )
    assert micro["micro_step"].tolist() == [0] * 30


def _global(step: int | None, line: int, fwd: float, rank: int | None = 0) -> TimerRecord:
    return TimerRecord(
        src=Source(run="r", file="f", line=line, rank=rank),
        step=step,
        group="global",
        values_ms={"fwd": fwd, "bwd": 2.0, "step": 1.0},
    )


def test_duplicate_lines_count_once_and_unknown_steps_are_kept() -> None:
    frame = records_frame(
        "timer",
        [_global(1, 10, 5.0), _global(1, 10, 6.0), _global(None, 20, 7.0), _global(None, 30, 8.0)],
    )
    out = step_breakdown(frame)
    assert out["fwd_ms"].tolist() == [6.0, 7.0, 8.0]
    assert out["step"].tolist()[0] == 1
    assert out["total_ms"].tolist() == [9.0, 10.0, 11.0]
    # bwd_inner / bwd_allreduce were not printed: NaN columns, not zeros
    assert out["bwd_inner_ms"].isna().all()


def test_no_timers_gives_empty_frames() -> None:
    empty = records_frame("timer", [])
    assert step_breakdown(empty).empty
    assert list(step_breakdown(empty).columns) == list(BREAKDOWN_COLUMNS)
    assert micro_breakdown(empty).empty
    assert step_stats(step_breakdown(empty)).loc["fwd_ms", "n"] == 0
    assert slowest_steps(step_breakdown(empty), 3).empty


def test_zero_timers_are_cut_to_what_a_chart_shows(z2_log_records: list[Record]) -> None:
    """A ZeRO-2 run's optimizer timer line, repeated for 20k steps with one slow step."""
    (line,) = [r for r in z2_log_records if isinstance(r, TimerRecord)
               and r.group == "zero_optimizer"][:1]  # fmt: skip
    recs = [
        dataclasses.replace(
            line,
            step=s,
            src=dataclasses.replace(line.src, line=s),
            values_ms={k: v * (50.0 if s == 12_345 else 1.0) for k, v in line.values_ms.items()},
        )
        for s in range(1, 20_001)
    ]
    zero, names = steps.zero_timers(steps.zero_rows(records_frame("timer", recs)))
    assert names == [k for k in line.values_ms]
    assert len(zero) <= 2 * len(names) * N_OUT < len(recs)
    spike = zero[zero["step"] == 12_345]
    assert not spike.empty  # the slow step survives the cut
    assert steps.zero_timers(steps.zero_rows(records_frame("timer", [])))[1] == []


def test_the_rows_of_one_rank(breakdown: pd.DataFrame) -> None:
    """Rank 0's timers are the breakdown itself; with another rank, each rank's rows alone."""
    assert steps.of_rank(breakdown, 0) is breakdown
    assert steps.of_rank(breakdown, 1).empty
    other = breakdown.assign(rank=pd.array([1] * len(breakdown), dtype="Int64"))
    both = pd.concat([breakdown, other], ignore_index=True)
    pd.testing.assert_frame_equal(steps.of_rank(both, 1).reset_index(drop=True), other)
    unranked = breakdown.assign(rank=pd.array([None] * len(breakdown), dtype="Int64"))
    assert steps.of_rank(unranked, 0) is unranked  # no rank known: every row
    partly = pd.concat([breakdown, unranked], ignore_index=True)
    assert len(steps.of_rank(partly, 0)) == len(breakdown)  # rows without a rank left out


#: Logs with timer lines, of one launch each. A log of two launches (a job started again after
#: a crash) has the same steps twice with other times, and which a breakdown keeps follows the
#: order of the rows (the store's: arrival): that property is not the one tested here. Nor is
#: the live file of a rotated log, read alone (its steps are numbered only after the others).
RUNS_WITH_TIMERS = sorted(
    p.parent.name
    for p in DATA.glob("*/train.log")
    if "time (ms) |" in (text := p.read_text("utf-8"))
    and text.count("WORLD INFO DICT") <= 1
    and not (p.parent / "train.log.1").exists()
)


@pytest.mark.parametrize("run", sampled(RUNS_WITH_TIMERS))
def test_breakdowns_do_not_depend_on_the_order_of_the_lines(run: str) -> None:
    """Rank 0's lines in log order take the short paths (no sort, no join); reversed, the
    general ones. Both must give the same rows, to the last digit and dtype."""
    timers = records_frame("timer", read_log(DATA / run / "train.log", run))
    backwards = timers.iloc[::-1].reset_index(drop=True)
    for fn in (step_breakdown, micro_breakdown):
        pd.testing.assert_frame_equal(fn(timers), fn(backwards), check_exact=True)
    # the ZeRO rows keep a step's lines as read: steps reversed, each step's lines in order
    steps_back = timers.sort_values("step", ascending=False, kind="stable")
    pd.testing.assert_frame_equal(
        steps.zero_rows(timers), steps.zero_rows(steps_back), check_exact=True
    )
    assert not step_breakdown(timers).empty or not micro_breakdown(timers).empty
