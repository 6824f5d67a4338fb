"""What the run is doing, from evidence: the one answer every surface shows.

A run's state was once a clock: no record for 120 s meant "finished", and a finished log
without the launcher's exit lines meant "killed". A job loading data silently for minutes was
then called killed while its ranks were alive, and a job that had ended was "live" until the
clock ran out. Here the state is read from what the run itself says:

- **finished** / **crashed**: something witnessed the end (``dsmon run``'s exit status, the
  launcher's exit lines, every rank's last heartbeat); a crash names the rank that died first
  and how, apart from the ranks that failed because it did (:mod:`dsmon.health.ending`);
- **hung**: a rank's heartbeat stopped, or a rank is stuck outside a collective, while others
  wait in one (:mod:`dsmon.health.hang`); **stalled**: no step for longer than the steps'
  pace allows while data still arrives (:mod:`dsmon.health.stall`);
- **starting** (no step yet), **training** (steps coming), **silent** (neither steps nor log
  lines for a while: what is known is said, above all whether the ranks' heartbeats are
  alive: a silent job with live heartbeats is never called killed);
- **ended**: a complete record (saved output, an import) that stops without any exit status:
  a warning where something in it would have recorded a normal end (DeepSpeed's launcher's
  exit lines, the probe), so the job was killed or the record cut; where nothing would have
  (torchrun prints no line when it succeeds) it says it cannot tell; **unknown**: nothing tells.

``HealthInputs.now`` is the wall clock for a run delivered live, None for a complete record,
which is judged as of its end: what a live look at that moment would have shown. The rule
``run.state`` states it in the checklist (FAIL for a crash, hang or stall, so the headline puts
it first); the pages' status line, ``dsmon check``, the watcher's alerts and ``/metrics`` read
:func:`judge`.
"""

from __future__ import annotations

import dataclasses
import signal
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

import pandas as pd

from dsmon.analysis.ranks import rank_states
from dsmon.ds_config.schema import Version
from dsmon.health import measures as m
from dsmon.health import probe_measures as pm
from dsmon.health import thresholds as th
from dsmon.health.ending import Death, Ending, ending, signal_name
from dsmon.health.gather import inputs_from_store, paged_timer_views
from dsmon.health.hang import judge_hang
from dsmon.health.inputs import HealthInputs, evaluated
from dsmon.health.model import Evidence, Finding, Status
from dsmon.health.stall import STEP_TIME_KINDS, judge_stall, last_ts
from dsmon.model.records import ENDED_PHASES, LAUNCH_TEXT, STARTING_PHASES
from dsmon.store.store import Store


class State(StrEnum):
    """The states a user can act on."""

    STARTING = "starting"
    TRAINING = "training"
    SILENT = "silent"
    STALLED = "stalled"
    HUNG = "hung"
    FINISHED = "finished"
    CRASHED = "crashed"
    ENDED = "ended"
    UNKNOWN = "unknown"


#: Config rules whose failure makes ``deepspeed.initialize`` refuse the run: a crash before
#: the first step follows from them.
START_REFUSALS = ("schema.optimizer", "schema.scheduler", "schema.hard_checks", "batch.arithmetic")
#: The states in which the run is over.
OVER = frozenset({State.FINISHED, State.CRASHED, State.ENDED})


@dataclass(frozen=True, slots=True)
class RunState:
    """The run's state with what is known: its line, its verdict, its evidence.

    ``live``: the run may still be going (delivered live, no end witnessed), so it is judged
    against the clock; ``cause`` names the rule whose finding holds the details (``ranks.hang``,
    ``run.errors``, ``run.stalled``); ``exit_code`` is the job's status when it ended with one.
    """

    state: State
    detail: str
    status: Status
    live: bool
    evidence: tuple[Evidence, ...] = ()
    cause: str | None = None
    exit_code: int | None = None
    fix: str | None = None
    #: The rules whose problem would explain this state (a crash at start-up: a config the
    #: release refuses), for the checklist's cause links.
    follows: tuple[str, ...] = ()
    #: Whether :meth:`line` names the run's last step already (a line that adds it need not).
    names_last_step: bool = False

    def line(self) -> str:
        """``hung: rank 1 sent no heartbeat for 21 s ...``: how every surface says it."""
        return f"{self.state.value}: {self.detail}"

    def finding(self) -> Finding:
        """The state as the ``run.state`` rule reports it."""
        return Finding(
            self.status,
            self.line(),
            self.evidence,
            self.fix,
            "text" if self.fix else "json",
            follows=self.follows or None,
        )


