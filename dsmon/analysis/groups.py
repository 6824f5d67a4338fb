"""Rows grouped by key columns, as numpy positions: what a live refresh can afford.

A pandas group-by splits the whole frame into sub-frames (a copy of every column), and on a
run of a million steps that cost more than the work done on each group. The dashboard's
traces and "latest value" tables need only the positions of each group's rows, so they are
computed here on integer codes: a factorisation per key column and one stable sort.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc


def codes(frame: pd.DataFrame, cols: Sequence[str]) -> np.ndarray:
    """One integer per row, ordered as the rows' keys sort (missing values last)."""
    out = np.zeros(len(frame), dtype=np.int64)
    for col in cols:
        col_codes, n = _factorized(frame[col])
        out = out * n + col_codes
    return out


def _factorized(values: pd.Series) -> tuple[np.ndarray, int]:
    """Codes of a column in the sort order of its values (missing last), and how many."""
    dtype = values.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        # the codes are the answer already (in category order, as a group-by sorts them);
        # pandas' factorize would sort and remap them again
        n = len(dtype.categories)
        col_codes = values.cat.codes.to_numpy().astype(np.int64)
        col_codes[col_codes < 0] = n  # missing: after every category
        return col_codes, n + 1
    if isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow":
        # Arrow's own dictionary encoding: pandas' factorize of the same strings took
        # three times as long (it sorts and remaps through Python objects)
        encoded = pc.dictionary_encode(pa.chunked_array(pa.array(values.array))).combine_chunks()
        names = encoded.dictionary.to_numpy(zero_copy_only=False)
        rank = np.empty(len(names) + 1, dtype=np.int64)
        rank[np.argsort(names, kind="stable")] = np.arange(len(names))
        rank[-1] = len(names)  # a missing value's code: after every string
        return rank[encoded.indices.fill_null(len(names)).to_numpy()], len(names) + 1
    if pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype):
        numbers = values.to_numpy(dtype="float64", na_value=np.nan)
        missing = np.isnan(numbers)
        known = numbers[~missing]
        if known.size and known.min() == known.max():  # one value (rank 0's timers): no hashing
            return missing.astype(np.int64), 2
    col_codes, uniques = pd.factorize(values, sort=True, use_na_sentinel=False)
    return col_codes, len(uniques)


def _one_value(values: pd.Series) -> bool:
    """Whether every row holds the same known number: a key that splits nothing.

    One comparison per row, where factorising it (a float copy, a NaN mask, a min and a max)
    cost a live refresh of a million steps ten milliseconds per chart.
    """
    dtype = values.dtype
    if not len(values) or not pd.api.types.is_integer_dtype(dtype):
        return False
    if isinstance(dtype, pd.api.extensions.ExtensionDtype) and values.array.isna().any():
        return False
    numbers = values.to_numpy(dtype=np.int64)
    return bool((numbers == numbers[0]).all())


def positions(frame: pd.DataFrame, cols: Sequence[str]) -> list[np.ndarray]:
    """Row positions of each group, groups in key order, each group's rows in frame order.

    The groups and their order are ``groupby(cols, sort=True, dropna=False)``'s.
    """
    cols = [col for col in cols if not _one_value(frame[col])]  # (rank 0's timers: rank)
    if not cols:
        return [np.arange(len(frame))]
    keys = codes(frame, cols)
    if not len(keys) or keys.min() == keys.max():  # one group: nothing to sort
        return [np.arange(len(keys))]
    return by_code(keys)[1]


def by_code(keys: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Each distinct code of ``keys`` (not empty, none negative) in order, and its positions."""
    if keys.max() < 1 << 16:
        # few groups (metrics, ranks): numpy's stable sort of 16-bit keys is a radix sort,
        # five times faster than the merge sort it uses for 64-bit ones
        keys = keys.astype(np.uint16)
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    cuts = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
    return ordered[np.concatenate([[0], cuts])], np.split(order, cuts)


def newest(
    frame: pd.DataFrame,
    cols: Sequence[str],
    step: str,
    grouped: list[np.ndarray] | None = None,
) -> np.ndarray:
    """Position of each group's row with the largest ``step``; of equal steps, the later row.

    Groups with a missing key, or whose ``step`` is missing on every row, have none (as in
    ``groupby(cols)[step].idxmax()``). Positions come in key order. ``grouped``: the
    :func:`positions` of ``frame`` by ``cols``, when the caller has them already.
    """
    if frame.empty:
        return np.arange(0)
    steps = frame[step].to_numpy(dtype=np.float64, na_value=np.nan)
    keys = frame[list(cols)]
    out = []
    for pos in positions(frame, cols) if grouped is None else grouped:
        values = steps[pos]
        if keys.iloc[pos[0]].isna().any() or np.isnan(values).all():
            continue
        top = np.nanmax(values)
        out.append(pos[np.flatnonzero(values == top)[-1]])
    return np.asarray(out, dtype=np.int64)
