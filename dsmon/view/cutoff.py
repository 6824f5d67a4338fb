"""Replay positions: the dashboard as a run stood at one of its steps.

Replay is a filter on the frames the dashboard holds (``dsmon.view.cache``; a long run's
timer and step rows are read again from the store first, and held), never a second copy of
the data: a :class:`Cutoff` keeps the rows that existed at the position, and nothing printed
after it (a worker's traceback carries an earlier line's time: see :func:`_printed_after`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from dsmon.model.records import UNSTAMPED, Record
from dsmon.model.units import parse_ts


@dataclass(frozen=True, slots=True)
class Cutoff:
    """Replay position: keep records up to ``step`` (and, for unstepped ones, up to ``ts``)."""

    step: int | None = None
    ts: pd.Timestamp | None = None

    def apply(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Rows of ``frame`` that existed at this position (all rows for an open cut-off)."""
        if frame.empty or (self.step is None and self.ts is None):
            return frame
        keep = pd.Series(True, index=frame.index)
        has_step = (
            frame["step"].notna()
            if "step" in frame.columns
            else pd.Series(False, index=frame.index)
        )
        if self.step is not None and "step" in frame.columns:
            keep &= ~has_step | (frame["step"] <= self.step)
        if self.ts is not None and "ts" in frame.columns:
            keep &= has_step | frame["ts"].isna() | (frame["ts"] <= self.ts)
        if {"name", "detail"} <= set(frame.columns):  # events: a crash printed later
            keep &= ~_printed_after(frame, self)
        return frame[keep]


#: Events DeepSpeed's launcher, torchrun and ``dsmon run`` print through a logger: their
#: times are their own (when not ``unstamped``), so they bound the time of an unstamped line
#: before them in the same file.
_BOUNDING = ("worker_exit", "job_end", "world_info", "signalled")


def _printed_after(events: pd.DataFrame, cutoff: Cutoff) -> pd.Series:
    """Failure events without a time of their own that may have been printed after ``cutoff``.

    A worker's traceback carries the last stamped line's time, which says only that it came
    later: a crash printed after step 159 would show as of step 50. It existed at the position
    only if a stamped launcher line after it in the same file did; with none, it is shown
    only as the run stands (a replay position never shows it).
    """
    flagged = events["detail"].map(lambda d: isinstance(d, Mapping) and bool(d.get(UNSTAMPED)))
    if not flagged.any():
        return pd.Series(False, index=events.index)
    bounds = events[events["name"].isin(_BOUNDING) & events["ts"].notna() & ~flagged]

    def after(row: pd.Series) -> bool:
        later = bounds[(bounds["file"] == row["file"]) & (bounds["line"] > row["line"])]
        bound = later["ts"].min() if not later.empty else None
        return bound is None or cutoff.ts is None or bool(bound > cutoff.ts)

    hidden = [
        bool(f) and after(row) for f, (_, row) in zip(flagged, events.iterrows(), strict=True)
    ]
    return pd.Series(hidden, index=events.index, dtype=bool)


OPEN = Cutoff()


def existed_at(rec: Record, cutoff: Cutoff) -> bool:
    """Whether a record existed at the replay position."""
    if cutoff.step is not None and rec.step is not None:
        return rec.step <= cutoff.step
    when = parse_ts(rec.ts)
    if cutoff.ts is not None and when is not None:
        return pd.Timestamp(when) <= cutoff.ts
    return True


def step_cutoff(steps: pd.DataFrame, step: int | None) -> Cutoff:
    """The replay position of optimizer step ``step``: its number and the time it ended.

    ``steps`` is any stepped frame with ``step`` and ``ts`` (timers, step lines); the time
    bounds the records that have no step (GPU samples, events).
    """
    if step is None:
        return OPEN
    if steps.empty or "ts" not in steps.columns:
        return Cutoff(step=step)
    upto = steps[steps["step"] <= step]["ts"].dropna()
    return Cutoff(step=step, ts=None if upto.empty else pd.Timestamp(upto.max()))
