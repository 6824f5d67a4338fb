"""Benchmark: the GPUs page over a day of 64 GPUs (issue 11), typed GPU tables vs JSON rows.

Builds a real store of ``--hours`` of 1 Hz samples from 64 GPUs (8 nodes; default 24 h = 5.5
million samples) through ``Store.add``, with the values NVML gives (integer utilisation,
memory in bytes, power in mW, energy counters, clock-event bits), then measures:

- ``bytes/sample``: the store's size over the samples it holds (SQLite: the file as written,
  its log checkpointed, and after VACUUM; PostgreSQL: the GPU tables with their indexes);
  baseline: the same samples stored as records rows (JSON body, key, indexes), the layout
  before, in the same backend. A live run's collectors each post their node's second of
  samples, and the store notes each post: ``--live`` writes so (8 GPUs a batch; several
  times slower to build than ``--batch-seconds 3600``). ``--gpm`` adds the three GPM
  metrics a Hopper GPU gives the collector;
- ``first load``: every query the GPUs page makes on its first render (per-GPU summary,
  trace buckets, grid buckets, newest sample per GPU) and the figures built from them, with
  the JSON size of those figures (what Streamlit sends); baseline: the page as it was, all
  samples decoded into a frame and bucketed in pandas, on ``--baseline-hours`` (the full day
  takes minutes and about 20 GB that way) and extrapolated linearly, labelled so;
- ``refresh``: the same after one more second of samples arrives (64 rows), as a live page.

Usage: ``python bench/gpu_page.py [--hours 24] [--batch-seconds 3600 | --live] [--gpm]
[--baseline-hours 0.5] [--store-url URL]``

``--store-url postgresql://...`` measures a PostgreSQL store instead of a SQLite file in a
temporary folder; it must name an empty database (or schema), which is left filled.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

from dsmon.analysis import gpus
from dsmon.analysis.downsample import N_OUT
from dsmon.figures import gpus as fig
from dsmon.model.records import GpuSampleRecord, Source
from dsmon.store.records.rows import ROW_COLUMNS, RecordRow, record_row
from dsmon.store.store import Store, open_store

RUN = "bench"
GPUS = 64
NODES = 8
T0 = datetime(2026, 11, 29, 8, 0, 0)
GIB = 1024**3


def samples(first_s: int, seconds: int, gpm: bool = False) -> Iterator[GpuSampleRecord]:
    """One NVML poll per GPU and second, values in the form the collector reads them.

    With ``gpm``, also the three GPM metrics (Hopper and newer), as NVML computes them.
    """
    rnd = random.Random(first_s)
    for sec in range(first_s, first_s + seconds):
        ts = (T0 + timedelta(seconds=sec, milliseconds=rnd.randint(0, 40))).isoformat(
            timespec="milliseconds"
        )
        for g in range(GPUS):
            yield GpuSampleRecord(
                src=Source(run=RUN, node=f"node{g // (GPUS // NODES):02d}"), ts=ts, gpu_index=g % 8,
                uuid=f"GPU-{g:04d}", name="NVIDIA H100 80GB HBM3",
                util_gpu_pct=rnd.choice((100, 100, 99, 97, 0)), util_mem_pct=rnd.randint(20, 60),
                mem_used_bytes=rnd.randint(60, 79) * GIB, mem_total_bytes=80 * GIB,
                power_w=rnd.randint(300_000, 700_000) / 1000, power_limit_w=700.0,
                energy_j=(1_000_000_000 + sec * 650_000 + g) / 1000,
                temperature_c=rnd.randint(55, 80), sm_clock_mhz=rnd.choice((1980, 1755)),
                mem_clock_mhz=2619, throttle_reasons=rnd.choice((0, 0, 0, 4)),
                pcie_tx_bytes_per_s=rnd.randint(0, 2_000_000) * 1024.0,
                pcie_rx_bytes_per_s=rnd.randint(0, 2_000_000) * 1024.0,
                ecc_corrected=0, ecc_uncorrected=0,
                **(_gpm(rnd) if gpm else {}),
            )  # fmt: skip


def _gpm(rnd: random.Random) -> dict[str, float]:
    """GPM percentages as the collector sends them: NVML's doubles to a hundredth of a percent."""
    return {
        "gpm_sm_active_pct": round(rnd.uniform(60, 100), 2),
        "gpm_tensor_active_pct": round(rnd.uniform(20, 80), 2),
        "gpm_dram_bw_pct": round(rnd.uniform(10, 90), 2),
    }


