"""The per-step frames several pages and the checklist share, each computed once per run.

The Steps, Communication and FLOPS pages and the health checklist all read the step
breakdown; the Steps and FLOPS pages the micro-step one. Naming each view once here means
they share one :class:`dsmon.view.fold.StepFold` per run, so a live refresh computes the
new steps once for every reader, and a refresh's cost follows the steps it brings, not the
length of the run.
"""

from __future__ import annotations

import pandas as pd

from dsmon.analysis import coordinator, steps
from dsmon.view.cache import Cutoff, RunFrames


def breakdown(frames: RunFrames, cutoff: Cutoff) -> pd.DataFrame:
    """``steps.step_breakdown`` of the run's timer lines (one row per step and rank)."""
    return frames.fold("steps.breakdown", "timer", cutoff, steps.step_breakdown)


def micro(frames: RunFrames, cutoff: Cutoff) -> pd.DataFrame:
    """``steps.micro_breakdown`` of the run's timer lines (one row per micro-batch)."""
    return frames.fold("steps.micro", "timer", cutoff, steps.micro_breakdown)


def coordinator_steps(frames: RunFrames, cutoff: Cutoff) -> pd.DataFrame:
    """``coordinator.coordinator_steps``: ZeRO-3 parameter-fetch times per step and rank."""
    return frames.fold("comm.coordinator", "timer", cutoff, coordinator.coordinator_steps)


def zero_rows(frames: RunFrames, cutoff: Cutoff) -> pd.DataFrame:
    """The ZeRO optimizer's own timer rows (``steps.zero_rows``), before downsampling."""
    return frames.fold("steps.zero_rows", "timer", cutoff, steps.zero_rows)
