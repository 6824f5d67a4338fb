"""Whole-run medians kept sorted as steps finish, so a live refresh does not partition them.

The checklist and the Communication page quote medians and 90th percentiles over every step
(``dsmon.analysis.step_stats``). Taken afresh, each one partitions a copy of all its values:
at a million steps a few milliseconds per figure, about a dozen figures per refresh, and the
refresh of those pages grew with the run. A :class:`StepQuantiles` keeps the values of the
fold's finished steps (``StepFold.stable``: rows no later update changes) in sorted arrays,
adds each newly finished step's values, and answers from them and the open steps' values by
binary search (:class:`dsmon.analysis.percentiles.Percentiles`): the same numbers, bit for bit.

New values go to a small sorted array first and are merged into the big one when it holds
:data:`MERGE_VALUES`, so a refresh copies a few thousand values, not a million.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from dsmon.analysis.percentiles import Percentiles
from dsmon.view.fold import FinishedRows

#: Values the small sorted array holds before it is merged into the big one.
MERGE_VALUES = 4096

ValuesFn = Callable[[pd.DataFrame], np.ndarray]


class SortedValues:
    """A multiset of floats as one big and one small sorted array."""

    def __init__(self) -> None:
        self._big = np.empty(0, dtype=np.float64)
        self._small = np.empty(0, dtype=np.float64)

    def add(self, values: np.ndarray) -> None:
        """Add values (NaN dropped)."""
        values = np.asarray(values, dtype=np.float64)
        values = values[~np.isnan(values)]  # (a copy: sorted in place below)
        if not len(values):
            return
        if len(self._small):
            small = np.sort(np.concatenate([self._small, values]))
        else:  # a first look's million values: sorted where they are, not copied twice more
            values.sort()
            small = values
        if len(small) < MERGE_VALUES:
            self._small = small
            return
        # two sorted runs: numpy's stable sort (a merge sort) joins them in one pass; none to
        # join on a first look, which takes in a long run's million values at once
        joined = np.concatenate([self._big, small]) if len(self._big) else small
        self._big = np.sort(joined, kind="stable") if len(self._big) else joined
        self._small = np.empty(0, dtype=np.float64)

    def ranked(self, more: np.ndarray) -> Percentiles:
        """These values and ``more`` (a few, NaN dropped), read as one."""
        more = more[~np.isnan(more)]
        return Percentiles.merged(self._big, np.sort(np.concatenate([self._small, more])))


class StepQuantiles(FinishedRows[Percentiles]):
    """The values ``values`` gives for a fold's rows, over the whole result, kept sorted.

    Args:
        values: the figures of some rows of the fold's result (whole steps): a function of
            those rows alone, so the values of finished steps are computed once.
    """

    def __init__(self, values: ValuesFn) -> None:
        super().__init__()
        self.values = values
        self._sorted = SortedValues()

    def _reset(self) -> None:
        self._sorted = SortedValues()

    def _take(self, rows: pd.DataFrame, offset: int) -> None:
        self._sorted.add(self.values(rows))

    def _answer(self, rows: pd.DataFrame, offset: int) -> Percentiles:
        return self._sorted.ranked(self.values(rows))
