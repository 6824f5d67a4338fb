"""Benchmark: every dashboard page on a big run, real store, real page code (issue 11).

Builds a real SQLite store through ``Store.add``: ``--steps`` optimizer steps (default
100,000) of what DeepSpeed prints with ``wall_clock_breakdown`` on rank 0 (engine timers,
micro-step timers, ZeRO optimizer timers, the step line with loss and lr, a ThroughputTimer
line every 10 steps), with each step a ``rank_step`` record and a heartbeat from each of
``--ranks`` ranks (``dsmon run``'s probe; default 64, rank 5 a straggler), and ``--gpu-hours``
of 1 Hz NVML samples from 64 GPUs (default 24 h = 5.5 million samples). It prints how long the
per-rank figures take to read from the store's summaries and, as before, from the probe's
records as frames (``per-rank reads``, each in a process of its own). Then opens each page with Streamlit's own test harness (``AppTest`` on
``app.py``: the real scripts, the real frame cache, the real queries) and measures:

- ``ever``: the page's first render with every cache empty and no sealed page kept in the
  store (``dsmon.store.frames.sealed``): the first reader of the run ever, which parses the
  JSON of every page and keeps the sealed ones;
- ``first``: the page's first render with every cache empty, in a new process after that one
  (the next browser to open the run, a dashboard restarted, another replica);
- ``refresh``: the median of ``--ticks`` renders (default :data:`TICKS`), each after one more
  step and one more second of GPU samples were stored (a live tick), caches warm, as a
  browser already on the page sees it (one step is stored before the first render too, so
  the run is live when the page opens); ``max`` the slowest of them, ``cpu`` the median CPU
  seconds of the process (the figure that other jobs on a shared VM move least). One tick
  alone is not a figure: the first refresh after a load and the ones after it differ;
- ``sent``: bytes of the page's figures (plotly JSON) and tables (Arrow), what the browser
  is sent on each render;
- ``RSS``: the peak RSS of the process that rendered the page (each page in its own).

A live page redraws only its fragment; a full rerun, timed here, costs more, so these are
upper bounds. ``--gpu-hours 0`` skips the GPU samples (they take about 2-4 minutes to write),
``--ranks 0`` the probe's records (about 5 minutes at 64 ranks).

Usage: ``python bench/pages.py [--steps 100000] [--gpu-hours 24] [--pages steps,gpus] [--keep]``
(``--store PATH`` measures a store kept by an earlier ``--keep`` run again; ``--ticks 1000``
keeps each page open for a thousand live ticks: ``max`` and ``RSS`` then show whether a page
left open gets slower or bigger.)
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_page import samples  # noqa: E402  (the GPU samples of bench/gpu_page.py)

from dsmon.model.records import (  # noqa: E402
    HeartbeatRecord,
    RankStepRecord,
    Record,
    Source,
    StepRecord,
    ThroughputRecord,
    TimerRecord,
)
from dsmon.store.store import Store, open_store  # noqa: E402

RUN = "bench"
T0 = datetime(2026, 11, 29, 8, 0, 0)
STEP_S = 0.8
PAGES = ("health", "steps", "training", "communication", "gpus", "flops")
#: Live ticks measured per page (``refresh`` is their median).
TICKS = 7
#: Ranks of ``dsmon run``'s probe records in the run (``--ranks``).
RANKS = 64


def step_records(step: int) -> list[Record]:
    """One step as DeepSpeed 0.19 prints it on rank 0 (values vary a little per step)."""
    ts = (T0 + timedelta(seconds=step * STEP_S)).isoformat(timespec="milliseconds")
    jitter = (step * 7919 % 97) / 10

    def src(line: int) -> Source:
        return Source(run=RUN, node="node00", rank=0, file="train.log", line=step * 6 + line)

    out: list[Record] = [
        TimerRecord(src=src(0), ts=ts, step=step, group="micro",
                    values_ms={"fwd_microstep": 210.0 + jitter, "bwd_microstep": 420.0 + jitter,
                               "bwd_inner_microstep": 300.0, "bwd_allreduce_microstep": 110.0,
                               "step_microstep": 95.0}),
        TimerRecord(src=src(1), ts=ts, step=step, group="global",
                    values_ms={"fwd": 210.0 + jitter, "bwd": 420.0 + jitter, "bwd_inner": 300.0,
                               "bwd_allreduce": 110.0, "step": 95.0}),
        TimerRecord(src=src(2), ts=ts, step=step, group="zero_optimizer",
                    values_ms={"optimizer_allgather": 40.0 + jitter, "optimizer_gradients": 20.0,
                               "optimizer_step": 30.0}),
        StepRecord(src=src(3), ts=ts, step=step, skipped=0, lr=(1e-4,), mom=((0.9, 0.999),)),
    ]  # fmt: skip
    if step % 10 == 0:
        out.append(
            ThroughputRecord(
                src=src(4),
                ts=ts,
                step=step,
                epoch=0,
                micro_step=step,
                global_step=step,
                samples_per_s=640.0 - jitter,
                running_avg_samples_per_s=640.0,
            )  # fmt: skip
        )
    return out


def rank_records(step: int, n_ranks: int) -> list[Record]:
    """One step of ``dsmon run``'s probe on ``n_ranks`` ranks: a step record and a heartbeat each.

    Rank 5 needs 30 % more time than the others (a straggler), who wait for it in the
    gradient all-reduce; the heartbeat says where the rank went next (the next forward).
    """
    ts = (T0 + timedelta(seconds=step * STEP_S)).isoformat(timespec="milliseconds")
    out: list[Record] = []
    for rank in range(n_ranks):
        src = functools.partial(
            Source, run=RUN, node=f"node{rank // 8:02d}", rank=rank, file=f"probe/rank-{rank}.jsonl"
        )
        busy = (520.0 + (step * 31 + rank * 17) % 40) * (1.3 if rank == 5 else 1.0)
        total = 800.0 + (step * 7919 % 97) / 10
        out.append(
            RankStepRecord(src=src(line=2 * step), ts=ts, step=step, fwd_ms=busy / 3,
                           bwd_ms=busy / 2 + (total - busy), step_ms=busy / 6, comm_ms=total - busy,
                           total_ms=total, micro_steps=1, clock="cuda")
        )  # fmt: skip
        out.append(
            HeartbeatRecord(src=src(line=2 * step + 1), ts=ts, step=step + 1, phase="forward",
                            phase_since=ts, pid=4000 + rank)
        )  # fmt: skip
    return out


def steps(first: int, n: int, n_ranks: int = 0) -> Iterator[Record]:
    for step in range(first, first + n):
        yield from step_records(step)
        if n_ranks:
            yield from rank_records(step, n_ranks)


def build(path: Path, n_steps: int, gpu_hours: float, n_ranks: int) -> Store:
    store = open_store(path)
    start = time.perf_counter()
    store.add(steps(1, n_steps, n_ranks))
    probe = f" (and {n_ranks} ranks' probe records)" if n_ranks else ""
    print(f"stored {n_steps:,} steps{probe} in {time.perf_counter() - start:.0f} s")
    seconds = int(gpu_hours * 3600)
    start = time.perf_counter()
    for hour in range(0, seconds, 3600):
        store.add(samples(hour, min(3600, seconds - hour)))
    if seconds:
        print(f"stored {seconds * 64:,} GPU samples in {time.perf_counter() - start:.0f} s")
    return store


def sent_bytes(at: object) -> int:
    """Bytes of the page's figures and tables as Streamlit sends them."""
    total = 0
    for chart in at.get("plotly_chart"):  # type: ignore[attr-defined]
        total += len(chart.proto.spec)
    for table in at.get("arrow_data_frame"):  # type: ignore[attr-defined]
        total += len(table.proto.data)
    return total


