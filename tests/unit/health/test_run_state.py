"""The run's state from evidence, never from a clock alone (dsmon.health.run_state).

Built from records, since these are about the decision on given evidence and clock; the real
jobs are in test_verdict_scenarios.py (after the fact) and tests/system/test_verdicts_live.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from dsmon.health import evaluate
from dsmon.health.gather import inputs_from_records
from dsmon.health.live import run_is_live
from dsmon.health.model import Status
from dsmon.health.run_state import RunState, State, judge
from dsmon.model.records import EventRecord, HeartbeatRecord, Record, Source
from dsmon.store.records.runs import RunInfo

T0 = datetime(2026, 12, 6, 12, 0, 0)


def ts(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat(timespec="milliseconds")


def beat(rank: int, at: float, phase: str, since: float, step: int = 1) -> HeartbeatRecord:
    src = Source(run="r", file=f"rank-{rank}.jsonl", line=int(at * 10), rank=rank)
    return HeartbeatRecord(src=src, ts=ts(at), step=step, phase=phase, phase_since=ts(since))


def event(at: float, name: str, message: str, line: int, **detail: object) -> EventRecord:
    src = Source(run="r", file="train.log", line=line)
    return EventRecord(src=src, ts=ts(at), name=name, message=message, detail=detail)


LAUNCH = event(0, "world_info", "WORLD INFO DICT: {'localhost': [0, 1]}", 1)


def state(recs: list[Record], now: float | None) -> RunState:
    when = None if now is None else T0 + timedelta(seconds=now)
    return judge(inputs_from_records(recs, run="r", now=when))


def test_a_job_building_its_engine_is_starting() -> None:
    recs: list[Record] = [LAUNCH, beat(0, 4, "init", 3), beat(1, 4.5, "init", 3)]
    got = state(recs, 6)
    assert (got.state, got.status, got.live) == (State.STARTING, Status.PASS, True)
    assert "every rank's heartbeats alive" in got.detail
    assert "deepspeed.initialize (the engine being built)" in got.detail


def test_a_silent_start_with_live_heartbeats_is_silent_never_killed() -> None:
    """Four minutes of loading after initialize: nothing printed, the heartbeats go on."""
    recs: list[Record] = [LAUNCH, *(beat(r, 238 + r, "idle", 5) for r in range(2))]
    got = state(recs, 240)
    assert (got.state, got.status) == (State.SILENT, Status.PASS)
    assert got.detail.startswith("no step yet, nothing printed for 235 s; every rank's heart")
    assert "the script's own code before step 1 (the engine is built) for 235 s" in got.detail
    checked = inputs_from_records(recs, run="r", now=T0 + timedelta(seconds=240))
    found = {r.rule_id: r for r in evaluate(checked).results}
    assert found["ranks.hang"].status is Status.PASS  # both busy in their own code: no hang
    assert found["run.errors"].status is Status.PASS  # not "killed"


def test_silence_without_heartbeats_says_it_cannot_tell() -> None:
    """A job followed live with no probe, quiet for 200 s: silent, not killed, not finished."""
    recs: list[Record] = [LAUNCH, event(5, "dist_backend", "Initialize gloo backend", 2)]
    got = state(recs, 205)
    assert (got.state, got.status) == (State.SILENT, Status.UNKNOWN)
    assert "no per-rank heartbeats to tell whether the ranks are alive" in got.detail
    # the same record read after the fact is complete: it ends with no exit status
    after = state(recs, None)
    assert (after.state, after.status, after.live) == (State.ENDED, Status.WARN, False)
    assert after.detail.startswith("the record ends without an exit status")


def test_the_end_is_what_the_launcher_or_dsmon_run_said() -> None:
    ok = [LAUNCH, event(60, "job_end", "dsmon run: the job ended with status 0", 9, return_code=0)]
    for now in (None, 61, 10_000):  # after the fact, a moment later, or days later
        got = state(ok, now)
        assert got.line() == "finished: exit status 0 (dsmon run: the job ended with status 0)"
        assert not got.live
    killed = [LAUNCH, event(60, "job_end", "...", 9, return_code=-9)]
    got = state(killed, 61)
    assert (got.state, got.status) == (State.ENDED, Status.WARN)
    assert got.detail.startswith("the launch command was killed by signal 9 (SIGKILL)")


def test_every_rank_exited_by_its_heartbeats() -> None:
    recs: list[Record] = [beat(r, 30 + r, "exited", 30 + r, step=11) for r in range(2)]
    got = state(recs, 500)
    assert got.line() == "finished: exit status 0 (every rank's last heartbeat (2 ranks))"


def test_a_run_never_delivered_live_is_never_live() -> None:
    """Imported a minute ago, its lines stamped a minute ago: still not live."""
    now = datetime.now()
    stamp = (now - timedelta(minutes=1)).isoformat(timespec="milliseconds")
    imported = RunInfo("r", stamp, stamp, 10, (), (0,), 5, received_at=None)
    delivered = RunInfo("r", stamp, stamp, 10, (), (0,), 5, received_at=now.isoformat())
    assert not run_is_live(imported, now)
    assert run_is_live(delivered, now)
