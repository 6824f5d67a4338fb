"""Runtime rules on records parsed from real runs (tests/data/health_corpus and friends).

Values asserted were read from the logs: e.g. fp16_zero2's last step line is
``step=25, skipped=4`` and its last OVERFLOW line ``reducing to 8192``; crash_step17 raises
``RuntimeError: [train.py] deliberate crash at step 17`` on both ranks.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from health_support import (
    DATA,
    LOGGED_RUNS,
    check,
    corpus_config,
    corpus_inputs,
    corpus_records,
    evidence,
)

from dsmon.ds_config.effective import ConfigView
from dsmon.health import Status, evaluate
from dsmon.health import thresholds as th
from dsmon.health.gather import inputs_from_records
from dsmon.health.inputs import NEWEST_TS
from dsmon.health.model import CheckResult
from dsmon.load.files import read_found
from dsmon.load.kinds import discover
from dsmon.model.records import EventRecord, GpuSampleRecord, Record, Source, TimerRecord
from dsmon.parse.base import Diagnostics

W, U = Status.WARN, Status.UNKNOWN


def log_records(path: Path, run: str) -> list[Record]:
    """Records of one log file."""
    (found,) = discover(path)
    return list(read_found(found, run, Diagnostics()))


def gpu_sample(ts: str, name: str = "NVIDIA H100 80GB HBM3", index: int = 0) -> GpuSampleRecord:
    """One NVML sample (the collectors' poller is another issue's: built here)."""
    return GpuSampleRecord(
        src=Source(run="r", node="n1"), ts=ts, gpu_index=index, name=name, util_gpu_pct=90.0
    )


def test_comm_share_pass_on_fp16_zero2() -> None:
    r = check(corpus_inputs("fp16_zero2"), "comm.share")
    assert r.status is Status.PASS
    ev = evidence(r)
    assert ev["exposed comm share p50"] == "15.8% (steps 3-25, slowest rank)"
    assert ev["step total p50"] == "59.70 ms (steps 3-25, slowest rank)"
    assert r.steps == (3, 25)
    assert "exposed communication only" in r.summary


def test_comm_share_warns_on_grad_accum() -> None:
    r = check(corpus_inputs("grad_accum"), "comm.share")
    assert r.status is Status.WARN
    assert r.summary.startswith("communication is 29.1% of a step (> 25%)")
    assert r.page == "communication"


def test_comm_share_unknown_without_timers() -> None:
    r = check(inputs_from_records([], config=corpus_config("comms_logger")), "comm.share")
    assert r.status is Status.UNKNOWN and "wall_clock_breakdown" in r.summary


def test_phase_share_from_timers() -> None:
    # ZeRO-2's all-gather runs after the optimizer step: divided by fwd it read 27 % and
    # warned; against the step it holds it is shown, not judged (comm.share counts it)
    r = check(corpus_inputs("fp16_zero2"), "comm.phase_share")
    assert (r.status, r.summary) == (Status.PASS, "each phase's communication is within 25 %")
    ev = evidence(r)
    assert ev["bwd_allreduce share of bwd"] == (
        "17.8% (rank 0's timers, median over steps, waiting included, steps 3-25)"
    )
    assert ev["optimizer_allgather share of the step"] == (
        "4.1% (ZeRO-1/2 timers, median over steps (in comm.share), steps 3-25, not judged)"
    )
    assert check(corpus_inputs("fp16_zero0"), "comm.phase_share").status is Status.PASS


def test_comms_logger_latencies_that_exceed_wall_time_are_not_used() -> None:
    # z3_overlap_false's table sums to 87 s of collectives in a 2.4 s run (CPU accelerator).
    r = check(corpus_inputs("z3_overlap_false"), "comm.phase_share")
    assert evidence(r)["comms logger"].startswith(
        "ignored (comms-logger latencies (87310 ms) exceed"
    )
    assert r.status is Status.PASS  # bwd_allreduce is 24.5 % of bwd in the timers
    overlap = check(corpus_inputs("z3_overlap_true"), "comm.overlap")
    assert overlap.status is Status.UNKNOWN
    assert overlap.summary == (
        "comms-logger latencies (85593 ms) exceed the timed steps' wall time "
        "(2401 ms): not usable as durations"
    )
    assert check(corpus_inputs("fp16_zero2"), "comm.overlap").summary.startswith("no comms-logger")


def _timer(n: int, **values: float) -> TimerRecord:
    return TimerRecord(
        src=Source(run="r", file="t.log", line=n, rank=0), step=n, group="global", values_ms=values
    )


def _op(step: int, latency: float) -> Record:
    from dsmon.model.records import CommOpRecord

    return CommOpRecord(
        src=Source(run="r", file="t.log", line=1000 + step, rank=0),
        step=step,
        op="all_reduce",
        latency_ms=latency,
        msg_size_bytes=1 << 20,
    )


@pytest.mark.parametrize(
    ("total", "status", "overlap"), [(100.0, Status.PASS, "1.00"), (140.0, Status.WARN, "0.00")]
)
def test_overlap_from_verbose_comm_ops(total: float, status: Status, overlap: str) -> None:
    # compute = fwd + bwd_inner + step = 100 ms, comm 40 ms: a 100 ms step hides it all,
    # a 140 ms step is serial.
    recs: list[Record] = []
    for step in range(3, 9):
        recs.append(
            _timer(
                step,
                fwd=30.0,
                bwd=total - 50.0,
                bwd_inner=50.0,
                bwd_allreduce=total - 100.0,
                step=20.0,
            )
        )
        recs.append(_op(step, 40.0))
    r = check(inputs_from_records(recs), "comm.overlap")
    assert r.status is status
    assert evidence(r)["overlap"] == f"{overlap} (verbose comms-logger lines, per step)"


def test_skipped_steps_fail_warn_pass() -> None:
    r = check(corpus_inputs("fp16_zero2"), "loss_scale.skipped")
    assert (r.status, r.summary.split(":")[0]) == (Status.FAIL, "4 of 25 steps skipped (16.0%)")
    assert evidence(r)["skipped steps"] == "4 (step line at step 25)"
    zero0 = check(corpus_inputs("fp16_zero0"), "loss_scale.skipped")
    assert (zero0.status, zero0.steps) == (Status.WARN, (1, 30))  # skipped=2 at step 30
    assert check(corpus_inputs("z0"), "loss_scale.skipped").status is Status.PASS


def test_scale_collapse() -> None:
    ok = check(corpus_inputs("fp16_zero2"), "loss_scale.collapse")
    assert (ok.status, ok.summary) == (Status.PASS, "loss scale 8192, 13 halvings above the floor")
    old = log_records(DATA / "loss_scale_old_versions" / "issue697_v03.log", "i697")
    cfg = ConfigView({"fp16": {"enabled": True}})
    r = check(inputs_from_records(old, config=cfg), "loss_scale.collapse")
    assert r.status is Status.FAIL
    assert evidence(r)["latest loss scale"].startswith("1 (issue697_v03.log:15")
    exc = log_records(DATA / "loss_scale_old_versions" / "other_lines.log", "ex")
    r = check(inputs_from_records(exc), "loss_scale.collapse")
    assert r.summary == "the loss scale hit its minimum and the run stopped"
    near = [
        dataclasses.replace(rec, new_scale=8.0) if rec.KIND == "loss_scale" else rec
        for rec in corpus_records("fp16_zero2")
    ]
    assert check(inputs_from_records(near), "loss_scale.collapse").status is Status.WARN
    z2 = check(corpus_inputs("z2"), "loss_scale.collapse")
    assert (z2.status, z2.summary) == (
        Status.NOT_APPLICABLE,
        "fp16 is off (bf16/fp32 use no loss scale)",
    )


def test_crash_is_a_failure() -> None:
    r = check(corpus_inputs("crash_step17"), "run.errors")
    assert r.status is Status.FAIL
    assert r.summary == (
        "rank 0 died first: RuntimeError: [train.py] deliberate crash at step 17 (rank 0); then "
        "rank 1 failed (RuntimeError: [train.py] deliberate crash at step 17 (rank 1)); exit "
        "status 1; 2 error event(s), 1 failed worker(s); last step line: step 15"
    )
    ev = evidence(r)
    assert ev["traceback (rank 0)"].startswith(
        "RuntimeError: [train.py] deliberate crash at step 17"
    )
    assert ev["worker exit code"] == "1 (launcher)"
    assert check(corpus_inputs("fp16_zero2"), "run.errors").status is Status.PASS


def test_a_failed_launch_followed_by_a_clean_one_warns() -> None:
    """Two real launches in one log: the run still says a launch failed, but not that it fails."""
    recs = log_records(DATA / "events_relaunch_after_crash" / "train.log", "re")
    r = check(inputs_from_records(recs), "run.errors")
    assert r.status is Status.WARN
    assert r.summary == (
        "an earlier launch failed (2 error event(s), 1 failed worker(s)); the job was launched "
        "again at 2026-12-04 19:35:14 and has reported no error since"
    )
    ev = evidence(r)
    assert ev["traceback (rank 1)"] == (
        "RuntimeError: [train.py] deliberate crash at step 7 (rank 1) (train.log:195)"
    )
    assert ev["launched again"] == "2026-12-04 19:35:14 (WORLD INFO DICT)"
    # the other order: the latest launch failed
    recs = log_records(DATA / "events_crash_after_relaunch" / "train.log", "cr")
    r = check(inputs_from_records(recs), "run.errors")
    assert r.status is Status.FAIL
    assert evidence(r)["traceback (rank 0)"].startswith(
        "RuntimeError: [train.py] deliberate crash at step 4 (rank 0)"
    )


def test_a_torchrun_job_ends_by_its_heartbeats() -> None:
    """torchrun prints no launcher lines: the probe's ``exited`` heartbeats say the run ended."""
    recs: list[Record] = []
    for found in discover(DATA / "probe_torchrun"):
        recs.extend(read_found(found, "tr", Diagnostics()))
    assert not [r for r in recs if r.KIND == "event"]
    errors = check(inputs_from_records(recs), "run.errors")
    assert (errors.status, errors.summary) == (
        Status.PASS,
        "no crash, OOM or NCCL error in the log",
    )
    last = _last_ts(recs) + timedelta(seconds=300)
    for now in (None, last):  # replayed, or live long after the end
        stalled = check(inputs_from_records(recs, now=now), "run.stalled")
        assert stalled.summary == "all 2 ranks exited normally: run finished"
    config_only = [r for r in recs if r.KIND == "config"]
    assert check(inputs_from_records(config_only), "run.errors").status is Status.UNKNOWN


