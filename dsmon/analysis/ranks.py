"""Every rank, not only rank 0: per-rank step times, stragglers and hangs from the probe.

The probe that ``dsmon run`` loads into each rank writes one ``rank_step`` record per rank and
optimizer step, and a ``heartbeat`` saying which phase the rank is in. In data-parallel
training every rank waits for the slowest one at each gradient reduction, so the ranks' step
times (``total_ms``) are nearly equal and say nothing about who is slow: the fast ranks spend
the difference blocked in the collective. What each rank needed by itself is its **busy
time**, ``total_ms - comm_ms`` (host time outside blocking collectives). The straggler score
of a step is the slowest rank's busy time over the median rank's: 1.0 is perfectly balanced.

A hang shows in the heartbeats: a stopped or dead rank stops sending them (*silent*), while
the others keep saying they wait in a collective; a rank that is alive but stuck (a deadlock
in its input pipeline) stays in one phase while the others wait for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dsmon.analysis import collectives
from dsmon.model.records import ENDED_PHASES
from dsmon.store.ranks.sql import PHASE_SUMS, STAT_COLUMNS
from dsmon.store.ranks.tables import BUSY_COLUMNS, PHASE_COLUMNS

RANK_STEP_COLUMNS = (
    "step", "rank", "fwd_ms", "bwd_ms", "step_ms", "comm_ms", "total_ms", "input_ms",
)  # fmt: skip
#: What the probe adds to a step besides its times (probes before 2026-12-05 wrote neither;
#: before 2026-12-06, no loss or gradient norm).
_ENGINE_COLUMNS = ("skipped_steps", "loss_scale", "loss", "grad_norm")
TABLE_COLUMNS = (*RANK_STEP_COLUMNS, "busy_ms", "ts", *_ENGINE_COLUMNS, "coll_ms")
#: One row per step (:func:`step_stats`): what the store keeps in ``rank_step_stats``, less
#: the ``id`` a live reader pages with.
STEP_STAT_COLUMNS = tuple(c for c in STAT_COLUMNS if c != "id")
#: Where a frames mapping (the checklist's inputs, Compare's) holds :func:`step_stats`.
STATS_KEY = "rank_step:stats"
STRAGGLER_COLUMNS = ("step", "ranks", "slowest_rank", "slowest_ms", "median_ms", "score")
#: Up to this many ranks, each rank's busy time is drawn as a line; more as a heatmap.
LINE_RANKS = 16


def _empty(columns: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame(
        {c: pd.Series(dtype="datetime64[ns]" if c == "ts" else "float64") for c in columns}
    )


def rank_step_table(frame: pd.DataFrame, keep_collectives: bool = False) -> pd.DataFrame:
    """One row per step and rank with ``busy_ms`` and ``coll_ms``, from a ``rank_step`` frame.

    The same step of a rank stored twice (a collector restarted on a copied file, a job
    resumed from a checkpoint) counts once, the last stored; rows without a step or rank
    cannot be placed and are dropped. ``keep_collectives``: the records' ``collectives``
    column too (for :func:`dsmon.analysis.collectives.collective_rows`).
    """
    if frame.empty or "rank" not in frame.columns:
        return _empty(TABLE_COLUMNS)
    out = frame.dropna(subset=["step", "rank"]).drop_duplicates(
        subset=["step", "rank"], keep="last"
    )
    out = out.reindex(columns=[*RANK_STEP_COLUMNS, "ts", *_ENGINE_COLUMNS, "collectives"])
    floats = {*RANK_STEP_COLUMNS[2:], *_ENGINE_COLUMNS}
    # column by column, not astype with a mapping: that costs pandas 3 about half a
    # millisecond a column whatever the length, on every refresh of the Steps page
    out = pd.DataFrame(
        {c: out[c].to_numpy("float64", na_value=np.nan) if c in floats else out[c] for c in out},
        index=out.index,
    )
    waited = out["comm_ms"].fillna(0.0)
    out["busy_ms"] = (out["total_ms"] - waited).clip(lower=0.0)
    out["coll_ms"] = _coll_ms(out["collectives"])
    out = out.sort_values(["step", "rank"], kind="stable").reset_index(drop=True)
    return out[[*TABLE_COLUMNS, "collectives"]] if keep_collectives else out[list(TABLE_COLUMNS)]


def _coll_ms(items: pd.Series) -> np.ndarray:
    """Each row's time in timed collectives (ms), its ``collectives``' times summed.

    NaN without a timed one, as the store's ``coll_ms``.
    """
    out = np.full(len(items), np.nan)
    for i, calls in enumerate(items.tolist()):
        times = [
            t
            for c in (calls if isinstance(calls, tuple | list) else ())
            if (t := c.get("time_ms") if isinstance(c, dict) else c.time_ms) is not None
        ]
        if times:
            out[i] = float(sum(times))
    return out


def step_stats(frame: pd.DataFrame) -> pd.DataFrame:
    """Per step: ranks timed, the slowest rank and its busy time, medians, wall time.

    ``ranks`` counts the ranks with a busy time; ``slowest_rank`` is the lowest-numbered of
    equals; ``fastest_ms`` is the least busy rank's busy time (the rank that waited most,
    :mod:`dsmon.analysis.waiting`); ``wall_ms`` is the slowest rank's step time (the step's wall time, see
    :func:`step_wall_ms`); ``waited`` counts the ranks seen blocked in a collective;
    ``skipped_steps`` and ``loss_scale`` are the engine's (the same on every rank), ``loss``
    the lowest rank's, ``grad_norm`` the engine's; ``coll_wire_ms`` is the step's wire time in
    collectives and ``coll_max_ms`` the most time a rank spent in them
    (:mod:`dsmon.analysis.collectives`). The store
    keeps this table as records arrive (``Store.ranks.step_stats``); this is the same from a
    frame, for logs read into memory and for replay positions.
    """
    table = rank_step_table(frame, keep_collectives=True)
    if table.empty:
        return _empty(STEP_STAT_COLUMNS)
    by = table.groupby("step", sort=True)
    timed = table.dropna(subset=["busy_ms"])
    slowest = timed.loc[timed.groupby("step")["busy_ms"].idxmax()].set_index("step")["rank"]
    with_loss = table.dropna(subset=["loss"])  # sorted by step, rank: the lowest rank first
    loss = with_loss.groupby("step")["loss"].first()
    wire = collectives.step_wire_ms(collectives.collective_rows(table))
    out = pd.DataFrame(
        {
            "ts": by["ts"].max(),
            "ranks": by["busy_ms"].count().astype("float64"),
            "slowest_rank": slowest,
            "slowest_ms": by["busy_ms"].max(),
            "median_ms": by["busy_ms"].median(),
            "fastest_ms": by["busy_ms"].min(),
            "wall_ms": by["total_ms"].max(),
            "median_total_ms": by["total_ms"].median(),
            "waited": by["comm_ms"].count().astype("float64"),
            "skipped_steps": by["skipped_steps"].max(),
            "loss_scale": by["loss_scale"].max(),
            "loss": loss,
            "grad_norm": by["grad_norm"].max(),
            "coll_wire_ms": wire,
            "coll_max_ms": by["coll_ms"].max(),
        }
    )
    out.index.name = "step"  # an empty part's index has no name
    return out.reset_index()[list(STEP_STAT_COLUMNS)]


def busy_buckets(table: pd.DataFrame, width: int) -> pd.DataFrame:
    """Each rank's busy time per bucket of ``width`` steps (``step``: the bucket's first).

    From :func:`rank_step_table`; ``busy_ms`` is the mean, ``n`` the steps with a busy time.
    """
    if table.empty:
        return _empty(BUSY_COLUMNS)
    bucket = (table["step"] // width) * width
    by = table.groupby([table["rank"], bucket.rename("step")])["busy_ms"]
    out = by.agg(n="count", total="sum", min_ms="min", max_ms="max").reset_index()
    out["busy_ms"] = out["total"] / out["n"].where(out["n"] > 0)
    out["n"] = out["n"].astype("float64")
    return out[list(BUSY_COLUMNS)]


#: A bucket width that holds every step of any run: :func:`phase_buckets` (and the store's
#: ``ranks.phases``) over the whole run, one row per rank.
WHOLE_RUN = 1 << 40
#: Where a frames mapping (the checklist's inputs) holds each rank's whole-run phases.
PHASES_KEY = "rank_step:phases"


def phase_buckets(table: pd.DataFrame, width: int) -> pd.DataFrame:
    """Each rank's mean time per step in each phase, per bucket of ``width`` steps.

    From :func:`rank_step_table`, as the store's ``ranks.phases`` reads its roll-ups: the
    steps with a busy time count, and a phase a step has no time for adds 0 to it.
    """
    if table.empty:
        return _empty(PHASE_COLUMNS)
    timed = table[table["busy_ms"].notna()]
    bucket = (timed["step"] // width) * width
    filled = timed[list(PHASE_SUMS)].fillna(0.0)
    filled["n"] = 1.0
    by = filled.groupby([timed["rank"], bucket.rename("step")])
    out = by.sum().reset_index()
    for col in PHASE_SUMS:
        out[col] = out[col] / out["n"]
    return out[list(PHASE_COLUMNS)].astype("float64")


#: Columns of :func:`input_shares`.
INPUT_COLUMNS = ("rank", "steps", "input_ms", "total_ms", "share")


def input_shares(phases: pd.DataFrame) -> pd.DataFrame:
    """Per rank, its mean time before its forwards and that time's share of its step.

    The time before the forwards is data loading and the script's host work; largest share
    first (ties: lower rank first). From :func:`phase_buckets` (or ``ranks.phases``) over the whole run, bucket by bucket
    weighted by its steps.
    """
    if phases.empty:
        return _empty(INPUT_COLUMNS)
    n = phases["n"].to_numpy(dtype=np.float64)
    sums = (
        pd.DataFrame(
            {
                "rank": phases["rank"].to_numpy(),
                "steps": n,
                "input": phases["input_ms"].to_numpy(dtype=np.float64) * n,
                "total": phases["total_ms"].to_numpy(dtype=np.float64) * n,
            }
        )
        .groupby("rank", sort=True)
        .sum()
    )
    steps = sums["steps"].where(sums["steps"] > 0)
    out = pd.DataFrame(
        {
            "rank": sums.index.to_numpy(dtype=np.float64),
            "steps": sums["steps"].to_numpy(),
            "input_ms": (sums["input"] / steps).to_numpy(),
            "total_ms": (sums["total"] / steps).to_numpy(),
        }
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        out["share"] = np.where(out["total_ms"] > 0, out["input_ms"] / out["total_ms"], np.nan)
    out = out.sort_values(["share", "rank"], ascending=[False, True], na_position="last")
    return out.reset_index(drop=True)[list(INPUT_COLUMNS)]


def last_beats(heartbeats: pd.DataFrame) -> pd.DataFrame:
    """Each rank's newest heartbeat (by time, then line): what the checklist and page read.

    The store keeps their ids as heartbeats arrive (``Store.ranks.last_heartbeats``).
    """
    if heartbeats.empty or "rank" not in heartbeats.columns:
        return heartbeats
    known = heartbeats.dropna(subset=["rank", "ts"])
    newest = known.sort_values(["ts", "line"], kind="stable").groupby("rank").tail(1)
    return newest.sort_values("rank").reset_index(drop=True)


def step_wall_ms(stats: pd.DataFrame) -> pd.Series:
    """Each optimizer step's wall time as the probe measured it: the slowest rank's ``total_ms``.

    From :func:`step_stats`. For a run without engine timer lines (DeepSpeed's default log
    level) it is the only step time there is; it also holds what the script does between
    steps (data loading, logging).
    """
    if stats.empty or not {"step", "wall_ms"} <= set(stats.columns):
        return pd.Series(dtype="float64")
    rows = stats[["step", "wall_ms"]].dropna()
    return rows.set_index("step")["wall_ms"].astype("float64").rename("total_ms")


def straggler_baseline_ms(ranks: np.ndarray, median: np.ndarray, fastest: np.ndarray) -> np.ndarray:
    """What a step's slowest rank is compared with: the median rank's busy time.

    On two ranks it is the other rank's: the median of two holds half the slowest rank's own
    time (see :func:`stragglers`). One definition for the whole run's figures and the live ones.
    """
    return np.where(ranks == 2, fastest, median)


def stragglers(stats: pd.DataFrame) -> pd.DataFrame:
    """Per step seen by every rank: the slowest rank, its busy time, the median, the score.

    From :func:`step_stats`. ``score`` = slowest busy time / ``median_ms``, the median busy
    time of the step's ranks, except on two ranks: there it is the other rank's, since the
    median of two is half the slowest rank's own time (a rank twice as busy as its peer
    scored 1.33, under the fail line, and looked half as slow as it is). A step is kept when
    as many ranks reported it as reported any step (and at least two): live, the newest
    step's lines arrive rank by rank, and a step missing its slowest rank would misname it.
    """
    if stats.empty:
        return _empty(STRAGGLER_COLUMNS)
    n = stats["ranks"].to_numpy()
    keep = (n >= 2) & (n == n.max())  # one pass, one copy: a million steps live
    if not keep.any():
        return _empty(STRAGGLER_COLUMNS)
    slowest = stats["slowest_ms"].to_numpy()[keep]
    median = straggler_baseline_ms(
        n[keep], stats["median_ms"].to_numpy()[keep], stats["fastest_ms"].to_numpy()[keep]
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.where(median > 0, slowest / median, np.nan)
    return pd.DataFrame(
        {
            "step": stats["step"].to_numpy()[keep].astype("int64"),
            "ranks": n[keep],
            "slowest_rank": stats["slowest_rank"].to_numpy()[keep].astype("int64"),
            "slowest_ms": slowest,
            "median_ms": median,
            "score": score,
        }
    )


def slowest_counts(strag: pd.DataFrame) -> pd.DataFrame:
    """How often each rank was the slowest: columns ``rank``, ``steps``, ``share``."""
    counts = strag["slowest_rank"].value_counts() if not strag.empty else pd.Series()
    return counts_table(dict(zip(counts.index.astype(int), counts.to_numpy(), strict=True)))


def counts_table(counts: Mapping[int, int]) -> pd.DataFrame:
    """Steps per slowest rank as :func:`slowest_counts`' table, most often slowest first."""
    if not counts:
        return pd.DataFrame({"rank": [], "steps": [], "share": []})
    out = pd.DataFrame({"rank": list(counts), "steps": list(counts.values())}, dtype="int64")
    out["share"] = out["steps"] / out["steps"].sum()
    return out.sort_values(["steps", "rank"], ascending=[False, True]).reset_index(drop=True)


