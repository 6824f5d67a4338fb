"""The straggler summary of a live run, kept up to date with the steps that changed.

``ranks.straggler`` and the Steps page quote medians and counts over every steady step every
rank reported (:class:`dsmon.analysis.stragglers.StragglerSummary`). Computed afresh, that
is several passes over every step on each refresh: tens of milliseconds at a million steps,
and growing with the run. A :class:`LiveStragglers` takes in the per-step rows the store
changed since the last refresh (``dsmon.view.rank_views``): a step every rank reported is
final, and its figures go into sorted values (:class:`dsmon.view.quantiles.SortedValues`)
and counts once; a step still waiting for a rank is kept aside until it is complete. What
would change a final step (a step stored again, a rank that was not there before) takes
everything in again. The answers equal :func:`dsmon.analysis.stragglers.straggler_summary`
of the same rows (``tests/unit/store/test_rank_tables.py``).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from dsmon.analysis import steps
from dsmon.analysis.stragglers import StragglerSummary, straggler_summary
from dsmon.view.quantiles import SortedValues


class LiveStragglers:
    """A :class:`StragglerSummary` of a growing per-step table (``ranks.step_stats`` rows)."""

    def __init__(self, warmup: int = steps.WARMUP_STEPS) -> None:
        self.warmup = warmup
        self._reset()

    def _reset(self) -> None:
        self._whole: StragglerSummary | None = None  # before any steady step: computed whole
        self._ranks = 0  # every rank: the most ranks a steady step was reported by
        self._score, self._slowest, self._median, self._step_ms = (SortedValues() for _ in "1234")
        self._counts: Counter[int] = Counter()
        self._final = 0  # steady steps taken in for good (every rank reported them)
        self._n, self._first, self._last, self._waited = 0, -1, -1, False
        self._open: dict[int, tuple[float, bool]] = {}  # step -> (median step time, waited)

    def update(self, before: pd.DataFrame | None, new: pd.DataFrame, after: pd.DataFrame) -> None:
        """Take in ``new`` rows; ``before``/``after``: the whole table without and with them."""
        if before is None or self._whole is not None or self._changes_final(before, new):
            self._rebuild(after)
        else:
            self._take(new[new["step"] > self.warmup])

    def summary(self) -> StragglerSummary:
        """The figures now."""
        if self._whole is not None:
            return self._whole
        pending = np.array([ms for ms, _ in self._open.values()], dtype=np.float64)
        empty = np.empty(0, dtype=np.float64)
        return StragglerSummary(
            steps=self._n,
            first_step=self._first if self._n else None,
            last_step=self._last if self._n else None,
            score=self._score.ranked(empty),
            slowest_ms=self._slowest.ranked(empty),
            median_ms=self._median.ranked(empty),
            counts=dict(self._counts),
            waited=self._waited or any(w for _, w in self._open.values()),
            step_ms=self._step_ms.ranked(pending),
        )

    def _changes_final(self, before: pd.DataFrame, new: pd.DataFrame) -> bool:
        """Whether ``new`` changes a step already taken in, or the count of ranks."""
        steady = new[new["step"] > self.warmup]
        if steady.empty:
            return False
        if (steady["ranks"] > self._ranks).any() and self._final:
            return True  # the steps every rank reported so far lack the new rank
        held = before["step"].to_numpy()
        at = np.searchsorted(held, steady["step"].to_numpy())
        found = at < len(held)
        found[found] = held[at[found]] == steady["step"].to_numpy()[found]
        old = before["ranks"].to_numpy()[at[found]]
        return bool((old == self._ranks).any())

    def _rebuild(self, table: pd.DataFrame) -> None:
        """Take in the whole table again."""
        self._reset()
        steady = table[table["step"] > self.warmup]
        if steady.empty:  # no step after the warm-up yet: the figures are over every step
            self._whole = straggler_summary(table, self.warmup)
            return
        self._ranks = int(steady["ranks"].max())
        self._take(steady)

    def _take(self, rows: pd.DataFrame) -> None:
        """Take in steady rows: the complete ones for good, the others aside until complete."""
        if rows.empty:
            return
        self._ranks = max(self._ranks, int(rows["ranks"].max()))
        final = (rows["ranks"] == self._ranks).to_numpy()
        for step, total, waited in zip(
            rows["step"].to_numpy()[~final].astype(np.int64),
            rows["median_total_ms"].to_numpy()[~final],
            (rows["waited"].to_numpy() > 0)[~final],
            strict=True,
        ):
            self._open[int(step)] = (float(total), bool(waited))
        done = rows[final]
        if done.empty:
            return
        for step in done["step"].to_numpy().astype(np.int64):
            self._open.pop(int(step), None)
        self._final += len(done)
        self._step_ms.add(done["median_total_ms"].to_numpy(dtype=np.float64))
        self._waited = self._waited or bool((done["waited"] > 0).any())
        if self._ranks >= 2:  # a straggler needs two ranks
            self._take_scores(done)

    def _take_scores(self, done: pd.DataFrame) -> None:
        """The straggler figures of steps every rank reported."""
        slowest = done["slowest_ms"].to_numpy(dtype=np.float64)
        median = done["median_ms"].to_numpy(dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            self._score.add(np.where(median > 0, slowest / median, np.nan))
        self._slowest.add(slowest)
        self._median.add(median)
        self._counts.update(done["slowest_rank"].to_numpy().astype(np.int64).tolist())
        first, last = int(done["step"].min()), int(done["step"].max())
        self._first = first if self._n == 0 else min(self._first, first)
        self._last = max(self._last, last)
        self._n += len(done)
