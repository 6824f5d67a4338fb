"""The whole-run figures over steps that the checklist and the Communication page quote.

Each figure here is a median (and 90th percentile) of values taken from the rows of a run's
step breakdown after warm-up: the exposed-communication share per step, a timer's share of
its phase, and the like. Each is named once, with the function giving its values, so the
checklist on a log file (values of the whole breakdown, :func:`ranked`) and a live dashboard
(values of each step once, kept sorted: ``dsmon.view.quantiles``) quote the same number.

A values function must read nothing but the rows it is given, and those rows are always
whole steps: the values of a run are then the values of its steps taken in any parts.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from dsmon.analysis import comm, steps
from dsmon.analysis.percentiles import Percentiles

#: Per step (slowest rank): exposed communication as a fraction of the step's total.
COMM_SHARE = "comm_share"
#: Per breakdown row with a share: the exposed communication, and the step total (ms).
EXPOSED_COMM_MS = "rows.exposed_comm_ms"
STEP_TOTAL_MS = "rows.total_ms"
#: Per step: ``bwd_allreduce`` as a fraction of ``bwd``, and ZeRO-1/2's ``optimizer_allgather``
#: as a fraction of the step (:data:`dsmon.analysis.comm.PHASE_SHARES`).
ALLREDUCE_OF_BWD = "share.allreduce_of_bwd"
ALLGATHER_OF_STEP = "share.allgather_of_step"
#: The engine timers whose median per step (slowest rank, after warm-up) every page quotes as
#: ``<timer> p50``: ``ms.<column>``.
TIMER_COLUMNS = (*steps.PHASE_COLUMNS, "total_ms", *steps.OPTIMIZER_COLUMNS)

ValuesFn = Callable[[pd.DataFrame], np.ndarray]


def _per_step(frame: pd.DataFrame, column: str) -> np.ndarray:
    """:func:`dsmon.analysis.comm.per_step` as floats (the slowest rank of each step)."""
    return comm.per_step(frame, column).to_numpy(dtype=np.float64)


def _with_share(column: str) -> ValuesFn:
    """``column`` of :func:`comm.comm_share` on the rows whose share is known."""

    def values(rows: pd.DataFrame) -> np.ndarray:
        shares = comm.comm_share(rows)
        known = shares["comm_share"].notna().to_numpy()
        return shares[column].to_numpy(dtype=np.float64, na_value=np.nan)[known]

    return values


def _ratio(column: str) -> ValuesFn:
    """A :func:`comm.timer_ratios` column (a fraction), per step."""
    return lambda rows: _per_step(comm.timer_ratios(rows), column)


def _timer_ms(column: str) -> ValuesFn:
    """A breakdown column, per step (none when the breakdown has no such column)."""
    return lambda rows: _per_step(rows, column)


#: Every figure by name: its values from some whole steps' breakdown rows, after warm-up.
STEP_STATS: dict[str, ValuesFn] = {
    COMM_SHARE: lambda rows: _per_step(comm.comm_share(rows), "comm_share"),
    EXPOSED_COMM_MS: _with_share("exposed_comm_ms"),
    STEP_TOTAL_MS: _with_share("total_ms"),
    **{f"share.{ratio}": _ratio(ratio) for _, _, ratio, _, _ in comm.PHASE_SHARES},
    **{f"ms.{col}": _timer_ms(col) for col in TIMER_COLUMNS},
}

#: How a caller that keeps the figures answers for one (None: compute it from the rows).
StatSource = Callable[[str], Percentiles | None]


def values_fn(name: str) -> ValuesFn:
    """The function giving figure ``name``'s values (KeyError: no such figure)."""
    return STEP_STATS[name]


def ranked(rows: pd.DataFrame, name: str) -> Percentiles:
    """The values of figure ``name`` over a breakdown's steady rows, to take medians of.

    ``rows``: the steps after warm-up (``dsmon.analysis.steps.steady``).
    """
    if rows.empty:
        return Percentiles.of(np.empty(0))
    return Percentiles.of(values_fn(name)(rows))


def timer_table(breakdown: pd.DataFrame, values: Callable[[str], Percentiles]) -> pd.DataFrame:
    """:func:`dsmon.analysis.steps.step_stats` (p50 / p90 / max per timer) from ``values``.

    The same table, to the last digit, from figures ``ms.<column>`` a live page keeps sorted:
    over the steady steps, the slowest rank per step, as every other page quotes a timer.
    """
    rows = {}
    for col in [c for c in breakdown.columns if c.endswith("_ms")]:
        got = values(f"ms.{col}") if col in TIMER_COLUMNS else Percentiles.of(np.empty(0))
        if got.n == 0:
            rows[col] = (0, float("nan"), float("nan"), float("nan"))
            continue
        top = got.at([got.n - 1])[0]
        rows[col] = (got.n, got.percentile(50.0), got.percentile(90.0), top)
    out = pd.DataFrame.from_dict(rows, orient="index", columns=list(steps.STAT_COLUMNS))
    return out.astype({"n": "int64"})


def share_stats(values: Percentiles, scale: float = 1.0) -> comm.ShareStats | None:
    """Median and p90 (each divided by ``scale``) and the count; None without values.

    The p90 is taken at ``0.9 * 100``, as pandas asks numpy for ``quantile(0.9)``.
    """
    if values.n == 0:
        return None
    return comm.ShareStats(
        values.median() / scale, values.percentile(0.9 * 100.0) / scale, values.n
    )


def phase_lines(breakdown: pd.DataFrame, values: Callable[[str], Percentiles]) -> list[str]:
    """``bwd_allreduce = 7.52 ms (52 % of bwd)``: each timer's median and its share.

    Both are medians over the steady steps (``values`` gives each figure), as the checklist
    and the Steps page quote them; each share is named for what it divides.
    """
    lines = []
    for label, col, ratio, phase, _ in comm.PHASE_SHARES:
        if col not in breakdown.columns or breakdown[col].isna().all():
            lines.append(f"{label}: not in this log")
            continue
        ms = values(f"ms.{col}").median()
        share = share_stats(values(f"share.{ratio}"))
        pct = f" ({100 * share.p50:.0f} % of {phase}, median over steps)" if share else ""
        lines.append(f"{label} = {ms:.2f} ms{pct}")
    return lines
