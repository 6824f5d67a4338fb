"""How a job ended, and which rank died first and how: crash triage from every witness.

When one rank of a data-parallel job dies, the others fail a moment later in their next
collective ("Connection closed by peer", a watchdog timeout), and the launcher then kills the
rest. The first traceback in the log is often such a victim's, and a rank killed by a signal
(the host's OOM killer: SIGKILL) prints none at all. So the witnesses are read together:

- DeepSpeed's launcher: ``exits with return code = N`` (the first worker it found dead; the
  command it prints is its last worker's, whichever died, so its ``--local_rank`` names no
  one), ``Process N exits successfully``, ``Killing subprocess N``;
- ``dsmon run``'s last line: the launch command's exit status (``job_end``);
- the workers' tracebacks, OOM and NCCL errors, each with its rank;
- the probe's last heartbeat of each rank: ``exited``, ``failed`` on an uncaught exception
  (with its time), or a heartbeat that just stops: no exit handler ran, so a signal killed it.

A rank whose error says its peer went away is a victim (:data:`PEER_LOST`); the first rank to
die that is not one is the cause. :func:`ending` says whether the job ended, with what status,
and the deaths in the order they happened.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from dsmon.health import probe_measures as pm
from dsmon.health.inputs import HealthInputs, evaluated
from dsmon.model.records import (
    ENDED_PHASES,
    FAILURE_EVENTS,
    LAUNCH_TEXT,
    UNSTAMPED,
)

#: What a rank's error says when it failed because another rank died or stopped: gloo's and
#: NCCL's words for a peer that went away, and the timeouts of a collective a peer never joined.
PEER_LOST = re.compile(
    r"Connection closed by peer|Connection reset by peer|remote worker|Broken pipe"
    r"|ncclRemoteError|remote process exited|communicator was aborted"
    r"|Watchdog caught collective operation timeout|Timed out waiting|Socket Timeout"
    r"|DistNetworkError|pair closure|recvBytes|Connection refused",
    re.IGNORECASE,
)
#: Of those, the words that say the peer's process is gone (its end of the connection closed),
#: not that a collective timed out: a rank that hangs keeps its connections open.
PEER_GONE = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|remote process exited",
    re.IGNORECASE,
)
#: The exception torchrun's agent raises when a worker failed: its report, not a worker's death.
TORCHRUN_FAILED = "ChildFailedError"
#: The error Python's SIGINT raises (Ctrl-C reaches every process of the job): a rank that
#: was stopped, not one that failed, whether its traceback or the probe's heartbeat says it.
INTERRUPTED = "KeyboardInterrupt"
#: How each launcher that says which signal stopped it is named in a verdict.
_LAUNCHERS = {"deepspeed": "DeepSpeed's launcher", "torchrun": "torchrun"}
#: Characters of an error message kept in a summary.
_SHORT = 120


def signal_name(code: int) -> str:
    """``-9`` -> ``signal 9 (SIGKILL)``: what a negative exit status means."""
    try:
        return f"signal {-code} ({signal.Signals(-code).name})"
    except ValueError:
        return f"signal {-code}"


#: The source location torch's C++ errors start with (``[/__w/pytorch/.../pair.cc:553] ``):
#: a build machine's path, which would fill a short summary before the error's words.
_CPP_WHERE = re.compile(r"\[/[^\]\s]*\.(?:cc|cpp|h|hpp|cu):\d+\] ")


def short(text: str, limit: int = _SHORT) -> str:
    """``text`` on one line without a C++ source location, cut to ``limit`` characters."""
    one = _CPP_WHERE.sub("", " ".join(str(text).split()))
    return one if len(one) <= limit else one[: limit - 3] + "..."


@dataclass(frozen=True, slots=True)
class Death:
    """One rank's end, as the witnesses tell it.

    ``rank`` is None when no witness says which rank; ``how`` is ``signal 9 (SIGKILL)``,
    ``exit code 1`` or the exception (``RuntimeError: ...``); ``at`` is when it died, or its
    last sign of life before (a rank killed by a signal says nothing as it dies); ``peer``:
    its error says it failed because a peer went away; ``signal``: the number of the signal
    that killed it, as the launcher's negative exit code names it (None: no signal did);
    ``silent``: no witness tells how, only that it was gone when the others failed (they lost
    their connection to it, it printed nothing); ``source`` names the witnesses.
    """

    rank: int | None
    how: str
    at: pd.Timestamp | None
    source: str
    peer: bool = False
    signal: int | None = None
    silent: bool = False
    step: int | None = None
    local_rank: int | None = None

    def who(self) -> str:
        """``rank 1``; ``local rank 1`` when only torchrun's agent named it; else ``a worker``."""
        if self.rank is not None:
            return f"rank {self.rank}"
        return "a worker" if self.local_rank is None else f"local rank {self.local_rank}"


