"""Step-time breakdowns from the engine's wall-clock timer lines.

DeepSpeed's engine prints two timer lines per optimizer step when ``wall_clock_breakdown``
is on: a ``micro`` line per micro-batch (``fwd_microstep`` ...) and a ``global`` line at the
gradient-accumulation boundary whose values are sums over the whole accumulation window.
``bwd`` already contains ``bwd_inner`` (autograd) and ``bwd_allreduce`` (the gradient
reduction), so a step's total is ``fwd + bwd + step``, never the sum of all five. ZeRO-1/2
add an optimizer line (``optimizer_allgather`` ...) inside ``step``; the breakdown carries
it along because the allgather is the communication hidden inside the step time.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from dsmon.analysis.downsample import N_OUT, downsample
from dsmon.model.joined import concat
from dsmon.store.timers.sql import NO_RANK, OPTIMIZER_TIMERS, PHASES
from dsmon.store.timers.sql import OPTIMIZER as OPTIMIZER_GROUP

PHASE_COLUMNS = tuple(f"{p}_ms" for p in PHASES)
BREAKDOWN_COLUMNS = ("step", "rank", *PHASE_COLUMNS, "total_ms")
MICRO_COLUMNS = ("step", "micro_step", "rank", *PHASE_COLUMNS, "total_ms")
OPTIMIZER_COLUMNS = tuple(f"{t}_ms" for t in OPTIMIZER_TIMERS)
STAT_COLUMNS = ("n", "p50", "p90", "max")


def _group(timers: pd.DataFrame, group: str, columns: Iterable[str] | None = None) -> pd.DataFrame:
    """The timer rows of one group (an empty frame stays empty), of ``columns`` if given.

    Columns the caller reads are picked before the rows: a timer frame has a column per
    timer of every group, and taking the rows of all of them was most of a breakdown's cost.
    """
    if timers.empty or "group" not in timers.columns:
        return timers.iloc[0:0]
    mask = (timers["group"] == group).to_numpy(dtype=bool, na_value=False)
    if columns is None:
        return timers[mask]
    # Each column's rows taken by position, each in its own dtype: ``.loc`` with a mask and
    # a column list took twice this on a live refresh's few rows, and no less on millions.
    at = np.flatnonzero(mask)
    cols = {c: timers[c].array.take(at) for c in dict.fromkeys(columns) if c in timers.columns}
    return pd.DataFrame(cols, index=timers.index.take(at), copy=False)


def _take(rows: pd.DataFrame, keys: tuple[str, ...], names: dict[str, str]) -> pd.DataFrame:
    """Key columns plus the renamed timer columns; a timer the log lacks is all-NaN.

    The columns ``rows`` has as they are are shared, not copied: pandas copies a column of
    the result, or of ``rows``, only when one of them is written to. Copying them all into
    one block cost a 500 MB import's summary a breakdown's size more at its peak (44 MiB).
    """
    n = len(rows)
    cols: dict[str, Any] = {}
    for key in keys:
        cols[key] = rows[key] if key in rows.columns else pd.array([pd.NA] * n, "Int64")
    for src, dst in names.items():
        if src not in rows.columns:
            cols[dst] = np.full(n, np.nan)
        elif rows[src].dtype == np.float64:  # NaN for missing already
            cols[dst] = rows[src]
        else:  # a fresh array, owned by the result alone
            cols[dst] = rows[src].to_numpy(dtype="float64", na_value=np.nan, copy=True)
    return pd.DataFrame(cols, index=rows.index, copy=False)


def _dedupe(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per key: the same line read twice (two copies of one log) counts once.

    Rows whose step is unknown cannot be matched and are all kept.
    """
    if _increasing(frame, keys):  # in key order with no repeat (one rank's lines): as it is
        return frame.reset_index(drop=True)
    known = frame["step"].notna()
    kept = frame[known].drop_duplicates(subset=keys, keep="last")
    out = pd.concat([kept, frame[~known]]) if (~known).any() else kept
    return out.sort_values(keys, kind="stable", na_position="last").reset_index(drop=True)