def _find_components(at: object) -> None:
    """What ``streamlit run`` does once when it starts, before any browser connects.

    The server scans the installed packages for Streamlit components when its runtime starts
    (``Runtime.__init__``); AppTest does it in its first run instead: 0.3 s of Health's first
    render here that no browser waits for. Done before the clock starts, through AppTest's
    own attribute (left to AppTest if a Streamlit version names it otherwise).
    """
    if getattr(at, "_bidi_component_manager", False) is not None:
        return
    from streamlit.components.v2.component_manager import BidiComponentManager

    manager = BidiComponentManager()
    manager.discover_and_register_components(start_file_watching=False)
    at._bidi_component_manager = manager  # type: ignore[attr-defined]


def open_page(page: str) -> tuple[object, float]:
    """A fresh AppTest on ``page`` of the bench run, and the seconds its first render took.

    The app opens on the Health page; for another page the caches are emptied before
    switching, so its render starts from nothing, as a browser opening its URL first.
    """
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params["run"] = RUN
    _find_components(at)
    st.cache_resource.clear()
    start = time.perf_counter()
    at.run()
    if page != "health":
        st.cache_resource.clear()
        start = time.perf_counter()
        at.switch_page(f"pages/{page}.py").run()
    return at, time.perf_counter() - start


def first_ever(path: Path, page: str, step: int) -> float:
    """The page's first render with no sealed page kept yet: the first reader of the run.

    The store's kept pages (``dsmon.store.frames.sealed``) are dropped first; this render parses
    the JSON of every page and keeps the sealed ones for the readers after it.
    """
    os.environ["DSMON_STORE"] = str(path)
    logging.getLogger("streamlit").setLevel(logging.ERROR)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM sealed_pages")
    open_store(path).add(list(steps(step, 1, RANKS)), live=True)
    return open_page(page)[1]


