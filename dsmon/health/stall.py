"""Whether the run stopped making steps while it is still there: live, and after the fact.

A hung collective leaves a log that stops while the GPUs, the probe's heartbeats and the
collector are still alive; the job is killed only when the collective times out. Live, a
stall is no new step for longer than the steps' pace allows while other data still arrives.
After the fact (a saved run, an imported one) the same is asked as of the end of the record:
no step for that long before the last record of another kind, so the check of a folder finds
the stall a live look would have shown.
"""

from __future__ import annotations

import pandas as pd

from dsmon.health import measures as m
from dsmon.health import probe_measures as pm
from dsmon.health import thresholds as th
from dsmon.health.collective_timeout import left_text
from dsmon.health.ending import ending
from dsmon.health.gather import GPU_SUMMARY
from dsmon.health.inputs import NEWEST_TS, TIMER_TIMES, HealthInputs, evaluated, step_view
from dsmon.health.model import Evidence, Finding, Status

_STEP_KINDS = ("timer", "step", "throughput", "iteration")
#: Step data: the probe's per-rank steps (``dsmon run``) too, whose times are their own where
#: a timer line printed without one carries the last stamped line's.
STEP_TIME_KINDS = (*_STEP_KINDS, "rank_step")
#: Kinds that report every step, so the median step time says how long the next may take.
_EVERY_STEP_KINDS = ("timer", "rank_step")
#: What shows that the job and its collector are still there: a rank's heartbeat too.
ALIVE_KINDS = (*STEP_TIME_KINDS, "heartbeat", "gpu", "event", "loss_scale", "comm_op")
#: After the fact: what shows the job was still there after its last step (the launcher's and
#: dsmon run's closing lines say only that it ended).
_ALIVE_AFTER = tuple(k for k in ALIVE_KINDS if k != "event")
_UNTIMED = (
    "the step data are timer lines without a time of their own (DeepSpeed's default log "
    "level): a stall shows on the live dashboard, which sees when they arrive"
)


def last_ts(inputs: HealthInputs, kinds: tuple[str, ...]) -> pd.Timestamp | None:
    """Newest timestamp among the given kinds' frames (or the caller's :data:`NEWEST_TS`)."""
    newest = inputs.frames.get(NEWEST_TS)
    stamps: list[pd.Timestamp]
    if newest is not None:
        stamps = [newest["ts"][k] for k in kinds if k in newest.index]
    else:
        stamps = [t for k in kinds if (t := pm.newest_ts(inputs, k)) is not None]
    if "gpu" in kinds and "last_ts" in inputs.frame(GPU_SUMMARY).columns:
        stamps.append(inputs.frame(GPU_SUMMARY)["last_ts"].max())
    stamps = [t for t in stamps if pd.notna(t)]
    return max(stamps) if stamps else None


def judge_stall(inputs: HealthInputs) -> Finding:
    """The stall rule's verdict, once per evaluation (the run's state asks it too)."""
    return evaluated(inputs, "stall", lambda: _judge(inputs))


def _judge(inputs: HealthInputs) -> Finding:
    end = ending(inputs)
    live = inputs.now is not None and not end.ended
    last_step = last_ts(inputs, STEP_TIME_KINDS)
    if last_step is None:
        return _finished(inputs) or Finding(Status.UNKNOWN, "no timestamped step data yet")
    if NEWEST_TS not in inputs.frames and _only_untimed_steps(inputs):
        return _finished(inputs) or Finding(Status.UNKNOWN, _UNTIMED)
    wait_s, how = _expected_wait_s(inputs)
    if wait_s is None:
        return _finished(inputs) or Finding(Status.UNKNOWN, how)
    limit = max(th.STALL_MIN_S, th.STALL_FACTOR * wait_s)
    newest = last_ts(inputs, ALIVE_KINDS if live else _ALIVE_AFTER)
    if not live and end.ended and end.at is not None and newest is not None:
        newest = min(newest, end.at)  # a collector's GPU samples after the job's end
    now = pd.Timestamp(inputs.now) if live and inputs.now is not None else newest
    if now is None:
        return _finished(inputs) or Finding(Status.UNKNOWN, "no data after the last step")
    age = max((now - last_step).total_seconds(), 0.0)  # rows that arrived after ``now``
    alive_age = max((now - newest).total_seconds(), 0.0) if newest is not None else age
    ago = "ago" if live else "before the record ends"
    ev = (
        Evidence("last step data", str(last_step), f"{age:.0f} s {ago}"),
        Evidence(
            "stall limit",
            f"{limit:.0f} s",
            f"max({th.STALL_MIN_S:g} s, {th.STALL_FACTOR:g} x {how})",
        ),
        Evidence("newest record of any kind", str(newest), f"{alive_age:.0f} s {ago}"),
    )
    if age <= limit:
        if done := _finished(inputs):
            return done
        if not live:
            return Finding(
                Status.PASS, f"steps went on until the record ends (limit {limit:.0f} s)", ev
            )
        return Finding(Status.PASS, f"last step {age:.0f} s ago (limit {limit:.0f} s)", ev)
    if alive_age > limit:
        return _finished(inputs) or Finding(
            Status.UNKNOWN,
            f"no data of any kind for {alive_age:.0f} s: the run ended or its collector is down",
            ev,
        )
    if not live:
        return Finding(
            Status.FAIL,
            f"no step for {age:.0f} s while data still arrived, before the record ends: the "
            "run was stalled" + (" when it ended" if end.ended else ""),
            ev,
            "find the rank that held it up: dsmon run's per-rank heartbeats name it "
            "(ranks.hang); py-spy dump --pid <trainer pid> on each node while it hangs",
            "text",
        )
    return Finding(
        Status.FAIL,
        f"no step for {age:.0f} s while data still arrives: the run is stalled "
        f"({left_text(inputs, age)})",
        ev,
        "py-spy dump --pid <trainer pid>  # on each node: find the rank that hangs",
        "text",
    )