# --- heartbeats ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RankState:
    """A rank's newest heartbeat, seen from ``now``: how long it has been silent and in phase."""

    rank: int
    step: int | None
    phase: str
    collective: str | None
    last_seen: pd.Timestamp
    silent_s: float
    in_phase_s: float
    error: str | None = None  # the uncaught exception of a ``failed`` rank

    def where(self) -> str:
        """The phase in words: ``backward's all_reduce of step 1,203``."""
        if self.phase in ENDED_PHASES:
            done = (
                f" after step {self.step - 1:,}" if self.step is not None and self.step > 1 else ""
            )
            failed = f" on {self.error}" if self.error else " on an uncaught exception"
            return "exited" + done if self.phase == "exited" else "failed" + done + failed
        if self.phase == "outside":
            what = "code outside the engine (data loading or the script's own)"
        elif self.phase == "start":
            what = "its first engine call"
        elif self.phase == "init":
            return "deepspeed.initialize (the engine being built)"
        elif self.phase == "idle":
            return "the script's own code before step 1 (the engine is built)"
        else:
            what = f"{self.phase}'s {self.collective}" if self.collective else self.phase
        return f"{what} of step {self.step:,}" if self.step is not None else what


def rank_states(heartbeats: pd.DataFrame, now: pd.Timestamp) -> list[RankState]:
    """The newest heartbeat of every rank (by time, then line, as :func:`last_beats`), in rank order.

    Read row by row in Python: the frames it is given hold a row or a few per rank, and the
    run's state asks for it up to four times on every page (the status line, the hang, stall
    and crash verdicts), where pandas' sorts and ``iterrows`` cost 8 ms a call, a third of
    the Health page's script, for eight rows.
    """
    if heartbeats.empty or "phase" not in heartbeats.columns:
        return []
    errors = heartbeats["error"] if "error" in heartbeats.columns else [None] * len(heartbeats)
    rows = zip(*(heartbeats[c].tolist() for c in _BEAT_COLUMNS), list(errors), strict=True)
    newest: dict[int, _Beat] = {}
    for row in rows:
        rank, ts = row[0], row[1]
        if _missing(rank) or _missing(ts):
            continue
        held = newest.get(int(rank))
        if held is None or _order(row) >= _order(held):  # the later row of equal keys wins
            newest[int(rank)] = row
    return [_rank_state(row, now) for _, row in sorted(newest.items())]


