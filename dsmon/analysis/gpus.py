"""GPU telemetry views: per-GPU traces, GPUs x time grids, imbalance and throttling.

Input is the store's frame of ``gpu`` records (one NVML poll of one GPU per row). A day of
1 Hz samples on 64 GPUs is 5.5 million rows, so everything here is vectorised: time buckets
are summed with ``numpy.bincount`` rather than a pandas group-by, and per-GPU traces are cut
to ~1,000 points with MinMaxLTTB before they leave this module.

NVML's ``utilization.gpu`` is the share of the sample period in which *any* kernel ran
(kernel-active time), not how busy the SMs were: one tiny kernel reads 100 %. The labels in
:data:`METRICS` say so, and the dashboard shows them verbatim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dsmon.analysis.downsample import N_OUT, downsample

GIB = 1024**3


@dataclass(frozen=True, slots=True)
class GpuMetric:
    """One plottable GPU quantity: its column in :func:`prepare`'s frame and its honest label."""

    key: str
    label: str
    unit: str


METRICS: tuple[GpuMetric, ...] = (
    GpuMetric("util_gpu_pct", "Kernel-active time (NVML utilization.gpu, not SM occupancy)", "%"),
    GpuMetric("mem_used_gib", "Memory used", "GiB"),
    GpuMetric("mem_used_pct", "Memory used of total", "%"),
    GpuMetric("power_w", "Power draw", "W"),
    GpuMetric("power_pct", "Power draw of the enforced limit", "%"),
    GpuMetric("temperature_c", "Temperature", "°C"),
    GpuMetric("sm_clock_mhz", "SM clock", "MHz"),
)
METRIC_BY_KEY = {m.key: m for m in METRICS}

#: NVML clock-event ("throttle") reason bits, nvmlClocksEventReason* in nvml.h.
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "GPU idle"),
    (0x2, "Applications clocks setting"),
    (0x4, "SW power cap"),
    (0x8, "HW slowdown"),
    (0x10, "Sync boost"),
    (0x20, "SW thermal slowdown"),
    (0x40, "HW thermal slowdown"),
    (0x80, "HW power brake"),
    (0x100, "Display clock setting"),
)

_KEEP = ("ts", "node", "gpu_index", "name", "uuid", "mem_total_bytes", "power_limit_w")


def gpu_label(node: object, gpu_index: object) -> str:
    """How a GPU is named on every chart: ``node/gpuN`` (``gpuN`` when the node is unknown)."""
    idx = "?" if gpu_index is None or pd.isna(gpu_index) else int(gpu_index)  # type: ignore[call-overload]
    return f"gpu{idx}" if node is None or pd.isna(node) else f"{node}/gpu{idx}"  # type: ignore[call-overload]


def _num(frame: pd.DataFrame, col: str) -> pd.Series:
    """A column as float (NaN for missing), or all-NaN when the column is absent."""
    if col not in frame.columns:
        return pd.Series(np.nan, index=frame.index, dtype="float64")
    return pd.to_numeric(frame[col], errors="coerce").astype("float64")


def prepare(frame: pd.DataFrame) -> pd.DataFrame:
    """The compact per-sample frame every other function here reads.

    Keeps identity columns, adds ``gpu`` (label) and the derived metrics of :data:`METRICS`
    (memory in GiB and % of total, power % of limit), as float32 to halve memory on long runs.
    ``gpu`` is categorical; ``dsmon.live`` unions the categories when it appends a chunk.
    """
    out = pd.DataFrame({c: frame[c] for c in _KEEP if c in frame.columns})
    for col in ("node", "name", "uuid"):  # repeated strings: codes are cheap to copy and group
        if col in out.columns:
            out[col] = pd.Categorical(out[col], categories=sorted(out[col].dropna().unique()))
    out["ts"] = pd.to_datetime(frame["ts"]) if "ts" in frame.columns else pd.NaT
    # Categorical: a day of samples is millions of rows, and group-bys on codes are cheap.
    labels = _labels(_col(frame, "node"), frame["gpu_index"])
    out["gpu"] = pd.Categorical(labels, categories=sorted(set(labels)))
    mem_used, mem_total = _num(frame, "mem_used_bytes"), _num(frame, "mem_total_bytes")
    power, limit = _num(frame, "power_w"), _num(frame, "power_limit_w")
    derived = {
        "util_gpu_pct": _num(frame, "util_gpu_pct"),
        "mem_used_gib": mem_used / GIB,
        "mem_used_pct": 100.0 * mem_used / mem_total,
        "power_w": power,
        "power_pct": 100.0 * power / limit,
        "temperature_c": _num(frame, "temperature_c"),
        "sm_clock_mhz": _num(frame, "sm_clock_mhz"),
    }
    for key, values in derived.items():
        out[key] = values.astype("float32")
    out["throttle_reasons"] = _num(frame, "throttle_reasons")
    return out.reset_index(drop=True)


