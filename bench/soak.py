"""Benchmark: memory over time of a live dsmon set-up with a browser tab moving between pages.

A monitor stays open for days, so its processes must not grow while nothing new happens
but the run going on. The set-up, on 127.0.0.1, as deployed:

- ``dsmon serve`` (its own process, SQLite store) receives records;
- ``dsmon collect`` tails a log that grows at ``--rate`` lines per second (the real DeepSpeed
  run bundled with dsmon: its start-up lines, then its training section of timer, step and
  throughput lines, renumbered at each repetition; 6 lines a step, so the default 6/s is a
  step a second) and reads the fake NVML of the tests (``tests/fakes.py``: 8 GPUs) each
  second, in the child process of ``bench/collector_cost.py``;
- ``dsmon dashboard --no-ingest`` (Streamlit) on the same store, live refresh on (2 s);
- one headless Chromium tab (Debian's ``/usr/bin/chromium`` through Playwright) on the run,
  clicking the next page of the sidebar every ``--switch-s`` seconds, round and round.

Every ``--sample-s`` seconds each process's resident memory is read from ``/proc`` (the
browser's as the PSS summed over its processes, and the tab's JavaScript heap after a forced
collection, through CDP). ``--rate 0`` writes no lines: the run then grows by its GPU
samples alone, which tells growth that follows the run's data from growth that does not. After ``--warmup`` minutes (each page
visited a few times, its modules imported and caches filled), a least-squares line through
each process's samples gives its slope in MiB per minute, and its growth over the rest of
the window as a share of its RSS at the end of the warm-up. The goal: each of dsmon's
processes within +-10 %. The browser is reported beside them (what Chromium keeps is not
dsmon's process), as is each process's CPU.

``--trace DIR`` runs the dashboard under ``tracemalloc`` (a ``sitecustomize`` put on its
``PYTHONPATH``, nothing in dsmon): it writes a snapshot at the end of the warm-up and at
the end, and this script prints the allocation sites that grew most in between. The
process is slower under it: its figures are for finding a leak, not for the table.

Usage: ``python bench/soak.py [--minutes 20] [--warmup M] [--switch-s 10] [--sample-s 5]``;
``--short`` is a one-minute smoke run.
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector_cost import RUN, start_collector
from harness import (
    ROOT,
    ApiClient,
    Appender,
    IngestServer,
    cpu_seconds,
    demo_parts,
    free_port,
    renumbered,
    rss_mib,
    wait_for,
)
from harness import stop as stop_process
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import sync_playwright

CHROMIUM = os.environ.get("DSMON_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: The sidebar's pages, in menu order (``app.py``): the tab clicks them round and round.
PAGES = ("Health", "Steps", "Training", "Autotuner", "Compare", "Communication", "GPUs", "FLOPS")
GOAL_PCT = 10.0
#: What the dashboard runs under ``--trace``: tracemalloc from the start, a snapshot on SIGUSR2.
SITECUSTOMIZE = """
import gc, os, signal, time, tracemalloc
_dir = os.environ.get("DSMON_SOAK_TRACE_DIR")
if _dir:
    tracemalloc.start(int(os.environ.get("DSMON_SOAK_TRACE_FRAMES", "10")))
    def _dump(signum, frame):
        gc.collect()
        snap = tracemalloc.take_snapshot()
        name = os.path.join(_dir, f"{os.getpid()}-{time.time():.0f}.snap")
        snap.dump(name + ".part")
        os.replace(name + ".part", name)
    signal.signal(signal.SIGUSR2, _dump)
