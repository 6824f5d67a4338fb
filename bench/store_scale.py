"""Benchmark: the store's per-refresh and per-batch costs once a big run is stored (issue 11).

Writes ``--samples`` per-rank step records (64 ranks, ``dsmon run``'s probe; default 300,000)
and 1,000 timer records of one run into a real SQLite store file through ``Store.add``,
then measures, in the same run and on the same file, this dsmon against a baseline:

- ``refresh``: the query a dashboard refresh makes for a kind it shows (``after_id`` = one
  tick ago, 64 new rows), the SQL alone; baseline: the same file with the indexes it had
  before issue 11 (``(run, kind, step)``, ``(run, kind, ts)``, ``(run, ts)``, no
  ``(run, kind, id)``).
- ``batch``: ``store.add`` of one live batch of 2,000 new timer records (what the ingest
  server does per request), median of ``--rounds``; baseline: the bookkeeping statements as
  they were (the planner free to walk a whole-table index for the GROUP BY).

What the baseline spends beyond this dsmon grows linearly with the rows stored, so the script
also prints the baseline extrapolated to 5.5 million records (labelled as such: this dsmon's
figure plus that excess times 5.5 M / records); this dsmon's figures stay flat. GPU samples
have their own tables and benchmark (``bench/gpu_page.py``).

Usage: ``python bench/store_scale.py [--samples 300000] [--rounds 5]``
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

from dsmon.model.records import RankStepRecord, Record, Source, TimerRecord
from dsmon.store import sqlite as store_sql
from dsmon.store.records.filter import RecordFilter
from dsmon.store.store import Store, open_store

RUN = "bench"
GPUS = 64
FULL_RUN = 5_500_000
#: The records indexes as they were before issue 11, for the refresh baseline.
BEFORE_ISSUE_11 = (
    "DROP INDEX records_run_kind_id",
    "DROP INDEX records_run_id",
    "CREATE INDEX records_run_kind_step ON records (run, kind, step)",
    "CREATE INDEX records_run_kind_ts ON records (run, kind, ts)",
    "CREATE INDEX records_run_ts ON records (run, ts)",
)
T0 = datetime(2026, 11, 29, 8, 0, 0)


def rank_steps(n: int) -> Iterator[Record]:
    """``n`` per-rank step records of 64 ranks (``dsmon run``'s probe), as the store takes them."""
    for i in range(n):
        ts = (T0 + timedelta(seconds=i // GPUS)).isoformat(timespec="milliseconds")
        yield RankStepRecord(
            src=Source(run=RUN, node=f"node{i % GPUS // 8:02d}", rank=i % GPUS, file="probe.jsonl",
                       line=i + 1), ts=ts, step=i // GPUS + 1, fwd_ms=100.0, bwd_ms=200.0,
            step_ms=50.0,
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


def refresh_s(store: Store, rounds: int, last: int) -> float:
    """Median seconds of the GPU page's refresh query (the newest tick's 64 rows).

    The query alone (the record log's ``select``, the rows as stored): decoding 64 rows into a frame costs
    the same either way and would hide the difference at small sizes.
    """
    flt = RecordFilter(RUN, "rank_step", after_id=last - GPUS)
    if len(store._log.select(flt)) != GPUS:
        raise SystemExit("bench: the refresh query did not return one tick")
    return statistics.median(timed(lambda: store._log.select(flt)) for _ in range(rounds))


def add_batch(store: Store, first: int) -> int:
    """One live batch of 2,000 new timer records, as the ingest server stores a request."""
    return store.add(timers(first, 2000, "b.log"), live=True)


def batch_s(store: Store, rounds: int, first: int, baseline: bool) -> float:
    """Median seconds of ``store.add`` of 2,000 new timer records (baseline SQL if asked)."""
    kinds, sources = store_sql.UPDATE_KINDS, store_sql.UPDATE_SOURCES
    if baseline:
        store_sql.UPDATE_KINDS = kinds.replace("NOT INDEXED ", "")
        store_sql.UPDATE_SOURCES = sources.replace("NOT INDEXED ", "")
    try:
        runs = [timed(functools.partial(add_batch, store, first + 2000 * k)) for k in range(rounds)]
    finally:
        store_sql.UPDATE_KINDS, store_sql.UPDATE_SOURCES = kinds, sources
    return statistics.median(runs)


def main() -> None:
    """Fill the store, then print each figure for this dsmon and the baseline."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "bench.sqlite")
        store.add(timers(1, 1000, "train.log"))
        write = timed(lambda: store.add(rank_steps(args.samples)))
        rows = store.runs()[0].n_records
        print(
            f"store: {rows:,} records ({args.samples:,} per-rank steps), written in {write:.0f} s"
        )
        scale, last = FULL_RUN / args.samples, store.last_id(RUN)
        figures = {
            "refresh (ranks, after_id)": (refresh_s(store, args.rounds, last), 0.0),
            "batch (add 2,000 live records)": (
                batch_s(store, args.rounds, 10_000, False),
                batch_s(store, args.rounds, 100_000, True),
            ),
        }
        for stmt in BEFORE_ISSUE_11:
            store.backend._conn.execute(stmt)  # type: ignore[attr-defined]
        figures["refresh (ranks, after_id)"] = (
            figures["refresh (ranks, after_id)"][0],
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
