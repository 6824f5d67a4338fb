"""How much of a step is communication, and which collectives cost what.

The engine timers measure communication that the step waits for (``bwd_allreduce``, the
gradient reduction after backward, and ZeRO-1/2's ``optimizer_allgather`` inside the
optimizer step): this is *exposed* communication, the part that did not overlap with
compute. Communication hidden in hooks during backward (``overlap_comm``) or in ZeRO-3's
parameter prefetch is invisible to these timers, so the share is a lower bound on what the
network does and an upper bound on what it costs. The comms logger (``comm_op`` and
``comm_summary`` records) gives the per-collective view.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from dsmon.analysis.steps import max_per_step, steady

#: The comms logger's own barrier before printing its table: not the training's traffic.
LOGGER_OPS = frozenset({"log_summary_barrier"})
COMM_SHARE_COLUMNS = ("step", "rank", "exposed_comm_ms", "total_ms", "comm_share")
COMM_OPS_COLUMNS = (
    "op",
    "count",
    "total_bytes",
    "total_latency_ms",
    "avg_latency_ms",
    "algbw_gbps",
    "busbw_gbps",
)


def comm_share(breakdown: pd.DataFrame) -> pd.DataFrame:
    """Exposed communication per step: ``bwd_allreduce`` (+ ``optimizer_allgather``) vs total.

    Args:
        breakdown: :func:`dsmon.analysis.steps.step_breakdown` output.

    Returns:
        Columns :data:`COMM_SHARE_COLUMNS`; ``comm_share`` is a fraction of ``total_ms``
        (0.25 = a quarter of the step), NaN when the step has no timing.
    """
    if breakdown.empty:
        return pd.DataFrame(columns=list(COMM_SHARE_COLUMNS))
    # numpy, not pandas arithmetic: the checklist and the Communication page take this over
    # every step on each live refresh, and at a million steps pandas' aligned, masked
    # operations and frame copies were most of the checklist's time
    comm = _floats(breakdown["bwd_allreduce_ms"])
    if "optimizer_allgather_ms" in breakdown.columns:
        comm = _add_known(comm, _floats(breakdown["optimizer_allgather_ms"]))
    total = _floats(breakdown["total_ms"])
    share = _divided(comm, total)
    return pd.DataFrame(
        {
            "step": breakdown["step"].array,
            "rank": breakdown["rank"].array,
            "exposed_comm_ms": comm,
            "total_ms": total,
            "comm_share": share,
        },
        copy=False,  # fresh arrays: stacking them into one block copied them again
    )


def _floats(column: pd.Series) -> np.ndarray:
    """A column as float64 with NaN for missing values (a fresh array, never a view)."""
    return column.to_numpy(dtype="float64", na_value=np.nan, copy=True)


def _divided(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``num / den``, NaN where ``den`` is not positive (or either is missing)."""
    out = np.full(len(den), np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


def _add_known(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a + b`` where one side may be missing (NaN only where both are)."""
    out = a + b  # NaN where either is missing, then the known side copied in there
    np.copyto(out, b, where=np.isnan(a))
    np.copyto(out, a, where=np.isnan(b))
    return out


class ShareStats(NamedTuple):
    """A share over a run's steps: median and 90th percentile, and how many steps."""

    p50: float
    p90: float
    steps: int


def per_step(values: pd.DataFrame, column: str) -> pd.Series:
    """One value per optimizer step: the largest across ranks (the rank others wait for).

    Every page, rule and summary reads a per-rank share through this one reduction, so the
    same figure is never shown two ways (a median over rows and over steps differ as soon
    as ranks or steps are uneven).
    """
    if values.empty or column not in values.columns:
        return pd.Series(dtype="float64")
    # no copy of the frame when nothing is missing (a timed step always has its total)
    kept = values if values[column].notna().all() else values.dropna(subset=[column])
    if "step" not in kept.columns or kept["step"].isna().all():
        return kept[column].astype("float64").reset_index(drop=True)
    return max_per_step(kept, column)


def share_stats(values: pd.DataFrame, column: str) -> ShareStats | None:
    """Median and p90 over steps of :func:`per_step`; None when no step has the value."""
    s = per_step(values, column)
    if s.empty:
        return None
    return ShareStats(*median_p90(s.to_numpy(dtype="float64", copy=True)), len(s))


def median(values: pd.Series) -> float:
    """``values.median()`` as float (NaN for no value), taken by numpy on a copy.

    The same number as pandas' (which drops NaN, then asks numpy), without its extra copies:
    pages and rules take medians over every step on each live refresh.
    """
    known = _floats(values)
    known = known[~np.isnan(known)]
    return float(np.median(known, overwrite_input=True)) if known.size else float("nan")


def median_p90(values: np.ndarray) -> tuple[float, float]:
    """``Series.median()`` and ``Series.quantile(0.9)`` of values without NaN, the same numbers.

    numpy on an array the caller gives up (it is partly sorted in place): pandas' own path
    copies the values twice more and sorts them twice, which on every live refresh of a
    million steps was a third of the checklist's time. The percentile is taken at
    ``0.9 * 100``, as pandas asks numpy for it, so no last digit differs.
    """
    p50 = float(np.median(values, overwrite_input=True))
    return p50, float(np.percentile(values, 0.9 * 100.0, overwrite_input=True))


def exposed_comm_share(breakdown: pd.DataFrame) -> ShareStats | None:
    """The run's exposed-communication share of step time (the one definition dsmon uses).

    Over the steps after warm-up (:func:`dsmon.analysis.steps.steady`), slowest rank per step.
    """
    return steady_share_stats(comm_share(breakdown))


def steady_share_stats(shares: pd.DataFrame) -> ShareStats | None:
    """:func:`exposed_comm_share` from :func:`comm_share`'s rows, for a caller that has them.

    The share is row by row, so the steady rows of the shares are the shares of the steady
    steps: computed once, not twice, on each refresh of a long run.
    """
    return share_stats(steady(shares), "comm_share")


#: The timers read as a share of what holds them: (timer, its column, :func:`timer_ratios`
#: column, the timer that holds it, its column). ``bwd`` holds ``bwd_allreduce`` (bwd =
#: bwd_inner + bwd_allreduce); ZeRO-1/2's ``optimizer_allgather`` runs after the optimizer
#: step, inside ``step``, so it is read against the whole step (fwd + bwd + step), never
#: against ``fwd``, which it has nothing to do with. Every page, rule and summary quotes these.
PHASE_SHARES = (
    ("bwd_allreduce", "bwd_allreduce_ms", "allreduce_of_bwd", "bwd", "bwd_ms"),
    ("optimizer_allgather", "optimizer_allgather_ms", "allgather_of_step", "the step", "total_ms"),
)


def _last_summary_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows of the last ``log_summary()`` table per file: each table is cumulative so far."""
    rows = frame[frame["table"] == "summary"] if "table" in frame.columns else frame
    if rows.empty:
        return rows
    files = rows["file"].astype(object).where(rows["file"].notna(), "")
    last = rows.groupby(files)["table_index"].transform("max")
    return rows[rows["table_index"] == last]


def _weighted(values: pd.Series, weights: pd.Series) -> float:
    """Mean of ``values`` weighted by ``weights``, over rows where both are known."""
    ok = values.notna() & weights.notna()
    w = weights[ok].astype("float64")
    if not ok.any() or w.sum() == 0:
        return float("nan")
    return float((values[ok].astype("float64") * w).sum() / w.sum())


def _from_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per-op totals from summary-table rows (one row per op, caller and message size)."""
    out = []
    for op, g in rows.groupby("op", sort=True):
        count = g["count"].astype("float64")
        nbytes = (g["msg_size_bytes"].astype("float64") * count).sum(min_count=1)
        latency = g["total_latency_ms"].astype("float64").sum(min_count=1)
        n = count.sum(min_count=1)
        out.append(
            (
                op,
                n,
                nbytes,
                latency,
                latency / n if n else float("nan"),
                _weighted(g["algbw_avg_gbps"], g["count"]),
                _weighted(g["busbw_avg_gbps"], g["count"]),
            )
        )
    return pd.DataFrame(out, columns=list(COMM_OPS_COLUMNS))


def _from_ops(rows: pd.DataFrame) -> pd.DataFrame:
    """Per-op totals from verbose comms-logger lines (one row per collective call)."""
    g = rows.groupby("op", sort=True)
    out = pd.DataFrame(
        {
            "count": g.size().astype("float64"),
            "total_bytes": g["msg_size_bytes"].sum(min_count=1).astype("float64"),
            "total_latency_ms": g["latency_ms"].sum(min_count=1).astype("float64"),
            "avg_latency_ms": g["latency_ms"].mean().astype("float64"),
            "algbw_gbps": g["algbw_gbps"].mean().astype("float64"),
            "busbw_gbps": g["busbw_gbps"].mean().astype("float64"),
        }
    )
    return out.rename_axis("op").reset_index()[list(COMM_OPS_COLUMNS)]


def comm_ops(frame: pd.DataFrame) -> pd.DataFrame:
    """Per collective: calls, bytes moved, latency and bandwidth.

    Args:
        frame: a ``comm_summary`` frame (the ``log_summary()`` table; only the last table
            of each file is used, since each one repeats the totals so far) or a
            ``comm_op`` frame (one row per verbose comms-logger line).

    Returns:
        Columns :data:`COMM_OPS_COLUMNS`, one row per op sorted by name; bandwidths are
        call-weighted means in Gbps as DeepSpeed prints them. The logger's own
        ``log_summary_barrier`` is left out.
    """
    if frame.empty or "op" not in frame.columns:
        return pd.DataFrame(columns=list(COMM_OPS_COLUMNS))
    frame = frame[~frame["op"].isin(LOGGER_OPS)]
    if "total_latency_ms" in frame.columns:
        out = _from_summary(_last_summary_table(frame))
    else:
        out = _from_ops(frame)
    return out.astype({"count": "Int64"})


SIZE_COLUMNS = (
    "op",
    "msg_size_bytes",
    "count",
    "total_latency_ms",
    "avg_latency_ms",
    "algbw_gbps",
    "busbw_gbps",
)


def comm_by_size(frame: pd.DataFrame) -> pd.DataFrame:
    """Per collective and message size: calls, latency, bandwidth.

    One average over every size says little: a 4-byte all-reduce and a 3.5 MB one reach very
    different bandwidths, and the small ones (latency-bound) hide what the link does with the
    buckets that matter. ``log_summary()`` prints one row per size; verbose lines are grouped
    by their size here. Columns :data:`SIZE_COLUMNS`, sorted by op and size.
    """
    if frame.empty or "op" not in frame.columns or "msg_size_bytes" not in frame.columns:
        return pd.DataFrame(columns=list(SIZE_COLUMNS))
    frame = frame[~frame["op"].isin(LOGGER_OPS)]
    if "total_latency_ms" in frame.columns:
        rows = _last_summary_table(frame)
        out = [
            (
                op,
                size,
                g["count"].astype("float64").sum(min_count=1),
                g["total_latency_ms"].astype("float64").sum(min_count=1),
                _weighted(g["avg_latency_ms"], g["count"]),  # as printed, per caller
                _weighted(g["algbw_avg_gbps"], g["count"]),
                _weighted(g["busbw_avg_gbps"], g["count"]),
            )
            for (op, size), g in rows.groupby(["op", "msg_size_bytes"], sort=True)
        ]
        table = pd.DataFrame(out, columns=list(SIZE_COLUMNS))
    else:
        g = frame.groupby(["op", "msg_size_bytes"], sort=True)
        table = pd.DataFrame(
            {
                "count": g.size().astype("float64"),
                "total_latency_ms": g["latency_ms"].sum(min_count=1).astype("float64"),
                "avg_latency_ms": g["latency_ms"].mean().astype("float64"),
                "algbw_gbps": g["algbw_gbps"].mean().astype("float64"),
                "busbw_gbps": g["busbw_gbps"].mean().astype("float64"),
            }
        ).reset_index()
    return table[list(SIZE_COLUMNS)].astype({"count": "Int64"}).reset_index(drop=True)


def logged_time_exceeds(ops: pd.DataFrame, run_ms: float | None) -> bool | None:
    """Whether the comms logger's summed latency is more than the run took (None: unknown).

    The logger times each collective from its call to its end on the host; on some back-ends
    (the CPU accelerator's gloo, collectives it times while another runs) the sum comes out
    above the run's own duration, and its figures cannot be read as time spent.
    """
    if ops.empty or run_ms is None or run_ms <= 0 or "total_latency_ms" not in ops.columns:
        return None
    return bool(ops["total_latency_ms"].astype("float64").sum() > run_ms)


def run_ms(breakdown: pd.DataFrame, stamped: Sequence[pd.DataFrame]) -> float | None:
    """How long the run trained, to judge the comms logger's total against.

    Its engine timers summed over steps (slowest rank), else the time between the first and
    last training lines that carry a timestamp (``stamped``).
    """
    s = per_step(breakdown, "total_ms")
    if not s.empty:
        return float(s.sum())
    stamps = [f["ts"].dropna() for f in stamped if not f.empty and "ts" in f.columns]
    stamps = [t for t in stamps if not t.empty]
    if not stamps:
        return None
    span = max(t.max() for t in stamps) - min(t.min() for t in stamps)
    return float(span.total_seconds() * 1000.0) or None


def timer_ratios(breakdown: pd.DataFrame) -> pd.DataFrame:
    """Per row: each :data:`PHASE_SHARES` timer as a fraction of the timer that holds it.

    ``allreduce_of_bwd`` = bwd_allreduce / bwd, ``allgather_of_step`` = optimizer_allgather /
    (fwd + bwd + step); NaN where a timer is missing or its base is not positive.
    """
    cols = ["step", "rank", *(ratio for _, _, ratio, _, _ in PHASE_SHARES)]
    if breakdown.empty:
        return pd.DataFrame(columns=cols)
    out: dict[str, Any] = {"step": breakdown["step"].array, "rank": breakdown["rank"].array}
    for _, num, ratio, _, den in PHASE_SHARES:
        out[ratio] = _share(breakdown, num, den)
    return pd.DataFrame(out, copy=False)


def _share(breakdown: pd.DataFrame, num: str, den: str) -> np.ndarray:
    """``num / den`` per row, NaN where either is missing or ``den`` is not positive."""
    if num not in breakdown.columns or den not in breakdown.columns:
        return np.full(len(breakdown), np.nan)
    return _divided(_floats(breakdown[num]), _floats(breakdown[den]))


def step_overlap(breakdown: pd.DataFrame, comm_op_frame: pd.DataFrame) -> pd.DataFrame:
    """Per step: T_compute, T_comm, T_step and the overlap estimate (share of the smaller).

    T_comm is the comms logger's summed latency of the step's collectives, T_compute is
    ``fwd + bwd_inner + step`` and T_step is ``total_ms``; overlap is
    ``(T_compute + T_comm - T_step) / min(T_compute, T_comm)`` clipped to [0, 1]. Empty
    without verbose comms-logger lines (``comm_op`` records carry the step).
    """
    cols = ["step", "compute_ms", "comm_ms", "step_ms", "overlap"]
    if breakdown.empty or comm_op_frame.empty or "latency_ms" not in comm_op_frame.columns:
        return pd.DataFrame(columns=cols)
    comm = comm_op_frame.dropna(subset=["step"]).groupby("step")["latency_ms"].sum(min_count=1)
    bd = breakdown.groupby("step")[["fwd_ms", "bwd_inner_ms", "step_ms", "total_ms"]].median()
    out = pd.DataFrame({"compute_ms": bd["fwd_ms"] + bd["bwd_inner_ms"] + bd["step_ms"]})
    out["comm_ms"] = comm.reindex(out.index).astype("float64")
    out["step_ms"] = bd["total_ms"]
    smaller = out[["compute_ms", "comm_ms"]].min(axis=1)
    hidden = out["compute_ms"] + out["comm_ms"] - out["step_ms"]
    out["overlap"] = (hidden / smaller.where(smaller > 0)).clip(0.0, 1.0)
    return out.dropna(subset=["comm_ms"]).rename_axis("step").reset_index()[cols]