def judge(inputs: HealthInputs) -> RunState:
    """The run's state from the evidence in ``inputs``, once per evaluation.

    Malformed data (the errors a rule meets as UNKNOWN, ``dsmon.health.registry.run_rule``)
    gives the state ``unknown`` saying why, never an exception on a page or in the watcher.
    """
    try:
        return evaluated(inputs, "state", lambda: _judge(inputs))
    except (TypeError, ValueError, KeyError, ZeroDivisionError, OverflowError) as exc:
        why = f"could not be judged: {type(exc).__name__}: {exc}"
        return RunState(State.UNKNOWN, why, Status.UNKNOWN, inputs.now is not None)


#: Record kinds whose presence means there is a run to state (not a config checked alone).
_RUN_KINDS = ("event", "timer", "step", "throughput", "iteration", "heartbeat", "rank_step")


def has_run(inputs: HealthInputs) -> bool:
    """Whether the inputs hold a run's output (a config checked alone has no state)."""
    return any(inputs.has_rows(kind) for kind in _RUN_KINDS)


def stored_state(store: Store, run: str, now: datetime | None = None) -> RunState:
    """The state of a stored run: against ``now`` if a collector delivered it, else as of its end.

    What ``dsmon import`` and ``dsmon demo`` print as the run's outcome, as ``dsmon check
    --store`` says it.
    """
    info = next((r for r in store.runs() if r.name == run), None)
    live = now if info is not None and info.received_at is not None else None
    # lazily, and never a whole timer frame: the state reads the run's events, heartbeats,
    # step figures and the store's bookkeeping, the timers' breakdown and times page by
    # page. An import of a 500 MB log that loaded every frame for it peaked at 1.2 GB.
    views = paged_timer_views(store, run)
    return judge(inputs_from_store(store, run, now=live, eager=False, views=views))


def _judge(inputs: HealthInputs) -> RunState:
    end = ending(inputs)
    live = inputs.now is not None and not end.ended
    first = end.first
    if first is not None and not (first.peer or first.silent):
        crashed = _crashed(end, first, live)
        if _last_step(inputs) is None:  # died starting: a config it refused explains it
            return dataclasses.replace(crashed, follows=START_REFUSALS)
        return crashed
    hang = judge_hang(inputs)
    if hang.hang is not None:
        ended = f"; the job then ended ({end.witness})" if end.ended else ""
        return RunState(
            State.HUNG,
            hang.finding.summary + ended,
            Status.FAIL,
            live,
            hang.finding.evidence,
            "ranks.hang",
            end.code,
            hang.finding.fix,
        )
    stall = judge_stall(inputs)
    if stall.status is Status.FAIL:
        return RunState(
            State.STALLED, stall.summary, Status.FAIL, live, stall.evidence, "run.stalled",
            end.code, stall.fix,
        )  # fmt: skip
    if first is not None and not stop_explains(end):
        return _crashed(end, first, live)
    if end.ended:
        return _ended(end)
    if not live:
        return _record_over(inputs)
    return _going(inputs)


def stop_explains(end: Ending) -> bool:
    """Whether a signal that stopped the job explains every death: none was a rank's own.

    The launcher kills a rank as it stops the job, and its peers fail on the closed
    connection a moment before their own ``KeyboardInterrupt``: such deaths (a peer gone, a
    rank that said nothing) are the stop's. A rank's own error before it is still a crash.
    """
    return end.stop is not None and all(d.peer or d.silent for d in end.deaths)


def _death_text(d: Death) -> str:
    """``killed by signal 9 (SIGKILL), no traceback, last heard in step 8``, or the error."""
    heard = f", last heard in step {d.step + 1:,}" if d.step is not None else ""
    if d.signal is not None:
        return f"killed by {d.how}, no traceback{heard}"
    if d.silent:
        return f"{d.how}{heard}"
    after = f" (after step {d.step:,})" if d.step else ""
    return f"{d.how}{after}"


