"""Benchmark: freshness, from a timer line written to the log to its record visible over HTTP.

What a user of the live dashboard waits for. The set-up is the deployed one, on 127.0.0.1:

- ``dsmon serve`` (its own process, SQLite store) receives records;
- ``dsmon collect`` (its own process, default settings unless ``--poll-interval`` says
  otherwise; no NVML) tails the log and sends what it parses;
- this process writes the start-up lines of the real DeepSpeed run bundled with dsmon
  (``dsmon/data/demo/train.log``), waits until the collector has delivered them, then appends
  that run's real engine timer lines (``[Rank 0] time (ms) | fwd: ...``, cycled) at
  ``--rate`` lines per second for ``--seconds``, noting when each write returned;
- a client thread polls ``GET /v1/records?run=&kind=timer&since=<last id>`` every
  ``--poll-every`` seconds and notes when each line's record (matched by ``src.line``)
  first comes back.

Freshness of a line = visible time - write time, both on this process's monotonic clock. It
prints p50, p99 and max; the goal is p99 <= 1 s. The polling period bounds the error of
each figure from above (a record is seen at most one poll after it was stored).

``--prefill N`` first stores N timer records of the same run (an earlier log of it) through
the store API, so the figures are those of a store that already holds a big run.

Usage: ``python bench/freshness.py [--seconds 30] [--rate 50] [--poll-interval 0.5] [--prefill 5000000]``
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from harness import (
    ApiClient,
    Appender,
    IngestServer,
    demo_parts,
    dsmon_process,
    percentile,
    timer_lines,
    wait_for,
)
from harness import stop as stop_process

RUN = "bench"
GOAL_P99_S = 1.0


class Watcher(threading.Thread):
    """Polls ``/v1/records`` for new timer records and notes when each line first shows."""

    def __init__(self, api: ApiClient, since: int, every_s: float) -> None:
        super().__init__(name="bench-watch", daemon=True)
        self.api = api
        self.since = since
        self.every_s = every_s
        self.seen: dict[int, float] = {}
        self.polls = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            more = self.poll_once()
            if not more:
                self.done.wait(self.every_s)

    def poll_once(self) -> bool:
        """One GET; returns whether the server said more records are waiting."""
        page = self.api.get("/v1/records", run=RUN, kind="timer", since=self.since, limit=5000)
        now = time.monotonic()
        self.polls += 1
        for rec in page["records"]:
            self.seen.setdefault(rec["src"]["line"], now)
        if page["next"] is not None:
            self.since = page["next"]
        return bool(page["more"])


def warm_up(log: Appender, api: ApiClient, procs: list[subprocess.Popen[bytes]]) -> int:
    """Write the run's start-up lines and wait until they are stored; returns the last id."""
    header, _ = demo_parts()
    log.write(*header)
    wait_for("the start-up lines to be stored", lambda: bool(api.kinds(RUN)), procs)
    time.sleep(1.0)  # let the rest of the start-up block arrive before the clock starts
    return int(api.get("/healthz")["last_id"])


def write_paced(log: Appender, rate: float, seconds: float) -> dict[int, float]:
    """Append timer lines at ``rate`` per second for ``seconds``; line number -> write time."""
    lines = timer_lines()
    written: dict[int, float] = {}
    count = int(rate * seconds)
    start = time.monotonic()
    for i in range(count):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        number = log.write(lines[i % len(lines)])
        written[number] = time.monotonic()
    return written


def wait_for_rest(watcher: Watcher, written: dict[int, float], drain_s: float) -> None:
    """Give the last lines up to ``drain_s`` to show up."""
    deadline = time.monotonic() + drain_s
    while time.monotonic() < deadline and not written.keys() <= watcher.seen.keys():
        time.sleep(0.05)


def report(args: argparse.Namespace, written: dict[int, float], seen: dict[int, float]) -> None:
    """Print the figure lines."""
    lags = [seen[n] - t for n, t in written.items() if n in seen]
    print(
        f"freshness: {len(written)} real timer lines appended at {args.rate:g}/s for "
        f"{args.seconds:g} s; collector poll {args.poll_interval:g} s; client poll "
        f"{args.poll_every * 1000:.0f} ms"
    )
    if not lags:
        print("freshness: no line became visible")
        print(f"goal: p99 <= {GOAL_P99_S * 1000:.0f} ms -> NOT met")
        return
    p50, p99, worst = percentile(lags, 50), percentile(lags, 99), max(lags)
    print(
        f"freshness: visible {len(lags)}/{len(written)}; p50 {p50 * 1000:.0f} ms; "
        f"p99 {p99 * 1000:.0f} ms; max {worst * 1000:.0f} ms"
    )
    met = p99 <= GOAL_P99_S and len(lags) == len(written)
    print(f"goal: p99 <= {GOAL_P99_S * 1000:.0f} ms -> {'met' if met else 'NOT met'}")


def prefill(path: Path, n: int) -> None:
    """Store ``n`` engine timer records of the same run (an earlier log of it) beforehand.

    The live lines then go into a store that already holds a big run, as in production:
    any per-batch cost that grows with the stored rows shows up in the figures.
    """
    from dsmon.model.records import Source, TimerRecord
    from dsmon.store.store import open_store

    def records() -> Iterator[TimerRecord]:
        for i in range(n):
            yield TimerRecord(
                src=Source(run=RUN, node="bench", rank=0, file="earlier.log", line=i + 1),
                step=i + 1, group="global", values_ms={"fwd": 100.0, "bwd": 200.0, "step": 50.0},
            )  # fmt: skip

    start = time.perf_counter()
    store = open_store(path)
    store.add(records())
    store.close()
    print(f"prefill: {n:,} records of run {RUN} stored in {time.perf_counter() - start:.0f} s")


def measure(args: argparse.Namespace, tmp: Path) -> None:
    """Start server and collector, write, watch, report, stop everything."""
    if args.prefill:
        prefill(tmp / "store.sqlite", args.prefill)
    server = IngestServer(tmp, tmp / "store.sqlite")
    log_path = tmp / RUN / "train.log"
    log = Appender(log_path)
    collect = [
        "collect", "--log", str(log_path), "--server", server.url, "--token-file",
        str(server.token_file), "--node", "bench", "--run", RUN, "--state-dir",
        str(tmp / "state"), "--nvml-interval", "0", "--poll-interval", str(args.poll_interval),
    ]  # fmt: skip
    collector = dsmon_process(collect, tmp / "collect.out")
    try:
        api = ApiClient(server.url)
        since = warm_up(log, api, [server.proc, collector])
        watcher = Watcher(ApiClient(server.url), since, args.poll_every)
        watcher.start()
        written = write_paced(log, args.rate, args.seconds)
        wait_for_rest(watcher, written, args.drain)
        watcher.done.set()
        watcher.join()
        report(args, written, watcher.seen)
    finally:
        log.close()
        stop_process(collector)
        server.stop()


def main() -> None:
    """Parse options and run the measurement in a scratch folder."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="how long to write (30)")
    ap.add_argument("--rate", type=float, default=50.0, help="lines per second (50)")
    ap.add_argument("--poll-interval", type=float, default=0.5, help="collector poll (0.5 s)")
    ap.add_argument("--poll-every", type=float, default=0.02, help="client poll (0.02 s)")
    ap.add_argument("--drain", type=float, default=10.0, help="wait for the last lines (10 s)")
    ap.add_argument("--prefill", type=int, default=0, help="records of the run stored first (0)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dsmon-fresh-") as tmp:
        measure(args, Path(tmp))


if __name__ == "__main__":
    main()