#: What :func:`rank_states` reads of a heartbeat, in this order (then ``error``, if present).
_BEAT_COLUMNS = ("rank", "ts", "line", "step", "phase", "collective", "phase_since")
#: A heartbeat's values of :data:`_BEAT_COLUMNS` and its error, as Python objects.
_Beat = tuple[Any, ...]


def _missing(value: Any) -> bool:
    """Whether a value read from a frame is missing (None, NaN, NaT or NA)."""
    return bool(pd.isna(value))


def _order(row: _Beat) -> tuple[Any, bool, Any]:
    """A heartbeat's place in time: its ``ts``, then its line (a missing line sorts last)."""
    line = row[2]
    missing = _missing(line)
    return row[1], missing, 0 if missing else line


def _rank_state(row: _Beat, now: pd.Timestamp) -> RankState:
    """One rank's state from its newest heartbeat (a row of :data:`_BEAT_COLUMNS` and error)."""
    rank, ts, _, step, phase, collective, since, error = row
    seen = pd.Timestamp(ts)
    start: pd.Timestamp = seen if _missing(since) else pd.Timestamp(since)
    return RankState(
        rank=int(rank),
        step=None if _missing(step) else int(step),
        phase=str(phase),
        collective=None if _missing(collective) else str(collective),
        last_seen=seen,
        silent_s=(now - seen).total_seconds(),
        in_phase_s=(now - start).total_seconds(),
        error=None if _missing(error) else str(error),
    )


