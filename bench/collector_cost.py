"""Benchmark: what the collector costs the training node, in CPU seconds per minute.

The collector runs beside the training job on every node, so its CPU time is taken from the
job. The set-up, on 127.0.0.1:

- ``dsmon serve`` (its own process, SQLite store) receives records;
- the collector is the real ``dsmon collect`` command with default settings (log poll 0.5 s,
  NVML every 1 s, watchdog on), run in a child process whose only difference is that
  ``import pynvml`` finds the fake NVML of the tests (``tests/fakes.py``: 8 GPUs of two
  models), so every GPU field is read each second as on a real node;
- this process writes the start-up lines of the real run bundled with dsmon
  (``dsmon/data/demo/train.log``), waits until the collector delivered them and its first
  GPU samples, then appends that run's training section (timers, step and throughput lines;
  step numbers renumbered on each repetition) at ``--rate`` lines per second for
  ``--seconds``.

The collector's CPU time (user + system, all threads) is read from ``/proc/<pid>/stat`` at the
start and end of the writing window, so start-up (imports, the first read) is not counted;
so is each thread's, with its wake-ups. A control process whose threads only sleep and wake
like an idle collector's is measured over the same window: on a virtual machine what a
wake-up costs varies with the host's load, and the control shows that share.
The goal is <= 1 % of one core, i.e. 0.6 CPU seconds per minute.

Usage: ``python bench/collector_cost.py [--seconds 60] [--rate 100]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import cast

from harness import (
    ROOT,
    ApiClient,
    Appender,
    IngestServer,
    Sleeper,
    cpu_seconds,
    demo_parts,
    dsmon_process,
    renumbered,
    rss_mib,
    thread_cpu,
    wait_for,
)
from harness import stop as stop_process

RUN = "bench"
GOAL_CPU_S_PER_MIN = 0.6
CHILD_FLAG = "--as-collector"
#: The control process's threads wake like an idle collector's: main loop and log poll every
#: 0.5 s, sender every 0.2 s, NVML every 1 s.
SLEEPER_GAPS_S = (0.5, 0.5, 0.2, 1.0)


def collector_child(argv: list[str]) -> int:
    """The child: ``dsmon collect ARGV`` with the fake 8-GPU NVML standing in for pynvml."""
    sys.path.insert(0, str(ROOT / "tests"))
    from fakes import eight_gpus_two_models

    from cli.main import main

    sys.modules["pynvml"] = cast(ModuleType, eight_gpus_two_models())  # pynvml's names
    threading.Thread(target=_publish_threads, args=(Path(argv[-1]),), daemon=True).start()
    return main(["collect", *argv[:-1]])


def _publish_threads(path: Path) -> None:
    """Write ``{native thread id: name}`` once the agent's threads run, for the CPU breakdown."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        names = {t.name for t in threading.enumerate()}
        if "dsmon-tail" in names:
            break
        time.sleep(0.1)
    time.sleep(0.5)
    ids = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    path.write_text(json.dumps(ids))


def start_collector(tmp: Path, server: IngestServer, nvml_s: float) -> subprocess.Popen[bytes]:
    """The collector child process, sending to ``server``; its thread names go to a file."""
    args = [
        CHILD_FLAG, "--log", str(tmp / RUN / "train.log"), "--server", server.url,
        "--token-file", str(server.token_file), "--node", "bench", "--run", RUN,
        "--state-dir", str(tmp / "state"), "--nvml-interval", str(nvml_s),
        str(tmp / "threads.json"),
    ]  # fmt: skip
    return dsmon_process(args, tmp / "collect.out", script=Path(__file__).resolve())


