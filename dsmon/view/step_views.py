"""The per-step frames several pages and the checklist share, each computed once per run.

The Steps, Communication and FLOPS pages and the health checklist all read the step
breakdown; the Steps and FLOPS pages the micro-step one; the Training page each kind's
curves. Naming each view once here means they share one :class:`dsmon.view.fold.StepFold`
per run, so a live refresh computes the new steps once for every reader, and a refresh's
cost follows the steps it brings, not the length of the run.
"""

from __future__ import annotations

import functools

import pandas as pd

from dsmon.analysis import coordinator, steps, training
from dsmon.view.cache import Cutoff, RunFrames


def breakdown(frames: RunFrames, cutoff: Cutoff) -> pd.DataFrame:
    """``steps.step_breakdown`` of the run's timer lines (one row per step and rank)."""
    return frames.fold("steps.breakdown", "timer", cutoff, steps.step_breakdown)


def micro(frames: RunFrames, cutoff: Cutoff) -> pd.DataFrame:
    """``steps.micro_breakdown`` of the run's timer lines (one row per micro-batch)."""
    return frames.fold("steps.micro", "timer", cutoff, steps.micro_breakdown)


def skipped(frames: RunFrames, cutoff: Cutoff) -> pd.DataFrame:
    """``steps.skipped_counts``: the running skipped-step count of each ``step=`` line."""
    return frames.fold("steps.skipped", "step", cutoff, steps.skipped_counts)


def coordinator_steps(frames: RunFrames, cutoff: Cutoff) -> pd.DataFrame:
    """``coordinator.coordinator_steps``: ZeRO-3 parameter-fetch times per step and rank."""
    return frames.fold("comm.coordinator", "timer", cutoff, coordinator.coordinator_steps)


def zero_rows(frames: RunFrames, cutoff: Cutoff) -> pd.DataFrame:
    """The ZeRO optimizer's own timer rows (``steps.zero_rows``), before downsampling."""
    return frames.fold("steps.zero_rows", "timer", cutoff, steps.zero_rows)


def training_parts(frames: RunFrames, cutoff: Cutoff, tbs: int | None) -> list[pd.DataFrame]:
    """``training.kind_series`` of each kind of the run, grown by new steps only.

    Kept apart, not joined: a page that groups the points by metric and source finds each
    group within one kind, and joining a million points on every refresh is what this avoids.
    csv_monitor points need the config's ``train_batch_size``, so they are kept per size.
    """
    return [
        frames.fold(
            f"training.{kind}" + (f".{tbs}" if kind == "monitor" else ""),
            kind,
            cutoff,
            functools.partial(training.kind_series, kind, train_batch_size=tbs),
        )
        for kind in training.SERIES_KINDS
    ]


def training_series(frames: RunFrames, cutoff: Cutoff, tbs: int | None) -> pd.DataFrame:
    """:func:`training_parts` in one frame, kind by kind, each kind's rows by step.

    Not in metric order: sorting a million points on every refresh is what this avoids.
    """
    kinds = list(training.SERIES_KINDS)
    return frames.memo(
        f"training.series.{tbs}",
        kinds,
        cutoff,
        lambda: training.joined(training_parts(frames, cutoff, tbs)),
    )
