"""A frame that grows in place: rows written into spare capacity, read as zero-copy views.

A fold's result (:mod:`dsmon.view.fold`) gains a few rows per live refresh and is read whole
by every page. Joining it with ``pd.concat`` copied every row of every column on each refresh:
tens of milliseconds per view at a million steps, for rows that had not changed. Here the
columns are numpy arrays with room to spare (doubled when full), new rows are written after
the old ones, and a reader gets a frame whose columns are views of the first ``n`` rows:
nothing is copied.

Only numeric, boolean, time (numpy's ``datetime64``, no zone), pandas' masked (``Int64``,
``Float64``, ``boolean``) and categorical columns are held this way (a categorical as its
codes: every part of a fold's result has the same categories, or it does not fit); a frame
with any other column (strings, objects, times with a zone) is not, and its fold keeps
joining frames as before. The views are read-only: a reader that tried to change the rows
in place would raise instead of corrupting what the next refresh builds on.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from pandas.api.extensions import ExtensionDtype

#: Rows a new buffer has room for beyond its first rows, at least.
MIN_SPARE = 1024
#: pandas' masked dtypes: numpy values plus a mask of missing ones.
MASKED = (
    pd.Int8Dtype,
    pd.Int16Dtype,
    pd.Int32Dtype,
    pd.Int64Dtype,
    pd.UInt8Dtype,
    pd.UInt16Dtype,
    pd.UInt32Dtype,
    pd.UInt64Dtype,
    pd.Float32Dtype,
    pd.Float64Dtype,
    pd.BooleanDtype,
)


def _holdable(dtype: Any) -> bool:
    """Whether a column of ``dtype`` can live in a buffer (numbers, times, masked, categories)."""
    if isinstance(dtype, np.dtype):
        return dtype.kind in "fiubM"
    return isinstance(dtype, (*MASKED, pd.CategoricalDtype))


class RowBuffer:
    """The rows of frames with one fixed set of columns and dtypes, in preallocated arrays.

    Build it with :meth:`of`, which answers None for a frame it cannot hold.
    """

    def __init__(self, template: pd.DataFrame, capacity: int) -> None:
        self.columns = template.columns
        self.dtypes = list(template.dtypes)
        self.rows = 0  # rows written (a reader may ask for fewer)
        self._values = [self._new(d, capacity) for d in self.dtypes]
        self._masks = [
            np.ones(capacity, dtype=bool) if isinstance(d, MASKED) else None for d in self.dtypes
        ]

    @classmethod
    def of(cls, frame: pd.DataFrame) -> RowBuffer | None:
        """A buffer holding ``frame``'s rows, or None when a column's dtype cannot be held."""
        if not frame.columns.is_unique or not all(_holdable(d) for d in frame.dtypes):
            return None
        buffer = cls(frame, len(frame) + max(MIN_SPARE, len(frame) // 2))
        buffer.write(0, frame)
        return buffer

    @staticmethod
    def _new(dtype: np.dtype | ExtensionDtype, capacity: int) -> np.ndarray:
        """An empty array for one column's values (a categorical's: its codes)."""
        if isinstance(dtype, pd.CategoricalDtype):
            codes = pd.Categorical.from_codes([], dtype=dtype).codes
            return np.full(capacity, -1, dtype=codes.dtype)
        numpy_dtype = dtype if isinstance(dtype, np.dtype) else dtype.numpy_dtype  # type: ignore[attr-defined]
        return np.zeros(capacity, dtype=numpy_dtype)

    def fits(self, frame: pd.DataFrame) -> bool:
        """Whether ``frame`` has exactly this buffer's columns and dtypes."""
        return frame.columns.equals(self.columns) and list(frame.dtypes) == self.dtypes

    def write(self, at: int, frame: pd.DataFrame) -> None:
        """Put ``frame``'s rows at ``at``, ``at + 1``, ...; rows from there on are replaced."""
        end = at + len(frame)
        self._reserve(end)
        for i, (_, column) in enumerate(frame.items()):
            mask = self._masks[i]
            if isinstance(column.dtype, pd.CategoricalDtype):
                self._values[i][at:end] = column.cat.codes.to_numpy()
            elif mask is None:
                self._values[i][at:end] = column.to_numpy()
            else:
                missing = column.isna().to_numpy()
                fill = self._values[i].dtype.type(0)
                self._values[i][at:end] = column.to_numpy(
                    dtype=self._values[i].dtype, na_value=fill
                )
                mask[at:end] = missing
        self.rows = end

    def _reserve(self, rows: int) -> None:
        """Room for ``rows`` rows: new arrays twice as large, the old rows copied.

        Doubled, not grown by half, and the new room left unset (rows past ``rows`` are never
        read): a long run read page by page grows each fold's buffer to a million rows, and
        the copies cost a second at a million steps.
        """
        capacity = len(self._values[0]) if self._values else rows
        if rows <= capacity:
            return
        grown = max(rows, 2 * capacity)
        for i, old in enumerate(self._values):
            values = np.empty(grown, dtype=old.dtype)
            values[: len(old)] = old
            self._values[i] = values
            mask = self._masks[i]
            if mask is not None:
                self._masks[i] = np.concatenate([mask, np.ones(grown - len(mask), dtype=bool)])

    def frame(self, rows: int) -> pd.DataFrame:
        """The first ``rows`` rows as a frame whose columns view this buffer (read-only)."""
        data: dict[Any, Any] = {}
        for name, dtype, values, mask in zip(
            self.columns, self.dtypes, self._values, self._masks, strict=True
        ):
            view = _read_only(values[:rows])
            if isinstance(dtype, pd.CategoricalDtype):
                data[name] = pd.Categorical.from_codes(view, dtype=dtype, validate=False)
            elif mask is None:
                data[name] = view
            else:
                array_type = dtype.construct_array_type()
                data[name] = array_type(view, _read_only(mask[:rows]), copy=False)
        out = pd.DataFrame(data, index=pd.RangeIndex(rows), copy=False)
        out.columns = self.columns
        return out


def _read_only(view: np.ndarray) -> np.ndarray:
    """``view`` marked read-only (the array it views stays writable for the buffer)."""
    view.flags.writeable = False
    return view