def crash_text(end: Ending, first: Death) -> str:
    """The first death and how, then the ranks that failed after it, then the exit status."""
    victims = end.victims()
    if first.peer:  # every error says a peer went away: the rank that stopped said nothing
        names = ", ".join(d.who() for d in end.deaths[:3])
        more = f" and {len(end.deaths) - 3} more" if len(end.deaths) > 3 else ""
        parts = [f"{names}{more} failed waiting for a peer ({first.how}); no rank's own failure "
                 "is in the record"]  # fmt: skip
        if end.ended and end.code not in (None, 0):
            parts.append(f"exit status {end.code}")
        return "; ".join(parts)
    verb = "stopped" if first.silent else "died"
    lead = f"{first.who()} {verb} first" if victims else f"{first.who()} {verb}"
    parts = [f"{lead}: {_death_text(first)}"]
    if victims:
        shown = victims[:3]
        names = ", ".join(v.who() for v in shown)
        if all(v.peer for v in victims):
            parts.append(f"then {names} failed because a peer was gone ({shown[0].how})")
        else:
            parts.append(f"then {names} failed ({shown[0].how})")
    if end.ended and end.code not in (None, 0) and first.signal is None:
        parts.append(f"exit status {end.code}")  # a signal's death says more than its status
    return "; ".join(parts)


def _crashed(end: Ending, first: Death, live: bool) -> RunState:
    """A rank died: the first one and how, then the ranks that failed because of it."""
    ev = tuple(
        Evidence(d.who() + (" (first)" if i == 0 else ""), d.how, d.source)
        for i, d in enumerate(end.deaths[:4])
    )
    if end.witness:
        ev += (Evidence("end", end.witness),)
    return RunState(
        State.CRASHED, crash_text(end, first), Status.FAIL, live and not end.ended, ev,
        "run.errors", end.code, crash_fix(first),
    )  # fmt: skip


def crash_fix(first: Death) -> str:
    """Where to look for the cause of the first death."""
    node = f"{first.who()}'s node" if first.rank is not None else "each node"
    if first.signal == signal.SIGKILL:
        return (
            f"SIGKILL with no traceback is most often the host's out-of-memory killer "
            f"(dmesg -T | grep -i -e oom -e killed  # on {node}) or the scheduler's time or "
            "memory limit; the other ranks' errors only follow from it"
        )
    if first.signal == signal.SIGTERM:
        return (
            f"SIGTERM with no traceback: another process asked {first.who()} to stop, most "
            "often the scheduler (its cancel, time limit or preemption) or the node's agent; "
            f"the scheduler's job record says which (for {node}); the other ranks' errors only "
            "follow from it"
        )
    if first.signal is not None:
        return (
            f"{first.how}: the line before the launcher's names the cause (SIGABRT: a C++ "
            f"abort; SIGSEGV: a crash in native code); look at {node}'s kernel log"
        )
    if first.silent:
        return (
            f"{first.who()} printed no error while the others lost their connection to it: a "
            "signal most often killed it (the host's out-of-memory killer: dmesg -T | grep -i "
            f"-e oom -e killed  # on {node}; the launcher reports only the first failed worker "
            "it finds, so its exit code may be another rank's), or its output is elsewhere"
        )
    if first.peer:
        return (
            "every error says a peer went away: the rank that died first printed nothing "
            "(killed by a signal, or its output is elsewhere); look at each node's kernel log"
        )
    return (
        f"read {first.who()}'s traceback ({first.source}): it failed first; the other ranks' "
        "errors follow from it"
    )


