"""Replay positions: the dashboard as a run stood at one of its steps.

Replay is a filter on the frames the dashboard holds (``dsmon.view.cache``; a long run's
timer and step rows are read again from the store first, and held), never a second copy of
the data: a :class:`Cutoff` keeps the rows that existed at the position.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from dsmon.model.records import Record
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
        return frame[keep]


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