@dataclass(frozen=True, slots=True)
class Hang:
    """The ranks that hold the job up and the ranks left waiting for them.

    ``silent``: the culprits stopped sending heartbeats (stopped, dead, or stuck holding
    Python's lock); else they are alive but stuck in one phase.
    """

    culprits: tuple[RankState, ...]
    waiting: tuple[RankState, ...]
    silent: bool


def find_hang(
    states: Sequence[RankState], silent_limit_s: float, stuck_limit_s: float
) -> Hang | None:
    """The hang the heartbeats show, or None.

    A rank silent for more than ``silent_limit_s`` while another still sends heartbeats is a
    culprit. Without silent ranks, ranks in one phase for more than ``stuck_limit_s`` are
    stuck; of those, the ones *not* inside a collective hold the others up (a rank waiting in
    an all-reduce is waiting for someone), else the ones at the lowest step. Ranks stuck in
    their own code while no rank waits in a collective hold nobody up (a silent start, an
    evaluation between steps): None. When every rank is silent nothing can be told (the run
    ended, or the collector stopped): None.
    """
    active = [s for s in states if s.phase not in ENDED_PHASES]
    silent = tuple(s for s in active if s.silent_s > silent_limit_s)
    alive = tuple(s for s in active if s.silent_s <= silent_limit_s)
    if silent:
        return Hang(silent, alive, True) if alive else None
    stuck = [s for s in alive if s.in_phase_s > stuck_limit_s]
    if not stuck:
        return None
    culprits = [s for s in stuck if s.collective is None]
    if culprits and not any(s.collective for s in alive):
        return None  # nobody waits in a collective: busy (loading, evaluating), not hung
    if not culprits:
        low = min((s.step for s in stuck if s.step is not None), default=None)
        culprits = [s for s in stuck if s.step == low] or stuck
    blamed = {s.rank for s in culprits}
    return Hang(tuple(culprits), tuple(s for s in alive if s.rank not in blamed), False)
