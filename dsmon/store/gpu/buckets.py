"""GPU samples summed up per GPU and time bucket: the one shape every GPU view is drawn from.

A frame of *bucket statistics* has one row per (series, bucket) with count, sum, min and max
of each charted metric in NVML's own units, clock-event counts per reason bit, error counter
extremes and the bucket's first and last sample time. The store computes it in SQL from its
roll-ups (:mod:`dsmon.store.gpu.reads`); :func:`stats_of_samples` computes the same from a
frame of samples in memory (a log checked without a store). Everything the GPUs page and the
GPU rules show is derived from bucket statistics here: per-bucket means/min/max
(:func:`per_bucket`), per-GPU totals (:func:`summary`), so both sources give equal answers.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from pandas.core.groupby import DataFrameGroupBy

from dsmon.store.gpu.rows import (
    BUCKET_METRICS,
    BUCKET_STATS,
    GIB,
    STATS,
    THROTTLE_BITS,
    gpu_label,
    grid,
)

BUCKET_COLUMNS = ("series", "b", "n", *BUCKET_STATS)
#: One row per series: its id and the fields fixed for it.
SERIES_COLUMNS = ("series", "node", "gpu_index", "uuid", "name", "mem_total_bytes", "power_limit_w")


class BucketGrid(NamedTuple):
    """A run's bucket statistics with its series and the grid they are on.

    ``last_id`` is the newest GPU sample id stored when it was read (0: not known): handed
    back as ``since``, it tells the store which samples came after. ``split_ms`` marks a
    run's live summary (one bucket per GPU, ``width_ms`` None) read in two parts: bucket 0
    before that time, bucket 1 from it on (``dsmon.store.gpu.reads.summary_grid``).
    """

    stats: pd.DataFrame
    series: pd.DataFrame
    t0_ms: int
    width_ms: int | None
    last_id: int = 0
    split_ms: int | None = None

    def per_bucket(self) -> pd.DataFrame:
        """What ``GpuSamples.buckets`` answers of this grid (:func:`per_bucket`)."""
        return per_bucket(self.stats, self.series, self.t0_ms, self.width_ms or 1)


def grid_of_samples(frame: pd.DataFrame, n_buckets: int | None) -> BucketGrid:
    """The grid of a frame of samples in memory, in ``n_buckets`` buckets (None: one)."""
    empty = BucketGrid(pd.DataFrame(columns=list(BUCKET_COLUMNS)),
                       pd.DataFrame(columns=list(SERIES_COLUMNS)), 0, None)  # fmt: skip
    if frame.empty or "ts" not in frame.columns:
        return empty
    span = span_ms(frame["ts"])
    if span is None:
        return empty
    t0, width = grid(n_buckets, span) if n_buckets else (span[0], None)
    series, _ = series_frame(frame[frame["ts"].notna()])
    return BucketGrid(stats_of_samples(frame, t0, width), series, t0, width)


def _ms(ts: pd.Series) -> np.ndarray:
    """Sample times as integer ms on the samples' own clock (as ``rows.ts_ms``)."""
    return ts.to_numpy(dtype="datetime64[ms]").astype(np.int64)