@dataclass(frozen=True, slots=True)
class Stop:
    """The signal that stopped the job from outside, and who said it got it.

    ``signal`` is its name (``SIGINT``); ``who`` is a launcher (``torchrun``) or a rank whose
    Python raised ``KeyboardInterrupt``; ``source`` is the line that says so.
    """

    signal: str
    who: str
    source: str

    def exit_code(self) -> int | None:
        """The exit status a process killed by this signal has (``-2`` for SIGINT)."""
        number = getattr(signal.Signals, self.signal, None)
        return -number.value if number is not None else None

    def why(self) -> str:
        """What most often sends that signal, for the user to check."""
        if self.signal == "SIGINT":
            return "Ctrl-C"
        if self.signal == "SIGTERM":
            return "the scheduler's cancel or time limit, a pod's termination"
        return "sent by another process"


@dataclass(frozen=True, slots=True)
class Ending:
    """Whether the job ended, how, and its ranks' deaths in order (the cause first).

    ``code``: the job's exit status (``dsmon run``'s, else the launcher's failing worker's,
    else 0 when every worker exited successfully); None when unknown. ``witness`` says what
    told the end. ``killed``: the launcher killed its workers (it does so when one fails and
    when it is stopped itself).
    """

    ended: bool
    code: int | None = None
    witness: str = ""
    at: pd.Timestamp | None = None
    deaths: tuple[Death, ...] = ()
    killed: int = 0
    stop: Stop | None = None

    @property
    def first(self) -> Death | None:
        """The rank that died first and not because a peer did (else the first victim)."""
        return self.deaths[0] if self.deaths else None

    @property
    def failed(self) -> bool:
        """A rank died, or the job ended with a non-zero status."""
        return bool(self.deaths) or (self.code is not None and self.code != 0)

    def victims(self) -> tuple[Death, ...]:
        """The deaths after the first (most often because of it)."""
        return self.deaths[1:]


def latest_launch(events: pd.DataFrame) -> pd.DataFrame:
    """The events of the job's latest launch (a job started again after a crash writes on).

    DeepSpeed's launcher prints ``WORLD INFO DICT`` once per node as a launch starts; one that
    comes after the previous launch's end (an exit line, a failure) starts a new launch, and
    the events before it belong to an earlier one. Compared by time, as one node's lines may
    arrive after another's. Events without a time are kept.
    """
    if events.empty or "name" not in events.columns:
        return events
    ts = pd.to_datetime(events["ts"])
    ends = ts[events["name"].isin((*FAILURE_EVENTS, "worker_exit", "job_end", "signalled"))]
    ends = ends.dropna()
    if ends.empty:
        return events
    launch = (events["name"] == "world_info") & events["message"].astype(str).str.startswith(
        LAUNCH_TEXT
    )
    later = ts[launch & (ts > ends.min())].dropna()
    if later.empty:
        return events
    after_end = later[[bool((ends < t).any()) for t in later]]
    start = after_end.max()
    return events[ts.isna() | (ts >= start)]


def _detail(row: pd.Series) -> Mapping[str, object]:
    d = row.get("detail")
    return d if isinstance(d, Mapping) else {}


def _rank(value: object) -> int | None:
    return None if value is None or pd.isna(value) else int(value)  # type: ignore[call-overload]


def _event_deaths(events: pd.DataFrame) -> dict[int | None, Death]:
    """Each rank's first failure the log shows (tracebacks, OOM, NCCL errors), by rank."""
    out: dict[int | None, Death] = {}
    bad = events[events["name"].isin(FAILURE_EVENTS)] if not events.empty else events
    for _, row in bad.iterrows():
        rank = _rank(row.get("rank"))
        if rank in out or _is_torchrun_report(row):
            continue
        d = _detail(row)
        at = None if d.get(UNSTAMPED) else _ts(row.get("ts"))
        where = f"{row.get('file')}:{row.get('line')}"
        message = str(row.get("message") or row["name"])
        out[rank] = Death(
            rank, short(message), at, f"{row['name']} ({where})", bool(PEER_LOST.search(message))
        )
    return out