def test_a_hung_rank_stalls_the_run_while_the_others_send_heartbeats() -> None:
    """tests/data/probe_hang: rank 1 frozen after step 37, rank 0 waiting in all_reduce.

    At the default log level the timer lines carry a start-up line's time (22:12:25), and
    the heartbeats were not counted as data arriving: run.stalled said "no data of any kind
    for 129 s: the run ended or its collector is down" while ranks.hang saw rank 0's
    heartbeat of 3 s before."""
    recs: list[Record] = []
    for found in discover(DATA / "probe_hang"):
        recs.extend(read_found(found, "hang", Diagnostics()))
    now = datetime(2026, 12, 4, 22, 15, 48)  # 2 s after rank 0's last heartbeat
    inputs = inputs_from_records(recs, now=now)
    stalled = check(inputs, "run.stalled")
    assert stalled.status is Status.FAIL
    assert stalled.summary.startswith("no step for 163 s while data still arrives")
    # rank 0's step 38 (probe), where the timer lines said 22:12:25.746
    assert evidence(stalled)["last step data"] == "2026-12-04 22:13:05.256000 (163 s ago)"
    assert evidence(stalled)["newest record of any kind"] == (
        "2026-12-04 22:15:45.954000 (2 s ago)"  # rank 0's heartbeat
    )
    hang = check(inputs, "ranks.hang")
    assert hang.status is Status.FAIL
    assert hang.summary.startswith("rank 1 sent no heartbeat for 163 s")
    early = check(inputs_from_records(recs, now=datetime(2026, 12, 4, 22, 13, 20)), "run.stalled")
    assert early.status is Status.PASS  # 15 s after the last step: within the limit


