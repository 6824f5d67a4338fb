"""Time in collectives split into wire time and waiting for the slowest rank.

Rank 0's engine timers (``bwd_allreduce``) time a collective from its call to its end. When
another rank arrives late, rank 0 waits for it inside the collective, and the timer holds the
wait: with one rank slowed by a sleep in its forward, rank 0's timers read 38-95 % "of a
step" in communication while the collectives themselves took a tenth of the step. The cause
is the slow rank, not the network, and overlap_comm would not help.

``dsmon run``'s probe times every rank: ``comm_ms``, the host time a rank spent blocked in
DeepSpeed's collectives, and its busy time ``total_ms - comm_ms``
(:mod:`dsmon.analysis.ranks`). In data-parallel training the ranks arrive at the gradient
reduction at different times and leave it together, so every rank's step lasts the step's
wall time, and per step, over the ranks that reported it:

- the rank that arrives last (the slowest, most busy rank) waits for no one: its time in
  collectives is the wire time, ``wire_ms = wall_ms - slowest_ms``; it is also the rank that
  spends the least in collectives;
- every other rank's excess over it is waiting for the slowest rank; the fastest rank waits
  most: ``wait_ms = slowest_ms - fastest_ms``.

Both are taken as shares of the step's wall time. This needs collectives that block the host
while they wait, as on DeepSpeed's CPU accelerator (gloo). NCCL on a GPU returns to the host
at once and waits on the device, inside the phases: the ranks are then never seen in a
collective for long, and :func:`split_of` does not split (:data:`BLOCKED_MIN_SHARE`).

Where the probe measured every collective (``coll_wire_ms``, ``coll_max_ms`` of
:func:`dsmon.analysis.ranks.step_stats`, see :mod:`dsmon.analysis.collectives`), the split is
read from the collectives themselves, call by call rather than from whole steps: the wire time
is the sum over the step's kinds of call of the least time any rank spent in them (the rank
that arrived last at each), and the waiting is the most time a rank spent in collectives less
that. It is the better evidence (the busy-time reading holds every difference between the
ranks' steps, a slow data loader's included), and on a GPU it is timed by CUDA events, so the
device's waiting is seen too. A step without it keeps the busy-time reading.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from dsmon.analysis.steps import max_per_step

#: The figure :func:`reduction_wire_shares` gives, as a live dashboard names it to the
#: checklist (``HealthInputs.stats``).
REDUCTION_WIRE_OF_BWD = "wire.allreduce_of_bwd"
#: Columns of :func:`comm_split`.
SPLIT_COLUMNS = ("step", "wall_ms", "wire_ms", "wait_ms", "wire_share", "wait_share")
#: The ranks must be seen blocked in collectives for at least this share of a step (wire
#: plus waiting, medians over the steps) for the split to mean anything. On a GPU a
#: collective call returns at once (NCCL enqueues it), a few microseconds of a step of
#: milliseconds; on the CPU accelerator the reduction alone is several percent of a step.
BLOCKED_MIN_SHARE = 0.01


def comm_split(stats: pd.DataFrame, n_ranks: int | None = None) -> pd.DataFrame:
    """Per step every rank reported: wall time, wire time, waiting, and both as shares.

    From :func:`dsmon.analysis.ranks.step_stats` rows. A step is kept as
    :func:`dsmon.analysis.ranks.stragglers` keeps one (as many ranks as reported any step,
    at least two, and seen in a collective): live, a step missing its slowest rank would
    split wrong. ``n_ranks``: every rank's count when ``stats`` are some steps of a run
    (default: the most ranks a step of ``stats`` was reported by).
    """
    needed = {"step", "ranks", "slowest_ms", "fastest_ms", "wall_ms", "waited"}
    if stats.empty or not needed <= set(stats.columns):
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in SPLIT_COLUMNS})
    n = stats["ranks"].to_numpy(dtype=np.float64)
    every = n.max() if n_ranks is None else n_ranks
    keep = (n >= 2) & (n == every) & (stats["waited"].to_numpy(dtype=np.float64) > 0)
    wall = stats["wall_ms"].to_numpy(dtype=np.float64)[keep]
    slowest = stats["slowest_ms"].to_numpy(dtype=np.float64)[keep]
    fastest = stats["fastest_ms"].to_numpy(dtype=np.float64)[keep]
    coll_wire = _measured(stats, keep, "coll_wire_ms")
    wire, wait = split_ms(wall, slowest, fastest, coll_wire, _measured(stats, keep, "coll_max_ms"))
    with np.errstate(divide="ignore", invalid="ignore"):
        wire_share = np.where(wall > 0, wire / wall, np.nan)
        wait_share = np.where(wall > 0, wait / wall, np.nan)
    return pd.DataFrame(  # fresh arrays, each its own column: not copied into one block
        {
            "step": stats["step"].to_numpy()[keep].astype("int64"),
            "wall_ms": wall,
            "wire_ms": wire,
            "wait_ms": wait,
            "wire_share": wire_share,
            "wait_share": wait_share,
        },
        copy=False,
    )


def reduction_wire_shares(timers: pd.DataFrame, split: pd.DataFrame) -> np.ndarray:
    """Per step of both: (bwd_allreduce - wait) / (bwd - wait), the steps' order kept.

    ``timers``: breakdown rows (``bwd_allreduce_ms``, ``bwd_ms``; the slowest row of a step
    counts); ``split``: :func:`comm_split` rows. Rank 0's ``bwd_allreduce`` holds its wait for
    the slowest rank, and ``bwd`` holds it too; the wait taken out is never more than the
    timer holds. A step whose ``bwd`` is all waiting has no share. One definition for a
    whole run and for the steps a live dashboard adds (:mod:`dsmon.view.wire_steps`).
    """
    rows = timers[["step", "bwd_allreduce_ms", "bwd_ms"]].dropna()
    if rows.empty or split.empty:
        return np.empty(0, dtype=np.float64)
    # the slowest rank's per step, grouped only when a step has several rows (rank 0's
    # timers have one: grouping a million of them cost a long run's first look)
    per_step = pd.DataFrame({c: max_per_step(rows, c) for c in ("bwd_allreduce_ms", "bwd_ms")})
    joined = per_step.join(split.set_index("step")["wait_ms"], how="inner")
    taken = joined[["bwd_allreduce_ms", "wait_ms"]].min(axis=1)  # no more than the timer holds
    base = joined["bwd_ms"] - taken
    share = (joined["bwd_allreduce_ms"] - taken) / base.where(base > 0)
    return share.dropna().to_numpy(dtype=np.float64)


def _measured(stats: pd.DataFrame, keep: np.ndarray, column: str) -> np.ndarray:
    """A collectives column of the kept rows (NaN where, or when, it was not measured)."""
    if column not in stats.columns:
        return np.full(int(keep.sum()), np.nan)
    return stats[column].to_numpy(dtype=np.float64)[keep]


def split_ms(
    wall: np.ndarray,
    slowest: np.ndarray,
    fastest: np.ndarray,
    coll_wire: np.ndarray | None = None,
    coll_max: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Wire time and the waiting of the rank that waited most (ms) per step, never below 0.

    From the step's collectives where the probe measured them (``coll_wire``, ``coll_max``
    not NaN), else from the ranks' busy times. The slowest rank's step can end a little
    before the step's wall time (the ranks leave the last collective within a few
    microseconds of each other), so a difference is clipped at 0.
    """
    wire = np.clip(wall - slowest, 0.0, None)
    wait = np.clip(slowest - fastest, 0.0, None)
    if coll_wire is None or coll_max is None:
        return wire, wait
    measured = ~np.isnan(coll_wire) & ~np.isnan(coll_max)
    wire = np.where(measured, coll_wire, wire)
    wait = np.where(measured, np.clip(coll_max - coll_wire, 0.0, None), wait)
    return wire, wait


