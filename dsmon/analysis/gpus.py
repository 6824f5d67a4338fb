"""GPU telemetry views: per-GPU traces, GPUs x time grids, imbalance and throttling.

A day of 1 Hz samples on 64 GPUs is 5.5 million rows, so nothing here reads samples one by
one: inputs are what the store sums up for a page (``Store.gpu.summary``: one row per GPU;
``Store.gpu.buckets``: mean, min and max per GPU and time bucket;
``dsmon.store.gpu.buckets``), and only :func:`prepare`/:func:`latest` see samples, the newest one of each GPU.

NVML's ``utilization.gpu`` is the share of the sample period in which *any* kernel ran
(kernel-active time), not how busy the SMs were: one tiny kernel reads 100 %. The labels in
:data:`METRICS` say so, and the dashboard shows them verbatim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dsmon.model.frames import records_frame
from dsmon.model.records import GpuSampleRecord
from dsmon.store.gpu.rows import GIB, THROTTLE_REASONS, gpu_label


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

_KEEP = ("ts", "node", "gpu_index", "name", "uuid", "mem_total_bytes", "power_limit_w")


def _num(frame: pd.DataFrame, col: str) -> pd.Series:
    """A column as float (NaN for missing), or all-NaN when the column is absent."""
    if col not in frame.columns:
        return pd.Series(np.nan, index=frame.index, dtype="float64")
    return pd.to_numeric(frame[col], errors="coerce").astype("float64")


def prepare(frame: pd.DataFrame) -> pd.DataFrame:
    """The compact per-sample frame every other function here reads.

    Keeps identity columns, adds ``gpu`` (label) and the derived metrics of :data:`METRICS`
    (memory in GiB and % of total, power % of limit), as float32 to halve memory on long runs.
    ``gpu`` is categorical; ``dsmon.view.cache`` unions the categories when it appends a chunk.
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


def _col(frame: pd.DataFrame, col: str) -> pd.Series:
    """A column, or all-None when absent."""
    return frame[col] if col in frame.columns else pd.Series([None] * len(frame), index=frame.index)