def measure(path: Path, page: str, step: int, second: int, n_ticks: int = TICKS) -> str:
    """One page in this process: first render, ``n_ticks`` live ticks; the result line."""
    os.environ["DSMON_STORE"] = str(path)
    logging.getLogger("streamlit").setLevel(logging.ERROR)
    store = open_store(path)
    # a step first, so the run is live when the page opens, as for someone watching it.
    # Opened on a finished run (no live fragment), AppTest's next run at times did not run
    # the dashboard frame at all: a 0.02 s "refresh" that read nothing new.
    store.add(list(steps(step, 1, RANKS)), live=True)
    at, first = open_page(page)
    ticks, cpu = [], []
    for i in range(1, n_ticks + 1):
        store.add(list(steps(step + i, 1, RANKS)), live=True)
        store.add(samples(second + i - 1, 1), live=True)
        start, start_cpu = time.perf_counter(), time.process_time()
        at.run()  # type: ignore[attr-defined]
        ticks.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    if at.exception:  # type: ignore[attr-defined]
        print(f"{page}: {at.exception}", file=sys.stderr)  # type: ignore[attr-defined]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    refresh, slowest = statistics.median(ticks), max(ticks)
    return (
        f"{page:<15}{first:>9.2f}{refresh:>11.2f}{slowest:>7.2f}{statistics.median(cpu):>7.2f}"
        f"{sent_bytes(at) / 1e6:>9.2f}{rss:>10.0f}"
    )


