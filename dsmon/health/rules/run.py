"""Runtime rules on the run as a whole: did a worker crash, was it killed, has it stalled?

These are the rules a person watching a run needs first. A crash leaves a traceback or a
non-zero exit code; a job killed from outside leaves only a log that stops; a hung collective
leaves a log that stops while the GPUs (and the collector) are still alive, and NCCL kills it
only after 600 s. Each rule says which of these it sees, and the stall rule is judged live only.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping

import pandas as pd

from dsmon.health import measures as m
from dsmon.health import probe_measures as pm
from dsmon.health import thresholds as th
from dsmon.health.gather import GPU_SUMMARY
from dsmon.health.inputs import NEWEST_TS, HealthInputs
from dsmon.health.model import Evidence, Finding, Status, Tier
from dsmon.health.registry import rule
from dsmon.model.records import LAUNCH_TEXT

_STEP_KINDS = ("timer", "step", "throughput", "iteration")
#: Step data for run.stalled: the probe's per-rank steps (``dsmon run``) too, whose times are
#: their own where a timer line printed without one carries the last stamped line's.
_STEP_TIME_KINDS = (*_STEP_KINDS, "rank_step")
#: Kinds that report every step, so the median step time says how long the next may take.
_EVERY_STEP_KINDS = ("timer", "rank_step")
#: What shows that the job and its collector are still there: a rank's heartbeat too.
_ALIVE_KINDS = (*_STEP_TIME_KINDS, "heartbeat", "gpu", "event", "loss_scale", "comm_op")
_NO_ERROR = "no crash, OOM or NCCL error in the log"
_UNTIMED = (
    "the step data are timer lines without a time of their own (DeepSpeed's default log "
    "level): a stall shows on the live dashboard, which sees when they arrive"
)


@rule(
    "run.errors",
    "No worker crashed",
    "Worker tracebacks, CUDA out-of-memory, NCCL errors and non-zero exit codes reported by "
    "the launcher (a negative one named as its signal); workers the launcher killed warn. A "
    "failure followed by a new launch of the job only warns. A rank dsmon run's probe saw die "
    "on an uncaught exception fails too when the log shows no traceback.",
    "runtime",
    page="steps",
    tier=Tier.STATE,
)
def check_errors(inputs: HealthInputs) -> Finding:
    """Fail on any crash event; pass when the log shows none."""
    ev_frame = inputs.frame("event")
    if ev_frame.empty:  # a log without launcher lines (torchrun) still shows no error
        if probe_failed := _probe_failure(inputs):
            return probe_failed
        if any(inputs.has_rows(k) for k in _STEP_KINDS):
            return Finding(Status.PASS, _NO_ERROR)
        return Finding(
            Status.UNKNOWN, "no launcher, error or step lines to check (or a config checked alone)"
        )
    exits = ev_frame[ev_frame["name"] == "worker_exit"]
    bad, failed = _failures(ev_frame, exits)
    if bad.empty and failed.empty:
        return _probe_failure(inputs) or _clean_end(inputs, ev_frame, exits)
    ev = _failure_evidence(bad, failed)
    summary = f"{len(bad)} error event(s), {len(failed)} failed worker(s)"
    relaunch = _relaunch_after(ev_frame, pd.concat([bad["ts"], failed["ts"]]))
    if relaunch is not None:
        return Finding(
            Status.WARN,
            f"an earlier launch failed ({summary}); the job was launched again at "
            f"{relaunch:%Y-%m-%d %H:%M:%S} and has reported no error since",
            (*ev, Evidence("launched again", f"{relaunch:%Y-%m-%d %H:%M:%S}", LAUNCH_TEXT)),
            "read the earlier traceback above: if the new launch fixed its cause, nothing to do",
            "text",
        )
    steps = inputs.frame("step")
    last = int(steps["step"].max()) if not steps.empty else None
    if last is not None:
        summary += f"; last step line: step {last}"
    if "trainer_summary" in m.trainer_formats(inputs):  # printed once training has ended
        summary += "; training itself had ended (Trainer printed its end-of-training summary)"
    return Finding(
        Status.FAIL,
        summary,
        ev,
        _failure_fix(bad),
        "text",
    )


def _failures(events: pd.DataFrame, exits: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The error events (traceback, OOM, NCCL error) and, of ``exits``, the non-zero ones."""
    bad = events[events["name"].isin(("traceback", "oom", "nccl_error"))]
    codes = [d.get("return_code") if isinstance(d, Mapping) else None for d in exits["detail"]]
    # a boolean Series, not a list: an empty list would select no columns, not no rows
    return bad, exits[pd.Series([c not in (None, 0) for c in codes], index=exits.index, dtype=bool)]


