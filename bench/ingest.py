"""Benchmark: ingest throughput, records/s through HTTP into SQLite against a bare executemany.

The dashboard's ingest server takes the records of every node, so its rate bounds how many
nodes one dashboard can serve. The records are the real ones of the run bundled with dsmon
(``dsmon/data/demo/train.log``: timers, steps, throughput, events, config, flops profile),
repeated under distinct file names until there are ``--records`` of them. In the same run it
measures:

- ``direct``: the rows the store would write for those records (``record_row``, prepared
  beforehand), ``executemany``-ed into a fresh file with the store's schema and pragmas, one
  transaction per batch: the floor of what SQLite itself costs;
- ``http``: the same records as the sender sends them (JSON lines, gzip level 3, batches of
  2,000, bodies prepared beforehand) POSTed by ``--clients`` kept-alive connections to
  ``dsmon serve`` (its own process) with a fresh SQLite store, timed from the first request
  to the last 200 answer; every answer must count the whole batch as inserted;
- ``stages`` (with ``--stages``): the server's work on the same bodies run in this process,
  stage by stage (inflate, decode and check, row building, store insert), which says where
  the HTTP figure's time goes.

Each is measured ``--rounds`` times, alternating, into fresh files; the best round of each
is kept, the one least disturbed by other processes. It prints records/s for both, the ratio
http/direct, and the goal (issue 11): ratio >= 0.5 and http >= 50,000 records/s.

Usage: ``python bench/ingest.py [--records 100000] [--rounds 3] [--clients 1] [--stages]``
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import queue
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from harness import DEMO_LOG, ApiClient, IngestServer

from dsmon.model.records import Record
from dsmon.model.wire import encode
from dsmon.parse.log import parse_text
from dsmon.serve.batch import inflate, parse_batch_rows
from dsmon.store.records.rows import ROW_COLUMNS, RecordRow, record_row
from dsmon.store.store import open_store

BATCH = 2000  # the sender's batch_records
GOAL_RATIO = 0.5
GOAL_RATE = 50_000
INSERT = (
    f"INSERT OR IGNORE INTO records ({', '.join(ROW_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in ROW_COLUMNS)})"
)


@dataclasses.dataclass
class Timings:
    """Seconds of each round, and what the server said it inserted."""

    direct: list[float] = dataclasses.field(default_factory=list)
    http: list[float] = dataclasses.field(default_factory=list)
    inserted: list[int] = dataclasses.field(default_factory=list)
    stages: dict[str, float] | None = None


def demo_records(n: int) -> list[Record]:
    """``n`` records: the demo run's, repeated as if read from distinct files (distinct keys)."""
    base, _ = parse_text(DEMO_LOG.read_text(encoding="utf-8"), "bench", "train.log", "bench")
    out: list[Record] = []
    copy = 0
    while len(out) < n:
        label = f"node{copy}/train.log"
        out += [dataclasses.replace(r, src=dataclasses.replace(r.src, file=label)) for r in base]
        copy += 1
    return out[:n]


def bodies(records: list[Record]) -> list[bytes]:
    """The request bodies the sender would POST for these records."""
    out = []
    for start in range(0, len(records), BATCH):
        text = "".join(encode(r) + "\n" for r in records[start : start + BATCH])
        out.append(gzip.compress(text.encode("utf-8"), compresslevel=3))
    return out