def _is_torchrun_report(row: pd.Series) -> bool:
    """Torchrun's own traceback as it ends the job after a worker failed (``ChildFailedError``)."""
    if row["name"] != "traceback":
        return False
    return str(_detail(row).get("exception") or "").endswith(TORCHRUN_FAILED)


def stopped_by(inputs: HealthInputs, events: pd.DataFrame) -> Stop | None:
    """The signal that stopped the job from outside, where the record says so.

    A launcher's own line (DeepSpeed's ``Main process received SIGINT``, torchrun's ``Received
    2 death signal``) is taken first; else a rank that says it got SIGINT: its
    ``KeyboardInterrupt`` traceback, or the probe's last heartbeat naming it.
    """
    rows = events[events["name"] == "signalled"] if not events.empty else events
    found: Stop | None = None
    for _, row in rows.iterrows():
        d = _detail(row)
        where = f"{row.get('file')}:{row.get('line')}"
        launcher = d.get("launcher")
        if isinstance(launcher, str):
            return Stop(str(d.get("signal")), _LAUNCHERS.get(launcher, launcher), where)
        rank = _rank(row.get("rank"))
        who = f"rank {rank}" if rank is not None else "the launch command"
        found = found or Stop(str(d.get("signal")), who, f"{INTERRUPTED} ({where})")
    if found is None:
        beats = _probe_ranks(inputs)
        errors = beats["error"] if "error" in beats.columns else pd.Series(dtype=str)
        hit = beats[errors.astype(str).str.startswith(INTERRUPTED)]
        if not hit.empty:
            rank = _rank(hit.iloc[0]["rank"])
            found = Stop("SIGINT", f"rank {rank}", f"{INTERRUPTED} (the probe's last heartbeat)")
    return found