def _increasing(frame: pd.DataFrame, keys: list[str]) -> bool:
    """Whether every row has all ``keys`` and they strictly increase from row to row."""
    n = len(frame)
    later = np.zeros(max(n - 1, 0), dtype=bool)  # row i+1's keys above row i's so far
    tied = np.ones(max(n - 1, 0), dtype=bool)
    for key in keys:
        values = frame[key].to_numpy(dtype="float64", na_value=np.nan)
        if np.isnan(values).any():
            return False
        later |= tied & (values[1:] > values[:-1])
        tied &= values[1:] == values[:-1]
    return bool(later.all())


#: The phases a step's total adds up (``bwd`` already holds ``bwd_inner`` and ``bwd_allreduce``).
_TOTAL_OF = ("fwd_ms", "bwd_ms", "step_ms")


def _total(frame: pd.DataFrame) -> pd.Series:
    """Total step time: fwd + bwd + step (bwd already holds bwd_inner and bwd_allreduce).

    A missing phase counts as nothing and a row missing all three is NaN, as pandas' row sum
    with ``min_count=1`` gives, to the bit; added column by column in numpy, which took a
    third of that row sum's time on a live refresh's few rows and on 3 M rows alike.
    """
    total = np.zeros(len(frame))
    missing = np.ones(len(frame), dtype=bool)
    for col in _TOTAL_OF:
        values = frame[col].to_numpy(dtype="float64", na_value=np.nan)
        nan = np.isnan(values)
        total += np.where(nan, 0.0, values)
        missing &= nan
    total[missing] = np.nan
    return pd.Series(total, index=frame.index)


def step_breakdown(timers: pd.DataFrame) -> pd.DataFrame:
    """One row per optimizer step and rank from the ``global`` timer lines.

    Args:
        timers: the store's timer frame (``Store.frames.frame(run, "timer")``).

    Returns:
        Columns :data:`BREAKDOWN_COLUMNS` (``total_ms`` = fwd + bwd + step), plus
        ``optimizer_allgather_ms``/``optimizer_gradients_ms``/``optimizer_step_ms`` when
        the log has ZeRO-1/2 optimizer timer lines; sorted by step and rank.
    """
    return group_breakdown(
        _group(timers, "global", ["step", "rank", *PHASE_COLUMNS]),
        _group(timers, OPTIMIZER_GROUP, ["step", "rank", *OPTIMIZER_COLUMNS]),
    )