def _ended(end: Ending) -> RunState:
    """The end was witnessed and no rank died."""
    ev = (Evidence("end", end.witness),)
    if end.stop is not None:
        said = f"{end.stop.who} got {end.stop.signal}"
        # the witness says it, or is another (dsmon run's status, every rank's heartbeat)
        said = end.witness if end.witness.startswith(said) else f"{said}; {end.witness}"
        return RunState(
            State.ENDED,
            f"stopped from outside by {end.stop.signal} ({end.stop.why()}), no worker failed "
            f"({said})",
            Status.WARN,
            False,
            (*ev, Evidence("signal", end.stop.signal, end.stop.source)),
            "run.errors",
            end.code,
        )
    if end.code == 0:
        return RunState(State.FINISHED, f"exit status 0 ({end.witness})", Status.PASS, False, ev,
                        exit_code=0)  # fmt: skip
    if end.code is not None and end.code < 0:
        how = f"the launch command was killed by {signal_name(end.code)}"
        return RunState(State.ENDED, f"{how} ({end.witness})", Status.WARN, False, ev, "run.errors",
                        end.code)  # fmt: skip
    if end.code is not None:
        return RunState(State.ENDED, f"exit status {end.code} with no worker error seen "
                        f"({end.witness})", Status.WARN, False, ev, "run.errors", end.code)  # fmt: skip
    return RunState(
        State.ENDED,
        f"the launcher killed its workers with no failure seen: it was stopped from outside "
        f"(Ctrl-C, the scheduler) ({end.witness})",
        Status.WARN,
        False,
        ev,
        "run.errors",
    )


def _last_step(inputs: HealthInputs) -> int | None:
    """The highest step the run's step data name.

    Timers are read from the per-step breakdown, which a live dashboard keeps folded: its
    raw timer rows are never joined for this; the other kinds' highest step is the store's
    bookkeeping's where the caller gives it.
    """
    found = []
    if inputs.has_rows("timer"):
        f = m.all_steps(inputs)
        if "step" in f.columns and f["step"].notna().any():
            found.append(int(f["step"].max()))
    for kind in ("step", "throughput", "iteration"):
        if inputs.has_rows(kind) and (top := pm.newest(inputs, kind, "step")) is not None:
            found.append(int(top))
    stats = pm.rank_stats(inputs)
    if not stats.empty:
        found.append(int(stats["step"].max()))
    return max(found) if found else None


#: The first release whose launcher prints a worker's clean exit (``Process N exits
#: successfully.``, launch.py): before it a job that succeeded left no line of its end.
CLEAN_EXIT_LINE_SINCE: Version = (0, 5, 6)


def _end_expected(inputs: HealthInputs, events: pd.DataFrame) -> str | None:
    """What would have recorded the run's end had it ended on its own, if anything in it would.

    dsmon's probe writes each rank's end, and DeepSpeed's launcher (0.5.6 and later) prints
    each worker's exit: a record holding them that stops without an end was cut short or
    its job killed. torchrun (at its default log level) and a plain ``python`` launch print
    nothing when they succeed, so their silence says nothing.
    """
    if not pm.last_beats(inputs).empty:
        return "dsmon's probe records each rank's end"
    if launcher_prints_exit(inputs, events):
        return "DeepSpeed's launcher prints each worker's exit"
    return None


def launcher_prints_exit(inputs: HealthInputs, events: pd.DataFrame) -> bool:
    """Whether DeepSpeed's launcher ran, at a level and release that print each worker's exit.

    Its ``WORLD INFO DICT`` line says it ran at INFO, the level of its exit lines; before
    0.5.6 it printed no line for a worker that succeeded.
    """
    launch = events[events["name"] == "world_info"] if not events.empty else events
    if launch.empty or not launch["message"].astype(str).str.startswith(LAUNCH_TEXT).any():
        return False
    version = inputs.facts.ds_version
    return version is None or version >= CLEAN_EXIT_LINE_SINCE


def _record_over(inputs: HealthInputs) -> RunState:
    """A complete record that stops with no end witnessed.

    It warns only where something in the record would have witnessed a normal end; without
    such a witness the record cannot tell a finished run from a killed one and says so.
    """
    step = _last_step(inputs)
    events = inputs.frame("event")
    launched = not events.empty and bool(events["name"].isin(("world_info", "job_end")).any())
    beats = pm.last_beats(inputs)
    if not (launched or not beats.empty or step is not None):
        return RunState(State.UNKNOWN, "nothing in the record says how the run went",
                        Status.UNKNOWN, False)  # fmt: skip
    last = f"; last step {step:,}" if step is not None else "; no step was made"
    if expected := _end_expected(inputs, events):
        detail = (
            f"the record ends without an exit status, though {expected}: the job was killed "
            f"(SIGKILL, time limit, node loss) or the record is incomplete{last}"
        )
        status, fix = Status.WARN, None
    else:
        detail = (
            "the record ends with no exit status and no launcher line that would have printed "
            "one (torchrun and a plain python launch print none on success): it cannot tell a "
            f"finished run from a stopped one{last}"
        )
        status = Status.UNKNOWN
        fix = "run the job under dsmon run, or with dsmon's probe, to record how it ends"
    return RunState(
        State.ENDED,
        detail,
        status,
        False,
        (Evidence("exit status", "none", "launcher, dsmon run, the probe's heartbeats"),),
        "run.errors",
        fix=fix,
        names_last_step=True,
    )