def test_regression_and_spikes() -> None:
    r = check(corpus_inputs("fp16_zero2"), "steps.regression")
    assert (r.status, r.summary) == (
        Status.PASS,
        "recent steps run at 1.14x the earlier steps' median",
    )
    ev = evidence(r)
    assert ev["recent median"] == "63.45 ms (steps 18-25)"
    assert ev["earlier median"].startswith("55.57 ms (steps 3-17, engine timers")
    slow = [
        dataclasses.replace(rec, values_ms={k: v * 2 for k, v in rec.values_ms.items()})
        if isinstance(rec, TimerRecord) and rec.step is not None and rec.step >= 20
        else rec
        for rec in corpus_records("fp16_zero2")
    ]
    r = check(inputs_from_records(slow), "steps.regression")
    assert r.status is Status.FAIL and r.steps == (18, 25)
    assert (
        "(slower than 97% of the earlier steps (one-sided Mann-Whitney p = 0.00017))" in r.summary
    )
    # a CPU run (gloo) is not told to look at GPU throttling; one where NVML saw a GPU is
    assert "GPU" not in r.summary + (r.fix or "") and "data loading" in r.summary
    on_gpu = check(inputs_from_records([*slow, gpu_sample("2025-01-01T00:00:00")]), r.rule_id)
    assert "GPU throttling" in on_gpu.summary and "GPUs page" in (on_gpu.fix or "")
    spikes = check(corpus_inputs("z0"), "steps.spikes")
    assert (spikes.status, spikes.summary) == (Status.WARN, "6 of 28 steps took over 3x the median")
    assert check(corpus_inputs("fp16_zero2"), "steps.spikes").status is Status.PASS