def series_frame(samples: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """Series of a raw ``gpu`` records frame (one per node and GPU index) and each row's id."""
    node = samples["node"].astype(object).where(samples["node"].notna(), "")
    pairs = pd.MultiIndex.from_arrays([node, samples["gpu_index"].astype("int64")])
    codes, uniques = pd.factorize(pairs)
    first = pd.Series(np.arange(len(codes))).groupby(codes).first().to_numpy()
    out = pd.DataFrame({"series": np.arange(len(uniques))})
    out["node"] = [n or None for n, _ in uniques]
    out["gpu_index"] = [int(i) for _, i in uniques]
    for col in SERIES_COLUMNS[3:]:
        out[col] = samples[col].to_numpy()[first] if col in samples.columns else None
    return out, codes


def stats_of_samples(samples: pd.DataFrame, t0_ms: int, width_ms: int | None) -> pd.DataFrame:
    """Bucket statistics of a raw ``gpu`` records frame (a records frame), from ``t0_ms``.

    ``width_ms`` None makes one bucket of each series. Rows without a time are left out,
    as the store cannot place them in a bucket either.
    """
    samples = samples[samples["ts"].notna()] if "ts" in samples.columns else samples.iloc[0:0]
    if samples.empty:
        return pd.DataFrame(columns=list(BUCKET_COLUMNS))
    _, codes = series_frame(samples)
    t = _ms(samples["ts"])
    b = np.zeros(len(t), dtype=np.int64) if width_ms is None else (t - t0_ms) // width_ms
    columns: dict[str, np.ndarray] = {"series": codes, "b": b, "t": t}
    for prefix, field, _, factor in BUCKET_METRICS:
        columns[prefix] = _num(samples, field) * factor
    thr = columns["thr"] = _num(samples, "throttle_reasons")
    known = ~np.isnan(thr)
    bits = np.where(known, thr, 0).astype("int64")
    for bit in THROTTLE_BITS:
        columns[f"thr_{bit}"] = np.where(known, (bits & bit) != 0, np.nan)
    for col in ("ecc_corrected", "ecc_uncorrected", "xid"):
        columns[col] = _num(samples, col)
    return _aggregate(pd.DataFrame(columns).groupby(["series", "b"], sort=True))


def _num(frame: pd.DataFrame, col: str) -> np.ndarray:
    """Column ``col`` as float64 values, NaN where missing or not a number (or no such column)."""
    if col not in frame.columns:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype="float64", na_value=np.nan)


def _aggregate(g: DataFrameGroupBy) -> pd.DataFrame:
    """Count/sum/min/max per group, named as :data:`BUCKET_COLUMNS`.

    One grouped reduction per statistic over all its columns: a reduction per column took
    forty passes of pandas' grouping machinery for a frame of a few hundred rows.
    """
    metrics = [prefix for prefix, *_ in BUCKET_METRICS]
    bits = [f"thr_{bit}" for bit in THROTTLE_BITS]
    counts = g[[*metrics, "thr"]].count()
    sums = g[[*metrics, *bits]].sum(min_count=1)
    lows = g[[*metrics, "ecc_corrected", "t"]].min()
    highs = g[[*metrics, "ecc_corrected", "ecc_uncorrected", "xid", "t"]].max()
    parts: dict[str, pd.Series] = {"n": g["t"].size()}
    for prefix in metrics:
        parts[f"{prefix}_n"] = counts[prefix]
        parts[f"{prefix}_sum"] = sums[prefix]
        parts[f"{prefix}_min"] = lows[prefix]
        parts[f"{prefix}_max"] = highs[prefix]
    parts["thr_n"] = counts["thr"]
    parts.update({bit: sums[bit].fillna(0) for bit in bits})
    parts["ecc_c_min"] = lows["ecc_corrected"]
    parts["ecc_c_max"] = highs["ecc_corrected"]
    parts["ecc_u_max"] = highs["ecc_uncorrected"]
    parts["xid_max"] = highs["xid"]
    parts["t_min_ms"] = lows["t"]
    parts["t_max_ms"] = highs["t"]
    return pd.DataFrame(parts).reset_index()[list(BUCKET_COLUMNS)]


def labelled(stats: pd.DataFrame, series: pd.DataFrame) -> pd.DataFrame:
    """Bucket statistics with their series' fields and every chart's GPU label (``node/gpuN``)."""
    out = stats.merge(series, on="series", how="left")
    cols = zip(series["series"], series["node"], series["gpu_index"], strict=True)
    names = {s: gpu_label(n, i) for s, n, i in cols}
    out["gpu"] = out["series"].map(names)
    return out


