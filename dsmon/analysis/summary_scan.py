"""The run summary's inputs, read in one streaming pass with memory bounded by what it keeps.

A 500 MB log holds millions of timer records; building a Python object per record and a
frame of every column (``Store.frames.frame``) took gigabytes for a summary that needs a few
numbers per optimizer step. Here the store is read in chunks of ids (``Store.scan``), each
record is reduced to the numbers the summary uses (step, rank and the phase timers of each
line of the groups the step breakdown reads, one float per throughput line or flops
profile), and the frames handed to ``dsmon.analysis`` are built from those compact columns,
so the summary computes its figures with the same functions as the dashboard and agrees
with it. Where the store's timer tables hold every step (``Store.timers.placed``), the
breakdown is read from them, as the dashboard's checklist reads it (:func:`breakdown_of`).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping
from typing import Any

import msgspec
import pandas as pd

from dsmon.analysis.steps import OPTIMIZER_TIMERS, PHASES, group_breakdown, stored_breakdown
from dsmon.model.check import loads
from dsmon.store.records.log import SCAN_ROWS
from dsmon.store.store import Store

#: Timer groups the step breakdown reads, and the timers it takes from each.
_KEPT = {"global": PHASES, "zero_optimizer": OPTIMIZER_TIMERS}
_NAN = float("nan")
#: A micro-step timer record's group as dsmon writes its JSON. No other part of a timer
#: record can hold this text (timer names have no quotes, strings escape theirs), so such
#: records, most of the timers when gradients accumulate, are passed over without decoding.
#: One written with other spacing (an older writer) is decoded, then passed over by group.
_MICRO = b'"group":"micro"'


def _num(value: float | int | None) -> float:
    return _NAN if value is None else float(value)


class _GroupColumns:
    """One timer group's lines as packed doubles: step, rank, its timers (NaN = absent)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.cols = {c: array("d") for c in ("step", "rank", *(f"{n}_ms" for n in names))}
        self.seen: set[str] = set()

    def add(self, step: float | None, rank: float | None, values_ms: Mapping[str, Any]) -> None:
        """Append one timer line."""
        self.cols["step"].append(_num(step))
        self.cols["rank"].append(_num(rank))
        for name in self.names:
            value = values_ms.get(name)
            if value is not None:
                self.seen.add(name)
            self.cols[f"{name}_ms"].append(_num(value))

    def frame(self) -> pd.DataFrame:
        """The columns ``Store.frames.frame`` would give these lines; a timer never seen has none."""
        out = pd.DataFrame(
            {
                "step": pd.array(self.cols.pop("step"), dtype="float64").astype("Int64"),
                "rank": pd.array(self.cols.pop("rank"), dtype="float64").astype("Int64"),
            }
        )
        for name in self.names:
            values = self.cols.pop(f"{name}_ms")  # freed as the frame takes each column
            if name in self.seen:
                out[f"{name}_ms"] = pd.array(values, dtype="float64").to_numpy()
        return out


def breakdown_of(store: Store, run: str) -> pd.DataFrame:
    """``step_breakdown(store.frames.frame(run, "timer"))``: from the timer tables where it can.

    The tables keep one row per step and rank as the records arrive (``Store.timers``), and
    hold the breakdown while every global timer record has a step; reading them took a
    hundredth of the CPU of :func:`step_breakdown_of`'s pass over every timer record's JSON
    (0.03 against 0.24 s at 20 MB of log). A run whose timers the tables cannot all place
    (a live record without its step yet) is read by that pass.
    """
    tables = store.timers
    if tables.placed(run):
        return stored_breakdown(tables.rows(run), tables.names(run))
    return step_breakdown_of(store, run)


def step_breakdown_of(store: Store, run: str) -> pd.DataFrame:
    """``step_breakdown(store.frames.frame(run, "timer"))``, computed in one pass over the timers.

    It reads the stored JSON of each timer record, not a record built from it: building
    them took two thirds of the pass, which was a fifth of ``dsmon import``.
    """
    groups = {group: _GroupColumns(names) for group, names in _KEPT.items()}
    for body in store.scan_bodies(run, "timer"):
        if _MICRO in body:
            continue
        obj = loads(body)  # orjson, with Python's decoder for what orjson refuses
        if not isinstance(obj, dict):
            continue
        columns = groups.get(str(obj.get("group")))
        if columns is not None:
            src = obj.get("src") or {}
            columns.add(obj.get("step"), src.get("rank"), obj.get("values_ms") or {})
    return group_breakdown(groups["global"].frame(), groups["zero_optimizer"].frame())


def median_of(store: Store, run: str, kind: str, field: str) -> float | None:
    """Median of one numeric field over a kind's records (None when no record has it).

    Only that field of each stored JSON body is decoded (msgspec skips the rest in compiled
    code): building each record, a flops profile with its module tree, cost 0.13 s of the
    summary at 20 MB of log, this 0.01 s. A stored body is a checked record's, so the field
    holds what the record holds (a number, or null for none). ``SCAN_ROWS`` bodies are read
    at a time, as many as :meth:`Store.scan` held records.
    """
    decode = _field_decoder(field)
    values = array("d")
    for body in store.scan_bodies(run, kind, SCAN_ROWS):
        value = decode(body).value
        if isinstance(value, int | float):
            values.append(float(value))
    median = float(pd.Series(values, dtype="float64").median())
    return median if math.isfinite(median) else None


def _field_decoder(field: str) -> Any:
    """A JSON decoder of one field of a record's body (any value; None when absent)."""
    one = msgspec.defstruct("One", [("value", Any, None)], rename={"value": field}, gc=False)
    return msgspec.json.Decoder(one).decode