def probe_reads(path: Path, how: str) -> str:
    """The per-rank figures of the Steps page and the checklist, read ``how``; seconds, RSS.

    ``before``: as they were read before the store kept them (every ``rank_step`` and
    ``heartbeat`` record as a frame, the figures computed in pandas); ``now``: the store's
    per-step table, busy-time buckets and newest heartbeats; ``replay``: the same at the
    run's middle step, a replay position (before, a replay read the records as frames too).
    """
    from dsmon.analysis import ranks
    from dsmon.store.ranks.tables import bucket_width

    store = open_store(path)
    start = time.perf_counter()
    if how == "before":
        table = ranks.rank_step_table(store.frames.frame(RUN, "rank_step"))
        per_step = ranks.step_stats(store.frames.frame(RUN, "rank_step"))
        width = bucket_width(int(per_step["step"].max()), 300)
        ranks.busy_buckets(table, width)
        beats = ranks.last_beats(store.frames.frame(RUN, "heartbeat"))
    else:
        last = store.runs()[0].last_step or 0
        upto = last // 2 if how == "replay" else None
        per_step = store.ranks.step_stats(RUN, step_max=upto)
        assert per_step is not None
        store.ranks.busy(RUN, bucket_width(int(per_step["step"].max()), 300), upto)
        beats = store.ranks.last_heartbeats(RUN, upto)
    ranks.stragglers(per_step)
    took = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return f"{took:.2f} s, {rss:.0f} MiB ({len(per_step):,} steps, {len(beats)} ranks)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--gpu-hours", type=float, default=24.0)
    ap.add_argument(
        "--ranks", type=int, default=64, help="ranks of dsmon run's probe records (0: none)"
    )
    ap.add_argument("--pages", default=",".join(PAGES))
    ap.add_argument("--store", help="reuse a store an earlier run built (path; --keep prints it)")
    ap.add_argument("--keep", action="store_true", help="keep the store built, print its path")
    ap.add_argument("--ticks", type=int, default=TICKS, help="live ticks a refresh is timed over")
    ap.add_argument(
        "--no-probe-reads",
        action="store_true",
        help="skip the per-rank reads (their 'before' way takes minutes at 1M steps)",
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)  # page,step,second[,ticks]: one page
    args = ap.parse_args()
    global RANKS
    RANKS = args.ranks
    if args.child:
        if args.child.startswith("probe,"):
            print(probe_reads(Path(args.store), args.child.split(",")[1]), flush=True)
            return
        page, step, second, *ticks = args.child.split(",")
        if second == "ever":
            print(f"{first_ever(Path(args.store), page, int(step)):.2f}", flush=True)
        else:
            n = int(ticks[0]) if ticks else TICKS
            print(measure(Path(args.store), page, int(step), int(second), n), flush=True)
        return
    path = Path(args.store) if args.store else Path(tempfile.mkdtemp()) / "pages.sqlite"
    store = open_store(path) if args.store else build(path, args.steps, args.gpu_hours, RANKS)
    info = store.runs()[0]
    span = store.gpu.summary(RUN)
    last_s = int((span["last_ts"].max() - pd.Timestamp(T0)).total_seconds()) if len(span) else 0
    store.close()
    print(f"run: {info.n_records:,} records, last step {info.last_step:,}")
    if RANKS and not args.no_probe_reads:
        for how in ("now", "replay", "before"):
            print(f"per-rank reads, {how}: {_child(path, f'probe,{how}', RANKS)}", flush=True)
    print(
        f"{'page':<15}{'ever s':>8}{'first s':>9}{'refresh s':>11}{'max s':>7}{'cpu s':>7}"
        f"{'sent MB':>9}{'RSS MiB':>10}"
    )
    step, second = (info.last_step or 0) + 1, last_s + 1
    for page in args.pages.split(","):
        # each page in processes of its own: a first render from nothing, and its own RSS
        ever = _child(path, f"{page},{step},ever", RANKS)
        out = _child(path, f"{page},{step + 1},{second},{args.ticks}", RANKS)
        if " " in ever or " " not in out.strip():
            print(f"{page}: failed: {ever} {out}", flush=True)
        else:
            print(f"{out[:15]}{ever:>8}{out[15:]}", flush=True)
        step, second = step + args.ticks + 2, second + args.ticks
    if args.keep:
        print(f"store kept: {path}")


def _child(path: Path, what: str, n_ranks: int) -> str:
    """What ``--child what`` prints (the last of stderr when it fails)."""
    child = [sys.executable, __file__, "--store", str(path), "--ranks", str(n_ranks)]
    child += ["--child", what]
    out = subprocess.run(child, capture_output=True, text=True, check=False)
    return out.stdout.strip() or out.stderr.strip()[-300:]


if __name__ == "__main__":
    main()
