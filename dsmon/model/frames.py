"""Records as pandas DataFrames: the one table shape that analysis, health and pages read.

Each record becomes one row: ``id, step, ts, node, rank, file, line`` first, then the
record's own fields. Timer lines are widened so every timer is a column (``fwd_ms``,
``optimizer_step_ms``), since charts and step breakdowns want columns, not dicts. Column
dtypes follow the dataclass annotations, not the values seen, so an empty frame or a
column of missing values has the same dtypes as a full one (an ``int | None`` field is
pandas ``Int64``: missing stays NA and never turns into 0 or a float).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import orjson
import pandas as pd

from dsmon.model.records import KINDS, Record, TimerRecord
from dsmon.model.schema import schema

#: Columns every frame starts with, whatever the kind.
BASE_COLUMNS = ("id", "step", "ts", "node", "rank", "file", "line")
_BASE_DTYPES = {
    "id": "Int64",
    "step": "Int64",
    "node": "object",
    "rank": "Int64",
    "file": "object",
    "line": "Int64",
}
#: Fields not made columns: ``values_ms`` is widened into one ``<name>_ms`` column per timer.
_SKIP = frozenset({"src", "ts", "step", "values_ms"})


def field_dtypes(kind: str) -> dict[str, str]:
    """Column name -> dtype of a kind's own fields, in declaration order."""
    return {f.name: f.dtype for f in schema(KINDS[kind]).fields if f.name not in _SKIP}


def _row(rec: Record, rec_id: int | None, names: Sequence[str]) -> dict[str, Any]:
    """The flat dict of one record (timer values widened to ``<name>_ms``)."""
    s = rec.src
    row: dict[str, Any] = {
        "id": rec_id,
        "step": rec.step,
        "ts": rec.ts,
        "node": s.node,
        "rank": s.rank,
        "file": s.file,
        "line": s.line,
    }
    for name in names:
        row[name] = getattr(rec, name)
    if isinstance(rec, TimerRecord):
        for timer, value in rec.values_ms.items():
            row[f"{timer}_ms"] = value
    return row


def records_frame(
    kind: str, records: Sequence[Record], ids: Sequence[int] | None = None
) -> pd.DataFrame:
    """One row per record of ``kind`` (records of other kinds are ignored).

    Args:
        kind: the record kind (``timer``, ``step``, ...); fixes the columns and dtypes.
        records: the records, in the order the rows should have.
        ids: store ids, one per record; the ``id`` column is NA when omitted.

    Returns:
        A frame with :data:`BASE_COLUMNS`, the kind's fields and, for timers, one float
        column per timer name. ``ts`` is ``datetime64``; Mapping and tuple fields stay
        Python objects.

    Raises:
        KeyError: ``kind`` is not a record kind.
    """
    dtypes = field_dtypes(kind)
    names = list(dtypes)
    id_list: Sequence[int | None] = ids if ids is not None else [None] * len(records)
    rows = [
        _row(rec, rid, names) for rec, rid in zip(records, id_list, strict=True) if kind == rec.KIND
    ]
    return rows_frame(rows, _with_extra(list(BASE_COLUMNS) + names, rows), dtypes)


def bodies_frame(kind: str, ids: Sequence[int], bodies: Sequence[str | bytes]) -> pd.DataFrame:
    """:func:`records_frame` of stored JSON bodies, without building record objects.

    The store checked every body when it was written, so a page loading a long run's timers
    (300,000 rows at 100k steps) skips the dataclasses and goes from JSON (orjson, compiled)
    to columns: the same frame, several times faster.
    """
    if len(ids) == 0:
        return _empty_frame(kind).copy()
    dtypes = field_dtypes(kind)
    names = list(dtypes)
    decoders = schema(KINDS[kind]).decoders
    rows = []
    timers = kind == "timer"
    for rec_id, body in zip(ids, bodies, strict=True):
        row = orjson.loads(body)  # the record's own dict becomes the row: no copy per field
        src = row.pop("src", None) or {}
        del row["kind"]
        row["id"] = rec_id
        for key in ("node", "rank", "file", "line"):
            row[key] = src.get(key)
        for name, decode in decoders.items():
            if row.get(name) is not None:
                row[name] = decode(row[name])
        if timers:
            for timer, value in (row.pop("values_ms", None) or {}).items():
                row[f"{timer}_ms"] = value
        rows.append(row)
    return rows_frame(rows, _with_extra(list(BASE_COLUMNS) + names, rows), dtypes)


@functools.cache
def _empty_frame(kind: str) -> pd.DataFrame:
    """The frame of no ``kind`` records, built once.

    A live refresh asks each kind for its new rows, and most have none: typing the columns of
    an empty frame cost 5 ms a kind, a third of the health page's refresh.
    """
    return records_frame(kind, [])