class CommSplit(NamedTuple):
    """A run's wire time and waiting, medians over its steady steps, as shares of a step."""

    wire_share: float
    wait_share: float
    wire_ms: float
    wait_ms: float
    steps: int

    def text(self) -> str:
        """``wire 6.5 % of a step, waiting for the slowest rank 31 %`` for evidence and pages."""
        return (
            f"wire time {self.wire_share:.1%} of a step, waiting for the slowest rank "
            f"{self.wait_share:.1%}"
        )


def split_of(
    wire_share: float, wait_share: float, wire_ms: float, wait_ms: float, steps: int
) -> CommSplit | None:
    """The split, or None when it says nothing: no step, or ranks never held in collectives."""
    if steps == 0 or not wire_share + wait_share >= BLOCKED_MIN_SHARE:
        return None
    return CommSplit(wire_share, wait_share, wire_ms, wait_ms, steps)


def held_in_collectives(split: pd.DataFrame) -> bool:
    """Whether :func:`comm_split`'s rows show ranks held in collectives at all.

    Only then does the split mean something: the median step's wire time plus waiting must
    be at least :data:`BLOCKED_MIN_SHARE` (:func:`split_of` asks the same of the medians).
    """
    if split.empty:
        return False
    held = (split["wire_share"] + split["wait_share"]).dropna()
    return not held.empty and bool(held.median() >= BLOCKED_MIN_SHARE)
