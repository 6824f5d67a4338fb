"""Whether a run's latest steps are slower than its earlier ones, and how sure that is.

A ratio of two medians over a handful of samples reads noise as a regression: a run that
prints throughput every ``steps_per_print`` steps gives a few samples, and a bimodal run
(data loading, a cosine schedule, evaluation every N steps) puts fast and slow samples side
by side, so three samples "failed at 1.71x" with the newest among the fastest. This module
asks the question a regression is: are the recent steps' times *generally above* the earlier
ones? It compares the two groups by rank (the Mann-Whitney U test, one-sided, with its
normal approximation and tie correction), which a few outliers or two modes cannot sway, and
says how sure it is: the share of (recent, earlier) pairs in which the recent step is slower,
and the test's p-value. The size of the slowdown is the ratio of the two medians.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from dsmon.analysis.percentiles import Percentiles


class Slowdown(NamedTuple):
    """Recent steps against earlier ones: medians, their ratio, and how sure.

    ``slower_share``: the share of (recent, earlier) pairs whose recent step is slower (ties
    count half): 0.5 when the groups are alike, 1.0 when every recent step is slower.
    ``p_value``: the one-sided Mann-Whitney p-value that the recent steps are no slower.
    """

    earlier_median: float
    recent_median: float
    ratio: float
    slower_share: float
    p_value: float
    n_earlier: int
    n_recent: int


def slowdown(earlier: np.ndarray, recent: np.ndarray) -> Slowdown:
    """Compare ``recent`` values with ``earlier`` ones (NaN dropped; both non-empty).

    Each group is sorted once, and the test reads both from the sorted arrays: a live
    dashboard asks this of a long run's every step on each refresh, where numpy's medians and
    two ``np.unique`` passes (each sorting a million values again) cost 50 ms.
    """
    a = np.sort(np.asarray(earlier, dtype=np.float64))
    b = np.sort(np.asarray(recent, dtype=np.float64))
    a, b = a[: np.searchsorted(a, np.nan)], b[: np.searchsorted(b, np.nan)]  # NaN sort last
    if not len(a) or not len(b):
        raise ValueError("slowdown needs values on both sides")
    med_a, med_b = _sorted_median(a), _sorted_median(b)
    u, p = _mann_whitney_greater(b, a)
    return Slowdown(
        earlier_median=med_a,
        recent_median=med_b,
        ratio=med_b / med_a if med_a > 0 else float("nan"),
        slower_share=u / (len(a) * len(b)),
        p_value=p,
        n_earlier=len(a),
        n_recent=len(b),
    )


def _sorted_median(values: np.ndarray) -> float:
    """``np.median`` of sorted values, read from them instead of partitioning a copy."""
    return Percentiles.merged(values, values[:0]).median()


def _mann_whitney_greater(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """U of ``x`` over ``y`` and the one-sided p-value that ``x`` is not greater.

    The normal approximation with the tie correction and a continuity correction of 0.5, as
    statistics texts (and scipy's ``mannwhitneyu(..., alternative="greater")``) give it.
    ``x`` sorted, without NaN: a value's mid-rank in the union is where the union's run of
    values equal to it begins and ends. Ranks are half-integers far below 2**52, so their sum
    is exact in any order.
    """
    n1, n2 = len(x), len(y)
    both = np.sort(np.concatenate([x, y]))
    left = np.searchsorted(both, x, side="left")
    right = np.searchsorted(both, x, side="right")
    u = float(((left + 1 + right) / 2.0).sum() - n1 * (n1 + 1) / 2.0)
    counts = _run_lengths(both)
    n = n1 + n2
    ties = float((counts**3 - counts).sum())
    var = n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return u, 1.0
    z = (u - n1 * n2 / 2.0 - 0.5) / math.sqrt(var)
    return u, 0.5 * math.erfc(z / math.sqrt(2.0))


def _run_lengths(values: np.ndarray) -> np.ndarray:
    """How many times each distinct value occurs in sorted ``values`` (``np.unique``'s counts)."""
    starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    return np.diff(np.append(starts, len(values)))