def inventory(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per GPU: model, memory and power limit, sample count and last sample time.

    ``summary`` is the store's per-GPU summary (``Store.gpu.summary``).
    """
    cols = ["gpu", "node", "gpu_index", "name", "mem_total_gib", "power_limit_w", "samples",
            "last_ts"]  # fmt: skip
    if summary.empty:
        return pd.DataFrame(columns=cols)
    out = summary[["gpu", "node", "gpu_index", "name", "power_limit_w", "samples", "last_ts"]]
    out = out.assign(mem_total_gib=pd.to_numeric(summary["mem_total_bytes"], errors="coerce") / GIB)
    return out[cols].reset_index(drop=True)


def models(summary: pd.DataFrame) -> dict[str, int]:
    """GPU model name -> how many GPUs of it; more than one key means a mixed-model run."""
    if summary.empty or "name" not in summary.columns:
        return {}
    counts = summary["name"].fillna("unknown model").value_counts().sort_index()
    return {str(k): int(v) for k, v in counts.items()}


def lines(
    bucketed: pd.DataFrame, metric: str, selected: Sequence[str] | None = None
) -> pd.DataFrame:
    """Long frame ``ts, gpu, value`` of one metric: each bucket's minimum then its maximum.

    Two points per bucket draw the bucket's whole range, so a one-sample spike or drop
    stays on the chart however long the run (what MinMax downsampling keeps).
    """
    if bucketed.empty or metric not in bucketed.columns:
        return pd.DataFrame(columns=["ts", "gpu", "value"])
    rows = bucketed if selected is None else bucketed[bucketed["gpu"].isin(list(selected))]
    lo = rows[["ts", "gpu", f"{metric}_min"]].set_axis(["ts", "gpu", "value"], axis=1)
    hi = rows[["ts", "gpu", f"{metric}_max"]].set_axis(["ts", "gpu", "value"], axis=1)
    both = pd.concat([lo.assign(order=0), hi.assign(order=1)], ignore_index=True)
    both = both.sort_values(["gpu", "ts", "order"], kind="stable")
    return both[["ts", "gpu", "value"]].reset_index(drop=True)


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


def throttle_share(summary: pd.DataFrame) -> pd.DataFrame:
    """Per GPU, the % of samples in which each clock-event reason was active.

    Only reasons seen at least once get a column; "GPU idle" is listed too, as it is the
    benign reason (no work), next to the ones that cost speed (power cap, thermal, ...).
    """
    if summary.empty or "throttle_known" not in summary.columns:
        return pd.DataFrame(columns=["gpu", "samples"])
    known = summary[summary["throttle_known"] > 0]
    if known.empty:
        return pd.DataFrame(columns=["gpu", "samples"])
    out = pd.DataFrame(
        {"gpu": known["gpu"].to_numpy(), "samples": known["throttle_known"].to_numpy()}
    )
    for bit, name in THROTTLE_REASONS:
        hits = known[f"thr_{bit}"].to_numpy(dtype=np.float64)
        if hits.sum() > 0:
            out[name] = 100.0 * hits / out["samples"].to_numpy(dtype=np.float64)
    return out


def _newest(gpus: pd.DataFrame) -> pd.DataFrame:
    """The last row of each GPU (rows in time order)."""
    return gpus.groupby("gpu", observed=True, sort=True).tail(1)


def latest(gpus: pd.DataFrame) -> pd.DataFrame:
    """The newest sample of each GPU with its metrics and decoded clock-event reasons."""
    if gpus.empty:
        return pd.DataFrame(columns=["gpu", "ts"])
    last = _newest(gpus.sort_values("ts", kind="stable"))
    cols = ["gpu", "name", "ts", *[m.key for m in METRICS]]
    out = last[[c for c in cols if c in last.columns]].copy()
    out["clock_events"] = [
        ", ".join(decode_throttle(m)) or "none" for m in last["throttle_reasons"]
    ]
    return out.sort_values("gpu").reset_index(drop=True)


def latest_of(samples: Sequence[GpuSampleRecord]) -> pd.DataFrame:
    """:func:`latest` of sample records (the store's newest of each GPU)."""
    return latest(prepare(records_frame("gpu", list(samples))))


#: How far behind the newest sample a GPU's own newest may be and still count as reporting.
REPORTING_S = 10.0


@dataclass(frozen=True)
class LiveTiles:
    """The GPUs page's live tiles: the newest sample, and the GPUs at that moment.

    Redrawn every second apart from the rest of the page, so that a sample is on screen
    within the collector's poll and a second, not the page's whole redraw.
    """

    newest: pd.Timestamp
    gpus: int
    reporting: int
    util_mean_pct: float
    power_kw: float
    hottest_c: float

    def values(self) -> list[tuple[str, str]]:
        """(label, value) of each tile, as the page shows them."""

        def num(value: float, fmt: str) -> str:
            return "—" if value != value else format(value, fmt)

        return [
            ("newest sample", self.newest.strftime("%H:%M:%S")),
            ("GPUs reporting", f"{self.reporting} / {self.gpus}"),
            ("kernel-active, mean", f"{num(self.util_mean_pct, '.0f')} %"),
            ("power, all GPUs", f"{num(self.power_kw, '.1f')} kW"),
            ("hottest GPU", f"{num(self.hottest_c, '.0f')} °C"),
        ]


def live_tiles(latest_rows: pd.DataFrame) -> LiveTiles | None:
    """The tiles from :func:`latest` rows (one per GPU); None without a timed sample."""
    if latest_rows.empty or "ts" not in latest_rows.columns:
        return None
    ts = pd.to_datetime(latest_rows["ts"], errors="coerce")
    if ts.isna().all():
        return None
    newest = ts.max()
    fresh = latest_rows[ts >= newest - pd.Timedelta(seconds=REPORTING_S)]

    def col(name: str) -> pd.Series:
        if name not in fresh.columns:
            return pd.Series(dtype="float64")
        return pd.to_numeric(fresh[name], errors="coerce").dropna()

    util, power, temp = col("util_gpu_pct"), col("power_w"), col("temperature_c")
    return LiveTiles(
        newest=newest,
        gpus=len(latest_rows),
        reporting=len(fresh),
        util_mean_pct=float(util.mean()) if len(util) else float("nan"),
        power_kw=float(power.sum()) / 1000 if len(power) else float("nan"),
        hottest_c=float(temp.max()) if len(temp) else float("nan"),
    )