"""


@dataclass
class Watched:
    """One process whose memory is sampled, and its samples (minutes, MiB)."""

    name: str
    rss: Callable[[], float]
    cpu: Callable[[], float] | None
    in_goal: bool = True
    measure: str = "RSS"
    samples: list[tuple[float, float]] = field(default_factory=list)
    cpu_marks: list[tuple[float, float]] = field(default_factory=list)


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children...), from ``/proc``."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        found.extend(kids)
        todo.extend(kids)
    return found


def browser_pss_mib() -> float:
    """The PSS of every Chromium process this script started (shared pages counted once)."""
    total = 0
    for pid in descendants(os.getpid()):
        try:
            if "chrom" not in Path(f"/proc/{pid}/comm").read_text():
                continue
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def js_heap(page: Any) -> Callable[[], float]:
    """The tab's live JavaScript heap in MiB, read after a full garbage collection (CDP).

    The browser's PSS rises and falls by hundreds of MiB with V8's collections; what is left
    after one tells whether the page keeps what it drew.
    """
    cdp = page.context.new_cdp_session(page)

    def used() -> float:
        cdp.send("HeapProfiler.collectGarbage")
        return float(cdp.send("Runtime.getHeapUsage")["usedSize"]) / 2**20

    return used


def line_writer(log: Appender, rate: float, stop: threading.Event) -> threading.Thread:
    """A thread appending the demo run's training section at ``rate`` lines/s until ``stop``."""
    _, section = demo_parts()
    steps = sum(1 for ln in section if "| step:" in ln)

    def write() -> None:
        start, i, batch = time.monotonic(), 0, []
        while not stop.is_set():
            if not batch:
                batch = renumbered(section, (i // len(section) + 1) * steps)[::-1]
            delay = start + i / rate - time.monotonic()
            if delay > 0 and stop.wait(delay):
                return
            log.write(batch.pop())
            i += 1

    thread = threading.Thread(target=write, name="soak-writer", daemon=True)
    thread.start()
    return thread


@contextmanager
def dashboard(tmp: Path, store: Path, trace: Path | None) -> Iterator[tuple[str, int]]:
    """``dsmon dashboard --no-ingest`` on ``store`` (it becomes Streamlit): its URL and pid."""
    port = free_port()
    env = dict(os.environ)
    if trace is not None:
        site = tmp / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        trace.mkdir(parents=True, exist_ok=True)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
        env["DSMON_SOAK_TRACE_DIR"] = str(trace)
    cmd = [
        sys.executable, "-m", "cli.main", "dashboard", "--store", str(store),
        "--port", str(port), "--address", "127.0.0.1", "--no-browser", "--no-ingest",
    ]  # fmt: skip
    with (tmp / "dashboard.out").open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # slow to start under tracemalloc and load
        while not _healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                out = (tmp / "dashboard.out").read_text(errors="replace")[-2000:]
                raise SystemExit(f"bench: the dashboard did not start ({proc.poll()}):\n{out}")
            time.sleep(0.5)
        yield url, proc.pid
    finally:
        stop_process(proc)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
            return bool(r.read() == b"ok")
    except OSError:
        return False


@contextmanager
def browser_tab(url: str) -> Iterator[Any]:
    """One Chromium tab on ``url`` (Playwright driving Debian's chromium, no download)."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(url, timeout=120_000)
            page.wait_for_selector('[data-testid="stSidebarNav"] a', timeout=120_000)
            yield page
        finally:
            browser.close()


def switch(page: Any, title: str) -> bool:
    """Click ``title`` in the sidebar's page menu, as a user does; whether it was there."""
    link = page.locator('[data-testid="stSidebarNav"] a').filter(has_text=title)
    for i in range(link.count()):
        candidate = link.nth(i)
        if candidate.inner_text(timeout=10_000).strip() == title:
            candidate.click(timeout=30_000)
            return True
    return False


def sample(watched: list[Watched], t_min: float) -> None:
    """One RSS (and CPU) reading of every process, at ``t_min`` minutes."""
    for w in watched:
        try:
            w.samples.append((t_min, w.rss()))
            if w.cpu is not None:
                w.cpu_marks.append((t_min, w.cpu()))
        except (OSError, ValueError, PlaywrightError):
            continue


def slope(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares slope (per minute) and the line's value at the first point's time."""
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    sxx = sum((t - mx) ** 2 for t, _ in points)
    b = sum((t - mx) * (v - my) for t, v in points) / sxx if sxx else 0.0
    return b, my + b * (points[0][0] - mx)


def report(watched: list[Watched], warmup: float, switches: int, missed: int) -> bool:
    """Print each process's figures and the verdict; whether the goal was met."""
    ok = True
    for w in watched:
        after = [(t, v) for t, v in w.samples if t >= warmup]
        if len(after) < 3:
            print(f"soak: {w.name}: too few samples after the warm-up ({len(after)})")
            ok = ok and not w.in_goal
            continue
        per_min, base = slope(after)
        span = after[-1][0] - after[0][0]
        growth = per_min * span / base * 100 if base else float("nan")
        first = w.samples[0][1]
        peak = max(v for _, v in w.samples)
        cpu = ""
        marks = [(t, c) for t, c in w.cpu_marks if t >= warmup]
        if len(marks) >= 2 and marks[-1][0] > marks[0][0]:
            rate = (marks[-1][1] - marks[0][1]) / (marks[-1][0] - marks[0][0])
            cpu = f"; CPU {rate:.2f} s/min"
        met = abs(growth) <= GOAL_PCT
        verdict = ("-> met" if met else "-> NOT met") if w.in_goal else "(not dsmon's: info)"
        print(
            f"soak: {w.name:<9} {w.measure} {first:.0f} at start, {after[0][1]:.0f} after warm-up, "
            f"{after[-1][1]:.0f} at end, peak {peak:.0f} MiB; slope {per_min:+.3f} MiB/min, "
            f"{growth:+.1f} % over {span:.1f} min after warm-up{cpu} {verdict}"
        )
        ok = ok and (met or not w.in_goal)
    print(f"soak: {switches} page switches ({missed} not found in the menu)")
    print(
        f"goal: each dsmon process within +-{GOAL_PCT:g} % after {warmup:g} min of warm-up "
        f"-> {'met' if ok else 'NOT met'}"
    )
    return ok


def trace_report(trace: Path, pid: int) -> None:
    """The allocation sites that grew most between the dashboard's first and last snapshot."""
    snaps = sorted(trace.glob(f"{pid}-*.snap"), key=lambda p: int(p.stem.split("-")[1]))
    if len(snaps) < 2:
        print(f"trace: {len(snaps)} snapshot(s) in {trace}, need 2")
        return
    keep = [tracemalloc.Filter(False, tracemalloc.__file__)]
    old = tracemalloc.Snapshot.load(str(snaps[0])).filter_traces(keep)
    new = tracemalloc.Snapshot.load(str(snaps[-1])).filter_traces(keep)
    total = sum(s.size_diff for s in new.compare_to(old, "filename"))
    print(f"trace: dashboard's traced memory {total / 2**20:+.1f} MiB between the snapshots")
    for stat in new.compare_to(old, "lineno")[:15]:
        print(
            f"trace: {stat.size_diff / 2**20:+8.2f} MiB {stat.count_diff:+8d} blocks  {stat.traceback[0]}"
        )
    for stat in new.compare_to(old, "traceback")[:6]:
        print(f"trace: {stat.size_diff / 2**20:+.2f} MiB {stat.count_diff:+d} blocks, from:")
        for frame in stat.traceback.format(limit=10, most_recent_first=True):
            print(f"trace:   {frame}")


def soak(args: argparse.Namespace, tmp: Path) -> bool:
    """Start everything, move the tab between pages for ``--minutes``, sample, report."""
    store = tmp / "store.sqlite"
    server = IngestServer(tmp, store)
    log = Appender(tmp / RUN / "train.log")
    collector = start_collector(tmp, server, args.nvml_interval)
    stop_writing = threading.Event()
    writer: threading.Thread | None = None
    try:
        api = ApiClient(server.url)
        log.write(*demo_parts()[0])
        wait_for("start-up records and GPU samples", lambda: "gpu" in api.kinds(RUN), [collector])
        if args.rate > 0:  # 0: the run grows by its GPU samples alone (data growth apart)
            writer = line_writer(log, args.rate, stop_writing)
        with dashboard(tmp, store, args.trace) as (url, ui_pid), browser_tab(url) as page:
            watched = [
                Watched(
                    "serve", lambda: rss_mib(server.proc.pid), lambda: cpu_seconds(server.proc.pid)
                ),
                Watched(
                    "collect", lambda: rss_mib(collector.pid), lambda: cpu_seconds(collector.pid)
                ),
                Watched("dashboard", lambda: rss_mib(ui_pid), lambda: cpu_seconds(ui_pid)),
                Watched("browser", browser_pss_mib, None, in_goal=False, measure="PSS"),
                Watched("tab heap", js_heap(page), None, in_goal=False, measure="JS heap"),
            ]
            switches, missed = run_window(args, page, watched, ui_pid)
            with (tmp / "samples.csv").open("w", newline="") as f:
                out = csv.writer(f)
                out.writerow(["process", "minute", "rss_mib"])
                for w in watched:
                    out.writerows([w.name, f"{t:.3f}", f"{v:.1f}"] for t, v in w.samples)
            if args.csv:
                args.csv.write_bytes((tmp / "samples.csv").read_bytes())
            ok = report(watched, args.warmup, switches, missed)
            kinds = api.kinds(RUN)
            print(f"soak: stored {sum(kinds.values())} records of the run: {kinds}")
            if args.trace is not None:
                trace_report(args.trace, ui_pid)
            return ok
    finally:
        stop_writing.set()
        if writer is not None:
            writer.join(5)
        log.close()
        stop_process(collector)
        server.stop()


def run_window(
    args: argparse.Namespace, page: Any, watched: list[Watched], ui_pid: int
) -> tuple[int, int]:
    """Sample every ``--sample-s`` and switch pages every ``--switch-s`` until the end."""
    start = time.monotonic()
    end = start + args.minutes * 60
    next_sample, next_switch = start, start + args.switch_s  # the tab opened on Health
    next_print = start + 60
    switches = missed = 0
    traced_warm = False
    while (now := time.monotonic()) < end:
        t_min = (now - start) / 60
        if now >= next_sample:
            sample(watched, t_min)
            next_sample = max(next_sample + args.sample_s, time.monotonic())
        if args.trace is not None and not traced_warm and t_min >= args.warmup:
            os.kill(ui_pid, signal.SIGUSR2)
            traced_warm = True
        if now >= next_switch:
            title = PAGES[(switches + 1) % len(PAGES)]
            try:
                if not switch(page, title):
                    print(f"soak: no {title} in the menu at {t_min:.1f} min", flush=True)
                    missed += 1
            except PlaywrightError as exc:  # a slow page: count it, go on (the tab is still there)
                why = " | ".join(str(exc).splitlines()[-3:])  # what blocked the click
                print(f"soak: switch to {title} failed at {t_min:.1f} min: {why:.400}", flush=True)
                missed += 1
            switches += 1
            next_switch = max(next_switch + args.switch_s, time.monotonic())  # no catching up
        if now >= next_print:
            text = ", ".join(f"{w.name} {w.samples[-1][1]:.0f}" for w in watched if w.samples)
            print(f"soak: {t_min:.0f} min: {text} MiB; {switches} switches", flush=True)
            next_print += 60
        time.sleep(max(0.0, min(next_sample, next_switch, end) - time.monotonic()))
    sample(watched, args.minutes)
    if args.trace is not None:
        os.kill(ui_pid, signal.SIGUSR2)
        wait_for(
            "the last snapshot", lambda: len(list(args.trace.glob(f"{ui_pid}-*.snap"))) >= 2, []
        )
    return switches, missed


def main() -> None:
    """Parse options and run the soak in a scratch folder."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=20.0, help="whole window (20)")
    ap.add_argument("--warmup", type=float, help="minutes left out of the slope (a quarter)")
    ap.add_argument("--switch-s", type=float, default=10.0, help="seconds on each page (10)")
    ap.add_argument("--sample-s", type=float, default=5.0, help="seconds between samples (5)")
    ap.add_argument("--rate", type=float, default=6.0, help="log lines per second, 0: none (6)")
    ap.add_argument("--nvml-interval", type=float, default=1.0, help="NVML period, 0: off (1 s)")
    ap.add_argument("--csv", type=Path, help="also write the samples to this file")
    ap.add_argument(
        "--trace", type=Path, help="run the dashboard under tracemalloc, snapshots here"
    )
    ap.add_argument("--short", action="store_true", help="a smoke run: 1 min, pages every 3 s")
    args = ap.parse_args()
    if args.short:
        args.minutes, args.switch_s, args.sample_s = 1.0, 3.0, 1.0
    if args.warmup is None:
        args.warmup = args.minutes / 4
    print(
        f"soak: {args.minutes:g} min, warm-up {args.warmup:g} min; a page every "
        f"{args.switch_s:g} s ({', '.join(PAGES)}); {args.rate:g} real log lines/s; fake NVML "
        f"(8 GPUs) every {args.nvml_interval:g} s; RSS every {args.sample_s:g} s",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="dsmon-soak-") as tmp:
        soak(args, Path(tmp))


if __name__ == "__main__":
    main()
