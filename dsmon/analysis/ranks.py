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

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from dsmon.model.records import ENDED_PHASES

RANK_STEP_COLUMNS = ("step", "rank", "fwd_ms", "bwd_ms", "step_ms", "comm_ms", "total_ms")
TABLE_COLUMNS = (*RANK_STEP_COLUMNS, "busy_ms")
STRAGGLER_COLUMNS = ("step", "ranks", "slowest_rank", "slowest_ms", "median_ms", "score")


def rank_step_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per step and rank with ``busy_ms``, from the store's ``rank_step`` frame.

    The same line read twice (a collector restarted on a copied file) counts once; rows
    without a step or rank cannot be placed and are dropped.
    """
    if frame.empty or "rank" not in frame.columns:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in TABLE_COLUMNS})
    out = frame[list(RANK_STEP_COLUMNS)].dropna(subset=["step", "rank"])
    out = out.drop_duplicates(subset=["step", "rank"], keep="last")
    out = out.astype({c: "float64" for c in RANK_STEP_COLUMNS[2:]})
    waited = out["comm_ms"].fillna(0.0)
    out["busy_ms"] = (out["total_ms"] - waited).clip(lower=0.0)
    return out.sort_values(["step", "rank"], kind="stable").reset_index(drop=True)


def step_wall_ms(rank_steps: pd.DataFrame) -> pd.Series:
    """Each optimizer step's wall time as the probe measured it: the slowest rank's ``total_ms``.

    For a run without engine timer lines (DeepSpeed's default log level) it is the only step
    time there is; it also holds what the script does between steps (data loading, logging).
    """
    if rank_steps.empty or not {"step", "total_ms"} <= set(rank_steps.columns):
        return pd.Series(dtype="float64")
    rows = rank_steps[["step", "total_ms"]].dropna()
    return rows.groupby("step")["total_ms"].max().astype("float64")


def stragglers(table: pd.DataFrame) -> pd.DataFrame:
    """Per step seen by every rank: the slowest rank, its busy time, the median, the score.

    ``score`` = slowest busy time / median busy time over the step's ranks. A step is kept
    when as many ranks reported it as reported any step (and at least two): live, the newest
    step's lines arrive rank by rank, and a step missing its slowest rank would misname it.
    """
    valid = table.dropna(subset=["busy_ms"])
    counts = valid.groupby("step")["busy_ms"].transform("size")
    valid = valid[(counts >= 2) & (counts == (counts.max() if len(counts) else 0))]
    if valid.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in STRAGGLER_COLUMNS})
    by_step = valid.groupby("step")["busy_ms"]
    slow = valid.loc[by_step.idxmax()].set_index("step")
    out = pd.DataFrame(
        {
            "ranks": by_step.size(),
            "slowest_rank": slow["rank"].astype("int64"),
            "slowest_ms": slow["busy_ms"],
            "median_ms": by_step.median(),
        }
    )
    out["score"] = out["slowest_ms"] / out["median_ms"].where(out["median_ms"] > 0)
    out = out.reset_index()
    out["step"] = out["step"].astype("int64")
    return out[list(STRAGGLER_COLUMNS)]


def slowest_counts(strag: pd.DataFrame) -> pd.DataFrame:
    """How often each rank was the slowest: columns ``rank``, ``steps``, ``share``."""
    if strag.empty:
        return pd.DataFrame({"rank": [], "steps": [], "share": []})
    counts = strag["slowest_rank"].value_counts()
    out = pd.DataFrame({"rank": counts.index.astype(int), "steps": counts.to_numpy()})
    out["share"] = out["steps"] / len(strag)
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
        else:
            what = f"{self.phase}'s {self.collective}" if self.collective else self.phase
        return f"{what} of step {self.step:,}" if self.step is not None else what


def rank_states(heartbeats: pd.DataFrame, now: pd.Timestamp) -> list[RankState]:
    """The newest heartbeat of every rank, in rank order."""
    if heartbeats.empty or "phase" not in heartbeats.columns:
        return []
    known = heartbeats.dropna(subset=["rank", "ts"])
    newest = known.sort_values(["ts", "line"], kind="stable").groupby("rank").tail(1)
    out = []
    for _, row in newest.sort_values("rank").iterrows():
        since = pd.Timestamp(row["phase_since"]) if pd.notna(row["phase_since"]) else row["ts"]
        out.append(
            RankState(
                rank=int(row["rank"]),
                step=None if pd.isna(row["step"]) else int(row["step"]),
                phase=str(row["phase"]),
                collective=None if pd.isna(row["collective"]) else str(row["collective"]),
                last_seen=row["ts"],
                silent_s=(now - row["ts"]).total_seconds(),
                in_phase_s=(now - since).total_seconds(),
                error=str(row["error"]) if pd.notna(row.get("error")) else None,
            )
        )
    return out


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
    an all-reduce is waiting for someone), else the ones at the lowest step. When every rank
    is silent nothing can be told (the run ended, or the collector stopped): None.
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
    if not culprits:
        low = min((s.step for s in stuck if s.step is not None), default=None)
        culprits = [s for s in stuck if s.step == low] or stuck
    blamed = {s.rank for s in culprits}
    return Hang(tuple(culprits), tuple(s for s in alive if s.rank not in blamed), False)
