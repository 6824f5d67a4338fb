"""The regression rule's rank test: the same numbers as the textbook formulation, ties included.

``slowdown`` reads its medians and mid-ranks from sorted arrays (a live refresh asks it of a
long run's every step). The reference here is the plain definition: every value's mid-rank
from ``np.unique`` of the union, the tie term from its counts, ``np.median`` of each group.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from lanes import examples

from dsmon.analysis.slowdown import slowdown


def _reference(earlier: np.ndarray, recent: np.ndarray) -> tuple[float, float, float, float]:
    """Medians, U of ``recent`` over ``earlier`` and the one-sided p-value, by definition."""
    a, b = earlier[~np.isnan(earlier)], recent[~np.isnan(recent)]
    both = np.concatenate([b, a])
    _, inverse, counts = np.unique(both, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = ((ends - counts + 1 + ends) / 2.0)[inverse]
    n1, n2 = len(b), len(a)
    u = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    n = n1 + n2
    ties = float((counts**3 - counts).sum())
    var = n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    p = 1.0
    if var > 0:
        z = (u - n1 * n2 / 2.0 - 0.5) / math.sqrt(var)
        p = 0.5 * math.erfc(z / math.sqrt(2.0))
    return float(np.median(a)), float(np.median(b)), u, p


# step times as DeepSpeed prints them: two decimals, so a long run has many ties; NaN for a
# step whose time is unknown
_times = arrays(
    np.float64,
    st.integers(1, 60),
    elements=st.one_of(st.integers(1000, 1040).map(lambda c: c / 100.0), st.just(float("nan"))),
).filter(lambda v: (~np.isnan(v)).any())


@settings(max_examples=examples(200), deadline=None)
@given(_times, _times)
def test_the_same_figures_as_the_definition(earlier: np.ndarray, recent: np.ndarray) -> None:
    got = slowdown(earlier, recent)
    med_a, med_b, u, p = _reference(earlier, recent)
    assert (got.earlier_median, got.recent_median) == (med_a, med_b)
    assert got.slower_share == u / (got.n_earlier * got.n_recent)
    assert got.p_value == p
    assert (got.n_earlier, got.n_recent) == ((~np.isnan(earlier)).sum(), (~np.isnan(recent)).sum())


def test_a_long_run_with_ties_gives_the_definitions_figures() -> None:
    rng = np.random.default_rng(7)
    values = np.round(800.0 + rng.normal(0.0, 5.0, 200_000), 2)
    earlier, recent = values[:180_000], values[180_000:] + 0.5
    got = slowdown(earlier, recent)
    med_a, med_b, u, p = _reference(earlier, recent)
    assert (got.earlier_median, got.recent_median, got.p_value) == (med_a, med_b, p)
    assert got.slower_share == u / (180_000 * 20_000)
    assert got.slower_share > 0.5 and got.p_value < 1e-6


def test_every_recent_step_slower_and_groups_alike() -> None:
    slower = slowdown(np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0]))
    assert (slower.slower_share, slower.ratio) == (1.0, 4.5 / 2.0)
    alike = slowdown(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0]))
    assert alike.slower_share == 0.5 and alike.p_value > 0.5