def _scaled(factor_of_step: dict[int, float]) -> list[Record]:
    """fp16_zero2's records with each step's timers multiplied by its factor (default 1)."""
    return [
        dataclasses.replace(
            rec,
            values_ms={k: v * factor_of_step.get(rec.step, 1.0) for k, v in rec.values_ms.items()},
        )
        if isinstance(rec, TimerRecord) and rec.step is not None
        else rec
        for rec in corpus_records("fp16_zero2")
    ]


def test_a_bimodal_run_is_not_a_regression() -> None:
    """Slow steps every other step, and the newest among the fast ones: the recent median is
    2.5x the earlier one, but the recent steps are not generally slower."""
    slow = {s: 2.5 for s in (*range(4, 18, 2), 18, 20, 21, 23, 24)}
    r = check(inputs_from_records(_scaled(slow)), "steps.regression")
    assert r.status is Status.PASS, r.summary
    assert r.summary.startswith("recent steps' median is 2.")
    assert (
        "but they are not generally slower" in r.summary and "noise, not a regression" in r.summary
    )


def test_too_few_samples_are_not_judged() -> None:
    """Three samples a side (a short run, or throughput every steps_per_print) tell nothing."""
    short = [
        rec for rec in corpus_records("fp16_zero2")
        if not isinstance(rec, TimerRecord) or rec.step is None or rec.step <= 16
    ]  # fmt: skip
    r = check(inputs_from_records(short), "steps.regression")
    assert r.status is Status.UNKNOWN
    assert "a slowdown needs at least 8 recent and 8 earlier ones" in r.summary


def test_step_times_fall_back_to_iteration_lines() -> None:
    recs = log_records(DATA / "health_megatron_h100" / "train.log", "mixtral")
    r = check(inputs_from_records(recs), "steps.spikes")
    assert (
        evidence(r)["median step"]
        == "5533.80 ms (steps 43-45, iteration lines (elapsed time per iteration))"
    )


def test_mfu_on_h100_megatron_log() -> None:
    recs = log_records(DATA / "health_megatron_h100" / "train.log", "mixtral")
    recs.append(gpu_sample("2024-04-06T02:59:40"))
    r = check(inputs_from_records(recs), "flops.mfu")
    assert r.status is Status.WARN
    assert r.summary.startswith("MFU 23.9% < 30%")
    ev = evidence(r)
    assert ev["achieved"] == "236.000 TFLOPS per GPU (iteration lines (median))"
    assert ev["peak"].startswith("989.4 TFLOPS (H100 SXM, dense bf16)")
    assert "52 %" in ev["reference"] or "44-52 %" in ev["reference"]


