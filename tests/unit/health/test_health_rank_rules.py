"""The per-rank view's analysis and the straggler and hang rules.

The straggler cases read the real probe files of tests/data/probe_straggler (rank 1 sleeps
0.2 s in each forward, see its README.md); balanced and hang cases are built from records,
since they are about the rule's decision on given heartbeats and clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd
from locations import DATA

from dsmon.analysis import ranks
from dsmon.health import evaluate
from dsmon.health.gather import inputs_from_records
from dsmon.health.model import CheckResult, Status
from dsmon.health.registry import all_rules
from dsmon.load.files import read_found
from dsmon.load.kinds import discover
from dsmon.model.frames import records_frame
from dsmon.model.records import HeartbeatRecord, RankStepRecord, Record, Source
from dsmon.parse.base import Diagnostics

RUN = DATA / "probe_straggler"
T0 = datetime(2026, 12, 1, 12, 0, 0)


def real_records() -> list[Record]:
    out: list[Record] = []
    for found in discover(RUN):
        out.extend(read_found(found, "s", Diagnostics()))
    return out


def verdict(records: list[Record], rule_id: str, now: datetime | None = None) -> CheckResult:
    rules = [r for r in all_rules() if r.id == rule_id]
    (res,) = evaluate(inputs_from_records(records, run="s", now=now), rules).results
    return res


def ts(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat(timespec="milliseconds")


def step_rec(rank: int, step: int, total: float, comm: float | None) -> RankStepRecord:
    src = Source(run="s", file=f"rank-{rank}.jsonl", line=step, rank=rank)
    return RankStepRecord(src=src, ts=ts(step), step=step, total_ms=total, comm_ms=comm)


def beat(
    rank: int, at: float, phase: str, since: float, step: int = 9, coll: str | None = None
) -> HeartbeatRecord:
    src = Source(run="s", file=f"rank-{rank}.jsonl", line=int(at * 10) + 1000, rank=rank)
    return HeartbeatRecord(
        src=src, ts=ts(at), step=step, phase=phase, collective=coll, phase_since=ts(since)
    )


def test_busy_time_and_straggler_of_the_real_run() -> None:
    table = ranks.rank_step_table(records_frame("rank_step", real_records()))
    assert len(table) == 40
    last0 = table[(table["step"] == 20) & (table["rank"] == 0)].iloc[0]
    assert round(last0["busy_ms"], 3) == round(252.442 - 239.366, 3)  # read off rank-0.jsonl
    strag = ranks.stragglers(ranks.step_stats(records_frame("rank_step", real_records())))
    assert list(strag["step"]) == list(range(1, 21))
    assert set(strag["slowest_rank"]) == {1}
    assert (strag["score"] > 1.3).all()
    counts = ranks.slowest_counts(strag)
    assert counts.iloc[0].to_dict() == {"rank": 1, "steps": 20, "share": 1.0}


def test_straggler_rule_names_the_slow_rank() -> None:
    res = verdict(real_records(), "ranks.straggler")
    assert res.status is Status.FAIL
    assert res.summary.startswith("rank 1 is the slowest in 100% of steps")
    assert res.steps == (3, 20)  # warm-up steps left out


def test_balanced_ranks_pass_and_one_rank_alone_is_not_a_straggler() -> None:
    recs = [step_rec(r, s, 100 + r, 10) for r in range(4) for s in range(1, 11)]
    assert verdict(recs, "ranks.straggler").status is Status.PASS
    single = [step_rec(0, s, 100, 5) for s in range(1, 11)]
    assert verdict(single, "ranks.straggler").status is Status.UNKNOWN
    # Collectives that return at once (NCCL on a GPU): waiting is unknown, so no verdict.
    unknown_wait = [step_rec(r, s, 100 + 50 * r, None) for r in range(2) for s in range(1, 11)]
    res = verdict(unknown_wait, "ranks.straggler")
    assert res.status is Status.UNKNOWN and "compare the ranks' fwd_ms" in res.summary
    assert verdict([], "ranks.straggler").status is Status.NOT_APPLICABLE


def test_waiting_is_not_counted_as_slowness() -> None:
    # Every rank's step takes 300 ms; ranks 0-2 spend 200 of it in collectives: rank 3 is slow.
    recs = [step_rec(r, s, 300, 10 if r == 3 else 200) for r in range(4) for s in range(1, 11)]
    res = verdict(recs, "ranks.straggler")
    assert res.status is Status.FAIL and "rank 3" in res.summary


def test_silent_rank_is_named_with_its_phase_while_others_wait() -> None:
    recs = [
        beat(0, 100, "backward", 60, coll="all_reduce"),
        beat(1, 58, "outside", 57),
        beat(1, 61, "forward", 60.5),  # its last heartbeat
    ]
    res = verdict(recs, "ranks.hang", now=T0 + timedelta(seconds=101))
    assert res.status is Status.FAIL
    assert res.summary.startswith(
        "rank 1 sent no heartbeat for 40 s (stopped or hung), last seen in forward of step 9"
    )
    assert "waiting: rank 0 in backward's all_reduce of step 9 for 41 s" in res.summary
    assert res.fix is not None and "py-spy dump" in res.fix


def test_live_rank_stuck_outside_the_engine_holds_up_the_others() -> None:
    now = T0 + timedelta(seconds=200)
    recs = [
        beat(0, 199, "backward", 150, coll="all_reduce"),
        beat(1, 199, "outside", 150, step=9),
        beat(2, 199, "backward", 151, coll="all_reduce"),
    ]
    res = verdict(recs, "ranks.hang", now=now)
    assert res.status is Status.FAIL
    assert res.summary.startswith(
        "rank 1 has been in code outside the engine (data loading or the script's own) of step 9 "
        "for 50 s"
    )
    assert "rank 0 in backward's all_reduce" in res.summary and "rank 2" in res.summary


def test_hang_rule_passes_moving_ranks_and_finished_runs() -> None:
    now = T0 + timedelta(seconds=100)
    moving = [beat(r, 99.5, "forward", 99.4) for r in range(2)]
    assert verdict(moving, "ranks.hang", now=now).status is Status.PASS
    done = [beat(r, 50, "exited", 50) for r in range(2)]
    assert verdict(done, "ranks.hang", now=now).summary == "all 2 ranks exited normally"
    gone = [beat(r, 50, "forward", 49) for r in range(2)]  # everyone silent: cannot tell
    assert verdict(gone, "ranks.hang", now=now).status is Status.UNKNOWN
    # replayed, judged as of the end of the record: both ranks moved on until then
    replay = verdict(moving, "ranks.hang")
    assert (replay.status, replay.summary) == (Status.PASS, "no rank was hung when the record ends")
    # how a run ended needs no clock: a replay says it as live judging does
    assert verdict(done, "ranks.hang").summary == "all 2 ranks exited normally"
    assert verdict(real_records(), "ranks.hang").summary == "all 2 ranks exited normally"
    assert verdict(real_records(), "ranks.hang", now=now).status is Status.PASS
    killed = [*gone, *[r for r in real_records() if r.KIND == "event"]]  # launcher's exit lines
    assert verdict(killed, "ranks.hang", now=now).summary.startswith("the launcher reported")


def test_find_hang_prefers_the_rank_outside_a_collective() -> None:
    now = pd.Timestamp(T0 + timedelta(seconds=100))
    frame = records_frame(
        "heartbeat",
        [
            beat(0, 99, "step", 10, coll="all_gather"),
            beat(1, 99, "backward", 20, coll="all_reduce"),
        ],
    )
    states = ranks.rank_states(frame, now)
    hang = ranks.find_hang(states, silent_limit_s=15, stuck_limit_s=30)
    assert hang is not None and not hang.silent
    assert [s.rank for s in hang.culprits] == [0, 1]  # both in collectives, same step: both named
    assert ranks.find_hang(states, silent_limit_s=15, stuck_limit_s=100) is None


def test_a_step_not_yet_reported_by_every_rank_is_left_out() -> None:
    recs = [step_rec(r, s, 100, 10) for r in range(3) for s in range(1, 5)]
    recs.append(step_rec(0, 5, 100, 10))  # live: step 5 has arrived from rank 0 only so far
    recs.append(step_rec(1, 5, 100, 90))
    strag = ranks.stragglers(ranks.step_stats(records_frame("rank_step", recs)))
    assert list(strag["step"]) == [1, 2, 3, 4]
    assert set(strag["ranks"]) == {3}