def live_batches(first_s: int, seconds: int, gpm: bool) -> Iterator[list[GpuSampleRecord]]:
    """Each node's second of samples, as its collector posts it (8 GPUs a batch)."""
    per_node = GPUS // NODES
    for sec in range(first_s, first_s + seconds):
        polled = list(samples(sec, 1, gpm))
        for node in range(NODES):
            yield polled[node * per_node : (node + 1) * per_node]


def page(store: Store) -> tuple[float, int]:
    """Seconds and figure JSON bytes of the GPUs page's queries and figures (util metric)."""
    start = time.perf_counter()
    summary = store.gpu.summary(RUN)
    fine = store.gpu.buckets(RUN, N_OUT // 2, gpus=[f"node00/gpu{i}" for i in range(8)])
    grid = store.gpu.buckets(RUN, 300)
    latest = gpus.latest_of(store.gpu.latest(RUN))
    selected = [str(g) for g in gpus.inventory(summary)["gpu"][:8]]
    figures = [
        fig.lines_figure(gpus.lines(fine, "util_gpu_pct", selected), "util_gpu_pct"),
        fig.heatmap_figure(gpus.heatmap(grid, "util_gpu_pct"), "util_gpu_pct"),
        fig.imbalance_figure(gpus.imbalance(grid, "util_gpu_pct"), "util_gpu_pct"),
        fig.throttle_figure(gpus.throttle_share(summary)),
    ]
    sent = sum(len(f.to_json()) for f in figures) + len(latest.to_json(date_format="iso"))
    return time.perf_counter() - start, sent


def baseline_page(bodies: list[str]) -> float:
    """The page as it was: every sample decoded from its JSON row, then bucketed in pandas."""
    from dsmon.model.frames import records_frame
    from dsmon.store.records.rows import row_record

    start = time.perf_counter()
    recs = [row_record(b) for b in bodies]
    frame = gpus.prepare(records_frame("gpu", recs))
    frame.groupby("gpu", observed=True)["util_gpu_pct"].agg(["mean", "min", "max"])
    return time.perf_counter() - start


class SqliteBench:
    """The typed store and the JSON-row baseline as SQLite files in a temporary folder."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="dsmon-gpu-bench-")
        self.tmp = Path(self._dir.name)
        self.url = str(self.tmp / "typed.sqlite")

    def close(self) -> None:
        """Remove both stores: a day of samples is hundreds of MB in the temporary folder."""
        self._dir.cleanup()

    def typed_sizes(self) -> tuple[int, int]:
        """The typed store's file as written and after VACUUM (roll-ups, indexes included)."""
        conn = sqlite3.connect(self.url)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        written = os.path.getsize(self.url)
        conn.execute("VACUUM")
        conn.close()
        return written, os.path.getsize(self.url)

    def baseline(self, rows: list[RecordRow]) -> tuple[int, float]:
        """Bytes and first-load seconds of ``rows`` stored with the store's own DDL."""
        path = self.tmp / "records.sqlite"
        open_store(path).close()
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN")
        marks = ",".join("?" * len(ROW_COLUMNS))
        conn.executemany(f"INSERT INTO records ({', '.join(ROW_COLUMNS)}) VALUES ({marks})", rows)
        conn.execute("COMMIT")
        conn.execute("VACUUM")
        conn.close()
        start = time.perf_counter()
        conn = sqlite3.connect(path)
        bodies = [b for (b,) in conn.execute("SELECT body FROM records WHERE kind='gpu'")]
        conn.close()
        read_s = time.perf_counter() - start
        return os.path.getsize(path), read_s + baseline_page(bodies)


class PgBench:
    """The typed store in the PostgreSQL database named; the baseline in its records table.

    The typed store keeps no GPU samples in ``records``, so that table holds the baseline
    rows alone and its size (indexes and TOAST included) is theirs.
    """

    def __init__(self, url: str) -> None:
        import psycopg

        self.url = url
        self.psycopg = psycopg
        with open_store(url) as store:
            if store.runs():
                raise SystemExit(f"{url}: not empty; --store-url needs an empty database")

    def close(self) -> None:
        """Nothing to remove: the database named is the caller's."""

    def _size(self, tables: tuple[str, ...]) -> int:
        with self.psycopg.connect(self.url, autocommit=True) as conn:
            for table in tables:
                conn.execute(f"VACUUM ANALYZE {table}")
            sql = "SELECT SUM(pg_total_relation_size(t)) FROM unnest(%s::regclass[]) AS t"
            row = conn.execute(sql, (list(tables),)).fetchone()
        return int(row[0]) if row else 0

    def typed_sizes(self) -> tuple[int, int]:
        """The GPU tables, their indexes and TOAST (a plain VACUUM does not compact: twice)."""
        size = self._size(("gpu_samples", "gpu_rollup", "gpu_series", "gpu_batches"))
        return size, size

    def baseline(self, rows: list[RecordRow]) -> tuple[int, float]:
        """Bytes and first-load seconds of ``rows`` COPYed into ``records``."""
        copy_sql = f"COPY records ({', '.join(ROW_COLUMNS)}) FROM STDIN"
        with (
            self.psycopg.connect(self.url, autocommit=True) as conn,
            conn.cursor() as cur,
            cur.copy(copy_sql) as copy,
        ):
            for row in rows:
                copy.write_row(row)
        size = self._size(("records",))
        start = time.perf_counter()
        with self.psycopg.connect(self.url) as conn:
            bodies = [b for (b,) in conn.execute("SELECT body FROM records WHERE kind = 'gpu'")]
        read_s = time.perf_counter() - start
        return size, read_s + baseline_page(bodies)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--batch-seconds", type=int, default=3600, help="seconds of samples per add")
    ap.add_argument(
        "--live", action="store_true", help="each node's second of samples per add, as it posts"
    )
    ap.add_argument("--gpm", action="store_true", help="samples carry GPM metrics (Hopper)")
    ap.add_argument("--baseline-hours", type=float, default=0.5)
    ap.add_argument("--store-url", help="postgresql://... (an empty database); default SQLite")
    args = ap.parse_args()
    bench = PgBench(args.store_url) if args.store_url else SqliteBench()
    try:
        measure(args, bench)
    finally:
        bench.close()


def measure(args: argparse.Namespace, bench: SqliteBench | PgBench) -> None:
    """Write the samples, then print the typed layout's figures beside the baseline's."""
    seconds = int(args.hours * 3600)
    store = open_store(bench.url)
    start = time.perf_counter()
    per = 1 if args.live else max(args.batch_seconds, 1)
    if args.live:
        for batch in live_batches(0, seconds, args.gpm):
            store.add(batch, live=True)
    else:
        for first in range(0, seconds, per):
            store.add(samples(first, min(per, seconds - first), args.gpm), live=per < 60)
    build_s = time.perf_counter() - start
    n = seconds * GPUS
    store.close()
    written, size = bench.typed_sizes()
    print(f"store: {'PostgreSQL' if args.store_url else 'SQLite'}")
    print(
        f"stored {n:,} samples in {build_s:.0f} s ({n / build_s:,.0f} samples/s), "
        + (f"each node's second of samples per add ({GPUS // NODES} GPUs)" if args.live
           else f"{per} s of samples per add")
        + (", with GPM metrics" if args.gpm else "")
    )  # fmt: skip
    print(
        f"typed layout: {written / n:.1f} bytes/sample as written, {size / n:.1f} compacted "
        "(roll-ups and indexes included)"
    )
    store = open_store(bench.url)
    first, sent = page(store)
    print(f"first load (all queries + figures): {first:.2f} s, {sent / 1e6:.2f} MB of figures")
    store.add(samples(seconds, 1))
    refresh, sent = page(store)
    print(f"refresh after 64 new samples: {refresh:.2f} s, {sent / 1e6:.2f} MB of figures")
    store.close()
    rows = [record_row(r) for r in samples(0, int(args.baseline_hours * 3600))]
    b_n = len(rows)
    b_size, b_load = bench.baseline(rows)
    scale = n / b_n
    print(f"baseline JSON rows: {b_size / b_n:.1f} bytes/sample ({b_n:,} samples)")
    print(
        f"baseline first load: {b_load:.2f} s for {b_n:,} samples; "
        f"extrapolated to {n:,}: {b_load * scale:.0f} s (linear)"
    )
    print(f"ratio bytes/sample typed/baseline: {size / n / (b_size / b_n):.3f}")
    print(f"ratio first load typed/baseline(extrapolated): {first / (b_load * scale):.4f}")


if __name__ == "__main__":
    main()