def test_mfu_pass_branch_and_unknowns(monkeypatch: pytest.MonkeyPatch) -> None:
    recs = log_records(DATA / "health_megatron_h100" / "train.log", "mixtral")
    assert check(inputs_from_records(recs), "flops.mfu").status is Status.UNKNOWN  # no GPU model
    monkeypatch.setattr(th, "MFU_WARN", 0.20)
    recs.append(gpu_sample("2024-04-06T02:59:40"))
    assert check(inputs_from_records(recs), "flops.mfu").summary == "MFU 23.9%"
    z0 = check(corpus_inputs("z0"), "flops.mfu")  # flops profile at step 5, on CPU
    assert z0.status is Status.NOT_APPLICABLE
    assert z0.summary == "CPU run (no GPU peak to compare with)"
    assert evidence(z0)["achieved"].endswith("(profiled FLOPs x every step's timers (median))")


def _live(run: str) -> list[Record]:
    """A corpus run as if still running: without the launcher's exit lines."""
    return [
        r
        for r in corpus_records(run)
        if not (isinstance(r, EventRecord) and r.name == "worker_exit")
    ]


def _last_ts(recs: list[Record]) -> datetime:
    return max(pd.Timestamp(r.ts) for r in recs if r.ts).to_pydatetime()


def test_stall_detection_live() -> None:
    recs = _live("sigkill_all")  # killed after step 10: the log just stops
    last = _last_ts(recs)
    fresh = check(inputs_from_records(recs, now=last + timedelta(seconds=10)), "run.stalled")
    assert fresh.status is Status.PASS
    silent = check(inputs_from_records(recs, now=last + timedelta(seconds=120)), "run.stalled")
    assert silent.status is Status.UNKNOWN  # nothing arrives at all: ended or collector down
    alive = [*recs, gpu_sample((last + timedelta(seconds=115)).isoformat(timespec="milliseconds"))]
    stalled = check(inputs_from_records(alive, now=last + timedelta(seconds=120)), "run.stalled")
    assert stalled.status is Status.FAIL
    assert stalled.summary.startswith("no step for 120 s while data still arrives")
    assert evidence(stalled)["stall limit"] == "30 s (max(30 s, 5 x median step))"
    done = check(inputs_from_records(list(corpus_records("fp16_zero2")), now=last), "run.stalled")
    assert done.summary == "the launcher reported the workers' exit: run finished"
    # replayed, the log is judged as of its end: steps went on until the job was killed
    replay = check(corpus_inputs("sigkill_all"), "run.stalled")
    assert (replay.status, replay.summary) == (
        Status.PASS,
        "steps went on until the record ends (limit 30 s)",
    )


def test_step_lines_every_steps_per_print_are_no_stall() -> None:
    """tests/data/sparse_step_lines: steps of 4 s, steps_per_print 10, no timer lines: the
    step= lines come about 40 s apart. With GPU samples arriving (the collector's NVML), the
    30 s floor judged the wait for the next step= line a stall."""
    recs = [r for r in log_records(DATA / "sparse_step_lines" / "train.log", "s") if not (
        isinstance(r, EventRecord) and r.name == "worker_exit"
    )]  # fmt: skip
    last = _last_ts(recs)

    def at(wait_s: float) -> CheckResult:
        now = last + timedelta(seconds=wait_s)
        gpu = gpu_sample((now - timedelta(seconds=1)).isoformat(timespec="milliseconds"))
        return check(inputs_from_records([*recs, gpu], now=now), "run.stalled")

    waiting = at(60)
    assert waiting.status is Status.PASS, waiting.summary
    limit = evidence(waiting)["stall limit"]
    assert limit.startswith("202 s (max(30 s, 5 x the 40 s between step lines (10 steps)))")
    assert at(250).status is Status.FAIL


def test_dicts_without_times_do_not_say_a_run_stalled() -> None:
    """tests/data/hf_trainer_tqdm: the Trainer's dicts every 5 steps, all with the time of a
    start-up line, no timer lines: how long the next one may take is unknown."""
    recs = log_records(DATA / "hf_trainer_tqdm" / "train.log", "hf")
    recs = [r for r in recs if not (isinstance(r, EventRecord) and r.name == "worker_exit")]
    now = _last_ts(recs) + timedelta(seconds=120)
    gpu = gpu_sample((now - timedelta(seconds=1)).isoformat(timespec="milliseconds"))
    stalled = check(inputs_from_records([*recs, gpu], now=now), "run.stalled")
    assert stalled.status is Status.UNKNOWN
    assert stalled.summary.startswith("step lines come every 5 step(s) and say neither")