def _finished(inputs: HealthInputs) -> Finding | None:
    """PASS with how the run ended, when it did; None while it has not."""
    if ended := pm.ended_ranks(inputs):  # each rank's own end says more than the launcher
        return Finding(Status.PASS, f"{pm.ended_text(ended)}: run finished")
    if m.job_finished(inputs):  # needs no clock: a replay says it too, as ``dsmon check`` does
        return Finding(Status.PASS, "the launcher reported the workers' exit: run finished")
    if ending(inputs).ended:
        return Finding(Status.PASS, f"{ending(inputs).witness}: run finished")
    return None


def _only_untimed_steps(inputs: HealthInputs) -> bool:
    """The run's only step data are timer lines, and they carry no time of their own.

    DeepSpeed prints them with print(): each takes the time of the last logger line, and at
    its default log level no ``step=`` or throughput line (which have theirs) comes between,
    so their newest time may be the job's start. Only their arrival tells that steps go on:
    the dashboard and the server's health watcher see it (``NEWEST_TS``); one reading of a
    store (``dsmon check --store``) does not, and must not call a running job stalled. Lines
    a launcher or log shipper stamped (one time per step) keep the judgement.
    """
    timed = (k for k in STEP_TIME_KINDS if k != "timer")
    if any(pm.newest_ts(inputs, k) is not None for k in timed):
        return False
    timer = step_view(inputs, TIMER_TIMES, _times)
    ts = timer["ts"]
    steps_at_newest = timer.loc[ts == ts.max(), "step"].nunique(dropna=False)
    return bool(steps_at_newest > 1 or ts.nunique() < 2)


def _times(timer: pd.DataFrame) -> pd.DataFrame:
    """The timer rows' ``ts`` and ``step`` (:data:`TIMER_TIMES`)."""
    return timer[["ts", "step"]]


def _expected_wait_s(inputs: HealthInputs) -> tuple[float | None, str]:
    """How long the next step data may take to come, and what says so; None: nothing does.

    Timer lines and the probe report every step: the median step time. Without them, step
    data come every ``steps_per_print`` steps (step=, throughput lines) or every log interval
    (Megatron's, the Hugging Face Trainer's): such a wait is no stall. The lines' own times
    say how far apart they come, or their step gap times the step time; a Trainer's dicts
    carry neither, so a stall cannot be told from the wait for the next dict.
    """
    series = m.step_times(inputs)
    med_s = m.median(series.frame["value"]) / 1000.0 if series and series.unit == "ms" else 0.0
    med_s = med_s if med_s == med_s else 0.0
    if any(inputs.has_rows(k) for k in _EVERY_STEP_KINDS):
        return med_s, "median step"
    stride, gap_s = _sparse_prints(inputs)
    waits = [w for w in (gap_s, stride * med_s) if w > 0]
    if waits:
        return max(waits), f"the {max(waits):.0f} s between step lines ({stride:g} steps)"
    return None, (
        f"step lines come every {stride:g} step(s) and say neither when they were printed "
        "nor how long a step takes: a stall cannot be told from the wait for the next one "
        "(wall_clock_breakdown, or dsmon run's per-rank probe, times every step)"
    )


def _sparse_prints(inputs: HealthInputs) -> tuple[float, float]:
    """Steps between two step lines, and seconds between them (0 where unknown), medians."""
    strides, gaps = [], []
    for kind in ("step", "throughput", "iteration"):
        f = inputs.frame(kind)
        if f.empty or not {"step", "ts"} <= set(f.columns):
            continue
        rows = f.dropna(subset=["step"])
        newest = (
            pd.to_datetime(rows["ts"], errors="coerce").groupby(rows["step"]).max().sort_index()
        )
        steps = newest.index.to_series().diff().dropna()
        secs = newest.diff().dt.total_seconds().dropna()
        strides += [float(steps.median())] if len(steps) else []
        gaps += [float(secs[secs > 0].median())] if (secs > 0).any() else []
    return (min(strides) if strides else 1.0), (min(gaps) if gaps else 0.0)
