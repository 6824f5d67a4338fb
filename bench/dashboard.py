"""Benchmark: one dashboard refresh per page on a long run, against a naive full-resolution one.

The run is synthetic and large: ``--steps`` optimizer steps (default 100,000) of engine,
micro and ZeRO timer lines on one rank, ThroughputTimer lines every 10 steps, and
``--gpus`` GPUs (default 64, 8 per node) sampled at 1 Hz for ``--hours`` (default 24): 5.5
million GPU samples. For each page it measures, in the same process:

- ``dsmon``: what a live refresh does: fetch only the records added since the last refresh
  (one new step and one new sample per GPU, ``after_id``), recompute the page's analysis on
  the cached frames, downsample every trace to ~1,000 points, build the plotly figures and
  serialise them (figure JSON + table Arrow bytes = what the browser is sent);
- ``naive``: the same page drawn from full-resolution frames (no downsampling), the way a
  dashboard without a query layer would ship every point.

Goals: <= 1 s and <= 0.5 MB per refresh for ``dsmon``.

The frames are built in memory with numpy (columns exactly as ``Store.frame`` returns them)
and served by an in-memory store, because writing 5.5 million records into SQLite would take
this box minutes and is the store's benchmark, not the dashboard's. ``--sqlite-hours`` adds
a real SQLite measurement: it writes that many hours of the GPU samples, then times the
incremental query a refresh makes and the full re-read a naive refresh would make, and
reports rows/s with the extrapolation to the full run (labelled as such).

Usage: ``python bench/dashboard.py [--steps 100000] [--gpus 64] [--hours 24] [--sqlite-hours 0.25]``
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pyarrow as pa

from dsmon.analysis import comm, flops, gpus, steps
from dsmon.analysis.downsample import downsample
from dsmon.figures import comm as comm_fig
from dsmon.figures import flops as flops_fig
from dsmon.figures import gpus as gpus_fig
from dsmon.figures import steps as steps_fig
from dsmon.live import OPEN, RunFrames
from dsmon.peaks import find_peak
from dsmon.records import FlopsProfileRecord, GpuSampleRecord, ModuleAggregate, Source, TimerRecord
from dsmon.store import open_store

RUN = "bench"
PROFILE = FlopsProfileRecord(
    src=Source(run="bench"), profile_step=5, fwd_flops_per_gpu=1.2e14, bwd_factor=2.0,
    flops_per_s_per_gpu=4.0e14, samples_per_s=900.0,
    top_modules=tuple(ModuleAggregate(depth=1, metric="params", module_class=f"Layer{i}", value=1e8 * i) for i in range(1, 9)),
)  # fmt: skip
#: Live ticks timed per page (the median is reported).
REPEATS = 5
T0 = pd.Timestamp("2026-11-29T00:00:00")
RNG = np.random.default_rng(7)


# --- synthetic frames, shaped like Store.frame -------------------------------------------


def timer_frame(n_steps: int, seconds: float) -> pd.DataFrame:
    """Global, micro and ZeRO-optimizer timer rows of rank 0, one of each per step."""
    step = np.arange(1, n_steps + 1)
    ts = T0 + pd.to_timedelta(step * seconds / n_steps, unit="s")
    fwd = RNG.normal(100, 5, n_steps)
    bwd_inner = RNG.normal(200, 8, n_steps)
    allreduce = RNG.gamma(4, 10, n_steps)
    opt = RNG.normal(30, 2, n_steps)
    fwd[::5000] *= 8  # a slow step now and then
    base = {"step": step, "ts": ts, "node": "n0", "rank": 0, "file": "train.log", "line": step}
    glob = pd.DataFrame({**base, "group": "global", "fwd_ms": fwd, "bwd_ms": bwd_inner + allreduce,
                         "bwd_inner_ms": bwd_inner, "bwd_allreduce_ms": allreduce, "step_ms": opt})  # fmt: skip
    micro = pd.DataFrame({**base, "group": "micro", "micro_step": 0, "fwd_microstep_ms": fwd,
                          "bwd_microstep_ms": bwd_inner + allreduce, "bwd_inner_microstep_ms": bwd_inner,
                          "bwd_allreduce_microstep_ms": allreduce, "step_microstep_ms": opt})  # fmt: skip
    zero = pd.DataFrame({**base, "group": "zero_optimizer", "optimizer_allgather_ms": RNG.normal(20, 2, n_steps),
                         "optimizer_gradients_ms": RNG.normal(1, 0.1, n_steps), "optimizer_step_ms": opt * 0.8})  # fmt: skip
    out = (
        pd.concat([zero, micro, glob])
        .sort_values(["step", "group"], kind="stable")
        .reset_index(drop=True)
    )
    out.insert(0, "id", np.arange(1, len(out) + 1))
    out["step"] = out["step"].astype("Int64")
    out["rank"] = out["rank"].astype("Int64")
    out["micro_step"] = out["micro_step"].astype("Int64")
    return out


def throughput_frame(n_steps: int, seconds: float, first_id: int) -> pd.DataFrame:
    """ThroughputTimer lines every 10 steps."""
    step = np.arange(10, n_steps + 1, 10)
    return pd.DataFrame({
        "id": first_id + np.arange(len(step)), "step": pd.array(step, dtype="Int64"),
        "ts": T0 + pd.to_timedelta(step * seconds / n_steps, unit="s"), "global_step": step,
        "samples_per_s": RNG.normal(900, 20, len(step)),
    })  # fmt: skip


def gpu_frame(n_gpus: int, seconds: int, first_id: int) -> pd.DataFrame:
    """One NVML sample per GPU and second; GPU 13 lags 20 points behind the others."""
    n = n_gpus * seconds
    idx = np.tile(np.arange(n_gpus), seconds)
    util = np.clip(RNG.normal(92, 4, n), 0, 100)
    util[idx == 13] -= 20
    return pd.DataFrame({
        "id": first_id + np.arange(n), "step": pd.array([None] * n, dtype="Int64"),
        "ts": T0 + pd.to_timedelta(np.repeat(np.arange(seconds), n_gpus), unit="s"),
        "node": np.array([f"node{i // 8:02d}" for i in range(n_gpus)], dtype=object)[idx],
        "gpu_index": idx % 8, "name": "NVIDIA H100 80GB HBM3", "util_gpu_pct": util,
        "mem_used_bytes": np.full(n, 70 * 1024**3), "mem_total_bytes": np.full(n, 80 * 1024**3),
        "power_w": RNG.normal(600, 30, n), "power_limit_w": 700.0, "temperature_c": RNG.normal(65, 3, n),
        "sm_clock_mhz": RNG.normal(1980, 10, n), "throttle_reasons": np.where(RNG.random(n) < 0.01, 4, 0),
    })  # fmt: skip


class MemoryStore:
    """``Store.frame/records/last_id`` over in-memory frames, with ``after_id`` filtering."""

    def __init__(self, frames: dict[str, pd.DataFrame]) -> None:
        self.frames = frames

    def frame(self, run: str, kind: str, *, after_id: int | None = None, **_: Any) -> pd.DataFrame:
        f = self.frames.get(kind, pd.DataFrame())
        if f.empty or after_id is None:
            return f
        start = int(np.searchsorted(f["id"].to_numpy(), after_id, side="right"))
        return f.iloc[start:]

    def records(self, run: str, kind: str | None = None, **_: Any) -> list[Any]:
        return [PROFILE] if kind == "flops_profile" else []

    def last_id(self, run: str | None = None) -> int:
        return max((int(f["id"].iloc[-1]) for f in self.frames.values() if not f.empty), default=0)

    def append(self, kind: str, rows: pd.DataFrame) -> None:
        rows = rows.assign(id=self.last_id() + 1 + np.arange(len(rows)))
        self.frames[kind] = pd.concat([self.frames[kind], rows], ignore_index=True)


# --- one page refresh, as the pages compute it ---------------------------------------------


def steps_page(f: RunFrames, full: bool) -> list[Any]:
    """What pages/steps.py draws."""
    ds = (lambda fr, x, ys, **kw: fr) if full else downsample
    bd = steps.step_breakdown(f.frame("timer"))
    micro = steps.micro_breakdown(f.frame("timer"))
    tp = flops.throughput(f.frame("throughput"))
    stats = steps.step_stats(bd)
    zero = f.frame("timer")
    zero = zero[zero["group"] == "zero_optimizer"]
    return [
        steps_fig.steps_figure(
            ds(bd, "step", ["total_ms"]), ds(tp, "step", ["samples_per_s"]), None, None
        ),
        steps_fig.micro_figure(ds(micro, "step", ["total_ms"], by="rank")),
        steps_fig.distribution_figure(bd, stats),
        steps_fig.zero_timers_figure(
            ds(zero, "step", ["optimizer_allgather_ms"]), list(steps.OPTIMIZER_TIMERS)
        ),
        stats,
        steps.slowest_steps(bd, 5),
    ]


def comm_page(f: RunFrames, full: bool) -> list[Any]:
    """What pages/communication.py draws (no comms-logger output in this run)."""
    ds = (lambda fr, x, ys, **kw: fr) if full else downsample
    bd = steps.step_breakdown(f.frame("timer"))
    share = comm.comm_share(bd)
    ratios = comm.timer_ratios(bd)
    return [
        comm_fig.share_figure(ds(share, "step", ["exposed_comm_ms", "comm_share"], by="rank")),
        comm_fig.ratio_figure(ds(ratios, "step", ["allreduce_pct_of_bwd_inner"], by="rank")),
    ]


def gpus_page(f: RunFrames, full: bool) -> list[Any]:
    """What pages/gpus.py draws for the default metric (8 GPUs as lines, all in the grid)."""
    samples = f.frame("gpu")
    inv = gpus.inventory(samples)
    chosen = [str(g) for g in inv["gpu"][:8]]
    n_out = len(samples) if full else 1000
    series = gpus.series(samples, "util_gpu_pct", chosen, n_out=n_out)
    n_buckets = len(samples) // max(len(inv), 1) if full else 300
    b = gpus.buckets(samples, n_buckets=n_buckets, metrics=["util_gpu_pct"])
    return [
        gpus_fig.lines_figure(series, "util_gpu_pct"),
        gpus_fig.heatmap_figure(gpus.heatmap(b, "util_gpu_pct"), "util_gpu_pct"),
        gpus_fig.imbalance_figure(gpus.imbalance(b, "util_gpu_pct"), "util_gpu_pct"),
        gpus_fig.throttle_figure(gpus.throttle_share(samples)),
        gpus.latest(samples),
        inv,
    ]


def flops_page(f: RunFrames, full: bool) -> list[Any]:
    """What pages/flops.py draws: the profile tables and achieved TFLOPS of every step."""
    profile = flops.latest_profile(f.records("flops_profile"))  # type: ignore[arg-type]
    assert profile is not None
    bd = steps.step_breakdown(f.frame("timer"))
    per_step = flops.step_tflops(bd, profile, 1)
    shown = per_step if full else downsample(per_step, "step", ["tflops"], by="rank")
    peak = find_peak("NVIDIA H100 80GB HBM3")
    return [
        flops.summary(profile),
        flops.mfu_rows(float(per_step["tflops"].median()), peak, "bf16"),
        flops_fig.tflops_figure(shown, 989.4, "(H100 SXM, bf16)"),
        flops_fig.top_modules_figure(flops.top_modules(profile, "params", 10), "params"),
    ]


PAGES: dict[str, Callable[[RunFrames, bool], list[Any]]] = {
    "steps": steps_page,
    "communication": comm_page,
    "gpus": gpus_page,
    "flops": flops_page,
}


def payload_bytes(items: list[Any]) -> int:
    """Bytes the browser is sent: plotly JSON of each figure, Arrow IPC of each table."""
    total = 0
    for item in items:
        if isinstance(item, go.Figure):
            total += len(item.to_json().encode())
        else:
            sink = io.BytesIO()
            table = pa.Table.from_pandas(item.reset_index(), preserve_index=False)
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            total += sink.tell()
    return total


def new_tick(store: MemoryStore, n_gpus: int, step: int, second: int) -> None:
    """What one second of a live run adds: a step's timer lines and a sample per GPU."""
    t = timer_frame(1, 1.0).assign(
        step=pd.array([step] * 3, dtype="Int64"), ts=T0 + pd.Timedelta(seconds=second)
    )
    store.append("timer", t.drop(columns="id"))
    g = gpu_frame(n_gpus, 1, 0).assign(ts=T0 + pd.Timedelta(seconds=second))
    store.append("gpu", g.drop(columns="id"))


