"""The gradient reduction's wire share of bwd, kept as a live run's steps settle.

``comm.phase_share`` quotes the median over steps of rank 0's ``bwd_allreduce`` less its wait
for the slowest rank, against ``bwd`` less the same wait
(:func:`dsmon.analysis.waiting.reduction_wire_shares`). Each step's value joins the timers'
breakdown with the probe's per-step table; taken afresh, that join, the split of every step
and the median cost a third of the checklist's refresh at a million steps, and grew with the
run. Here a step's value is computed once it is settled on both sides (finished in the
breakdown, ``dsmon.view.timer_steps``; taken in for good by the straggler figures,
``dsmon.view.ranks``) and kept sorted (:class:`dsmon.view.quantiles.StepQuantiles`); the open
steps are computed at each refresh. A change to a settled step on either side, or a new rank,
starts the values again. The figure equals the whole computation's to the last bit
(``tests/unit/view/test_wire_steps.py``).
"""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd

from dsmon.analysis import waiting
from dsmon.analysis.percentiles import Percentiles
from dsmon.analysis.steps import WARMUP_STEPS
from dsmon.view import ranks as rank_views
from dsmon.view import step_views, timer_steps
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import OPEN, Cutoff
from dsmon.view.quantiles import StepQuantiles


class _LiveWire:
    """The values of the breakdown's rows, read with the probe's table of the same steps."""

    def __init__(self) -> None:
        self.kept = StepQuantiles(self._values)
        self._table = pd.DataFrame()  # the probe's per-step table, as of this refresh
        self._ranks = 0  # every rank (a step reported by fewer is not split)
        self._key: tuple[int, int, int] | None = None  # what the settled values were taken of
        self.generation = 0
        self.lock = threading.Lock()

    def answer(self, finished: timer_steps.Finished, settled: rank_views.Settled) -> Percentiles:
        """The figure over every step now, the settled ones' values kept."""
        key = (finished.epoch, settled.generation, settled.ranks)
        if key != self._key:
            self._key, self.generation = key, self.generation + 1
        self._table, self._ranks = settled.table, settled.ranks
        bd = finished.breakdown
        settled_rows = int(bd["step"].searchsorted(settled.settled, side="right"))
        return self.kept.over(bd, self.generation, min(finished.stable, settled_rows))

    def _values(self, rows: pd.DataFrame) -> np.ndarray:
        """The values of some whole steps of the breakdown: their probe rows looked up."""
        if rows.empty:
            return np.empty(0, dtype=np.float64)
        step = self._table["step"].to_numpy()
        first = max(rows["step"].iloc[0], WARMUP_STEPS + 1)  # the steady steps, as the rule's
        lo = int(np.searchsorted(step, first, side="left"))
        hi = int(np.searchsorted(step, rows["step"].iloc[-1], side="right"))
        split = waiting.comm_split(self._table.iloc[lo:hi], self._ranks)
        return waiting.reduction_wire_shares(rows, split)


def stat(frames: RunFrames, cutoff: Cutoff) -> Percentiles | None:
    """The figure's values live on a long run; None where the whole computation is as cheap.

    None before the run is long (``step_views.KEEP_SORTED_ROWS``) and past its warm-up on both
    sides, for a replay position, and while the breakdown is not kept live.
    """
    if cutoff != OPEN:
        return None
    with timer_steps.finished(frames) as finished:
        if finished is None:
            return None
        bd = finished.breakdown
        if len(bd) < step_views.KEEP_SORTED_ROWS or not step_views.past_warmup(bd["step"].iloc[-1]):
            return None
        with rank_views.settled(frames) as settled:
            table = settled.table
            if table.empty or not step_views.past_warmup(table["step"].iloc[-1]):
                return None
            live = frames.companion("wire_steps.live", _LiveWire)
            with live.lock:
                return live.answer(finished, settled)