def paced_lines(log: Appender, rate: float, seconds: float) -> int:
    """Append the training section, renumbered each round, at ``rate`` lines per second."""
    _, section = demo_parts()
    steps = sum(1 for ln in section if "| step:" in ln)
    count = int(rate * seconds)
    start = time.monotonic()
    batch: list[str] = []
    for i in range(count):
        if not batch:
            batch = renumbered(section, (i // len(section)) * steps)[::-1]
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        log.write(batch.pop())
    time.sleep(max(0.0, start + seconds - time.monotonic()))
    return count


def report(args: argparse.Namespace, win: Window, rss: float) -> None:
    """Print the figure lines."""
    cpu_s, wall_s, lines = win.cpu_s, win.wall_s, win.lines
    per_min = cpu_s / wall_s * 60
    print(
        f"collector cost: {lines} real log lines at {args.rate:g}/s + fake NVML (8 GPUs) at "
        f"1 Hz for {wall_s:.1f} s"
    )
    print(
        f"collector cost: {cpu_s:.2f} CPU-s in {wall_s:.1f} s = {per_min:.3f} CPU-s per minute "
        f"= {per_min / 60 * 100:.2f} % of one core; RSS {rss:.0f} MiB"
    )
    control = win.control_cpu_s / wall_s * 60
    wakes = sum(1 / g for g in SLEEPER_GAPS_S)
    print(
        f"control: a process that only wakes {wakes:g} times/s (as an idle collector) cost "
        f"{control:.3f} CPU-s per minute on this machine in the same window"
    )
    met = per_min <= GOAL_CPU_S_PER_MIN
    print(
        f"goal: <= {GOAL_CPU_S_PER_MIN} CPU-s per minute (1 % of a core) -> {'met' if met else 'NOT met'}"
    )


def report_threads(
    names: dict[str, str],
    before: dict[int, tuple[float, int]],
    after: dict[int, tuple[float, int]],
    wall_s: float,
) -> None:
    """CPU-s per minute and wake-ups per second of each thread (ended threads not counted)."""
    per_name: dict[str, tuple[float, int]] = {}
    for tid, (cpu, wakes) in after.items():
        cpu0, wakes0 = before.get(tid, (0.0, 0))
        old_cpu, old_wakes = per_name.get(names.get(str(tid), "other"), (0.0, 0))
        per_name[names.get(str(tid), "other")] = (old_cpu + cpu - cpu0, old_wakes + wakes - wakes0)
    parts = sorted(per_name.items(), key=lambda kv: (-kv[1][0], -kv[1][1]))
    text = ", ".join(
        f"{name} {cpu / wall_s * 60:.3f} ({wakes / wall_s:.1f}/s)"
        for name, (cpu, wakes) in parts
        if cpu > 0 or wakes > 0
    )
    print(f"collector cost by thread, CPU-s per minute (wake-ups per second): {text}")


@dataclass
class Window:
    """What was read at the start and the end of the measured window."""

    wall_s: float
    cpu_s: float
    threads: tuple[dict[int, tuple[float, int]], dict[int, tuple[float, int]]]
    control_cpu_s: float
    lines: int


def window(args: argparse.Namespace, log: Appender, collector: subprocess.Popen[bytes]) -> Window:
    """Append lines for ``--seconds`` and read the collector's and the control's CPU around it."""
    control = Sleeper(SLEEPER_GAPS_S)
    try:
        threads0, control0 = thread_cpu(collector.pid), control.cpu_seconds()
        cpu0, t0 = cpu_seconds(collector.pid), time.monotonic()
        lines = paced_lines(log, args.rate, args.seconds)
        cpu1, t1 = cpu_seconds(collector.pid), time.monotonic()
        threads1, control1 = thread_cpu(collector.pid), control.cpu_seconds()
    finally:
        control.stop()
    return Window(t1 - t0, cpu1 - cpu0, (threads0, threads1), control1 - control0, lines)


def measure(args: argparse.Namespace, tmp: Path) -> None:
    """Start server and collector, warm up, write for the window, report."""
    server = IngestServer(tmp, tmp / "store.sqlite")
    log = Appender(tmp / RUN / "train.log")
    collector = start_collector(tmp, server, args.nvml_interval)
    procs = [server.proc, collector]
    try:
        api = ApiClient(server.url)
        log.write(*demo_parts()[0])
        want = "gpu" if args.nvml_interval > 0 else "event"
        wait_for("start-up records (and GPU samples)", lambda: want in api.kinds(RUN), procs)
        wait_for("the thread list", (tmp / "threads.json").exists, procs)
        time.sleep(1.0)
        win = window(args, log, collector)
        report(args, win, rss_mib(collector.pid))
        names = json.loads((tmp / "threads.json").read_text())
        report_threads(names, *win.threads, win.wall_s)
        kinds = api.kinds(RUN)
        print(f"collector cost: stored so far {sum(kinds.values())} records: {kinds}")
    finally:
        log.close()
        stop_process(collector)
        server.stop()


def main() -> None:
    """Parse options and run the measurement in a scratch folder (or be the collector child)."""
    if len(sys.argv) > 1 and sys.argv[1] == CHILD_FLAG:
        sys.exit(collector_child(sys.argv[2:]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="measured window (60 s)")
    ap.add_argument("--rate", type=float, default=100.0, help="log lines per second (100)")
    ap.add_argument("--nvml-interval", type=float, default=1.0, help="NVML period, 0: off (1 s)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dsmon-cost-") as tmp:
        measure(args, Path(tmp))


if __name__ == "__main__":
    main()
