"""Benchmark: CPU and peak memory of ``dsmon import`` against the vectorised reference (issue 43).

The log is ``bench/import_memory.py``'s: the demo run's real start-up lines (DeepSpeed 0.19.8),
then its training section (timer, step, throughput, flops-profiler lines) repeated with the
step numbers moved on, up to ``--mb`` megabytes. Each round runs, alternately and each in a
child process of its own:

- ``dsmon``: ``dsmon import LOG --store <fresh file> --run x``, the command as users run it
  (the import, then the run summary);
- ``reference``: ``bench/import_reference.py LOG DIR``, polars reading the log as one column
  of lines and extracting the timer, step, throughput and overflow lines into Parquet.

CPU seconds are user + system of the child (``RUSAGE_CHILDREN`` of a fresh parent), peak RSS
its ``ru_maxrss``. It prints each round, then the medians, the ratio dsmon/reference and the
goals: CPU ratio <= 2, and peak RSS <= 500 MB at 500 MB of log (``--mb 500``; a smaller log
says nothing of that goal, the peak is mostly a fixed working set).

``--baseline DSMON`` runs another dsmon (an older commit's, e.g. ``/work/main/.venv/bin/dsmon``)
alternately with these, for a before/after in the same run.

Usage: ``python bench/import_speed.py [--mb 100] [--rounds 5] [--no-reference] [--baseline DSMON]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import ROOT
from import_memory import build_log

CPU_GOAL = 2.0
RSS_GOAL_MB = 500.0
REFERENCE = ROOT / "bench" / "import_reference.py"

# Runs a command; prints its CPU seconds and peak RSS (MiB). RUSAGE_CHILDREN holds the only
# child this parent has, so each measurement gets a parent of its own.
_MEASURE = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.ru_utime + r.ru_stime, r.ru_maxrss / 1024)
"""


def measure(cmd: list[str]) -> tuple[float, float]:
    """CPU seconds and peak RSS (MiB) of one command run to its end."""
    res = subprocess.run(
        [sys.executable, "-c", _MEASURE, *cmd], check=True, capture_output=True, text=True, cwd=ROOT
    )
    cpu, rss = res.stdout.split()
    return float(cpu), float(rss)


def main() -> None:
    """Build the log, run both alternately, print rounds, medians and the goals."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=100.0, help="log size in MB (default 100)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    ap.add_argument("--no-reference", action="store_true", help="measure dsmon only")
    ap.add_argument("--log", type=Path, help="measure this log instead of building one")
    ap.add_argument("--dsmon", help="the dsmon executable measured (default: this venv's)")
    ap.add_argument(
        "--baseline",
        metavar="DSMON",
        help="another dsmon executable (an older checkout's venv) run alternately with these",
    )
    args = ap.parse_args()
    dsmon = args.dsmon or str(Path(sys.executable).with_name("dsmon"))
    with tempfile.TemporaryDirectory() as tmp:
        log = args.log or Path(tmp) / "train.log"
        if args.log is None:
            build_log(log, int(args.mb * 1e6))
        mb = log.stat().st_size / 1e6
        print(f"log {mb:.1f} MB, load average {os.getloadavg()[0]:.1f} at start")
        print(f"{'round':>6}{'dsmon CPU-s':>13}{'dsmon MiB':>11}{'ref CPU-s':>11}{'ref MiB':>9}"
              + (f"{'base CPU-s':>12}{'base MiB':>10}" if args.baseline else ""))  # fmt: skip
        ours: list[tuple[float, float]] = []
        ref: list[tuple[float, float]] = []
        base: list[tuple[float, float]] = []
        for k in range(args.rounds):
            for exe, into in [(dsmon, ours)] + ([(args.baseline, base)] if args.baseline else []):
                store = Path(tmp) / f"s{k}.sqlite"
                into.append(measure([exe, "import", str(log), "--store", str(store), "--run", "x"]))
                for p in Path(tmp).glob(f"s{k}.sqlite*"):
                    p.unlink()
            if not args.no_reference:
                out = Path(tmp) / f"ref{k}"
                out.mkdir()
                ref.append(measure([sys.executable, str(REFERENCE), str(log), str(out)]))
            r = ref[-1] if ref else (float("nan"), float("nan"))
            b = f"{base[-1][0]:>12.2f}{base[-1][1]:>10.0f}" if base else ""
            print(f"{k + 1:>6}{ours[-1][0]:>13.2f}{ours[-1][1]:>11.0f}{r[0]:>11.2f}{r[1]:>9.0f}{b}")
    cpu, rss = statistics.median(c for c, _ in ours), statistics.median(m for _, m in ours)
    print(f"median: dsmon {cpu:.2f} CPU-s, peak {rss:.0f} MiB", end="")
    if ref:
        rcpu, rrss = statistics.median(c for c, _ in ref), statistics.median(m for _, m in ref)
        ratio = cpu / rcpu
        print(f"; reference {rcpu:.2f} CPU-s, peak {rrss:.0f} MiB")
        print(f"CPU dsmon/reference: {ratio:.2f}x (goal <= {CPU_GOAL:g}x) "
              f"-> {'met' if ratio <= CPU_GOAL else 'NOT met'}")  # fmt: skip
    else:
        print()
    if base:
        bcpu, brss = statistics.median(c for c, _ in base), statistics.median(m for _, m in base)
        print(f"baseline {args.baseline}: {bcpu:.2f} CPU-s, peak {brss:.0f} MiB; "
              f"dsmon/baseline CPU {cpu / bcpu:.2f}x"
              + (f"; baseline/reference {bcpu / statistics.median(c for c, _ in ref):.2f}x" if ref else ""))  # fmt: skip
    if mb >= 500:
        met = rss * 1.048576 <= RSS_GOAL_MB  # MiB to MB
        print(f"peak RSS at {mb:.0f} MB of log: {rss * 1.048576:.0f} MB (goal <= "
              f"{RSS_GOAL_MB:.0f} MB) -> {'met' if met else 'NOT met'}")  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.1f} at end")


if __name__ == "__main__":
    main()
