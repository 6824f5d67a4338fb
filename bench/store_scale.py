"""Benchmark: the store's per-refresh and per-batch costs once a big run is stored (issue 11).

Writes ``--samples`` GPU samples (64 GPUs at 1 Hz, default 300,000 = 78 min) and 1,000 timer
records of one run into a real SQLite store file through ``SQLiteStore.add``, then measures,
in the same run and on the same file, this dsmon against a baseline:

- ``refresh``: the query a dashboard refresh makes for the GPU page (``store.frame(run,
  "gpu", after_id=<one tick ago>)``, 64 new rows), the SQL alone; baseline: the same file without the
  ``(run, kind, id)`` index, i.e. the schema before it.
- ``batch``: ``store.add`` of one live batch of 2,000 new timer records (what the ingest
  server does per request), median of ``--rounds``; baseline: the bookkeeping statements as
  they were (the planner free to walk a whole-table index for the GROUP BY).

What the baseline spends beyond this dsmon grows linearly with the rows stored, so the script
also prints the baseline extrapolated to 5.5 million samples (labelled as such: this dsmon's
figure plus that excess times 5.5 M / samples); this dsmon's figures stay flat.

``--first-load`` also times the GPU grid's first load as the page does it now (every sample
decoded into a frame, then bucketed) against a prototype of the same buckets in SQL
(``json_extract`` on the body; min/max/mean per GPU and bucket): a figure for the next step.

Usage: ``python bench/store_scale.py [--samples 300000] [--rounds 5] [--first-load]``
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

from dsmon import store as sqlite_store
from dsmon.records import GpuSampleRecord, Record, Source, TimerRecord
from dsmon.store import SQLiteStore
from dsmon.store_schema import RecordFilter

RUN = "bench"
GPUS = 64
FULL_RUN = 5_500_000
T0 = datetime(2026, 11, 29, 8, 0, 0)


def gpu_samples(n: int) -> Iterator[Record]:
    """``n`` samples of 64 GPUs (8 per node) at 1 Hz, generated as the store consumes them."""
    for i in range(n):
        ts = (T0 + timedelta(seconds=i // GPUS)).isoformat(timespec="milliseconds")
        g = i % GPUS
        yield GpuSampleRecord(
            src=Source(run=RUN, node=f"node{g // 8:02d}"), ts=ts, gpu_index=g % 8,
            name="NVIDIA H100 80GB HBM3", util_gpu_pct=90.0, power_w=600.0, power_limit_w=700.0,
        )  # fmt: skip


def timers(first: int, n: int, file: str) -> list[Record]:
    """``n`` engine timer records of consecutive steps from ``first``."""
    return [
        TimerRecord(src=Source(run=RUN, file=file, line=s, rank=0), step=s, group="global",
                    values_ms={"fwd": 100.0, "bwd": 200.0, "step": 50.0})
        for s in range(first, first + n)
    ]  # fmt: skip


def timed(fn: Callable[[], object]) -> float:
    """Wall seconds of one call."""
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def refresh_s(store: SQLiteStore, rounds: int, last: int) -> float:
    """Median seconds of the GPU page's refresh query (the newest tick's 64 rows).

    The query alone (``_select``, the rows as stored): decoding 64 rows into a frame costs
    the same either way and would hide the difference at small sizes.
    """
    flt = RecordFilter(RUN, "gpu", after_id=last - GPUS)
    if len(store._select(flt)) != GPUS:
        raise SystemExit("bench: the refresh query did not return one tick")
    return statistics.median(timed(lambda: store._select(flt)) for _ in range(rounds))


def add_batch(store: SQLiteStore, first: int) -> int:
    """One live batch of 2,000 new timer records, as the ingest server stores a request."""
    return store.add(timers(first, 2000, "b.log"), live=True)


def batch_s(store: SQLiteStore, rounds: int, first: int, baseline: bool) -> float:
    """Median seconds of ``store.add`` of 2,000 new timer records (baseline SQL if asked)."""
    kinds, sources = sqlite_store._UPDATE_KINDS, sqlite_store._UPDATE_SOURCES
    if baseline:
        sqlite_store._UPDATE_KINDS = kinds.replace("NOT INDEXED ", "")
        sqlite_store._UPDATE_SOURCES = sources.replace("NOT INDEXED ", "")
    try:
        runs = [timed(functools.partial(add_batch, store, first + 2000 * k)) for k in range(rounds)]
    finally:
        sqlite_store._UPDATE_KINDS, sqlite_store._UPDATE_SOURCES = kinds, sources
    return statistics.median(runs)


# A prototype of the GPU page's first load done in SQL (issue 11, step 4, not in dsmon yet):
# min/max/mean of one metric per GPU and time bucket, one row per bucket instead of per sample.
_GPU_BUCKETS = """
SELECT node, json_extract(body, '$.gpu_index') AS gpu,
       CAST((julianday(ts) - julianday(:t0)) * 86400000 AS INTEGER) / :width_ms AS bucket,
       COUNT(*), MIN(v), MAX(v), AVG(v)
