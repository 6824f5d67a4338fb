"""The per-step frames several pages and the checklist share, each computed once per run.

The Steps, Communication and FLOPS pages and the health checklist all read the step
breakdown; the Steps and FLOPS pages the micro-step one; the Training page each kind's
curves. Naming each view once here means they share one :class:`dsmon.view.fold.StepFold`
per run, so a live refresh computes the new steps once for every reader, and a refresh's
cost follows the steps it brings, not the length of the run. :data:`STEP_FOLDS` lists the
folds of the timer and step lines for the frame cache, which feeds them as a long run's pages
are read and then lets go of the raw rows (``dsmon.view.cache.RunFrames``).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pandas as pd

from dsmon.analysis import coordinator, step_stats, steps, training
from dsmon.analysis.percentiles import Percentiles
from dsmon.analysis.step_stats import StatSource
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import OPEN, Cutoff
from dsmon.view.fold import StepFn
from dsmon.view.quantiles import ValuesFn

#: Breakdown rows from which a live page keeps whole-run figures sorted instead of taking
#: them afresh on each refresh (below this, numpy on every row costs under a millisecond).
KEEP_SORTED_ROWS = 20_000
WARMUP = steps.WARMUP_STEPS

#: The folds over each kind of a long run's bulk (its timer and step lines), by name: all
#: that pages ask of those rows while live. ``FrameHub(store, folds=STEP_FOLDS)``.
STEP_FOLDS: dict[str, dict[str, StepFn]] = {
    "timer": {
        "steps.breakdown": steps.step_breakdown,
        "steps.micro": steps.micro_breakdown,
        "comm.coordinator": coordinator.coordinator_steps,
        "steps.zero_rows": steps.zero_rows,
    },
    "step": {
        "steps.skipped": steps.skipped_counts,
        # (the batch size is read for csv_monitor points only, not for step lines)
        "training.step": functools.partial(training.kind_series, "step", train_batch_size=None),
    },
}


def _fold(frames: RunFrames, kind: str, name: str, cutoff: Cutoff) -> pd.DataFrame:
    """The fold ``name`` of :data:`STEP_FOLDS` over ``kind``."""
    return frames.fold(name, kind, cutoff, STEP_FOLDS[kind][name])


def breakdown(frames: RunFrames, cutoff: Cutoff) -> pd.DataFrame:
    """``steps.step_breakdown`` of the run's timer lines (one row per step and rank)."""
    return _fold(frames, "timer", "steps.breakdown", cutoff)


def stat(frames: RunFrames, cutoff: Cutoff, name: str) -> Percentiles:
    """Whole-run figure ``name`` (``dsmon.analysis.step_stats``) of the run's breakdown.

    Over the steady steps. Live, on a long run, from values kept sorted as steps finish
    (``dsmon.view.quantiles``); otherwise from the breakdown, as the checklist computes it on
    a log file.
    """
    bd = breakdown(frames, cutoff)
    live = cutoff == OPEN and not bd.empty and len(bd) >= KEEP_SORTED_ROWS
    if live and past_warmup(bd["step"].iloc[-1]):
        values = steady_values(name)
        kept = frames.quantiles("steps.breakdown", "timer", steps.step_breakdown, name, values)
        if kept is not None:
            return kept
    return step_stats.ranked(steps.steady(bd), name)


def past_warmup(last_step: Any) -> bool:
    """Whether the newest row of a breakdown in step order is after the warm-up steps."""
    return bool(pd.notna(last_step) and last_step > WARMUP)


def steady_values(name: str) -> ValuesFn:
    """The values of figure ``name`` from some whole steps' rows, warm-up steps left out.

    (:func:`dsmon.analysis.steps.steady` keeps warm-up steps when a run has nothing else;
    :func:`stat` asks here only once a run has steps after them.)
    """
    values = step_stats.values_fn(name)
    return lambda rows: values(_after_warmup(rows))


def _after_warmup(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of steps after the warm-up ones: a slice when in step order (a breakdown is).

    A mask would copy every column of the rows, once per figure, on a long run's first look.
    """
    step = rows["step"]
    if step.notna().all() and step.is_monotonic_increasing:
        return rows.iloc[int(step.searchsorted(WARMUP, side="right")) :]
    return rows[rows["step"] > WARMUP]


def stat_source(frames: RunFrames, cutoff: Cutoff) -> StatSource:
    """:func:`stat` as the checklist asks for it (``HealthInputs.stats``)."""
    return lambda name: stat(frames, cutoff, name)


def micro(frames: RunFrames, cutoff: Cutoff) -> pd.DataFrame:
    """``steps.micro_breakdown`` of the run's timer lines (one row per micro-batch)."""
    return _fold(frames, "timer", "steps.micro", cutoff)


def skipped(frames: RunFrames, cutoff: Cutoff) -> pd.DataFrame:
    """``steps.skipped_counts``: the running skipped-step count of each ``step=`` line."""
    return _fold(frames, "step", "steps.skipped", cutoff)


def coordinator_steps(frames: RunFrames, cutoff: Cutoff) -> pd.DataFrame:
    """``coordinator.coordinator_steps``: ZeRO-3 parameter-fetch times per step and rank."""
    return _fold(frames, "timer", "comm.coordinator", cutoff)


def zero_rows(frames: RunFrames, cutoff: Cutoff) -> pd.DataFrame:
    """The ZeRO optimizer's own timer rows (``steps.zero_rows``), before downsampling."""
    return _fold(frames, "timer", "steps.zero_rows", cutoff)


def training_parts(frames: RunFrames, cutoff: Cutoff, tbs: int | None) -> list[pd.DataFrame]:
    """``training.kind_series`` of each kind of the run, grown by new steps only.

    Kept apart, not joined: a page that groups the points by metric and source finds each
    group within one kind, and joining a million points on every refresh is what this avoids.
    csv_monitor points need the config's ``train_batch_size``, so they are kept per size.
    """
    return [frames.fold(name, kind, cutoff, fn) for kind, name, fn in _training_folds(tbs)]


def training_groups(
    frames: RunFrames, cutoff: Cutoff, tbs: int | None
) -> list[list[np.ndarray] | None]:
    """Each :func:`training_parts` part's trace positions (``training.TRACE_KEYS``).

    Live, kept as steps finish (``dsmon.view.group_positions``) where it can be; None for a
    part the caller groups itself (replay, a part that is not folded step by step).
    """
    if cutoff != OPEN:
        return [None] * len(training.SERIES_KINDS)
    return [
        frames.positions(name, kind, fn, training.TRACE_KEYS)
        for kind, name, fn in _training_folds(tbs)
    ]


def _training_folds(tbs: int | None) -> list[tuple[str, str, StepFn]]:
    """(kind, fold name, function) of each kind's training points."""
    return [
        (
            kind,
            f"training.{kind}" + (f".{tbs}" if kind == "monitor" else ""),
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