def _failure_evidence(bad: pd.DataFrame, failed: pd.DataFrame) -> tuple[Evidence, ...]:
    """The first three error events with their file and line, and three exit codes."""
    ev = tuple(
        Evidence(
            f"{r['name']} (rank {_rank(r['rank'])})",
            str(r["message"])[:160],
            f"{r['file']}:{r['line']}",
        )
        for _, r in bad.head(3).iterrows()
    )
    codes = [d.get("return_code") for d in failed["detail"].head(3)]
    return ev + tuple(Evidence("worker exit code", _exit_code(c), "launcher") for c in codes)


def _exit_code(code: object) -> object:
    """A negative code as the signal it stands for: ``-9 (SIGKILL)``, as the launcher means it."""
    if not isinstance(code, int) or code >= 0:
        return code
    try:
        return f"{code} ({signal.Signals(-code).name})"
    except ValueError:
        return code


def _failure_fix(bad: pd.DataFrame) -> str:
    """Where to look: the first traceback, or, without one, what the signal usually means."""
    if not bad.empty:
        return "read the first traceback above; it names the rank that failed first"
    return (
        "no traceback: a worker was killed by a signal or exited on its own. SIGKILL (-9) is "
        "most often the host's out-of-memory killer (see `dmesg`) or the scheduler; SIGABRT "
        "(-6) a C++ abort, whose message is the line before the launcher's"
    )


def _probe_failure(inputs: HealthInputs) -> Finding | None:
    """Ranks the probe saw die on an uncaught exception, when the log shows no error line.

    A worker's traceback goes to its own stderr, which is not always the log dsmon follows
    (a launcher writing each rank's output to a file of its own, a script logging to a file).
    """
    failed = pm.failed_ranks(inputs)
    if not failed:
        return None
    first = failed[0]
    return Finding(
        Status.FAIL,
        f"rank {first.rank} died first, on an uncaught exception "
        f"({first.error or 'unknown error'}); the log followed shows no traceback",
        tuple(
            Evidence(f"rank {s.rank}", s.where(), "dsmon run's probe, last heartbeat")
            for s in failed
        ),
        "the traceback is in the rank's own output (stderr): look there for its cause",
        "text",
    )


def _relaunch_after(events: pd.DataFrame, failure_ts: pd.Series) -> pd.Timestamp | None:
    """When the job was launched again after its last failure, if it was.

    A job relaunched after a crash (a fixed config, a Kubernetes Job's retry) often writes to
    the same log or run: the launcher prints ``WORLD INFO DICT`` on each node at each launch.
    Compared by time, not by arrival order: one node's collector may deliver its launch
    lines after another node's crash. A failure without a time cannot be placed: None.
    """
    if failure_ts.empty or failure_ts.isna().any():
        return None
    launches = events[
        (events["name"] == "world_info") & events["message"].astype(str).str.startswith(LAUNCH_TEXT)
    ]["ts"].dropna()
    later = launches[launches > failure_ts.max()]
    return None if later.empty else pd.Timestamp(later.min())


def _clean_end(inputs: HealthInputs, events: pd.DataFrame, exits: pd.DataFrame) -> Finding:
    """No error lines: pass, unless the launcher killed workers or a finished log stops short.

    A job killed from outside (SIGKILL, node loss, the scheduler's time limit) leaves no
    traceback: the log just ends. The launcher prints one exit line per worker when they end,
    so a replayed launcher log without them did not end normally. Live, it is still running.
    """
    details = exits["detail"].tolist() if "detail" in exits.columns else []
    killed = [d for d in details if isinstance(d, Mapping) and d.get("killed")]
    if killed:
        return Finding(
            Status.WARN,
            f"the launcher killed {len(killed)} worker(s): it does so when a worker fails or "
            "when it is stopped itself (Ctrl-C, the scheduler); no line says which",
            (Evidence("Killing subprocess", len(killed), "deepspeed launcher log"),),
            "look for the first worker's exit code or traceback before these lines (an exit "
            "code of -9 with no traceback is most often the host's out-of-memory killer)",
            "text",
        )
    launched = bool((events["name"] == "world_info").any())
    if inputs.now is None and launched and exits.empty:
        steps = inputs.frame("step")
        last = f"; last step line: step {int(steps['step'].max())}" if not steps.empty else ""
        return Finding(
            Status.WARN,
            "the log ends without the launcher's exit lines: the job was "
            f"killed (SIGKILL, time limit, node loss) or the log is incomplete{last}",
            (Evidence("launcher exit lines", "none", "deepspeed launcher log"),),
            "check the scheduler's job record and the nodes' kernel logs (OOM killer)",
            "text",
        )
    return Finding(Status.PASS, _NO_ERROR)


