"""What the rules read of ``dsmon run``'s probe: per-step figures, newest heartbeats, the end.

The probe's records (a ``rank_step`` per rank and step, a heartbeat per rank and second) are
millions in a long 64-rank run, so the rules never read them as they are: they read the
per-step figures (:func:`dsmon.analysis.ranks.step_stats`) and each rank's newest heartbeat
(:func:`dsmon.analysis.ranks.last_beats`), which a store keeps as the records arrive and
hands over as views (``dsmon.health.inputs.RANK_STATS``, ``LAST_BEATS``); from records in
memory they are computed once per evaluation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dsmon.analysis import ranks
from dsmon.analysis.steps import WARMUP_STEPS
from dsmon.analysis.stragglers import StragglerSummary, straggler_summary
from dsmon.health.inputs import (
    KIND_STAMPS,
    LAST_BEATS,
    RANK_PHASES,
    RANK_STATS,
    HealthInputs,
    step_view,
)
from dsmon.model.records import ENDED_PHASES


def rank_stats(inputs: HealthInputs) -> pd.DataFrame:
    """The probe's per-step figures (``dsmon.analysis.ranks.step_stats``), once per evaluation.

    A caller holding a store passes the store's (:data:`RANK_STATS`): computing them here
    reads every rank's every step.
    """
    return step_view(inputs, RANK_STATS, ranks.step_stats, "rank_step")


def rank_phases(inputs: HealthInputs) -> pd.DataFrame:
    """Each rank's mean phase times over the run (``dsmon.analysis.ranks.phase_buckets``).

    A caller holding a store passes the store's roll-ups (:data:`RANK_PHASES`).
    """
    return step_view(inputs, RANK_PHASES, _whole_run_phases, "rank_step")


def _whole_run_phases(frame: pd.DataFrame) -> pd.DataFrame:
    return ranks.phase_buckets(ranks.rank_step_table(frame), ranks.WHOLE_RUN)


def last_beats(inputs: HealthInputs) -> pd.DataFrame:
    """Each rank's newest heartbeat (``dsmon.analysis.ranks.last_beats``), as ``rank_stats``."""
    return step_view(inputs, LAST_BEATS, ranks.last_beats, "heartbeat")


def stragglers(inputs: HealthInputs) -> StragglerSummary:
    """The whole-run straggler figures over the steady steps, once per evaluation.

    From :attr:`HealthInputs.stragglers` when the caller keeps them up to date (a live
    dashboard), else from :func:`rank_stats`.
    """
    if "stragglers" not in inputs.derived:
        given = inputs.stragglers() if inputs.stragglers is not None else None
        inputs.derived["stragglers"] = (
            given if given is not None else straggler_summary(rank_stats(inputs), WARMUP_STEPS)
        )
    found: StragglerSummary = inputs.derived["stragglers"]
    return found


def newest_ts(inputs: HealthInputs, kind: str) -> pd.Timestamp | None:
    """The newest ``ts`` of a kind's rows; the probe's kinds from their summaries."""
    if kind == "rank_step":
        frame = rank_stats(inputs)
    elif kind == "heartbeat":
        frame = last_beats(inputs)
    else:
        found: pd.Timestamp | None = newest(inputs, kind, "ts")
        return found
    if "ts" not in frame.columns or frame.empty:
        return None
    top = frame["ts"].max()
    return top if pd.notna(top) else None


def newest(inputs: HealthInputs, kind: str, column: str) -> Any:
    """The greatest ``ts`` or ``step`` of a kind's rows (not the probe's); None if no row has one.

    From the store's bookkeeping (:data:`KIND_STAMPS`) when the caller gives it, which holds
    the same maximum as the frame without reading a row of it.
    """
    stamps = inputs.frames.get(KIND_STAMPS)
    if stamps is not None:
        top = stamps[column].get(kind) if column in stamps.columns else None
    else:
        frame = inputs.frame(kind)
        top = frame[column].max() if column in frame.columns and not frame.empty else None
    return top if top is not None and pd.notna(top) else None


def probe_progress(inputs: HealthInputs, column: str) -> tuple[float, int] | None:
    """The probe's newest ``skipped_steps`` or ``loss_scale`` and the step it was read at.

    Each rank's engine reports the same counter and scale; the newest step of any rank wins.
    None when the run has no probe lines with the figure (a log-only run, an older probe).
    """
    stats = rank_stats(inputs)  # in step order
    if column not in stats.columns:
        return None
    known = np.flatnonzero(stats[column].notna().to_numpy())
    if not len(known):
        return None
    row = stats.iloc[int(known[-1])]
    return float(row[column]), int(row["step"])


def _last_beats(inputs: HealthInputs) -> list[ranks.RankState]:
    """Every rank's newest heartbeat, once a rank's process has ended (else none to look at).

    Kept per evaluation: run.stalled, ranks.hang and run.errors all ask.
    """
    if "last_beats" not in inputs.derived:
        beats = last_beats(inputs)
        ended = not beats.empty and bool(beats["phase"].isin(ENDED_PHASES).any())
        inputs.derived["last_beats"] = ranks.rank_states(beats, beats["ts"].max()) if ended else []
    states: list[ranks.RankState] = inputs.derived["last_beats"]
    return states


def ended_ranks(inputs: HealthInputs) -> list[ranks.RankState]:
    """Every rank's last heartbeat, when the probe says each rank's process has ended.

    Empty when some rank has not, or without the probe. Under ``torchrun`` the log has no
    launcher lines, and this is how a run tells that it finished; a ``failed`` rank ended on
    an uncaught exception.
    """
    states = _last_beats(inputs)
    return states if states and all(s.phase in ENDED_PHASES for s in states) else []


def failed_ranks(inputs: HealthInputs) -> list[ranks.RankState]:
    """The ranks whose last heartbeat says their process died on an uncaught exception.

    In the order they died: the first is most often the cause, the others fail waiting on it.
    """
    return _in_death_order(_last_beats(inputs))


def _in_death_order(states: list[ranks.RankState]) -> list[ranks.RankState]:
    """The ``failed`` ranks among ``states``, the first to die first."""
    return sorted((s for s in states if s.phase == "failed"), key=lambda s: s.last_seen)


def ended_text(states: list[ranks.RankState]) -> str:
    """How the ranks ended, in words: ``all 2 ranks exited normally`` or who failed on what."""
    failed = _in_death_order(states)
    if not failed:
        return f"all {len(states)} ranks exited normally"
    first = failed[0]  # the first to die: the others often fail because it did
    return (
        f"all {len(states)} ranks ended, {len(failed)} on an uncaught exception, first "
        f"rank {first.rank} ({_short(first.error or 'unknown error')})"
    )


def _short(text: str, limit: int = 100) -> str:
    """``text`` cut to ``limit`` characters, marked when cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