def _ranks_text(inputs: HealthInputs, now: pd.Timestamp) -> tuple[str, bool]:
    """What the heartbeats say of the ranks now, and whether any rank's is alive."""
    beats = pm.last_beats(inputs)
    if beats.empty:
        return "no per-rank heartbeats to tell whether the ranks are alive", False
    states = [s for s in rank_states(beats, now) if s.phase not in ENDED_PHASES]
    alive = [s for s in states if s.silent_s <= th.HEARTBEAT_SILENT_S]
    if not alive:
        newest = min((s.silent_s for s in states), default=0.0)
        return f"no heartbeat from any rank for {newest:.0f} s", False
    every = "every rank's" if len(alive) == len(states) else f"{len(alive)} of {len(states)} ranks'"
    phases = sorted({s.where() for s in alive})
    since = max(s.in_phase_s for s in alive)
    where = phases[0] if len(phases) == 1 else "; ".join(phases[:2])
    newest = min(s.silent_s for s in alive)
    return (
        f"{every} heartbeats alive (newest {newest:.0f} s ago), in {where} for {since:.0f} s",
        True,
    )


def _going(inputs: HealthInputs) -> RunState:
    """A run that may still be going: starting, training or silent, and what is known."""
    now = pd.Timestamp(inputs.now if inputs.now is not None else pd.Timestamp.now())
    step = _last_step(inputs)
    last_step = last_ts(inputs, STEP_TIME_KINDS) if step is not None else None
    quiet_kinds = (*STEP_TIME_KINDS, "event", "loss_scale", "comm_op", "memory")
    newest = last_ts(inputs, quiet_kinds)
    quiet_s = (now - newest).total_seconds() if newest is not None else None
    ranks, alive = _ranks_text(inputs, now)
    beats = pm.last_beats(inputs)
    starting = not beats.empty and bool(beats["phase"].isin(STARTING_PHASES).all())
    if step is None or starting:
        if quiet_s is not None and quiet_s <= th.SILENT_AFTER_S and not starting:
            return RunState(State.STARTING, f"no step yet; {ranks}", Status.PASS, True)
        silent = _silence(beats, now, quiet_s)
        if silent <= th.SILENT_AFTER_S:
            return RunState(State.STARTING, f"no step yet; {ranks}", Status.PASS, True)
        return RunState(
            State.SILENT,
            f"no step yet, nothing printed for {silent:.0f} s; {ranks}",
            Status.PASS if alive else Status.UNKNOWN,
            True,
        )
    age = (now - last_step).total_seconds() if last_step is not None else None
    if (
        age is not None
        and age > th.SILENT_AFTER_S
        and quiet_s is not None
        and (quiet_s > th.SILENT_AFTER_S)
    ):
        return RunState(
            State.SILENT,
            f"no step for {age:.0f} s after step {step:,}; {ranks}",
            Status.PASS if alive else Status.UNKNOWN,
            True,
        )
    return RunState(State.TRAINING, f"step {step:,}" + (f"; {ranks}" if alive else ""),
                    Status.PASS, True)  # fmt: skip


def _silence(beats: pd.DataFrame, now: pd.Timestamp, quiet_s: float | None) -> float:
    """Seconds without a step or a printed line: since the ranks began their start-up phase."""
    if not beats.empty and "phase_since" in beats.columns:
        since = pd.to_datetime(beats["phase_since"]).max()
        if pd.notna(since):
            span = (now - since).total_seconds()
            return min(span, quiet_s) if quiet_s is not None else span
    return quiet_s if quiet_s is not None else 0.0
