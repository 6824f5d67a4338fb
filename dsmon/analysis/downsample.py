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
) -> pd.DataFrame:
    """Rows of ``frame`` that keep the shape of each ``ys`` column against ``x``.

    Args:
        frame: one row per point, any order.
        x: the x column (numeric or datetime).
        ys: the y columns; the kept rows are the union of what each column needs, so a
            stacked chart of several columns stays aligned.
        n_out: points to keep per column and group.
        by: optional grouping columns (rank, GPU): each group is one trace.

    Returns:
        The kept rows sorted by ``by`` then ``x``; the frame itself when it is small enough.
    """
    if frame.empty or len(frame) <= n_out:
        return frame.sort_values([*_as_list(by), x], kind="stable") if not frame.empty else frame
    parts = [_downsample_group(g, x, ys, n_out) for _, g in _groups(frame, by)]
    return pd.concat(parts) if parts else frame.iloc[0:0]


def _as_list(by: str | Sequence[str] | None) -> list[str]:
    """Grouping columns as a list."""
    if by is None:
        return []
    return [by] if isinstance(by, str) else list(by)


def _groups(
    frame: pd.DataFrame, by: str | Sequence[str] | None
) -> list[tuple[object, pd.DataFrame]]:
    """One (key, rows) pair per trace."""
    cols = _as_list(by)
    if not cols:
        return [(None, frame)]
    return list(frame.groupby(cols if len(cols) > 1 else cols[0], sort=True, dropna=False))


def _downsample_group(group: pd.DataFrame, x: str, ys: Sequence[str], n_out: int) -> pd.DataFrame:
    """Downsample one trace group: the union of the points each y column keeps."""
    if not group[x].is_monotonic_increasing:  # a frame in step order is not sorted again
        group = group.sort_values(x, kind="stable")
    if len(group) <= n_out:
        return group
    xs = _as_x(group[x])
    keep: set[int] = set()
    for col in ys:
        if col in group.columns:
            y = pd.to_numeric(group[col], errors="coerce").to_numpy(dtype=np.float64)
            keep.update(indices(xs, y, n_out).tolist())
    return group.iloc[sorted(keep)]


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