def _ts(value: object) -> pd.Timestamp | None:
    if value is None:
        return None
    try:
        stamp = pd.Timestamp(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if pd.isna(stamp) else stamp


def _probe_ranks(inputs: HealthInputs) -> pd.DataFrame:
    """Each rank's newest heartbeat (rank, ts, phase, error, step), empty without the probe."""
    beats = pm.last_beats(inputs)
    if beats.empty or "phase" not in beats.columns:
        return pd.DataFrame(columns=["rank", "ts", "phase", "error", "step"])
    return beats


def _launcher(events: pd.DataFrame) -> tuple[list[int], int, int, pd.Timestamp | None]:
    """The launcher's exit codes, workers that exited successfully, workers killed, last time."""
    exits = events[events["name"] == "worker_exit"] if not events.empty else events
    codes: list[int] = []
    ok = killed = 0
    details = [_detail(row) for _, row in exits.iterrows()]
    for d, repeat in zip(details, repeated_root_causes(details), strict=True):
        if repeat:
            continue
        code = d.get("return_code")
        if d.get("killed"):
            killed += 1
        elif isinstance(code, int) and code == 0:
            ok += 1
        elif isinstance(code, int):
            codes.append(code)
    last = _ts(exits["ts"].max()) if not exits.empty else None
    return codes, ok, killed, last


def repeated_root_causes(details: Sequence[Mapping[str, object]]) -> list[bool]:
    """Per ``worker_exit`` detail: whether it repeats a worker already counted.

    torchrun's failure report names its root cause after the agent's own ``failed (exitcode:
    N)`` line named the same worker (the same pid): it is counted once. A report pasted alone
    is no repeat.
    """
    agent = {
        d.get("pid")
        for d in details
        if d.get("launcher") == "torchrun" and not d.get("killed") and not d.get("root_cause")
    }
    return [bool(d.get("root_cause")) and d.get("pid") in agent for d in details]


def _torchrun_exit(events: pd.DataFrame) -> Mapping[str, object]:
    """What torchrun said of the first failed worker; empty if it said nothing.

    Its agent's ``failed (exitcode: -9) local_rank: 1 (pid: N)`` names the worker's own local
    rank (unlike the command line DeepSpeed's launcher prints); the root cause of its failure
    report (``rank : 1 (local_rank: 1)``) adds its global rank and host, and is taken first.
    """
    exits = events[events["name"] == "worker_exit"] if not events.empty else events
    agent: Mapping[str, object] = {}
    for _, row in exits.iterrows():
        d = _detail(row)
        if d.get("launcher") != "torchrun" or d.get("return_code") in (None, 0):
            continue
        if not d.get("root_cause"):
            agent = agent or d
        elif not agent or d.get("pid") == agent.get("pid"):
            return d  # the same worker (a job restarted with --max-restarts reports its last)
    return agent


def _exit_witness(code: int, torchrun: Mapping[str, object]) -> str:
    """Who reported the exit code: ``the launcher: return code = -9``, or torchrun."""
    if torchrun.get("root_cause") and torchrun.get("return_code") == code:
        return (
            f"torchrun's root cause: exitcode {code} of rank {torchrun.get('rank')} "
            f"(local_rank {torchrun.get('local_rank')}) on {torchrun.get('host')}"
        )
    if torchrun:
        return f"torchrun: exitcode {code} of local_rank {torchrun.get('local_rank')}"
    return f"the launcher: return code = {code}"


def _torchrun_report(events: pd.DataFrame) -> pd.Timestamp | None:
    """When torchrun reported a failed worker and ended the job (its time, or the epoch)."""
    if events.empty:
        return None
    rows = [row for _, row in events.iterrows() if _is_torchrun_report(row)]
    if not rows:
        return None
    return _ts(rows[-1].get("ts")) or pd.Timestamp(0)


def _job_end(events: pd.DataFrame) -> tuple[int | None, pd.Timestamp | None]:
    """``dsmon run``'s exit status of the launch command, and when it was written."""
    ends = events[events["name"] == "job_end"] if not events.empty else events
    if ends.empty:
        return None, None
    row = ends.iloc[-1]
    code = _detail(row).get("return_code")
    return (code if isinstance(code, int) else None), _ts(row.get("ts"))


def ending(inputs: HealthInputs) -> Ending:
    """How the job ended, once per evaluation: ended or not, its status, who died first."""
    return evaluated(inputs, "ending", lambda: _ending(inputs))


def _ending(inputs: HealthInputs) -> Ending:
    events = latest_launch(inputs.frame("event"))
    codes, ok, killed, launcher_at = _launcher(events)
    run_code, run_at = _job_end(events)
    beats = _probe_ranks(inputs)
    agent_exit = _torchrun_exit(events)
    stop = stopped_by(inputs, events)
    deaths = _deaths(inputs, events, beats, _not_the_stop(codes, stop), agent_exit)
    all_ended = not beats.empty and bool(beats["phase"].isin(ENDED_PHASES).all())
    code: int | None = None
    at: pd.Timestamp | None = None
    if run_code is not None:
        code, at = run_code, run_at
        witness = f"dsmon run: the job ended with status {run_code}"
    elif codes or ok or killed:
        code = codes[0] if codes else (0 if ok and not killed else None)
        if codes:
            witness = _exit_witness(codes[0], agent_exit)
        elif stop is not None:
            witness = f"{stop.who} got {stop.signal} and stopped {killed} worker(s)"
        else:
            what = f"{ok} worker(s) exited successfully" if ok else f"killed {killed} worker(s)"
            witness = f"the launcher: {what}"
        at = launcher_at
    elif torchrun := _torchrun_report(events):
        code, at, witness = 1, torchrun, "torchrun: a worker failed (ChildFailedError)"
    elif all_ended:
        code = None if beats["phase"].eq("failed").any() else 0
        at = _ts(beats["ts"].max())
        witness = f"every rank's last heartbeat ({len(beats)} ranks)"
    elif stop is not None:  # no launcher line: a plain python launch that got Ctrl-C
        witness = f"{stop.who} got {stop.signal}"
    else:
        return Ending(False, deaths=deaths, killed=killed)
    return Ending(True, code, witness, at, deaths, killed, stop)


def _not_the_stop(codes: list[int], stop: Stop | None) -> list[int]:
    """The launcher's exit codes, less a worker's death by the very signal that stopped the job.

    Python dies of SIGINT after its ``KeyboardInterrupt``: a launcher that polls such a worker
    before its own handler runs reports ``return code = -2``, which is the stop, not a crash.
    """
    if stop is None:
        return codes
    return [c for c in codes if c != stop.exit_code()]


def _deaths(
    inputs: HealthInputs,
    events: pd.DataFrame,
    beats: pd.DataFrame,
    codes: list[int],
    torchrun: Mapping[str, object],
) -> tuple[Death, ...]:
    """Every rank's death the witnesses show, the cause first, then the victims in time order."""
    by_rank = _event_deaths(events)
    for _, b in beats[beats["phase"] == "failed"].iterrows():
        rank = _rank(b["rank"])
        error = str(b.get("error") or "an uncaught exception")
        if error.startswith(INTERRUPTED):
            continue  # stopped by Ctrl-C (stopped_by), not failed
        seen = by_rank.get(rank)
        by_rank[rank] = Death(
            rank,
            seen.how if seen is not None else short(error),
            _ts(b["ts"]),
            (seen.source + ", " if seen is not None else "") + "the probe's last heartbeat",
            bool(PEER_LOST.search(error)) or (seen is not None and seen.peer),
            step=_step_before(b.get("step")),
        )
    signalled = [c for c in codes if c < 0]
    local = _rank(torchrun.get("local_rank")) if torchrun else None
    named = _rank(torchrun.get("rank")) if torchrun else None  # its root cause's global rank
    if signalled:
        rank, at, step, how_known = _killed_rank(inputs, beats, by_rank)
        if named is not None and rank != named:  # torchrun said which: no inference needed
            rank, at, step, how_known = named, None, None, ""
        elif rank is None and local is not None and inputs.facts.nodes == 1:
            rank, how_known = local, "; one node: its local rank is its rank"
        if rank is None or rank not in by_rank:
            by_rank[rank] = Death(
                rank,
                signal_name(signalled[0]),
                at,
                _exit_witness(signalled[0], torchrun) + how_known,
                signal=-signalled[0],
                step=step,
                local_rank=local if rank is None else None,
            )
    elif by_rank and all(d.peer and PEER_GONE.search(d.how) for d in by_rank.values()):
        _add_silent_rank(inputs, beats, by_rank)
    elif codes and not by_rank:
        by_rank[named] = Death(
            named,
            f"exit code {codes[0]}",
            None,
            _exit_witness(codes[0], torchrun),
            local_rank=local if named is None else None,
        )
    never = pd.Timestamp.max
    return tuple(
        sorted(by_rank.values(), key=lambda d: (d.peer, d.at if d.at is not None else never))
    )


def _add_silent_rank(
    inputs: HealthInputs, beats: pd.DataFrame, by_rank: dict[int | None, Death]
) -> None:
    """The rank the others lost their connection to, when it printed nothing itself.

    DeepSpeed's launcher reports only the first failed worker it polls, so when a rank is
    killed and its peers fail a moment later on the closed connection, the exit code it
    prints is often a victim's (1), not the killed rank's (-9): the rank that went away is
    then known only as the one that printed no error (or whose heartbeats just stop).
    """
    rank, at, step, how_known = _killed_rank(inputs, beats, by_rank)
    if rank is None or rank in by_rank:
        return
    lost = ", ".join(d.who() for d in by_rank.values())
    by_rank[rank] = Death(
        rank,
        "no error of its own in the record",
        at,
        f"{lost}: connection to a peer closed{how_known}",
        silent=True,
        step=step,
    )


def _step_before(step: object) -> int | None:
    """The last step a rank finished, from the step its heartbeat was working on."""
    s = _rank(step)
    return s - 1 if s is not None and s > 1 else None


def _killed_rank(
    inputs: HealthInputs, beats: pd.DataFrame, by_rank: Mapping[int | None, Death]
) -> tuple[int | None, pd.Timestamp | None, int | None, str]:
    """The rank a signal killed: the one whose heartbeats just stop, or the one without error.

    A rank killed by a signal runs no exit handler, so its last heartbeat names no end; with
    the probe absent, a job whose other ranks all printed an error leaves one rank to blame.
    """
    if not beats.empty:
        cut = beats[~beats["phase"].isin(ENDED_PHASES)]
        if len(cut) == 1:
            row = cut.iloc[0]
            return (
                _rank(row["rank"]),
                _ts(row["ts"]),
                _step_before(row.get("step")),
                "; its heartbeats stop with no exit or traceback",
            )
    world = inputs.facts.world_size
    known = {r for r in by_rank if r is not None}
    if world and len(known) == world - 1:
        (rank,) = set(range(world)) - known
        return rank, None, None, f"; the only one of {world} ranks that printed no error"
    return None, None, None, ""