def paged_totals(pages: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """:func:`step_breakdown`'s rows, ``step``, ``rank`` and ``total_ms`` only, read page by page.

    The timer frame comes as ``Store.frames.pages`` gives it, and only its ``global`` rows'
    step, rank and phase totals are kept. It is what the run's state reads of the timers (the
    highest step, the step time), at a third of the breakdown's memory: a 500 MB import's
    state peaked at 457 MiB with the whole breakdown built page by page, 282 MiB with this.
    """
    rows = [_group(page, "global", ["step", "rank", *_TOTAL_OF]) for page in pages]
    joined = concat(rows)
    rows.clear()
    out = _dedupe(_take(joined, ("step", "rank"), {c: c for c in _TOTAL_OF}), ["step", "rank"])
    return pd.DataFrame({"step": out["step"], "rank": out["rank"], "total_ms": _total(out)})


def stored_breakdown(rows: pd.DataFrame, names: Mapping[str, Collection[str]]) -> pd.DataFrame:
    """:func:`step_breakdown` of a run from the store's timer tables (``Store.timers``).

    ``rows``: ``Store.timers.rows`` (every step, or those a live reader replaces);
    ``names``: ``Store.timers.names``, the timer names each group printed. The result is the
    one :func:`step_breakdown` gives of the run's timer frame, to the dtype, while every
    global timer record has a step (``Store.timers.placed``): an optimizer timer is a column
    when the run printed a ZeRO optimizer line and the frame has that timer's column.
    """
    rank = rows["rank"].to_numpy(dtype="int64")
    cols: dict[str, Any] = {
        "step": pd.array(rows["step"].to_numpy(dtype="int64"), dtype="Int64"),
        "rank": pd.array(np.where(rank == NO_RANK, 0, rank), dtype="Int64"),
    }
    cols["rank"][rank == NO_RANK] = pd.NA
    for col in PHASE_COLUMNS:
        cols[col] = rows[col].to_numpy(dtype="float64")
    # its own columns, not gathered into one block (a copy of a million rows, each time)
    out = pd.DataFrame(cols, copy=False)
    out["total_ms"] = _total(out)
    if OPTIMIZER_GROUP in names:  # (a group's line with no timer names it too: "")
        printed = set().union(*names.values())
        for timer in OPTIMIZER_TIMERS:
            if timer in printed:
                out[f"{timer}_ms"] = rows[f"{timer}_ms"].to_numpy(dtype="float64")
    return out


def group_breakdown(global_rows: pd.DataFrame, opt_rows: pd.DataFrame) -> pd.DataFrame:
    """:func:`step_breakdown` of the ``global`` and ``zero_optimizer`` timer rows, given apart.

    A reader that streams a big run's timers (``dsmon.analysis.summary_scan``) keeps each group in
    its own compact frame and never builds the frame of every timer column.
    """
    names = {f"{p}_ms": f"{p}_ms" for p in PHASES}
    out = _take(global_rows, ("step", "rank"), names)
    out = _dedupe(out, ["step", "rank"])
    out["total_ms"] = _total(out)
    return _with_optimizer(out, opt_rows)


def _with_optimizer(breakdown: pd.DataFrame, opt_rows: pd.DataFrame) -> pd.DataFrame:
    """Attach the ZeRO optimizer timers of the same step and rank, when there are any."""
    present = [t for t in OPTIMIZER_TIMERS if f"{t}_ms" in opt_rows.columns]
    if opt_rows.empty or not present:
        return breakdown
    names = {f"{t}_ms": f"{t}_ms" for t in present}
    known = opt_rows["step"].notna()
    opt = _take(opt_rows if known.all() else opt_rows[known], ("step", "rank"), names)
    if not _increasing(opt, ["step", "rank"]):  # (else no key repeats: nothing to drop)
        opt = opt.drop_duplicates(subset=["step", "rank"], keep="last")
    if _same_keys(breakdown, opt, ["step", "rank"]):  # a line of each per step: no join needed
        return breakdown.assign(**{col: opt[col].to_numpy() for col in names.values()})
    return breakdown.merge(opt, on=["step", "rank"], how="left")


def _same_keys(left: pd.DataFrame, right: pd.DataFrame, keys: list[str]) -> bool:
    """Whether both frames hold the same keys, row for row, none missing."""
    if len(left) != len(right):
        return False
    for key in keys:
        a = left[key].to_numpy(dtype="float64", na_value=np.nan)
        b = right[key].to_numpy(dtype="float64", na_value=np.nan)
        if not np.array_equal(a, b):  # (NaN is equal to nothing: a missing key joins)
            return False
    return True


def micro_breakdown(timers: pd.DataFrame) -> pd.DataFrame:
    """One row per micro-batch from the ``micro`` timer lines (``fwd_microstep`` -> ``fwd_ms``).

    With gradient accumulation these show how the global sums split over micro-batches;
    ``micro_step`` is the 0-based index inside the optimizer step.
    """
    names = {f"{p}_microstep_ms": f"{p}_ms" for p in PHASES}
    keys = ("step", "micro_step", "rank")
    out = _take(_group(timers, "micro", [*keys, *names]), keys, names)
    out = _dedupe(out, ["step", "micro_step", "rank"])
    out["total_ms"] = _total(out)
    return out[list(MICRO_COLUMNS)]


def max_per_step(rows: pd.DataFrame, column: str) -> pd.Series:
    """``rows.groupby("step")[column].max()`` as float64, without grouping when it need not.

    DeepSpeed prints its timers on rank 0 only, so a breakdown usually has one row per step
    already, in step order; grouping a million of them on every live refresh cost more than
    the rest of a rule.
    """
    steps = rows["step"]
    if steps.notna().all():
        order = np.diff(steps.to_numpy(dtype="float64"))
        if (order > 0).all():  # strictly increasing: one row per step, in order
            values = rows[column].to_numpy(dtype="float64")
            return pd.Series(values, index=pd.Index(steps, name="step"), name=column)
    return rows.groupby("step")[column].max().astype("float64")


def step_stats(breakdown: pd.DataFrame) -> pd.DataFrame:
    """p50/p90/max (and count) of every ``*_ms`` column of a breakdown: the timers' figures.

    Over the steps after warm-up (:func:`steady`), one value per step, the slowest rank's
    (the step waits for it): the same definition as every page, the checklist and the
    import summary quote (``ms.<column>`` of :mod:`dsmon.analysis.step_stats`), so a timer's
    median is one number everywhere. Medians, not means: a checkpoint step or an
    evaluation would drag a mean far from what the run normally does.

    Returns:
        One row per timer column (index = column name), columns :data:`STAT_COLUMNS`.
    """
    cols = [c for c in breakdown.columns if c.endswith("_ms")]
    rows_of = steady(breakdown)
    rows = {}
    for col in cols:
        known = rows_of[["step", col]].dropna()  # two columns, not every row's copy
        values = max_per_step(known, col).to_numpy(dtype="float64")
        if values.size == 0:
            rows[col] = (0, float("nan"), float("nan"), float("nan"))
        else:
            p50, p90 = np.quantile(values, [0.5, 0.9])  # one pass for both
            rows[col] = (values.size, float(p50), float(p90), float(values.max()))
    out = pd.DataFrame.from_dict(rows, orient="index", columns=list(STAT_COLUMNS))
    return out.astype({"n": "int64"})


def slowest_steps(breakdown: pd.DataFrame, n: int = 5) -> pd.DataFrame:
    """The ``n`` rows with the largest ``total_ms`` (ties: the earlier step first)."""
    if breakdown.empty:
        return breakdown
    # the n largest (ties at the edge included) first: sorting a million rows each refresh
    # to keep five cost a tenth of a second
    top = breakdown.nlargest(n, "total_ms", keep="all")
    if len(top) < n:  # fewer timed steps than asked: the untimed ones follow, as sorted
        top = breakdown
    ranked = top.sort_values(["total_ms", "step"], ascending=[False, True], kind="stable")
    return ranked.head(n).reset_index(drop=True)


def timed_steps(breakdown: pd.DataFrame) -> int:
    """How many distinct steps a breakdown covers.

    A breakdown of rank 0's timers has one row per step, in order: then that is its length,
    found without hashing a million steps on each live refresh.
    """
    if breakdown.empty:
        return 0
    step = breakdown["step"].to_numpy(dtype="float64", na_value=np.nan)
    if len(step) and not np.isnan(step).any() and bool((step[1:] > step[:-1]).all()):
        return len(step)
    return int(breakdown["step"].nunique())


def ranks_of(frame: pd.DataFrame) -> list[int]:
    """The ranks a frame's rows come from, in order (each once)."""
    if frame.empty or "rank" not in frame.columns:
        return []
    rank = frame["rank"].to_numpy(dtype="float64", na_value=np.nan)
    rank = rank[~np.isnan(rank)]
    if rank.size and rank.min() == rank.max():  # one rank (DeepSpeed's timers: rank 0)
        return [int(rank[0])]
    return [int(r) for r in np.unique(rank)]


def of_rank(breakdown: pd.DataFrame, rank: int) -> pd.DataFrame:
    """The rows of one rank (all rows when none has a rank).

    The breakdown itself when it holds no other rank: DeepSpeed prints its timers on rank 0,
    and a mask over a million rows copied every column of the run on each live refresh.
    """
    known = breakdown["rank"].notna()
    if not known.any() or (known.all() and ranks_of(breakdown) == [rank]):
        return breakdown
    return breakdown[breakdown["rank"] == rank]


def skipped_counts(step_lines: pd.DataFrame) -> pd.DataFrame:
    """``step, skipped`` of each ``step=`` line that has both, in step order (ties: as read).

    DeepSpeed's ``skipped`` is a running count since the start, so the last row holds the
    run's figure. Step-local, so the dashboard keeps it per step (``dsmon.view.fold``)
    instead of sorting every step line of the run on each refresh.
    """
    cols = ["step", "skipped"]
    if step_lines.empty or not set(cols) <= set(step_lines.columns):
        return pd.DataFrame(columns=cols)
    known = step_lines[(step_lines["step"] > 0) & step_lines["skipped"].notna()]
    return known[cols].sort_values("step", kind="stable").reset_index(drop=True)


#: The first optimizer steps are slow for reasons that say nothing about the run (allocator
#: warm-up, kernel selection, first collectives): headline figures leave them out.
WARMUP_STEPS = 2


def steady(frame: pd.DataFrame, warmup: int = WARMUP_STEPS) -> pd.DataFrame:
    """Rows after the warm-up steps; all rows when that would leave none.

    Every headline figure (pages, health checklist, summary) is taken over the same steps.
    """
    if "step" not in frame.columns or frame.empty:
        return frame
    step = frame["step"]
    if step.notna().all() and step.is_monotonic_increasing:
        # in step order (a breakdown is): the rows after the warm-up are a slice, not a copy
        kept = frame.iloc[int(step.searchsorted(warmup, side="right")) :]
    else:
        kept = frame[step.notna() & (step > warmup)]
    return kept if not kept.empty else frame


#: Timer groups of the ZeRO optimizer's own lines (ZeRO-1/2 and ZeRO-3).
ZERO_GROUPS = ("zero_optimizer", "zero3_optimizer")


def zero_rows(timers: pd.DataFrame) -> pd.DataFrame:
    """The timer rows of the ZeRO optimizer's own lines (ZeRO-1/2 and ZeRO-3), in step order."""
    if timers.empty or "group" not in timers.columns:
        return timers.iloc[0:0]
    mask = timers["group"].isin(ZERO_GROUPS).to_numpy(dtype=bool, na_value=False)
    if not mask.any() or "step" not in timers.columns:
        return timers[mask].reset_index(drop=True)
    # only what the chart reads: a timer frame has a column per timer of every group,
    # picked before the rows are (not the values_ms / min_values_ms mappings)
    keys = [k for k in ("step", "rank") if k in timers.columns]
    numbers = [c for c in timers.select_dtypes("number").columns if c.endswith("_ms")]
    zero = timers.loc[mask, [*keys, *numbers]]
    zero = zero[[*keys, *(c for c in numbers if zero[c].notna().any())]]
    if zero["step"].notna().all() and zero["step"].is_monotonic_increasing:
        return zero.reset_index(drop=True)  # in step order already (a log mostly is)
    return zero.sort_values("step", kind="stable", na_position="last").reset_index(drop=True)


def zero_timers(zero: pd.DataFrame, n_out: int = N_OUT) -> tuple[pd.DataFrame, list[str]]:
    """:func:`zero_rows` cut to about ``n_out`` points per timer, and the timers' names.

    At 100k steps these lines are 100k rows a chart would otherwise send whole (5 MB).
    """
    if zero.empty:
        return zero, []
    names = [c[:-3] for c in zero.columns if c.endswith("_ms")]  # zero_rows kept only these
    if not names:
        return zero, names
    cols = [f"{n}_ms" for n in names]
    filled = zero.assign(**{c: zero[c].astype("float64") for c in cols})
    return downsample(filled, "step", cols, n_out=n_out), names
