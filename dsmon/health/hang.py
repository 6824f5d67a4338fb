"""Whether a rank holds the job up, from the probe's heartbeats: live, and after the fact.

Live, each rank's newest heartbeat is seen from now (:func:`dsmon.analysis.ranks.find_hang`).
After the fact (a saved run, an imported one, a replay position), the same question is asked
as of the end of the record: the newest heartbeat of any rank. A rank whose heartbeats stopped
long before another rank's last one (even that rank's ``failed`` one: it waited, then its
collective timed out) stopped or hung while the others waited; that is what a live look at
the end would have shown, so ``dsmon check`` of the folder says it too.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from dsmon.analysis import ranks
from dsmon.health import probe_measures as pm
from dsmon.health import thresholds as th
from dsmon.health.collective_timeout import left_text
from dsmon.health.ending import ending
from dsmon.health.inputs import HealthInputs, evaluated
from dsmon.health.model import Evidence, Finding, Status
from dsmon.health.verdicts import not_applicable
from dsmon.model.records import ENDED_PHASES

NO_PROBE = "no per-rank data: start the job with 'dsmon run -- <launch command>'"


@dataclass(frozen=True, slots=True)
class HangVerdict:
    """The hang rule's finding, and the hang itself when there is one (for the run's state)."""

    finding: Finding
    hang: ranks.Hang | None = None
    live: bool = True


def stuck_limit_s(inputs: HealthInputs) -> float:
    """max(HANG_MIN_S, HANG_STEP_FACTOR x the median step's median rank step time)."""
    med_ms = pm.stragglers(inputs).step_ms.median() if not pm.rank_stats(inputs).empty else 0.0
    med_s = med_ms / 1000.0 if med_ms == med_ms else 0.0
    return max(th.HANG_MIN_S, th.HANG_STEP_FACTOR * med_s)


def _waiting_text(waiting: tuple[ranks.RankState, ...]) -> str:
    shown = [s for s in waiting if s.phase not in ENDED_PHASES][:3]
    if not shown:
        return ""
    parts = [f"rank {s.rank} in {s.where()} for {s.in_phase_s:.0f} s" for s in shown]
    more = f" and {len(waiting) - 3} more" if len(waiting) > 3 else ""
    return "; waiting: " + ", ".join(parts) + more


def _culprit_text(hang: ranks.Hang, live: bool) -> str:
    c = hang.culprits[0]
    names = ", ".join(str(s.rank) for s in hang.culprits)
    who = f"rank {names}" if len(hang.culprits) == 1 else f"ranks {names}"
    if hang.silent:
        when = "" if live else " before the record ends"
        return (
            f"{who} sent no heartbeat for {c.silent_s:.0f} s{when} (stopped or hung), last "
            f"seen in {c.where()}"
        )
    return f"{who} has been in {c.where()} for {c.in_phase_s:.0f} s"


def judge_hang(inputs: HealthInputs) -> HangVerdict:
    """The hang rule's verdict, once per evaluation (the run's state asks it too)."""
    return evaluated(inputs, "hang", lambda: _judge(inputs))


def _judge(inputs: HealthInputs) -> HangVerdict:
    beats = pm.last_beats(inputs)
    if beats.empty:
        return HangVerdict(not_applicable(NO_PROBE))
    live = inputs.now is not None and not _ended(inputs)
    as_of = pd.Timestamp(inputs.now) if live and inputs.now is not None else _newest(beats)
    states = ranks.rank_states(beats, as_of)
    limit = stuck_limit_s(inputs)
    ev = tuple(
        Evidence(f"rank {s.rank}", s.where(), f"heartbeat {s.silent_s:.0f} s ago")
        for s in states[:8]
    )
    ev += (
        Evidence("silent limit", f"{th.HEARTBEAT_SILENT_S:.0f} s"),
        Evidence(
            "stuck limit",
            f"{limit:.0f} s",
            f"max({th.HANG_MIN_S:g} s, {th.HANG_STEP_FACTOR:g} x median step)",
        ),
    )
    if not live:
        ev = (Evidence("judged as of", "the end of the record", str(_newest(beats))), *ev)
    gone = live and _all_silent(states)
    if gone:  # nothing arrives any more: what the last heartbeats showed is all there is
        states = ranks.rank_states(beats, _newest(beats))
    if live and not gone:
        hang = ranks.find_hang(states, th.HEARTBEAT_SILENT_S, limit)
    else:
        hang = _hang_at_the_end(states, limit)
    if hang is None:
        if gone:
            states = ranks.rank_states(beats, as_of)
        return HangVerdict(_no_hang(inputs, states, ev, live), None, live)
    waited = max(s.in_phase_s for s in hang.waiting or hang.culprits)
    summary = _culprit_text(hang, live and not gone) + _waiting_text(hang.waiting)
    if gone:
        quiet = (as_of - _newest(beats)).total_seconds()
        summary += (
            f"; then every rank went silent {quiet:.0f} s ago (the job was killed, or its "
            "collector stopped)"
        )
    elif live:
        summary += f" ({left_text(inputs, waited)})"
    else:
        summary += "; then the record ends"
    finding = Finding(
        Status.FAIL,
        summary,
        ev,
        f"py-spy dump --pid {_pid(beats, hang.culprits[0].rank)}  # on rank "
        f"{hang.culprits[0].rank}'s node: where it is stuck",
        "text",
    )
    return HangVerdict(finding, hang, live)


def _ended(inputs: HealthInputs) -> bool:
    """Every rank's heartbeat, or the launcher, or ``dsmon run``, says the job has ended."""
    return ending(inputs).ended


def _all_silent(states: list[ranks.RankState]) -> bool:
    """No rank that has not ended sent a heartbeat lately (live: the job or collector is gone)."""
    active = [s for s in states if s.phase not in ENDED_PHASES]
    return bool(active) and all(s.silent_s > th.HEARTBEAT_SILENT_S for s in active)


def _newest(beats: pd.DataFrame) -> pd.Timestamp:
    return pd.Timestamp(beats["ts"].max())


def _hang_at_the_end(states: list[ranks.RankState], stuck_limit_s: float) -> ranks.Hang | None:
    """The hang the record's last heartbeats show, seen from the newest of them.

    A rank that ended (exited, or failed when its collective timed out) reported until its
    end: a rank whose heartbeats stopped long before, with no end of its own, is the one the
    others waited for. Else the live ranks are judged as a live look at that moment would.
    """
    limit = th.HEARTBEAT_SILENT_S
    cut = [s for s in states if s.phase not in ENDED_PHASES]
    silent = tuple(s for s in cut if s.silent_s > limit)
    witnesses = tuple(s for s in states if s.silent_s <= limit)
    if silent and witnesses:
        return ranks.Hang(silent, witnesses, True)
    return ranks.find_hang([s for s in cut if s.silent_s <= limit], limit, stuck_limit_s)


def _no_hang(
    inputs: HealthInputs, states: list[ranks.RankState], ev: tuple[Evidence, ...], live: bool
) -> Finding:
    """The verdict when no rank holds the job up: how the run ended, or that all report."""
    if ended := pm.ended_ranks(inputs):
        return Finding(Status.PASS, pm.ended_text(ended))
    if _ended(inputs):
        return Finding(Status.PASS, "the launcher reported the workers' exit: the job ended")
    if not live:
        return Finding(Status.PASS, "no rank was hung when the record ends", ev)
    active = [s for s in states if s.phase not in ENDED_PHASES]
    if active and all(s.silent_s > th.HEARTBEAT_SILENT_S for s in active):
        return Finding(
            Status.UNKNOWN,
            "no heartbeat from any rank lately: the job ended or its collector is down",
            ev,
        )
    return Finding(Status.PASS, f"all {len(states)} ranks report and move on", ev)


def _pid(beats: pd.DataFrame, rank: int) -> str:
    """The process id of a rank from its newest heartbeat (``<pid>`` when unknown)."""
    pids = beats.loc[beats["rank"] == rank, "pid"].dropna()
    return str(int(pids.iloc[-1])) if "pid" in beats.columns and not pids.empty else "<pid>"