def metric_columns(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """Mean, min and max of every ``analysis.gpus.METRICS`` key from labelled statistics.

    Keyed ``<key>``, ``<key>_min``, ``<key>_max``, in that order: the columns of
    :func:`per_bucket` and :func:`summary`, as float64 values.
    """
    total = _num(df, "mem_total_bytes")
    limit = _num(df, "power_limit_w")
    stats = {f"{prefix}_{stat}": _num(df, f"{prefix}_{stat}")
             for prefix, *_ in BUCKET_METRICS for stat in STATS}  # fmt: skip
    out = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        for key, prefix, scale in (
            ("util_gpu_pct", "util", 1.0),
            ("mem_used_gib", "mem", 1024.0 / GIB),
            ("mem_used_pct", "mem", 1024.0 * 100.0 / total),
            ("power_w", "power", 1.0 / 1000),
            ("power_pct", "power", 100.0 / 1000 / limit),
            ("temperature_c", "temp", 1.0),
            ("sm_clock_mhz", "clock", 1.0),
        ):
            n = stats[f"{prefix}_n"]
            mean = stats[f"{prefix}_sum"] / np.where(n > 0, n, np.nan)
            out[key] = mean * scale
            out[f"{key}_min"] = stats[f"{prefix}_min"] * scale
            out[f"{key}_max"] = stats[f"{prefix}_max"] * scale
    return out


def per_bucket(
    stats: pd.DataFrame, series: pd.DataFrame, t0_ms: int, width_ms: int
) -> pd.DataFrame:
    """Per GPU and bucket: ``gpu``, ``ts`` (bucket centre), ``n`` and each metric's mean, min, max.

    A metric's columns are ``<key>`` (mean), ``<key>_min`` and ``<key>_max``; the mean feeds
    grids and imbalance, min and max the traces, so a one-second spike stays visible.
    """
    if stats.empty:
        return pd.DataFrame(columns=["gpu", "ts", "n"])
    df = labelled(stats, series)
    centre = t0_ms + (df["b"].to_numpy(dtype="int64") * width_ms + width_ms // 2)
    out = pd.DataFrame(
        {
            "gpu": df["gpu"].to_numpy(),
            "n": df["n"].to_numpy(dtype="int64"),
            "ts": pd.to_datetime(centre, unit="ms"),
            **metric_columns(df),
        }
    )
    return out.sort_values(["gpu", "ts"], kind="stable").reset_index(drop=True)


def summary(stats: pd.DataFrame, series: pd.DataFrame) -> pd.DataFrame:
    """One row per GPU over all its buckets: what inventories and GPU rules read.

    Columns: the series fields, ``gpu``, ``samples``, ``first_ts``/``last_ts``, each metric's
    ``<key>`` (mean), ``<key>_min``, ``<key>_max``, ``throttle_known`` and ``thr_<bit>``
    (samples with that clock-event bit), ``ecc_corrected_rise``, ``ecc_uncorrected_max``,
    ``xid_max``.
    """
    if stats.empty:
        return pd.DataFrame(columns=["gpu", "samples"])
    sums = [c for c in BUCKET_COLUMNS[2:] if c.endswith(("_n", "_sum")) or c.startswith("thr_")]
    lows = [c for c in BUCKET_COLUMNS if c.endswith("_min") and not c.startswith("t_")]
    highs = [c for c in BUCKET_COLUMNS if c.endswith("_max") and not c.startswith("t_")]
    g = stats.groupby("series")
    per = pd.concat(
        [
            g[sums].sum(min_count=1),
            g[["n"]].sum(),
            g[[*lows, "t_min_ms"]].min(),
            g[[*highs, "t_max_ms"]].max(),
        ],
        axis=1,
    )
    df = labelled(per.reset_index(), series)
    columns: dict[str, Any] = {"gpu": df["gpu"].to_numpy()}
    columns.update({c: df[c].to_numpy() for c in SERIES_COLUMNS if c != "series"})
    columns["samples"] = df["n"].to_numpy(dtype="int64")
    columns["first_ts"] = pd.to_datetime(df["t_min_ms"].to_numpy(), unit="ms")
    columns["last_ts"] = pd.to_datetime(df["t_max_ms"].to_numpy(), unit="ms")
    columns.update(metric_columns(df))
    columns["throttle_known"] = df["thr_n"].fillna(0).to_numpy(dtype="int64")
    for bit in THROTTLE_BITS:
        columns[f"thr_{bit}"] = df[f"thr_{bit}"].fillna(0).to_numpy(dtype="int64")
    columns["ecc_corrected_rise"] = _num(df, "ecc_c_max") - _num(df, "ecc_c_min")
    columns["ecc_uncorrected_max"] = _num(df, "ecc_u_max")
    columns["xid_max"] = _num(df, "xid_max")
    out = pd.DataFrame(columns)
    return out.sort_values(["node", "gpu_index"], kind="stable").reset_index(drop=True)


def span_ms(ts_values: pd.Series) -> tuple[int, int] | None:
    """First and last sample time in ms, None without any."""
    ts = ts_values.dropna()
    if ts.empty:
        return None
    t = _ms(ts)
    return int(t.min()), int(t.max())