def _rank(value: object) -> str:
    """A rank for display (``?`` when unknown)."""
    return "?" if value is None or pd.isna(value) else str(int(value))  # type: ignore[call-overload]


def _last_ts(inputs: HealthInputs, kinds: tuple[str, ...]) -> pd.Timestamp | None:
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


@rule(
    "run.stalled",
    "The run is still making steps",
    f"Live: no new step for max({th.STALL_MIN_S:g} s, {th.STALL_FACTOR:g} x the median step "
    "time, or x the time between step lines when only every steps_per_print-th step prints "
    "one) while the collector still delivers data, well before NCCL's "
    f"{th.NCCL_TIMEOUT_S:g} s collective timeout kills the job. Timer lines alone (DeepSpeed's "
    "default log level prints them without a time) are judged by when they arrive: live, not "
    "by one reading of a store.",
    "runtime",
    page="steps",
    tier=Tier.STATE,
    follows=("run.errors", "ranks.hang"),
)
def check_stalled(inputs: HealthInputs) -> Finding:
    """Fail when steps stopped while other data (GPU samples, log lines) keeps arriving."""
    if m.job_finished(inputs):  # needs no clock: a replay says it too, as ``dsmon check`` does
        return Finding(Status.PASS, "the launcher reported the workers' exit: run finished")
    if ended := pm.ended_ranks(inputs):
        return Finding(Status.PASS, f"{pm.ended_text(ended)}: run finished")
    if inputs.now is None:
        return Finding(Status.UNKNOWN, "only judged live (replaying a finished log)")
    last_step = _last_ts(inputs, _STEP_TIME_KINDS)
    if last_step is None:
        return Finding(Status.UNKNOWN, "no timestamped step data yet")
    if NEWEST_TS not in inputs.frames and _only_untimed_steps(inputs):
        return Finding(Status.UNKNOWN, _UNTIMED)
    wait_s, how = _expected_wait_s(inputs)
    if wait_s is None:
        return Finding(Status.UNKNOWN, how)
    limit = max(th.STALL_MIN_S, th.STALL_FACTOR * wait_s)
    now = pd.Timestamp(inputs.now)
    age = max((now - last_step).total_seconds(), 0.0)  # rows that arrived after ``now``
    newest = _last_ts(inputs, _ALIVE_KINDS)
    alive_age = max((now - newest).total_seconds(), 0.0) if newest is not None else age
    ev = (
        Evidence("last step data", str(last_step), f"{age:.0f} s ago"),
        Evidence(
            "stall limit",
            f"{limit:.0f} s",
            f"max({th.STALL_MIN_S:g} s, {th.STALL_FACTOR:g} x {how})",
        ),
        Evidence("newest record of any kind", str(newest), f"{alive_age:.0f} s ago"),
    )
    if age <= limit:
        return Finding(Status.PASS, f"last step {age:.0f} s ago (limit {limit:.0f} s)", ev)
    if alive_age > limit:
        return Finding(
            Status.UNKNOWN,
            f"no data of any kind for {alive_age:.0f} s: the run ended or its collector is down",
            ev,
        )
    left = th.NCCL_TIMEOUT_S - age
    return Finding(
        Status.FAIL,
        f"no step for {age:.0f} s while data still arrives: the run is "
        f"stalled (NCCL's default timeout fires in about {max(left, 0):.0f} s)",
        ev,
        "py-spy dump --pid <trainer pid>  # on each node: find the rank that hangs",
        "text",
    )


def _only_untimed_steps(inputs: HealthInputs) -> bool:
    """The run's only step data are timer lines, and they carry no time of their own.

    DeepSpeed prints them with print(): each takes the time of the last logger line, and at
    its default log level no ``step=`` or throughput line (which have theirs) comes between,
    so their newest time may be the job's start. Only their arrival tells that steps go on:
    the dashboard and the server's health watcher see it (``NEWEST_TS``); one reading of a
    store (``dsmon check --store``) does not, and must not call a running job stalled. Lines
    a launcher or log shipper stamped (one time per step) keep the judgement.
    """
    timed = (k for k in _STEP_TIME_KINDS if k != "timer")
    if any(pm.newest_ts(inputs, k) is not None for k in timed):
        return False
    timer = inputs.frame("timer")
    ts = timer["ts"]
    steps_at_newest = timer.loc[ts == ts.max(), "step"].nunique(dropna=False)
    return bool(steps_at_newest > 1 or ts.nunique() < 2)


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