FROM (SELECT node, ts, body, json_extract(body, '$.util_gpu_pct') AS v
      FROM records WHERE run = :run AND kind = 'gpu')
GROUP BY node, gpu, bucket
"""


def first_load_s(store: SQLiteStore) -> tuple[float, float, int]:
    """Seconds of the GPU grid's first load: rows -> frame -> buckets, and the SQL prototype."""
    from dsmon.analysis import gpus  # pandas: only for this figure

    info = store.runs()[0]
    t = time.perf_counter()
    gpus.buckets(gpus.prepare(store.frame(RUN, "gpu")), metrics=["util_gpu_pct"])
    frame_s = time.perf_counter() - t
    first, last = (
        datetime.fromisoformat(str(info.first_ts)),
        datetime.fromisoformat(str(info.last_ts)),
    )
    width_ms = max(int((last - first).total_seconds() * 1000) // 300 + 1, 1)
    params = {"t0": info.first_ts, "width_ms": width_ms, "run": RUN}
    t = time.perf_counter()
    rows = store._conn.execute(_GPU_BUCKETS, params).fetchall()
    return frame_s, time.perf_counter() - t, len(rows)


def main() -> None:
    """Fill the store, then print each figure for this dsmon and the baseline."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--first-load", action="store_true", help="also time the GPU grid's load")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "bench.sqlite")
        store.add(timers(1, 1000, "train.log"))
        write = timed(lambda: store.add(gpu_samples(args.samples)))
        rows = store.runs()[0].n_records
        print(f"store: {rows:,} records ({args.samples:,} GPU samples), written in {write:.0f} s")
        scale, last = FULL_RUN / args.samples, store.last_id(RUN)
        figures = {
            "refresh (GPU page, after_id)": (refresh_s(store, args.rounds, last), 0.0),
            "batch (add 2,000 live records)": (
                batch_s(store, args.rounds, 10_000, False),
                batch_s(store, args.rounds, 100_000, True),
            ),
        }
        if args.first_load:
            frame_s, sql_s, n = first_load_s(store)
            print(f"GPU grid first load: frame + buckets {frame_s:.2f} s; "
                  f"SQL prototype {sql_s:.2f} s ({n:,} bucket rows)")  # fmt: skip
        store._conn.execute("DROP INDEX records_run_kind_id")  # the schema before issue 11
        figures["refresh (GPU page, after_id)"] = (
            figures["refresh (GPU page, after_id)"][0],
            refresh_s(store, args.rounds, last),
        )
        store.close()
    print(f"\n{'median of ' + str(args.rounds):<32}{'dsmon ms':>10}{'baseline ms':>13}"
          f"{'baseline at 5.5M (extrapolated) ms':>37}")  # fmt: skip
    for name, (now, before) in figures.items():
        # What the baseline spends beyond this dsmon grows with the rows stored; the rest not.
        extra = now + (before - now) * scale
        print(f"{name:<32}{now * 1000:>10.2f}{before * 1000:>13.2f}{extra * 1000:>37.0f}")


if __name__ == "__main__":
    main()
