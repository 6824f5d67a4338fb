"""Runtime rules on the run as a whole: its state, did a worker crash, has it stalled?

These are the rules a person watching a run needs first. ``run.state`` says what the run is
doing (:mod:`dsmon.health.run_state`: starting, training, silent, stalled, hung, finished,
crashed, ended); the others hold the details. A crash leaves a traceback, a non-zero exit code
or a rank whose heartbeats just stop; a job killed from outside leaves only a record that
stops; a hung collective leaves a log that stops while the heartbeats, the GPUs and the
collector are still alive, until the collective times out. A saved or imported run is judged
as of the end of its record, as a live look at that moment would have judged it.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from dsmon.health import measures as m
from dsmon.health import probe_measures as pm
from dsmon.health import thresholds as th
from dsmon.health.collective_timeout import DESCRIBED
from dsmon.health.ending import Death, Stop, ending, repeated_root_causes, signal_name
from dsmon.health.inputs import HealthInputs
from dsmon.health.model import Evidence, Finding, Status, Tier
from dsmon.health.registry import rule
from dsmon.health.run_state import (
    crash_fix,
    crash_text,
    has_run,
    judge,
    launcher_prints_exit,
    stop_explains,
)
from dsmon.health.stall import judge_stall
from dsmon.health.verdicts import not_applicable
from dsmon.model.records import FAILURE_EVENTS, LAUNCH_TEXT

_STEP_KINDS = ("timer", "step", "throughput", "iteration")
_NO_ERROR = "no crash, OOM or NCCL error in the log"


@rule(
    "run.state",
    "What the run is doing",
    "The run's state from its own evidence, never from a clock alone: starting, training, "
    "silent for N s (with whether the ranks' heartbeats are alive), stalled or hung, finished "
    "(its exit status, from dsmon run, the launcher or every rank's last heartbeat), crashed "
    "(the rank that died first and how, apart from the ranks that failed because of it), "
    "ended (stopped from outside by a signal the record names, or a saved record that stops "
    "without an exit status: a warning where the launcher or the probe would have recorded "
    "one), unknown. A crash, hang "
    "or stall fails.",
    "runtime",
    page="steps",
    tier=Tier.STATE,
)
def check_state(inputs: HealthInputs) -> Finding:
    """The run's state as a finding (:func:`dsmon.health.run_state.judge`)."""
    if not has_run(inputs):
        return not_applicable("a config checked alone: no run output to state")
    return judge(inputs).finding()


