"""Benchmark: peak memory and time of ``dsmon import`` of a big log, against the old summary.

The log is the demo run's real start-up lines, then its training section (timer, step,
throughput and flops-profiler lines) repeated with the step numbers moved on each time, up to
``--mb`` megabytes. Each measurement runs in its own child process, and its peak RSS is read
with ``resource.getrusage(RUSAGE_CHILDREN)``:

- ``dsmon``: ``dsmon import LOG --store <fresh file>``, the command as users run it (the
  import, then the run summary);
- ``baseline``: the same import, then the summary's inputs built as before issue 11: every
  timer, throughput and flops-profile record of the run loaded with ``Store.frame``.

Usage: ``python bench/import_memory.py [--mb 10 40] [--no-baseline]`` (one log per size). The goal is
<= 500 MB peak at 500 MB of log: measure it at that size (``--mb 500 --no-baseline``, about
four minutes). From the growth between the smallest and the largest size the script
extrapolates the baseline to 500 MB (linear, labelled as such), which holds: it loads every
record. It does not extrapolate ``dsmon``: its peak is mostly a fixed working set (the pages it
keeps as Arrow chunks while it reads), so a line through two small sizes says nothing of 500 MB.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import ROOT, demo_parts, renumbered

_BASELINE = """
import sys
from pathlib import Path
from dsmon.analysis.steps import step_breakdown
from dsmon.load.files import import_paths
from dsmon.store.store import open_store
with open_store(sys.argv[2]) as store:
    import_paths(store, [Path(sys.argv[1])], "x")
    step_breakdown(store.frames.frame("x", "timer"))
    store.frames.frame("x", "throughput")
    store.frames.frame("x", "flops_profile")
"""


def build_log(path: Path, size: int) -> int:
    """Write the log; returns the number of optimizer steps it holds."""
    head, section = demo_parts()
    span = 30  # the demo run's steps
    with path.open("w", encoding="utf-8") as out:
        out.writelines(head)
        k = written = 0
        while written < size:
            lines = renumbered(section, k * span)
            out.writelines(lines)
            written += sum(len(ln) for ln in lines)
            k += 1
    return k * span


# Runs a command and prints its peak RSS: RUSAGE_CHILDREN keeps the largest child's peak, so
# each measurement gets a fresh parent of its own.
_PEAK = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, capture_output=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
"""


def measure(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one command."""
    t = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-c", _PEAK, *cmd], check=True, capture_output=True, text=True, cwd=ROOT
    )
    return time.perf_counter() - t, float(res.stdout)


def main() -> None:
    """Build each log, measure both ways, print the peaks and their growth with the log."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, nargs="+", default=[10.0, 40.0])
    ap.add_argument(
        "--no-baseline",
        action="store_true",
        help="measure dsmon only (a 500 MB baseline takes GBs)",
    )
    args = ap.parse_args()
    dsmon = str(Path(sys.executable).with_name("dsmon"))
    print(
        f"{'log MB':>8}{'steps':>10}{'dsmon s':>10}{'dsmon MiB':>11}{'base s':>10}{'base MiB':>10}"
    )
    peaks: list[tuple[float, float, float]] = []
    for size in args.mb:
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "train.log"
            steps = build_log(log, int(size * 1e6))
            mb = log.stat().st_size / 1e6
            new = measure([dsmon, "import", str(log), "--store", f"{tmp}/a.sqlite", "--run", "x"])
            old = (
                (float("nan"), float("nan"))
                if args.no_baseline
                else measure([sys.executable, "-c", _BASELINE, str(log), f"{tmp}/b.sqlite"])
            )
        peaks.append((mb, new[1], old[1]))
        print(f"{mb:>8.1f}{steps:>10,}{new[0]:>10.1f}{new[1]:>11.0f}{old[0]:>10.1f}{old[1]:>10.0f}")
    if len(peaks) > 1 and not args.no_baseline:  # the baseline's growth per MB of log
        (a, _, lo), (b, _, hi) = peaks[0], peaks[-1]
        slope = (hi - lo) / (b - a)
        print(f"baseline: {slope:.2f} MiB per MB of log; at 500 MB (extrapolated, linear): "
              f"{hi + slope * (500 - b):,.0f} MiB")  # fmt: skip
    if max(mb for mb, _, _ in peaks) < 500:
        print("dsmon: not extrapolated (mostly a fixed working set); measure it with --mb 500")


if __name__ == "__main__":
    main()
