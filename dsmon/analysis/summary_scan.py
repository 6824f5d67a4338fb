"""The run summary's inputs, read page by page with memory bounded by what it keeps.

A 500 MB log holds millions of timer records; building a Python object per record and a
frame of every column (``Store.frame``) took gigabytes for a summary that needs a few
numbers per optimizer step. Here a kind is read one page at a time (``Store.frame_pages``:
after an import, from the Arrow chunks the store keeps, with no JSON parsed and no record
built), each page is cut to the columns the summary uses (step, rank and the phase timers
of the groups the step breakdown reads, one number per throughput line or flops profile),
and those compact frames are handed to ``dsmon.analysis``, so the summary computes its
figures with the same functions as the dashboard and agrees with it.
"""

from __future__ import annotations

import math

import pandas as pd

from dsmon.analysis.steps import OPTIMIZER_TIMERS, PHASES, group_breakdown
from dsmon.store.base import Store

#: Timer groups the step breakdown reads, and the timers it takes from each.
_KEPT = {"global": PHASES, "zero_optimizer": OPTIMIZER_TIMERS}


def _group_rows(page: pd.DataFrame, group: str, names: tuple[str, ...]) -> pd.DataFrame:
    """One page's lines of a timer group: step, rank and the group's timers it has."""
    if page.empty or "group" not in page.columns:
        return page.iloc[:0, :0]
    rows = page[(page["group"] == group).fillna(False).to_numpy(dtype=bool)]
    cols = ["step", "rank", *(c for c in (f"{n}_ms" for n in names) if c in rows.columns)]
    return rows[cols]


def _group_frame(parts: list[pd.DataFrame], names: tuple[str, ...]) -> pd.DataFrame:
    """A group's lines of every page: a timer no line of the group has gets no column."""
    filled = [p for p in parts if len(p)]
    whole = pd.concat(filled, ignore_index=True) if filled else None
    if whole is None:
        return pd.DataFrame({c: pd.array([], dtype="Int64") for c in ("step", "rank")})
    out = pd.DataFrame({c: whole[c].astype("Int64") for c in ("step", "rank")})
    for name in names:
        col = f"{name}_ms"
        if col in whole.columns and whole[col].notna().any():
            out[col] = whole[col].astype("float64").to_numpy()
    return out


def step_breakdown_of(store: Store, run: str) -> pd.DataFrame:
    """``step_breakdown(store.frame(run, "timer"))``, computed one page of timers at a time."""
    parts: dict[str, list[pd.DataFrame]] = {group: [] for group in _KEPT}
    wanted = ("group", "step", "rank", *(f"{n}_ms" for names in _KEPT.values() for n in names))
    for page in store.frame_pages(run, "timer", columns=wanted):
        for group, names in _KEPT.items():
            parts[group].append(_group_rows(page, group, names))
    frames = {group: _group_frame(parts[group], names) for group, names in _KEPT.items()}
    return group_breakdown(frames["global"], frames["zero_optimizer"])


def median_of(store: Store, run: str, kind: str, field: str) -> float | None:
    """Median of one numeric field over a kind's records (None when no record has it)."""
    values = [
        pd.to_numeric(page[field], errors="coerce").astype("float64")
        for page in store.frame_pages(run, kind, columns=(field,))
        if field in page.columns
    ]
    if not values:
        return None
    median = float(pd.concat(values, ignore_index=True).median())
    return median if math.isfinite(median) else None
