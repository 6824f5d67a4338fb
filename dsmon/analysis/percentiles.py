"""Medians and percentiles of values held either as they come or as sorted parts.

The checklist and the Communication page quote medians and 90th percentiles over every step
of a run. numpy takes each by partitioning a copy of all the values: a few milliseconds per
figure at a million steps, on every live refresh. A dashboard that keeps the finished steps'
values sorted (:mod:`dsmon.view.quantiles`) answers the same question from the sorted values
and the few steps still open, by binary search. Both forms answer through :class:`Percentiles`,
with numpy's own arithmetic (``np.median``; ``np.percentile``'s default linear method), so a
figure does not change in its last digit with the way it was computed.
"""

from __future__ import annotations

import math

import numpy as np


class Percentiles:
    """Values (no NaN) whose k-th smallest can be asked; see :meth:`of` and :meth:`merged`.

    Held as one big sorted array and one small sorted array (either may be empty), or as
    plain values that numpy partitions when asked.
    """

    def __init__(self, big: np.ndarray, small: np.ndarray, plain: np.ndarray | None) -> None:
        self._big, self._small, self._plain = big, small, plain
        self.n = len(plain) if plain is not None else len(big) + len(small)

    @classmethod
    def of(cls, values: np.ndarray) -> Percentiles:
        """Plain values, NaN dropped (a copy: they are partitioned in place when asked)."""
        known = np.asarray(values, dtype=np.float64)
        return cls(_EMPTY, _EMPTY, known[~np.isnan(known)])

    @classmethod
    def merged(cls, big: np.ndarray, small: np.ndarray) -> Percentiles:
        """Two sorted arrays without NaN, read as one (``small`` is searched value by value)."""
        return cls(big, small, None)

    def at(self, ks: list[int]) -> list[float]:
        """The ``k``-th smallest values (0-based) for each ``k`` of ``ks``."""
        if self._plain is not None:
            self._plain.partition(ks)  # one pass for all of them, as numpy's own median
            return [float(self._plain[k]) for k in ks]
        # each small value's position in the union, ties after the big array's equal values
        pos = np.searchsorted(self._big, self._small, side="right") + np.arange(len(self._small))
        return [self._union_kth(pos, k) for k in ks]

    def _union_kth(self, pos: np.ndarray, k: int) -> float:
        """The k-th of the union, given where each small value lands in it."""
        before = int(np.searchsorted(pos, k))  # small values placed before position k
        if before < len(pos) and pos[before] == k:
            return float(self._small[before])
        return float(self._big[k - before])

    def median(self) -> float:
        """``np.median`` of the values (NaN when there are none)."""
        if self.n == 0:
            return float("nan")
        half = self.n // 2
        if self.n % 2:
            return self.at([half])[0]
        low, high = self.at([half - 1, half])
        return (low + high) / 2.0  # np.mean of the two middle ones

    def percentile(self, q: float) -> float:
        """``np.percentile(values, q)`` (linear method), NaN when there are no values."""
        if self.n == 0:
            return float("nan")
        virtual = (self.n - 1) * float(np.true_divide(q, 100))
        if virtual >= self.n - 1:
            return self.at([self.n - 1])[0]
        below = math.floor(virtual)
        low, high = self.at([below, below + 1])
        return _lerp(low, high, virtual - below)


_EMPTY = np.empty(0, dtype=np.float64)


def _lerp(a: float, b: float, t: float) -> float:
    """Linear interpolation between neighbours, as numpy does it (``_lerp`` in numpy.lib)."""
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t