def _with_extra(columns: list[str], rows: list[dict[str, Any]]) -> list[str]:
    """The fixed columns followed by extra ones (timer names) in order of first appearance."""
    known = set(columns)
    extra: dict[str, None] = {}
    for row in rows:
        if len(row) > len(known):
            extra.update((k, None) for k in row if k not in known)
    return columns + list(extra)


def rows_frame(
    rows: Sequence[dict[str, Any]], columns: list[str], dtypes: dict[str, str]
) -> pd.DataFrame:
    """The frame of ``rows`` (dicts), each column built straight in its declared dtype.

    Not ``DataFrame.from_records`` and then :func:`typed`: from_records infers each column's
    type (text becomes pandas' Arrow strings) only for it to be cast again, which cost a
    live refresh 5-10 ms a kind for a few rows.
    """
    index = pd.RangeIndex(len(rows))
    out: dict[str, Any] = {}
    for col in columns:
        values: list[Any] = [row.get(col) for row in rows]
        if col == "ts":
            out[col] = pd.to_datetime(values, format="ISO8601")
        else:
            dtype = _BASE_DTYPES.get(col) or dtypes.get(col) or "float64"
            out[col] = _column(values, dtype, index)
    return pd.DataFrame(out, index=index, copy=False)


def _column(values: list[Any], dtype: Any, index: pd.RangeIndex) -> Any:
    """``values`` (None where missing) as an array of ``dtype``, as ``astype`` would give.

    Text stays Python objects: a bare array of ``str`` would become pandas' own string dtype,
    so it is a Series on the frame's own index (nothing to align).
    """
    if dtype == "object":
        return pd.Series(values, dtype=object, index=index)
    if dtype == "float64":
        try:
            return np.array(values, dtype=np.float64)  # None becomes NaN
        except (TypeError, ValueError):
            return pd.Series(values, dtype=object).astype(np.float64).array
    if dtype == "Int64" and all(type(v) is int for v in values):
        try:  # (pd.array infers each value's type first: three times slower)
            ints = np.array(values, dtype=np.int64)
        except OverflowError:
            return pd.array(values, dtype=dtype)
        return pd.arrays.IntegerArray(ints, np.zeros(len(ints), dtype=bool))
    return pd.array(values, dtype=dtype)


def typed(columns: Mapping[str, Any], dtypes: dict[str, str], index: pd.Index) -> pd.DataFrame:
    """A frame of ``columns`` (name -> Series, in order) in the declared dtypes.

    Extra (timer) columns are float. Column by column into one new frame: ``DataFrame.astype`` with a mapping costs about half
    a millisecond a column in pandas 3 whatever the length, so the few rows of a live refresh
    paid more to be cast than to be read. Columns already of their dtype (Arrow's frames come
    typed) are taken as they are.
    """
    out: dict[str, Any] = {}
    for col, values in columns.items():
        if col == "ts":
            out[col] = pd.to_datetime(values, format="ISO8601")
            continue
        want = _BASE_DTYPES.get(col) or dtypes.get(col) or "float64"
        series = values if isinstance(values, pd.Series) else pd.Series(values, index=index)
        out[col] = series if series.dtype == want else _cast(series, want)
    return pd.DataFrame(out, index=index, copy=False)


def _cast(values: pd.Series, dtype: Any) -> Any:
    """``values.astype(dtype)``, built straight from numpy for the common cases.

    A float column cast to ``Int64`` must hold whole numbers (missing ones are NaN), as
    ``astype`` requires: anything else goes through ``astype``, which raises as before.
    """
    if dtype == "object":
        return pd.Series(values.to_numpy(dtype=object), index=values.index, dtype=object)
    kind = values.dtype.kind if isinstance(values.dtype, np.dtype) else ""
    if dtype == "Int64" and kind == "i":
        ints = values.to_numpy(dtype=np.int64)
        return pd.arrays.IntegerArray(ints, np.zeros(len(ints), dtype=bool))
    if dtype == "Int64" and kind == "f":
        floats = values.to_numpy()
        missing = np.isnan(floats)
        whole = np.where(missing, 0.0, floats)
        if np.array_equal(whole, np.trunc(whole)) and np.all(np.abs(whole) < 2.0**63):
            return pd.arrays.IntegerArray(whole.astype(np.int64), missing)
    if dtype == "boolean" and kind == "b":
        flags = values.to_numpy()
        return pd.arrays.BooleanArray(flags, np.zeros(len(flags), dtype=bool))
    if dtype == "float64" and kind in "iuf" and kind:
        return values.to_numpy(dtype=np.float64)
    return values.astype(dtype)
