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
    """Compare ``recent`` values with ``earlier`` ones (NaN dropped; both non-empty)."""
    a = np.asarray(earlier, dtype=np.float64)
    b = np.asarray(recent, dtype=np.float64)
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    if not len(a) or not len(b):
        raise ValueError("slowdown needs values on both sides")
    med_a, med_b = float(np.median(a)), float(np.median(b))
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


def _mann_whitney_greater(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """U of ``x`` over ``y`` and the one-sided p-value that ``x`` is not greater.

    The normal approximation with the tie correction and a continuity correction of 0.5, as
    statistics texts (and scipy's ``mannwhitneyu(..., alternative="greater")``) give it.
    """
    n1, n2 = len(x), len(y)
    both = np.concatenate([x, y])
    ranks = _ranks(both)
    u = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    _, counts = np.unique(both, return_counts=True)
    n = n1 + n2
    ties = float((counts**3 - counts).sum())
    var = n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return u, 1.0
    z = (u - n1 * n2 / 2.0 - 0.5) / math.sqrt(var)
    return u, 0.5 * math.erfc(z / math.sqrt(2.0))


def _ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties given the mean of the ranks they span."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return ((ends - counts + 1 + ends) / 2.0)[inverse]
