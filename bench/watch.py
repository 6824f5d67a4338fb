"""Benchmark: one round of the server's health watcher on a long run, and the RSS it keeps.

The ingest server's ``HealthWatcher`` (``dsmon.watch.health``) evaluates the checklist of every
recent run every 15 s. This measures it on a store built as ``bench/pages.py`` builds one
(``--steps`` optimizer steps of rank 0's timer, step and throughput lines, ``--ranks`` ranks'
probe records, ``--gpu-hours`` of 1 Hz NVML samples from 64 GPUs), live as of its last step:

- ``first``: the first round (nothing known of the run yet);
- ``idle``: a round with no new record (only the rules that read the clock are due);
- ``new``: the median of ``--ticks`` rounds, each after one more step was stored (a live run);
- ``RSS``: the process's resident memory after the imports, after the first round and after
  the last one, freed memory given back first; and how much of it the watcher itself holds
  between rounds (what its end gives back).

Usage: ``python bench/watch.py [--steps 100000] [--ranks 8] [--gpu-hours 1] [--store PATH]``
(``--store`` measures a copy of a store an earlier ``bench/pages.py --keep`` or this script's
``--keep`` built; the copy is changed, the original is not).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import shutil
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pages  # noqa: E402  (the store of bench/pages.py)
from dsmon.store.store import open_store  # noqa: E402
from dsmon.watch.health import HealthWatcher  # noqa: E402


def rss_mib() -> float:
    """The resident memory this process holds now (Linux), after freed memory is given back.

    glibc keeps freed blocks for reuse; ``malloc_trim`` returns them, so what remains is what
    the watcher (and the store's connection) really keep between rounds.
    """
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--gpu-hours", type=float, default=1.0)
    ap.add_argument("--ticks", type=int, default=5)
    ap.add_argument("--store", help="a copy of this store is measured instead of a new one")
    ap.add_argument("--keep", action="store_true", help="keep the store built, print its path")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dsmon-watch-"))
    path = tmp / "watch.sqlite"
    if args.store:
        shutil.copy(args.store, path)
    else:
        pages.build(path, args.steps, args.gpu_hours, args.ranks).close()
        if args.keep:
            kept = Path(tempfile.gettempdir()) / "dsmon-watch-kept.sqlite"
            shutil.copy(path, kept)
            print(f"kept {kept}")
    with open_store(path) as store:
        (info,) = store.runs()
    assert info.last_step is not None and info.last_ts is not None
    step = info.last_step
    clock = [pages.T0 + timedelta(seconds=step * pages.STEP_S + 5)]
    base = rss_mib()
    watcher = HealthWatcher(open_store(path), clock=lambda: clock[0])
    first = timed(watcher.tick)
    after_first = rss_mib()
    idle = timed(watcher.tick)
    news = []
    writer = open_store(path)
    for _ in range(args.ticks):
        step += 1
        writer.add(pages.step_records(step), live=True)
        clock[0] += timedelta(seconds=pages.STEP_S)
        news.append(timed(watcher.tick))
    writer.close()
    states = watcher.states.snapshot()[pages.RUN]
    at_end = rss_mib()
    watcher.stop()
    del watcher
    held = at_end - rss_mib()
    print(
        f"{info.n_records:,} records, {step:,} steps: first {first:.2f} s, idle {idle:.2f} s, "
        f"new {statistics.median(news):.2f} s (max {max(news):.2f}); RSS {base:.0f} MiB after "
        f"imports, {after_first:.0f} after the first round, {at_end:.0f} at the end, of which "
        f"{held:.0f} held by the watcher (given back when it goes); "
        f"{sum(s.value == 'fail' for s in states.values())} rule(s) failing"
    )
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