def _labels(nodes: pd.Series, indices: pd.Series) -> np.ndarray:
    """:func:`gpu_label` of every row, computed once per distinct (node, index) pair."""
    pairs = pd.MultiIndex.from_arrays([nodes.astype(object), indices.astype(object)])
    codes, uniques = pd.factorize(pairs)
    names = np.array([gpu_label(n, i) for n, i in uniques], dtype=object)
    return names[codes]


def _codes(gpus: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Integer code per row and the GPU label of each code (sorted labels)."""
    col = gpus["gpu"]
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = np.asarray(col.cat.categories, dtype=object)
        if col.cat.categories.is_monotonic_increasing:  # prepare() and live keep them sorted
            return col.cat.codes.to_numpy(), cats
        order = np.argsort(cats)
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        return rank[col.cat.codes.to_numpy()], cats[order]
    codes, labels = pd.factorize(col, sort=True)
    return codes, np.asarray(labels, dtype=object)


def _col(frame: pd.DataFrame, col: str) -> pd.Series:
    """A column, or all-None when absent."""
    return frame[col] if col in frame.columns else pd.Series([None] * len(frame), index=frame.index)


def _newest(gpus: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The last stored sample of each GPU (stores append in arrival order) and sample counts.

    Found from the GPU codes with numpy, not a group-by: on a day of 1 Hz samples from 64
    GPUs this is the difference between milliseconds and most of a second per refresh.
    """
    codes, labels = _codes(gpus)
    last = np.full(len(labels), -1, dtype=np.int64)
    last[codes] = np.arange(len(codes))  # repeated indices: the last assignment wins
    counts = np.bincount(codes, minlength=len(labels))
    seen = last >= 0
    rows = gpus.iloc[last[seen]].copy()
    rows["gpu"] = labels[seen]
    return rows, counts[seen]


def inventory(gpus: pd.DataFrame) -> pd.DataFrame:
    """One row per GPU: model, memory and power limit, sample count and last sample time."""
    cols = [
        "gpu",
        "node",
        "gpu_index",
        "name",
        "mem_total_gib",
        "power_limit_w",
        "samples",
        "last_ts",
    ]
    if gpus.empty:
        return pd.DataFrame(columns=cols)
    rows, counts = _newest(gpus)
    out = pd.DataFrame(
        {
            "gpu": rows["gpu"].to_numpy(),
            "node": rows["node"].to_numpy() if "node" in rows else None,
            "gpu_index": rows["gpu_index"].to_numpy(),
            "name": rows["name"].to_numpy() if "name" in rows else None,
            "mem_total_gib": pd.to_numeric(
                _col(rows, "mem_total_bytes"), errors="coerce"
            ).to_numpy()
            / GIB,
            "power_limit_w": pd.to_numeric(_col(rows, "power_limit_w"), errors="coerce").to_numpy(),
            "samples": counts,
            "last_ts": rows["ts"].to_numpy(),
        }
    )
    return out.sort_values(["node", "gpu_index"], kind="stable").reset_index(drop=True)


def models(gpus: pd.DataFrame) -> dict[str, int]:
    """GPU model name -> how many GPUs of it; more than one key means a mixed-model run."""
    if gpus.empty or "name" not in gpus.columns:
        return {}
    per_gpu = gpus.groupby("gpu", observed=True)["name"].last().fillna("unknown model")
    return {str(k): int(v) for k, v in per_gpu.value_counts().sort_index().items()}


def series(
    gpus: pd.DataFrame, metric: str, selected: Sequence[str] | None = None, n_out: int = N_OUT
) -> pd.DataFrame:
    """Long frame ``ts, gpu, value`` of one metric, each GPU's trace cut to ``n_out`` points."""
    codes, labels = _codes(gpus)
    wanted = set(labels) if selected is None else set(selected)
    ts, values = gpus["ts"].to_numpy(), gpus[metric].to_numpy()
    parts = []
    for code, label in enumerate(labels):
        if label in wanted:
            at = np.flatnonzero(codes == code)
            part = pd.DataFrame({"ts": ts[at], "value": values[at]})
            parts.append(downsample(part, "ts", ["value"], n_out=n_out).assign(gpu=label))
    if not parts:
        return pd.DataFrame(columns=["ts", "gpu", "value"])
    return pd.concat(parts, ignore_index=True)[["ts", "gpu", "value"]]


def buckets(
    gpus: pd.DataFrame, n_buckets: int = 300, metrics: Sequence[str] | None = None
) -> pd.DataFrame:
    """Mean of every metric per GPU and equal time bucket: the input of grids and imbalance.

    Returns one row per (gpu, bucket) with data: ``gpu``, ``ts`` (bucket centre) and the
    ``metrics`` columns (default: all of :data:`METRICS`; NaN where a GPU had no sample
    with that field in the bucket). Ask for the one metric on screen: each costs a pass
    over every sample.
    """
    cols = list(metrics) if metrics is not None else [m.key for m in METRICS]
    unknown = gpus["ts"].isna()
    if unknown.any():  # no time (an impossible one, stored long ago)
        gpus = gpus[~unknown]
    if gpus.empty:
        return pd.DataFrame(columns=["gpu", "ts", *cols])
    ts = gpus["ts"].to_numpy(dtype="datetime64[ns]").astype(np.int64)
    t0, t1 = int(ts.min()), int(ts.max())
    width = max((t1 - t0) // max(n_buckets, 1) + 1, 1)
    bucket = (ts - t0) // width
    codes, labels = _codes(gpus)
    key = codes.astype(np.int64) * n_buckets + bucket
    size = len(labels) * n_buckets
    data: dict[str, np.ndarray] = {}
    for col in cols:
        vals = gpus[col].to_numpy(dtype=np.float64)
        ok = ~np.isnan(vals)
        total = np.bincount(key, weights=np.where(ok, vals, 0.0), minlength=size)
        count = np.bincount(key, weights=ok, minlength=size)
        with np.errstate(invalid="ignore", divide="ignore"):
            data[col] = np.where(count > 0, total / count, np.nan)
    seen = np.bincount(key, minlength=size) > 0
    out = pd.DataFrame(data)
    out["gpu"] = np.repeat(np.asarray(labels, dtype=object), n_buckets)
    out["ts"] = pd.to_datetime(t0 + (np.tile(np.arange(n_buckets), len(labels)) + 0.5) * width)
    return out[seen].reset_index(drop=True)[["gpu", "ts", *cols]]


def heatmap(bucketed: pd.DataFrame, metric: str) -> pd.DataFrame:
    """GPUs x time grid of one metric (rows sorted by GPU label, columns by time)."""
    if bucketed.empty:
        return pd.DataFrame()
    return bucketed.pivot_table(
        index="gpu", columns="ts", values=metric, aggfunc="mean", dropna=False
    )


def imbalance(bucketed: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Spread of one metric across GPUs over time.

    Returns per bucket time: ``n_gpus``, ``mean``, ``min``, ``max``, ``spread`` (max - min)
    and ``cv`` (standard deviation / mean, population form; NaN when the mean is 0).
    """
    cols = ["ts", "n_gpus", "mean", "min", "max", "spread", "cv"]
    if bucketed.empty:
        return pd.DataFrame(columns=cols)
    g = bucketed.groupby("ts")[metric]
    out = pd.DataFrame(
        {
            "n_gpus": g.count(),
            "mean": g.mean(),
            "min": g.min(),
            "max": g.max(),
            "std": g.std(ddof=0),
        }
    )
    out["spread"] = out["max"] - out["min"]
    out["cv"] = out["std"] / out["mean"].where(out["mean"] != 0)
    return out.reset_index()[cols]


def decode_throttle(mask: int | float | None) -> tuple[str, ...]:
    """Names of the clock-event reasons set in an NVML bit mask."""
    if mask is None or pd.isna(mask):
        return ()
    bits = int(mask)
    return tuple(name for bit, name in THROTTLE_REASONS if bits & bit)


def throttle_share(gpus: pd.DataFrame) -> pd.DataFrame:
    """Per GPU, the % of samples in which each clock-event reason was active.

    Only reasons seen at least once get a column; "GPU idle" is listed too, as it is the
    benign reason (no work), next to the ones that cost speed (power cap, thermal, ...).
    """
    if gpus.empty or "throttle_reasons" not in gpus.columns:
        return pd.DataFrame(columns=["gpu", "samples"])
    reasons = gpus["throttle_reasons"].to_numpy(dtype=np.float64)
    ok = ~np.isnan(reasons)
    if not ok.any():
        return pd.DataFrame(columns=["gpu", "samples"])
    codes, labels = _codes(gpus)
    codes, masks = codes[ok], reasons[ok].astype(np.int64)
    samples = np.bincount(codes, minlength=len(labels))
    seen = samples > 0
    out = pd.DataFrame({"gpu": labels[seen], "samples": samples[seen]})
    present = int(np.bitwise_or.reduce(masks)) if masks.size else 0
    for bit, name in THROTTLE_REASONS:
        if present & bit:
            hits = (masks & bit) != 0
            out[name] = (
                100.0
                * np.bincount(codes, weights=hits, minlength=len(labels))[seen]
                / samples[seen]
            )
    return out


def latest(gpus: pd.DataFrame) -> pd.DataFrame:
    """The newest sample of each GPU with its metrics and decoded clock-event reasons."""
    if gpus.empty:
        return pd.DataFrame(columns=["gpu", "ts"])
    last, _ = _newest(gpus)
    cols = ["gpu", "name", "ts", *[m.key for m in METRICS]]
    out = last[[c for c in cols if c in last.columns]].copy()
    out["clock_events"] = [
        ", ".join(decode_throttle(m)) or "none" for m in last["throttle_reasons"]
    ]
    return out.sort_values("gpu").reset_index(drop=True)
