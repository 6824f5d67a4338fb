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

from typing import NamedTuple

import numpy as np
import pandas as pd
from pandas.core.groupby import DataFrameGroupBy

from dsmon.store.gpu.rows import BUCKET_METRICS, BUCKET_STATS, GIB, THROTTLE_BITS, gpu_label, grid

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
    df = pd.DataFrame({"series": codes, "b": b, "t": t})
    for prefix, field, _, factor in BUCKET_METRICS:
        df[prefix] = _num(samples, field) * factor
    thr = _num(samples, "throttle_reasons")
    df["thr"] = thr
    for bit in THROTTLE_BITS:
        df[f"thr_{bit}"] = np.where(thr.isna(), np.nan, (thr.fillna(0).astype("int64") & bit) != 0)
    for col in ("ecc_corrected", "ecc_uncorrected", "xid"):
        df[col] = _num(samples, col)
    return _aggregate(df.groupby(["series", "b"], sort=True))


def _num(frame: pd.DataFrame, col: str) -> pd.Series:
    if col not in frame.columns:
        return pd.Series(np.nan, index=frame.index)
    return pd.to_numeric(frame[col], errors="coerce").astype("float64").reset_index(drop=True)


def _aggregate(g: DataFrameGroupBy) -> pd.DataFrame:
    """Count/sum/min/max per group, named as :data:`BUCKET_COLUMNS`."""
    parts = {"n": g["t"].size()}
    for prefix, *_ in BUCKET_METRICS:
        col = g[prefix]
        parts.update(
            {
                f"{prefix}_n": col.count(),
                f"{prefix}_sum": col.sum(min_count=1),
                f"{prefix}_min": col.min(),
                f"{prefix}_max": col.max(),
            }
        )
    parts["thr_n"] = g["thr"].count()
    parts.update({f"thr_{bit}": g[f"thr_{bit}"].sum() for bit in THROTTLE_BITS})
    parts["ecc_c_min"] = g["ecc_corrected"].min()
    parts["ecc_c_max"] = g["ecc_corrected"].max()
    parts["ecc_u_max"] = g["ecc_uncorrected"].max()
    parts["xid_max"] = g["xid"].max()
    parts["t_min_ms"] = g["t"].min()
    parts["t_max_ms"] = g["t"].max()
    return pd.DataFrame(parts).reset_index()[list(BUCKET_COLUMNS)]


def labelled(stats: pd.DataFrame, series: pd.DataFrame) -> pd.DataFrame:
    """Bucket statistics with their series' fields and every chart's GPU label (``node/gpuN``)."""
    out = stats.merge(series, on="series", how="left")
    cols = zip(series["series"], series["node"], series["gpu_index"], strict=True)
    names = {s: gpu_label(n, i) for s, n, i in cols}
    out["gpu"] = out["series"].map(names)
    return out


def _mean(df: pd.DataFrame, prefix: str) -> pd.Series:
    n = pd.to_numeric(df[f"{prefix}_n"], errors="coerce")
    return pd.to_numeric(df[f"{prefix}_sum"], errors="coerce") / n.where(n > 0)


def metric_columns(df: pd.DataFrame) -> dict[str, tuple[pd.Series, pd.Series, pd.Series]]:
    """Mean, min and max of every ``analysis.gpus.METRICS`` key from labelled statistics."""
    total = pd.to_numeric(df["mem_total_bytes"], errors="coerce")
    limit = pd.to_numeric(df["power_limit_w"], errors="coerce")
    out = {}
    for key, prefix, scale in (
        ("util_gpu_pct", "util", 1.0),
        ("mem_used_gib", "mem", 1024.0 / GIB),
        ("mem_used_pct", "mem", 1024.0 * 100.0 / total),
        ("power_w", "power", 1.0 / 1000),
        ("power_pct", "power", 100.0 / 1000 / limit),
        ("temperature_c", "temp", 1.0),
        ("sm_clock_mhz", "clock", 1.0),
    ):
        lo = pd.to_numeric(df[f"{prefix}_min"], errors="coerce") * scale
        hi = pd.to_numeric(df[f"{prefix}_max"], errors="coerce") * scale
        out[key] = (_mean(df, prefix) * scale, lo, hi)
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
    out = pd.DataFrame({"gpu": df["gpu"], "n": df["n"].astype("int64")})
    centre = t0_ms + (df["b"].astype("int64") * width_ms + width_ms // 2)
    out["ts"] = pd.to_datetime(centre, unit="ms")
    for key, (mean, lo, hi) in metric_columns(df).items():
        out[key], out[f"{key}_min"], out[f"{key}_max"] = mean, lo, hi
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
    g = stats.groupby("series")
    per = g[sums].sum(min_count=1)
    per["n"] = g["n"].sum()
    for col in ("min", "max"):
        for c in [x for x in BUCKET_COLUMNS if x.endswith(f"_{col}") and not x.startswith("t_")]:
            per[c] = getattr(g[c], col)()
    per["t_min_ms"], per["t_max_ms"] = g["t_min_ms"].min(), g["t_max_ms"].max()
    df = labelled(per.reset_index(), series)
    out = df[[c for c in SERIES_COLUMNS if c != "series"]].copy()
    out.insert(0, "gpu", df["gpu"])
    out["samples"] = df["n"].astype("int64")
    out["first_ts"] = pd.to_datetime(df["t_min_ms"], unit="ms")
    out["last_ts"] = pd.to_datetime(df["t_max_ms"], unit="ms")
    for key, (mean, lo, hi) in metric_columns(df).items():
        out[key], out[f"{key}_min"], out[f"{key}_max"] = mean, lo, hi
    out["throttle_known"] = df["thr_n"].fillna(0).astype("int64")
    for bit in THROTTLE_BITS:
        out[f"thr_{bit}"] = df[f"thr_{bit}"].fillna(0).astype("int64")
    out["ecc_corrected_rise"] = pd.to_numeric(df["ecc_c_max"]) - pd.to_numeric(df["ecc_c_min"])
    out["ecc_uncorrected_max"] = pd.to_numeric(df["ecc_u_max"])
    out["xid_max"] = pd.to_numeric(df["xid_max"])
    return out.sort_values(["node", "gpu_index"], kind="stable").reset_index(drop=True)


def span_ms(ts_values: pd.Series) -> tuple[int, int] | None:
    """First and last sample time in ms, None without any."""
    ts = ts_values.dropna()
    if ts.empty:
        return None
    t = _ms(ts)
    return int(t.min()), int(t.max())