def timed(fn: Callable[[], object]) -> float:
    """Wall seconds of one call."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def direct(path: Path, rows: list[RecordRow]) -> float:
    """Seconds to executemany ``rows`` into a fresh store file, one transaction per batch."""
    open_store(path).close()  # the store's schema and WAL mode
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous = NORMAL")

    def insert() -> None:
        for start in range(0, len(rows), BATCH):
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(INSERT, rows[start : start + BATCH])
            conn.execute("COMMIT")

    seconds = timed(insert)
    stored = conn.execute("SELECT COUNT(*) FROM records").fetchone()[0]
    conn.close()
    if stored != len(rows):
        raise SystemExit(f"bench: direct stored {stored} of {len(rows)} rows")
    return seconds


def over_http(tmp: Path, payloads: list[bytes], clients: int) -> tuple[float, int]:
    """Seconds to POST every body to a fresh ``dsmon serve``; and how many it inserted."""
    server = IngestServer(tmp, tmp / "http.sqlite")
    todo: queue.SimpleQueue[bytes] = queue.SimpleQueue()
    for body in payloads:
        todo.put(body)
    inserted: list[int] = []
    errors: list[str] = []

    def client() -> None:
        api = ApiClient(server.url)
        while True:
            try:
                body = todo.get_nowait()
            except queue.Empty:
                return
            resp = api.post(body)
            if resp.status != 200:
                errors.append(f"{resp.status} {resp.body[:200]!r}")
                return
            inserted.append(int(json.loads(resp.body)["inserted"]))

    try:
        ApiClient(server.url).get("/healthz")  # connections and imports warm
        threads = [threading.Thread(target=client) for _ in range(clients)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - t0
    finally:
        server.stop()
    if errors:
        raise SystemExit(f"bench: POST /v1/records answered {errors[0]}")
    return seconds, sum(inserted)


def stages(path: Path, payloads: list[bytes]) -> dict[str, float]:
    """Seconds per stage of the server's work on the same bodies, run here in order.

    The stages the server runs for each POST: inflate the body, check every line and make its
    row (``parse_batch_rows``: msgspec's typed decode, the other checks, the key digest), then
    ``store.add`` of the rows (``executemany``, the per-run bookkeeping, the commit).
    """
    names = ("inflate", "decode+check+row", "store.add")
    out = dict.fromkeys(names, 0.0)
    store = open_store(path)
    for body in payloads:
        marks = [time.perf_counter()]
        raw = inflate(body, "gzip", 1 << 30)
        marks.append(time.perf_counter())
        rows = parse_batch_rows(raw)
        marks.append(time.perf_counter())
        store.add(rows, live=True)
        marks.append(time.perf_counter())
        for name, t0, t1 in zip(names, marks[:-1], marks[1:], strict=True):
            out[name] += t1 - t0
    store.close()
    return out


def report_stages(times: dict[str, float], n: int, http_s: float) -> None:
    """The stage table: seconds, microseconds per record, share of the HTTP time."""
    rows = {
        "inflate (gunzip)": times["inflate"],
        "decode, check, row (parse_batch_rows)": times["decode+check+row"],
        "SQL: store.add (insert, bookkeeping)": times["store.add"],
    }
    rows["HTTP, ASGI, threads (the rest)"] = http_s - sum(rows.values())
    print(f"{'server stage (same bodies, in-process)':<40} {'seconds':>8} {'us/rec':>7} {'%':>6}")
    for name, sec in rows.items():
        print(f"{name:<40} {sec:8.2f} {sec / n * 1e6:7.1f} {sec / http_s * 100:6.1f}")


def rounds(args: argparse.Namespace, payloads: list[bytes], rows: list[RecordRow]) -> Timings:
    """Direct then HTTP, ``--rounds`` times, each into fresh files; then the stages if asked."""
    out = Timings()
    with tempfile.TemporaryDirectory(prefix="dsmon-ingest-") as name:
        for i in range(args.rounds):
            tmp = Path(name) / f"round{i}"
            tmp.mkdir()
            out.direct.append(direct(tmp / "direct.sqlite", rows))
            seconds, inserted = over_http(tmp, payloads, args.clients)
            out.http.append(seconds)
            out.inserted.append(inserted)
            print(f"round {i + 1}: direct {out.direct[-1]:.2f} s, http {seconds:.2f} s", flush=True)
        if args.stages:
            out.stages = stages(Path(name) / "stages.sqlite", payloads)
    return out


def report(args: argparse.Namespace, n: int, payloads: list[bytes], t: Timings) -> None:
    """Print the figure lines (best round of each: the least disturbed by other processes)."""
    size = sum(map(len, payloads)) / 1e6
    print(
        f"ingest: {n} real records ({len(payloads)} gzip batches of {BATCH}, {size:.1f} MB), "
        f"{args.clients} client(s), best of {args.rounds} round(s)"
    )
    t_direct, t_http = min(t.direct), min(t.http)
    print(f"direct executemany: {n / t_direct:10.0f} records/s ({t_direct:.2f} s)")
    print(f"http POST /v1/records: {n / t_http:7.0f} records/s ({t_http:.2f} s)")
    ratio = t_direct / t_http
    complete = all(i == n for i in t.inserted)
    print(f"ratio http/direct: {ratio:.3f}; every round inserted all {n}: {complete}")
    met = ratio >= GOAL_RATIO and n / t_http >= GOAL_RATE and complete
    print(
        f"goal: ratio >= {GOAL_RATIO} and >= {GOAL_RATE} records/s -> {'met' if met else 'NOT met'}"
    )
    if t.stages is not None:
        report_stages(t.stages, n, t_http)


def main() -> None:
    """Build the records, measure direct and HTTP (and the stages), print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000, help="records to store (100000)")
    ap.add_argument(
        "--rounds", type=int, default=3, help="measure each this often, keep the best (3)"
    )
    ap.add_argument("--clients", type=int, default=1, help="concurrent POSTing connections (1)")
    ap.add_argument("--stages", action="store_true", help="also time the server's stages")
    args = ap.parse_args()
    records = demo_records(args.records)
    payloads = bodies(records)
    rows = [record_row(r) for r in records]
    report(args, len(records), payloads, rounds(args, payloads, rows))


if __name__ == "__main__":
    main()
