"""Shrinking a trace to about a thousand points before it is drawn.

A browser cannot usefully show 100k steps or a day of 1 Hz samples in one line, and sending
them costs megabytes per refresh. MinMaxLTTB (the ``tsdownsample`` package) keeps each
bucket's extremes and the visually important points, so spikes survive, which an average or
every-n-th-point would hide. The dashboard downsamples here, in the query layer, so a figure
never receives more than it can show.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from tsdownsample import MinMaxLTTBDownsampler, NaNMinMaxLTTBDownsampler

from dsmon.analysis import groups

#: Points per trace the dashboard aims at (plotly-resampler's and TensorBoard's default).
N_OUT = 1000


def _as_x(values: pd.Series) -> np.ndarray:
    """A numeric x axis for tsdownsample: datetimes become int64 nanoseconds."""
    if pd.api.types.is_datetime64_any_dtype(values):
        return values.to_numpy(dtype="datetime64[ns]").astype(np.int64)
    return values.to_numpy(dtype=np.float64)


def indices(x: np.ndarray, y: np.ndarray, n_out: int = N_OUT) -> np.ndarray:
    """Positions of the points MinMaxLTTB keeps from one trace (``x`` sorted ascending).

    NaN in ``y`` is kept visible as a gap (NaN-aware variant); an all-NaN trace keeps its
    first and last point only, so its x range still shows.
    """
    n = len(y)
    if n <= n_out:
        return np.arange(n)
    y = np.asarray(y, dtype=np.float64)
    nan = np.isnan(y)
    if nan.all():
        return np.array([0, n - 1])
    algo = NaNMinMaxLTTBDownsampler() if nan.any() else MinMaxLTTBDownsampler()
    picked = algo.downsample(x, y, n_out=max(n_out, 4))
    return np.sort(np.asarray(picked, dtype=np.int64))


def downsample(
    frame: pd.DataFrame,
    x: str,
    ys: Sequence[str],
    n_out: int = N_OUT,
    by: str | Sequence[str] | None = None,
    grouped: list[np.ndarray] | None = None,
) -> pd.DataFrame:
    """Rows of ``frame`` that keep the shape of each ``ys`` column against ``x``.

    Args:
        frame: one row per point, any order.
        x: the x column (numeric or datetime).
        ys: the y columns; the kept rows are the union of what each column needs, so a
            stacked chart of several columns stays aligned.
        n_out: points to keep per column and group.
        by: optional grouping columns (rank, GPU): each group is one trace.
        grouped: ``groups.positions(frame, by)``, when the caller has them already.

    Returns:
        The kept rows sorted by ``by`` then ``x``; the frame itself when it is small enough.
    """
    if frame.empty or len(frame) <= n_out:
        return frame.sort_values([*_as_list(by), x], kind="stable") if not frame.empty else frame
    # each trace is picked on numpy arrays of its positions: a pandas group-by split the
    # whole frame into sub-frames first, which at a million rows cost more than the picking
    xs, ys_arrays = _as_x(frame[x]), _y_arrays(frame, ys)
    kept = [
        _pick(pos, xs, ys_arrays, n_out) for pos in grouped or groups.positions(frame, _as_list(by))
    ]
    return frame.take(np.concatenate(kept)) if kept else frame.iloc[0:0]


def _as_list(by: str | Sequence[str] | None) -> list[str]:
    """Grouping columns as a list."""
    if by is None:
        return []
    return [by] if isinstance(by, str) else list(by)


def _y_arrays(frame: pd.DataFrame, ys: Sequence[str]) -> list[np.ndarray]:
    """The ``ys`` columns the frame has, as float64 (what is not a number becomes NaN)."""
    return [_floats(frame[col]) for col in ys if col in frame.columns]


def _floats(values: pd.Series) -> np.ndarray:
    """A column as float64, NaN for what is not a number; float64 columns are not copied."""
    if values.dtype == np.float64:
        return values.to_numpy()  # (only read: a view of the frame's own values)
    return pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _missing_last(x: np.ndarray) -> np.ndarray:
    """A sort key that puts NaN and NaT last, as ``sort_values`` does."""
    if x.dtype == np.int64:  # datetimes as nanoseconds: NaT is the smallest int64
        return np.where(x == np.iinfo(np.int64).min, np.inf, x.astype(np.float64))
    return x


def _pick(pos: np.ndarray, xs: np.ndarray, ys: list[np.ndarray], n_out: int) -> np.ndarray:
    """Positions kept from one trace, in ``x`` order: the union of what each y column needs."""
    whole = len(pos) == len(xs)  # the only trace: its rows are all rows, no need to take them
    x = xs if whole else xs[pos]
    if not np.all(x[1:] >= x[:-1]):  # a trace already in x order is not sorted again
        ordered = np.argsort(_missing_last(x), kind="stable")
        pos, x, whole = pos[ordered], x[ordered], False
    if len(pos) <= n_out:
        return pos
    picked = [indices(x, y if whole else y[pos], n_out) for y in ys]
    keep = np.unique(np.concatenate(picked or [np.arange(0)]))
    return pos[keep]


def histogram(values: pd.Series, n_bins: int = 40) -> pd.DataFrame:
    """Counts in ``n_bins`` equal bins: what a histogram of 100k steps sends, not 100k numbers.

    Returns ``left, right, center, count`` per bin (empty for no values).
    """
    data = pd.to_numeric(values, errors="coerce").dropna().to_numpy(dtype=np.float64)
    if data.size == 0:
        return pd.DataFrame(columns=["left", "right", "center", "count"])
    counts, edges = np.histogram(data, bins=n_bins)
    return pd.DataFrame(
        {
            "left": edges[:-1],
            "right": edges[1:],
            "center": (edges[:-1] + edges[1:]) / 2,
            "count": counts,
        }
    )
