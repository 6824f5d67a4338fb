"""The run summary's inputs, read in one streaming pass with memory bounded by what it keeps.

A 500 MB log holds millions of timer records; building a Python object per record and a
frame of every column (``Store.frame``) took gigabytes for a summary that needs a few
numbers per optimizer step. Here the store is read in chunks of ids (:func:`scan`), each
record is reduced to the numbers the summary uses (eight floats per timer line of the groups
the step breakdown reads, one per throughput line or flops profile), and the frames handed to
``dsmon.analysis`` are built from those compact columns, so the summary computes its figures
with the same functions as the dashboard and agrees with it.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator

import pandas as pd

from dsmon.analysis.steps import OPTIMIZER_TIMERS, PHASES
from dsmon.records import Record, TimerRecord
from dsmon.store_schema import RecordFilter, Store, row_record

#: Records decoded at a time: the pass never holds more record objects than this.
SCAN_ROWS = 1000
#: Timer groups the step breakdown reads, and the timers it takes from each.
_KEPT = {"global": PHASES, "zero_optimizer": OPTIMIZER_TIMERS}
_NAN = float("nan")


def scan(store: Store, run: str, kind: str, chunk: int = SCAN_ROWS) -> Iterator[Record]:
    """Every record of one kind of a run in id order, ``chunk`` rows per query."""
    after = 0
    while True:
        rows = store._select(RecordFilter(run, kind, after_id=after, limit=chunk))
        for _, body in rows:
            yield row_record(body)
        if len(rows) < chunk:
            return
        after = rows[-1][0]


def _num(value: float | int | None) -> float:
    return _NAN if value is None else float(value)


class _TimerColumns:
    """Columns of the kept timer lines as packed doubles (NaN = absent)."""

    def __init__(self) -> None:
        self.group: list[str] = []
        self.cols: dict[str, array[float]] = {"step": array("d"), "rank": array("d")}

    def add(self, rec: TimerRecord, names: tuple[str, ...]) -> None:
        """Append one timer line; a timer seen for the first time gets a column of NaN."""
        n = len(self.group)
        self.group.append(rec.group)
        self.cols["step"].append(_num(rec.step))
        self.cols["rank"].append(_num(rec.src.rank))
        for name in names:
            value = rec.values_ms.get(name)
            if value is not None and f"{name}_ms" not in self.cols:
                self.cols[f"{name}_ms"] = array("d", [_NAN]) * n
            col = self.cols.get(f"{name}_ms")
            if col is not None:
                col.append(_num(value))
        for col in self.cols.values():  # timers of the other group: absent on this line
            if len(col) == n:
                col.append(_NAN)

    def frame(self) -> pd.DataFrame:
        """The columns ``dsmon.analysis.steps.step_breakdown`` reads of ``Store.frame``."""
        out = pd.DataFrame({"group": pd.Categorical(self.group)})
        for name, col in self.cols.items():
            values = pd.Series(col, dtype="float64")
            out[name] = values.astype("Int64") if name in ("step", "rank") else values
        return out


def timer_frame(store: Store, run: str) -> pd.DataFrame:
    """The run's timer lines of the groups the step breakdown reads, in one pass."""
    cols = _TimerColumns()
    for rec in scan(store, run, "timer"):
        if isinstance(rec, TimerRecord) and rec.group in _KEPT:
            cols.add(rec, _KEPT[rec.group])
    return cols.frame()


def median_of(store: Store, run: str, kind: str, field: str) -> float | None:
    """Median of one numeric field over a kind's records (None when no record has it)."""
    values = array("d")
    for rec in scan(store, run, kind):
        value = getattr(rec, field, None)
        if isinstance(value, int | float):
            values.append(float(value))
    median = float(pd.Series(values, dtype="float64").median())
    return median if math.isfinite(median) else None
