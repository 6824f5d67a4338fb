"""The step breakdown as the checklist reads it live: from the store's timer tables, kept live.

A run of a million steps stores three million timer records, and the dashboard folded them
all into the step breakdown on its first look at the run (``dsmon.view.step_views``): most of
Health's first render, and it grew with the run (70 s for the first reader of a million
steps). The store keeps the breakdown's rows as the records arrive (``Store.timers``); live,
the checklist reads those: every row once, then only the steps changed since (by record id).
The answer is :func:`dsmon.analysis.steps.step_breakdown` of the run's timer frame, row for
row (``tests/unit/store/test_timer_tables.py``).

While a global timer line of the run has no step yet (a live collector sends it before the
log named the step, and the store fills it in later), the tables cannot place it, and the
breakdown is folded from the records as before; so it is for a replay position.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import pandas as pd

from dsmon.analysis import coordinator, step_stats, steps
from dsmon.analysis.percentiles import Percentiles
from dsmon.analysis.step_stats import StatSource
from dsmon.view import fold, step_views
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import OPEN, Cutoff
from dsmon.view.quantiles import StepQuantiles
from dsmon.view.rowbuffer import RowBuffer

#: The timer group whose lines the coordinator figures read (DeepSpeed 0.10.0's ZeRO-3).
COORDINATOR_GROUP = "zero3_coordinator"


class _LiveBreakdown:
    """A run's breakdown from the timer tables, extended with the steps changed since."""

    def __init__(self) -> None:
        self.names: dict[str, set[str]] = {}
        self.result: pd.DataFrame | None = None  # None: the tables cannot answer
        #: ``result``'s rows, grown in place: a live refresh writes its few steps after the
        #: finished ones instead of copying a million rows (``dsmon.view.rowbuffer``).
        self.buffer: RowBuffer | None = None
        self.after_id = 0
        self.counted: tuple[int, int] | None = None  # timer records stored, restamps
        #: Rows at the head of ``result`` of finished steps, and a count of the times a
        #: finished step changed (``dsmon.view.fold.FinishedRows`` reads both).
        self.stable = 0
        self.epoch = 0
        self.quantiles: dict[str, StepQuantiles] = {}
        self.lock = threading.Lock()

    def update(self, frames: RunFrames) -> pd.DataFrame | None:
        """The breakdown now; None while the tables cannot hold every row (see above)."""
        with self.lock:
            counted = (frames.stored("timer"), frames.store.restamps(frames.run))
            if counted == self.counted:
                return self.result
            self.counted = counted
            tables, run = frames.store.timers, frames.run
            if not tables.placed(run):
                self.result = self.buffer = None
                return None
            last = tables.last_id(run)  # before the rows: a row newer than it is read again
            names = tables.names(run)
            changed = None if self.result is None else tables.changed_from(run, self.after_id)
            if self.result is None or names != self.names:  # (a new timer: new columns)
                self._whole(steps.stored_breakdown(tables.rows(run), names))
            elif changed is not None:
                self._from(changed, steps.stored_breakdown(tables.rows(run, changed), names))
            self.after_id, self.names = last, names
            self._finish()
            return self.result

    def _whole(self, result: pd.DataFrame) -> None:
        """Hold ``result`` as the breakdown, anew."""
        self.epoch += 1
        self.buffer = RowBuffer.of(result)
        self.result = result if self.buffer is None else self.buffer.frame(len(result))

    def _from(self, changed: int, new: pd.DataFrame) -> None:
        """The held rows of steps from ``changed`` on replaced by ``new`` (all of them)."""
        assert self.result is not None
        first = int(self.result["step"].searchsorted(changed, side="left"))
        if first < self.stable:  # a finished step changed: what was kept of it is not
            self.epoch += 1
        buffer = self.buffer
        if buffer is not None and buffer.fits(new):
            buffer.write(first, new)
            self.result = buffer.frame(buffer.rows)
            return
        self._whole(pd.concat([self.result.iloc[:first], new], ignore_index=True))

    def _finish(self) -> None:
        """Steps ``fold.LATE_STEPS`` behind the newest are finished: no update adds to them.

        (One that does, a step stored again, makes a new epoch: :meth:`_from`.)
        """
        assert self.result is not None
        step = self.result["step"]
        if step.empty:
            self.stable = 0
            return
        boundary = int(step.iloc[-1]) - fold.LATE_STEPS
        stable = int(step.searchsorted(boundary, side="left"))
        if stable < self.stable:
            self.epoch += 1
        self.stable = stable

    def stat(self, name: str) -> Percentiles | None:
        """Figure ``name`` over the steady steps, kept sorted (None: not kept)."""
        result = self.result
        if result is None or self.stable == 0:
            return None
        kept = self.quantiles.get(name)
        if kept is None:
            kept = self.quantiles[name] = StepQuantiles(step_views.steady_values(name))
        return kept.over(result, self.epoch, self.stable)