def timed(fn: Callable[..., list[Any]]) -> tuple[float, int]:
    """Seconds to compute and serialise a page, and the bytes it sends."""
    t = time.perf_counter()
    items = fn()
    size = payload_bytes(items)
    return time.perf_counter() - t, size


def sqlite_query_costs(n_gpus: int, hours: float) -> dict[str, float]:
    """Write ``hours`` of GPU samples to SQLite; time the refresh query and a full re-read."""
    seconds = int(hours * 3600)
    t0 = T0.to_pydatetime()
    recs: list[Any] = [TimerRecord(src=Source(run=RUN, file="train.log", line=i), step=i, group="global", values_ms={"fwd": 1.0}) for i in range(1, 1000)]  # fmt: skip
    recs += [
        GpuSampleRecord(src=Source(run=RUN, node=f"node{g // 8:02d}"), ts=(t0 + pd.Timedelta(seconds=s)).isoformat(timespec="milliseconds"),
                        gpu_index=g % 8, name="NVIDIA H100 80GB HBM3", util_gpu_pct=90.0, power_w=600.0, power_limit_w=700.0)
        for s in range(seconds) for g in range(n_gpus)
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp, open_store(Path(tmp) / "bench.sqlite") as store:
        t = time.perf_counter()
        store.add(recs)
        write = time.perf_counter() - t
        last = store.last_id(RUN)
        t = time.perf_counter()
        store.frame(RUN, "gpu", after_id=last - n_gpus)
        tick = time.perf_counter() - t
        t = time.perf_counter()
        full = store.frame(RUN, "gpu")
        reread = time.perf_counter() - t
    return {"rows": float(len(full)), "write_s": write, "tick_query_s": tick, "full_read_s": reread}


def main() -> None:
    """Build the run, time one refresh per page both ways, print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument(
        "--sqlite-hours", type=float, default=0.25, help="GPU samples written to SQLite (0: skip)"
    )
    args = ap.parse_args()
    seconds = int(args.hours * 3600)

    t = time.perf_counter()
    timers = timer_frame(args.steps, seconds)
    tp = throughput_frame(args.steps, seconds, len(timers) + 1)
    samples = gpu_frame(args.gpus, seconds, len(timers) + len(tp) + 1)
    store = MemoryStore({"timer": timers, "throughput": tp, "gpu": samples})
    print(f"run: {args.steps:,} steps ({len(timers):,} timer rows), {args.gpus} GPUs x {args.hours:g} h "
          f"= {len(samples):,} GPU samples (built in {time.perf_counter() - t:.1f} s)")  # fmt: skip

    frames = RunFrames(store, RUN, transforms={"gpu": gpus.prepare})  # type: ignore[arg-type]
    t = time.perf_counter()
    for kind in ("timer", "throughput", "gpu"):
        frames.frame(kind, OPEN)
    print(f"first load into the shared cache (once per server): {time.perf_counter() - t:.1f} s")
    del samples, timers

    head = f"{'page':<15}{'dsmon s':>10}{'dsmon MB':>10}{'naive s':>10}{'naive MB':>10}"
    print(f"\n{head}  goal <= 1 s, <= 0.5 MB")
    tick = args.steps
    for name, page in PAGES.items():
        page(frames, False)  # the server has drawn this page before: plotly's lazy imports are warm
        runs = []
        for _ in range(REPEATS):
            tick += 1
            new_tick(store, args.gpus, tick, seconds + tick - args.steps)
            t = time.perf_counter()
            frames.refresh()
            fetch = time.perf_counter() - t
            secs, size = timed(lambda page=page: page(frames, False))
            runs.append((fetch + secs, size))
        secs, size = sorted(runs)[REPEATS // 2]
        naive_s, naive_size = timed(lambda page=page: page(frames, True))
        ok = "ok" if secs <= 1.0 and size <= 0.5e6 else "MISSED"
        row = f"{name:<15}{secs:>10.3f}{size / 1e6:>10.3f}{naive_s:>10.3f}{naive_size / 1e6:>10.2f}"
        print(f"{row}  {ok}")
    print(
        f"(dsmon: median of {REPEATS} live ticks, each: fetch new rows, compute, figures, serialise;"
    )
    print(" naive: the same frames without downsampling, not counting a full re-read of the store)")

    if args.sqlite_hours > 0:
        cost = sqlite_query_costs(args.gpus, args.sqlite_hours)
        rate = cost["rows"] / cost["full_read_s"]
        total = args.gpus * seconds
        print(f"\nSQLite, {cost['rows']:,.0f} GPU samples written in {cost['write_s']:.1f} s:")
        print(f"  refresh query (after_id, one tick): {cost['tick_query_s'] * 1000:.1f} ms")
        print(
            f"  full re-read (naive refresh): {cost['full_read_s']:.2f} s = {rate:,.0f} rows/s; "
            f"extrapolated to {total:,} samples: {total / rate:.0f} s per naive refresh"
        )


if __name__ == "__main__":
    main()