# The full checklist of every corpus run judged on its log (health_support.LOGGED_RUNS), judged as
# ``dsmon check RUN_FOLDER`` judges it; rules not listed pass. run.stalled passes where the
# launcher's exit lines say the run finished, and where steps went on until the record ends.
# run.state fails on a crash and warns on a record that ends without an exit status.
# comm.overlap is unknown everywhere: no comms logger, or (z3_overlap_*) latencies the CPU
# accelerator reports longer than the whole run. flops.mfu and zero.overlap_comm do not apply:
# these are CPU runs (no GPU peak; the CPU accelerator has no streams to overlap on).
_O, _S, _PH = "comm.overlap", "run.stalled", "comm.phase_share"
_R = "steps.regression"
F = Status.FAIL
RUN_VERDICTS: dict[str, dict[str, Status]] = {
    "fp16_zero2": {_O: U, "loss_scale.skipped": F},
    "fp16_zero0": {"fp16.loss_scaler": W, _O: U, "loss_scale.skipped": W},
    "z3_overlap_false": {_O: U},
    "z3_overlap_true": {_PH: W, _O: U},
    "crash_step17": {_PH: W, _O: U, "run.errors": F, "run.state": F, _R: U},
    "grad_accum": {"comm.share": W, _PH: W, _O: U, _R: U},
    "z0": {_PH: W, _O: U, "steps.spikes": W},
    "sigkill_all": {_PH: W, _O: U, "run.errors": W, "run.state": W, _R: U},
}


def test_the_table_covers_every_logged_corpus_run() -> None:
    assert set(RUN_VERDICTS) == LOGGED_RUNS


@pytest.mark.parametrize("run", sorted(RUN_VERDICTS))
def test_corpus_run_verdicts(run: str) -> None:
    got = {
        r.rule_id: r.status
        for r in evaluate(corpus_inputs(run)).results
        if r.status not in (Status.PASS, Status.NOT_APPLICABLE)
    }
    assert got == RUN_VERDICTS[run]


def test_killed_job_is_flagged_in_replay_only() -> None:
    r = check(corpus_inputs("sigkill_all"), "run.errors")
    assert r.summary == (
        "the log ends without the launcher's exit lines: the job was killed "
        "(SIGKILL, time limit, node loss) or the log is incomplete; last step "
        "line: step 10"
    )
    live = inputs_from_records(list(corpus_records("sigkill_all")), now=datetime(2026, 11, 29, 15))
    assert check(live, "run.errors").status is Status.PASS


def test_timer_lines_without_times_of_their_own_do_not_say_a_run_stalled() -> None:
    """tests/data/z0_default_loglevel: DeepSpeed's default log level, so the timer lines are
    the only step data, all with the time of a start-up warning. Read once from a store
    (``dsmon check --store`` of a live GPU job: samples keep arriving), their age said FAIL;
    the dashboard, which sees the lines arrive (``NEWEST_TS``), still judges."""
    recs = [r for r in log_records(DATA / "z0_default_loglevel" / "train.log", "z0") if not (
        isinstance(r, EventRecord) and r.name == "worker_exit"
    )]  # fmt: skip
    assert {r.KIND for r in recs} >= {"timer"} and not {"step", "throughput"} & {
        r.KIND for r in recs
    }
    now = _last_ts(recs) + timedelta(seconds=120)
    gpu = gpu_sample((now - timedelta(seconds=1)).isoformat(timespec="milliseconds"))
    once = check(inputs_from_records([*recs, gpu], now=now), "run.stalled")
    assert once.status is Status.UNKNOWN
    assert once.summary.startswith("the step data are timer lines without a time of their own")
    inputs = inputs_from_records([*recs, gpu], now=now)
    arrived = pd.DataFrame({"ts": pd.Series({"timer": pd.Timestamp(now) - timedelta(seconds=2)})})
    live = check(dataclasses.replace(inputs, frames={**inputs.frames, NEWEST_TS: arrived}), _S)
    assert live.status is Status.PASS, live.summary
    late = pd.DataFrame({"ts": pd.Series({"timer": pd.Timestamp(now) - timedelta(seconds=100)})})
    hung = check(dataclasses.replace(inputs, frames={**inputs.frames, NEWEST_TS: late}), _S)
    assert hung.status is Status.FAIL, hung.summary