def _live(frames: RunFrames) -> _LiveBreakdown:
    return frames.companion("timer_steps.live", _LiveBreakdown)


def breakdown(frames: RunFrames, cutoff: Cutoff) -> pd.DataFrame:
    """``steps.step_breakdown`` of the run's timer lines as of ``cutoff``.

    Live, from the store's timer tables; else (or while they cannot answer) folded from the
    records (:func:`dsmon.view.step_views.breakdown`).
    """
    if cutoff == OPEN:
        found = _live(frames).update(frames)
        if found is not None:
            return found
    return step_views.breakdown(frames, cutoff)


def stat(frames: RunFrames, cutoff: Cutoff, name: str) -> Percentiles:
    """:func:`dsmon.view.step_views.stat` of :func:`breakdown`: the same figure, the same way.

    Live on a long run from values kept sorted as steps finish, else from the breakdown.
    """
    if cutoff != OPEN:
        return step_views.stat(frames, cutoff, name)
    bd = breakdown(frames, cutoff)
    live = _live(frames)
    if live.result is None:  # the tables cannot answer: the records' fold does
        return step_views.stat(frames, cutoff, name)
    long = not bd.empty and len(bd) >= step_views.KEEP_SORTED_ROWS
    if long and step_views.past_warmup(bd["step"].iloc[-1]):
        with live.lock:
            kept = live.stat(name) if live.result is bd else None
        if kept is not None:
            return kept
    return step_stats.ranked(steps.steady(bd), name)


class Finished(NamedTuple):
    """The live breakdown, its epoch and how many of its rows are of finished steps."""

    breakdown: pd.DataFrame
    epoch: int
    stable: int


@contextmanager
def finished(frames: RunFrames) -> Iterator[Finished | None]:
    """The live breakdown brought up to date and held still meanwhile (None: not kept live).

    For a figure kept over the finished steps as :meth:`_LiveBreakdown.stat` keeps its own
    (``dsmon.view.wire_steps``).
    """
    bd = breakdown(frames, OPEN)
    live = _live(frames)
    with live.lock:
        yield Finished(bd, live.epoch, live.stable) if live.result is bd else None


def stat_source(frames: RunFrames, cutoff: Cutoff) -> StatSource:
    """:func:`stat` as the checklist asks for it (``HealthInputs.stats``)."""
    return lambda name: stat(frames, cutoff, name)


def coordinator_steps(frames: RunFrames, cutoff: Cutoff) -> pd.DataFrame:
    """``coordinator.coordinator_steps`` of the run's timer lines as of ``cutoff``.

    Live, a run that printed no coordinator line (every release but 0.10.0) has none, as the
    store's timer names say: its timer records are not read for it.
    """
    if cutoff == OPEN and COORDINATOR_GROUP not in frames.store.timers.names(frames.run):
        return coordinator.coordinator_steps(pd.DataFrame())
    return step_views.coordinator_steps(frames, cutoff)