@rule(
    "run.errors",
    "No worker crashed",
    "Worker tracebacks, CUDA out-of-memory, NCCL errors and non-zero exit codes reported by "
    "the launcher (a negative one named as its signal), with the rank that died first and how "
    "named apart from the ranks that failed because a peer was gone; workers the launcher "
    "killed warn. A failure followed by a new launch of the job only warns. A rank dsmon "
    "run's probe saw die on an uncaught exception fails too when the log shows no traceback.",
    "runtime",
    page="steps",
    tier=Tier.STATE,
    follows=("run.state",),  # its details: shown under the state they make
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
    end = ending(inputs)
    bad, failed = _failures(ev_frame, exits, end.stop)
    if bad.empty and failed.empty:
        return _probe_failure(inputs) or _clean_end(inputs, ev_frame, exits)
    if end.stop is not None and stop_explains(end):
        return _stopped(end.stop, _killed(exits), len(bad) + len(failed))
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
    end = ending(inputs)
    first = end.first
    if first is None:
        return Finding(Status.FAIL, summary, ev, _failure_fix(bad), "text")
    deaths = tuple(
        Evidence(d.who() + (_first(d) if i == 0 else ""), d.how, d.source)
        for i, d in enumerate(end.deaths[:3])
    )
    return Finding(
        Status.FAIL, f"{crash_text(end, first)}; {summary}", deaths + ev, crash_fix(first), "text"
    )


def _first(death: Death) -> str:
    """``" died first"``, or ``" stopped first"`` for a rank known only by its silence."""
    return " stopped first" if death.silent else " died first"


def _failures(
    events: pd.DataFrame, exits: pd.DataFrame, stop: Stop | None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The error events (traceback, OOM, NCCL error) and, of ``exits``, the non-zero ones.

    A worker's death by the signal that stopped the whole job (``return code = -2`` after
    Ctrl-C) is the stop, not a failure.
    """
    bad = events[events["name"].isin(FAILURE_EVENTS)]
    stopped = stop.exit_code() if stop is not None else None
    details = [d if isinstance(d, Mapping) else {} for d in exits["detail"]]
    failed = [
        d.get("return_code") not in (None, 0, stopped) and not repeat
        for d, repeat in zip(details, repeated_root_causes(details), strict=True)
    ]
    # a boolean Series, not a list: an empty list would select no columns, not no rows
    return bad, exits[pd.Series(failed, index=exits.index, dtype=bool)]


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
    return f"{code} ({signal_name(code).partition('(')[2].rstrip(')') or 'signal'})"


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


def _killed(exits: pd.DataFrame) -> int:
    """How many workers the launcher killed (it does so when one fails or when it is stopped)."""
    details = exits["detail"].tolist() if "detail" in exits.columns else []
    return sum(1 for d in details if isinstance(d, Mapping) and d.get("killed"))


def _stopped(stop: Stop, killed: int, victims: int) -> Finding:
    """The job was stopped from outside by a signal; ``victims``: errors that followed from it.

    A rank the launcher killed first leaves its peers failing on the closed connection a
    moment before their own ``KeyboardInterrupt``: those errors are the stop's, not a crash.
    """
    workers = f" and stopped its {killed} worker(s)" if killed else ""
    after = (
        f"; {victims} error(s) only say a peer was gone as the workers were stopped"
        if victims
        else ""
    )
    return Finding(
        Status.WARN,
        f"{stop.who} got {stop.signal}{workers}: the job was stopped from outside "
        f"({stop.why()}), no worker failed{after}",
        (Evidence("signal", stop.signal, stop.source),),
        "nothing failed in the job: if nobody meant to stop it, the scheduler's record "
        "says who did (a SIGTERM is most often its cancel or time limit)",
        "text",
        explains=False,
    )


def _clean_end(inputs: HealthInputs, events: pd.DataFrame, exits: pd.DataFrame) -> Finding:
    """No error lines: pass, unless the launcher killed workers or a finished log stops short.

    A job killed from outside (SIGKILL, node loss, the scheduler's time limit) leaves no
    traceback: the log just ends. The launcher prints one exit line per worker when they end,
    so a replayed launcher log without them did not end normally. Live, it is still running.
    """
    killed = _killed(exits)
    end = ending(inputs)
    if (stop := end.stop) is not None:
        return _stopped(stop, killed, 0)
    if killed:
        return Finding(
            Status.WARN,
            f"the launcher killed {killed} worker(s): it does so when a worker fails or "
            "when it is stopped itself (Ctrl-C, the scheduler); no line says which",
            (Evidence("Killing subprocess", killed, "deepspeed launcher log"),),
            "look for the first worker's exit code or traceback before these lines (an exit "
            "code of -9 with no traceback is most often the host's out-of-memory killer)",
            "text",
            explains=False,
        )
    if end.ended and end.code not in (None, 0) and not end.deaths:
        code = end.code if end.code is not None else 0
        how = signal_name(code) if code < 0 else f"status {code}"
        return Finding(
            Status.WARN,
            f"the job ended with {how} and no worker reported an error ({end.witness}): it "
            "was stopped or killed from outside, or failed before DeepSpeed started",
            (Evidence("exit status", _exit_code(code), end.witness),),
            "check the scheduler's job record and the nodes' kernel logs (OOM killer)",
            "text",
            explains=False,
        )
    if (
        inputs.now is None
        and launcher_prints_exit(inputs, events)
        and exits.empty
        and not end.ended
    ):
        steps = inputs.frame("step")
        last = f"; last step line: step {int(steps['step'].max())}" if not steps.empty else ""
        return Finding(
            Status.WARN,
            "the log ends without the launcher's exit lines: the job was "
            f"killed (SIGKILL, time limit, node loss) or the log is incomplete{last}",
            (Evidence("launcher exit lines", "none", "deepspeed launcher log"),),
            "check the scheduler's job record and the nodes' kernel logs (OOM killer)",
            "text",
            explains=False,
        )
    return Finding(Status.PASS, _NO_ERROR)


def _rank(value: object) -> str:
    """A rank for display (``?`` when unknown)."""
    return "?" if value is None or pd.isna(value) else str(int(value))  # type: ignore[call-overload]


@rule(
    "run.stalled",
    "The run is still making steps",
    f"No new step for max({th.STALL_MIN_S:g} s, {th.STALL_FACTOR:g} x the median step "
    "time, or x the time between step lines when only every steps_per_print-th step prints "
    "one) while data (heartbeats, GPU samples, log lines) still arrives: live against the "
    "clock, after the fact (a saved or imported run) as of the end of its record. Well before "
    f"{DESCRIBED} kills the job. Timer lines alone (DeepSpeed's default log level prints "
    "them without a time) are judged by when they arrive: live, not by one reading of a store.",
    "runtime",
    page="steps",
    tier=Tier.STATE,
    follows=("run.state", "run.errors", "ranks.hang"),
)
def check_stalled(inputs: HealthInputs) -> Finding:
    """Fail when steps stopped while other data (GPU samples, log lines) keeps arriving."""
    return judge_stall(inputs)
