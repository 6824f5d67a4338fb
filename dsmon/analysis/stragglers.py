"""The whole-run straggler figures the checklist and the Steps page quote, in one summary.

``ranks.straggler`` judges the median straggler score over the steady steps every rank
reported (:func:`dsmon.analysis.ranks.stragglers`), names the rank that was slowest most
often, ``ranks.hang`` scales its limit with the median step time, and the communication rules
judge the wire time apart from the waiting for the slowest rank (:mod:`dsmon.analysis.waiting`). Taken afresh from the
per-step figures, each is a pass over every step: at a million steps, tens of milliseconds
on every live refresh. A :class:`StragglerSummary` holds them as sorted values
(:class:`dsmon.analysis.percentiles.Percentiles`) and counts, so the dashboard can keep one up to date
with the steps that finished since (``dsmon.view.ranks``); :func:`straggler_summary`
computes the same from the per-step figures, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dsmon.analysis import ranks, steps
from dsmon.analysis.percentiles import Percentiles
from dsmon.analysis.waiting import CommSplit, comm_split, split_of

#: A rank is named as the one the others wait for only when it was the slowest in at least
#: this share of the steps: jitter alone makes the ranks take turns (each of N ranks is the
#: slowest in about 1/N of the steps). On a loaded 2-core host, healthy 2-rank DeepSpeed jobs
#: had one rank slowest in 60-71 % of the steps, a rank slowed by 60 ms a forward in 74-82 %,
#: by 200 ms in all of them (dsmon's line: above what jitter gives two ranks).
CONSISTENT_SHARE = 0.8


@dataclass(frozen=True, slots=True)
class StragglerSummary:
    """Straggler figures over the steady steps (after the warm-up) every rank reported.

    ``steps`` counts those steps, ``first_step``/``last_step`` bound them; ``score``,
    ``slowest_ms`` and ``median_ms`` are their straggler scores and busy times; ``counts``
    maps a rank to the steps it was the slowest in. ``waited`` says whether any steady step
    saw a rank blocked in a collective, and ``step_ms`` holds every steady step's median rank
    step time, whether or not every rank reported it. ``wire_share``, ``wait_share``,
    ``wire_ms`` and ``wait_ms`` are the steady steps' :func:`dsmon.analysis.waiting.comm_split`.
    """

    steps: int
    first_step: int | None
    last_step: int | None
    score: Percentiles
    slowest_ms: Percentiles
    median_ms: Percentiles
    counts: dict[int, int]
    waited: bool
    step_ms: Percentiles
    wire_share: Percentiles
    wait_share: Percentiles
    wire_ms: Percentiles
    wait_ms: Percentiles

    def step_range(self) -> tuple[int, int] | None:
        """The first and last step the figures are over (None: no such step)."""
        if self.first_step is None or self.last_step is None:
            return None
        return self.first_step, self.last_step

    def split(self) -> CommSplit | None:
        """Wire time and waiting for the slowest rank, medians; None where they are unknown."""
        if not self.waited:
            return None
        return split_of(
            self.wire_share.median(),
            self.wait_share.median(),
            self.wire_ms.median(),
            self.wait_ms.median(),
            self.wire_share.n,
        )

    def named(self) -> tuple[int, float] | None:
        """The rank that was the slowest in most steps and how often; None: they take turns.

        Every surface that names a slowest rank (the checklist, the Steps page, the import
        summary) asks here, so a balanced run is never headlined with one.
        """
        counts = self.slowest_counts()
        if counts.empty:
            return None
        top = counts.iloc[0]
        share = float(top["share"])
        return (int(top["rank"]), share) if share >= CONSISTENT_SHARE else None

    def slowest_counts(self) -> pd.DataFrame:
        """How often each rank was the slowest (:func:`dsmon.analysis.ranks.slowest_counts`)."""
        return ranks.counts_table(self.counts)


def straggler_summary(stats: pd.DataFrame, warmup: int = steps.WARMUP_STEPS) -> StragglerSummary:
    """The summary of the per-step figures ``stats`` (:func:`dsmon.analysis.ranks.step_stats`)."""
    steady = steps.steady(stats, warmup)
    strag = ranks.stragglers(steady)
    waited = bool((steady["waited"] > 0).any()) if not steady.empty else False
    split = comm_split(steady)
    return StragglerSummary(
        steps=len(strag),
        first_step=int(strag["step"].iloc[0]) if len(strag) else None,
        last_step=int(strag["step"].iloc[-1]) if len(strag) else None,
        score=Percentiles.of(strag["score"].to_numpy()),
        slowest_ms=Percentiles.of(strag["slowest_ms"].to_numpy()),
        median_ms=Percentiles.of(strag["median_ms"].to_numpy()),
        counts=_counts(strag["slowest_rank"].to_numpy()),
        waited=waited,
        step_ms=Percentiles.of(steady["median_total_ms"].to_numpy(dtype=np.float64)),
        wire_share=Percentiles.of(split["wire_share"].to_numpy(dtype=np.float64)),
        wait_share=Percentiles.of(split["wait_share"].to_numpy(dtype=np.float64)),
        wire_ms=Percentiles.of(split["wire_ms"].to_numpy(dtype=np.float64)),
        wait_ms=Percentiles.of(split["wait_ms"].to_numpy(dtype=np.float64)),
    )


def _counts(slowest: np.ndarray) -> dict[int, int]:
    """Steps per slowest rank."""
    ranks_seen, n = np.unique(slowest.astype(np.int64), return_counts=True)
    return {int(r): int(c) for r, c in zip(ranks_seen, n, strict=True)}
