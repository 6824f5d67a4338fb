"""Benchmark: ingest throughput on the real record mix, through HTTP against a bare executemany.

The dashboard's ingest server takes the records of every node, so its rate bounds how many
nodes one dashboard can serve. The records are the real mix (:func:`real_mix`): every record
dsmon makes of the real DeepSpeed runs in ``tests/data`` (their logs and their per-rank probe
files) and of the run bundled with dsmon (``dsmon/data/demo/train.log``), copied as if sent by
several nodes of one job, with the GPU samples an 8-GPU node's collector sends (the NVML of
``tests/fakes.py``: four H100s and four A100s, every field NVML gives) mixed in as the sender
mixes them. It prints their count by kind and the mean bytes of JSON a record. In the same
run it measures, alternating, into fresh databases each round:

- ``direct``: the rows the store holds for those records (taken from a scratch store the same
  records were written to: ``records`` rows and ``gpu_samples`` rows, in id order)
  ``executemany``-ed into a fresh database with the store's schema, 2,000 records to a
  transaction: the floor of what the database itself costs for the same rows;
- ``http``: the same records as the sender sends them (JSON lines, gzip level 3, batches of
  2,000, bodies prepared beforehand) POSTed by one kept-alive connection (``--clients``) to
  ``dsmon serve`` (its own process) with a fresh store, timed from the first request to the
  last 200 answer; every answer must count the whole batch as inserted.

Each figure is the median of ``--rounds`` (at least 5) alternated rounds; the ratio is
http/direct of the medians, and the goal (issue 43) is ratio >= 0.5 and http >= 50,000
records/s. ``--stages`` also times the server's stages on the same bodies in this process
(inflate, decode and check, store), which says where the HTTP figure's time goes.
``--store-url postgresql://...`` measures a PostgreSQL server instead (a database is created
and dropped per round; ``scripts/start-postgres.sh`` starts one): ``direct`` is then psycopg's
``executemany`` of the same rows.

``--instructions`` counts instead the instructions a record of the server's stages, which the
machine's load does not move: valgrind's callgrind runs this script on 10 of the batches (every
fifth of the first 50, after one batch that warms imports and caches) in a fresh SQLite store,
in process, with ``PYTHONHASHSEED=0``, once per stage reached (none, inflate, decode and check,
``store.add(live=True)``); the differences of the totals, over the records, are the stages'.

Usage: ``python bench/ingest.py [--records 100000] [--rounds 5] [--clients 1] [--stages]
[--gpu-share 0.1] [--store-url URL] [--instructions]``
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gzip
import json
import os
import pickle
import queue
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from harness import DEMO_LOG, ROOT, ApiClient, IngestServer, cpu_seconds

from dsmon.model.records import Record
from dsmon.model.wire import encode
from dsmon.parse.log import parse_text
from dsmon.parse.probe import ProbeParser
from dsmon.serve.batch import inflate, parse_batch_rows
from dsmon.store.gpu.rows import SAMPLE_COLUMNS
from dsmon.store.records.rows import ROW_COLUMNS
from dsmon.store.store import open_store

BATCH = 2000  # the sender's batch_records
GOAL_RATIO = 0.5
GOAL_RATE = 50_000
MIN_ROUNDS = 5
RUN = "bench-job"
DATA = ROOT / "tests" / "data"
#: GPUs of one node, polled once a second (collectors/gpu/nvml.py).
NODE_GPUS = 8
_RECORD_COLS = ", ".join(ROW_COLUMNS)
_SAMPLE_COLS = ", ".join(("id", "series", "t_ms", *SAMPLE_COLUMNS))
_SERIES_COLS = (
    "id, run, node, file, sub, gpu_index, t0_ms, uuid, name, mem_total_bytes, power_limit_w"
)


@dataclasses.dataclass(frozen=True)
class Direct:
    """One ``direct`` round: wall seconds, CPU seconds, and wall seconds spent in COMMIT."""

    seconds: float
    cpu: float | None  # this process's CPU: the SQLite engine's (None: PostgreSQL's is elsewhere)
    commit: float  # SQLite's automatic WAL checkpoints run (and sync the disk) in COMMIT


@dataclasses.dataclass
class Timings:
    """What each round measured, and what the server said it inserted."""

    direct: list[Direct] = dataclasses.field(default_factory=list)
    http: list[float] = dataclasses.field(default_factory=list)
    #: CPU seconds of the ``dsmon serve`` process over each round's POSTs.
    http_cpu: list[float] = dataclasses.field(default_factory=list)
    inserted: list[int] = dataclasses.field(default_factory=list)
    #: The 1-minute load average as each round started.
    load: list[float] = dataclasses.field(default_factory=list)
    stages: dict[str, float] | None = None

    def ratios(self) -> list[float]:
        """Each round's http/direct rate ratio: its two halves ran minutes apart at most."""
        return [d.seconds / h for d, h in zip(self.direct, self.http, strict=True)]


# --- the records ------------------------------------------------------------------------------


def corpus_records(node: str) -> list[Record]:
    """Every record of the real runs (logs, probe files) and of the demo run, as from ``node``.

    The file label names the run's folder, so the copies of each file differ in their keys
    only by ``node``, as the logs of one job's nodes do.
    """
    out: list[Record] = []
    logs = [*sorted(DATA.glob("*/train.log")), DEMO_LOG]
    for path in logs:
        label = f"{path.parent.name}/{path.name}"
        text = path.read_text(encoding="utf-8", errors="replace")
        out += parse_text(text, RUN, label, node)[0]
    for path in sorted(DATA.glob("*/probe/*.jsonl")):
        parser = ProbeParser(RUN, f"{path.parent.parent.name}/probe/{path.name}", node)
        offset = 0
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(True), 1):
            out += parser.feed(line, offset=offset, line=number)
            offset += len(line.encode("utf-8"))
    return out


def gpu_polls(node: str, start: datetime) -> Iterator[list[Record]]:
    """The GPU samples of ``node``'s collector, one poll of its 8 GPUs a second from ``start``."""
    sys.path.insert(0, str(ROOT / "tests"))
    from fakes import eight_gpus_two_models

    from collectors.gpu.nvml import NvmlPoller

    clock = [start]

    def now() -> datetime:
        clock[0] += timedelta(seconds=1)
        return clock[0]

    poller = NvmlPoller(eight_gpus_two_models(), run=RUN, node=node, now=now)
    poller.start()
    while True:
        yield list(poller.poll())


def real_mix(n: int, gpu_share: float) -> list[Record]:
    """``n`` records of the real mix: nodes' copies of the corpus, GPU samples mixed in.

    ``gpu_share`` of them are GPU samples, a poll of 8 spread evenly between the other
    records (a collector submits each poll as it is taken, between the log's records).
    """
    import logging

    logging.getLogger("collectors").setLevel(logging.ERROR)  # the A100s' "no GPM" notes
    out: list[Record] = []
    node = 0
    start = datetime(2026, 12, 1, 8, 0, 0)
    while len(out) < n:
        name = f"node{node:02d}"
        logs = corpus_records(name)
        polls = gpu_polls(name, start)
        every = max(1, round(NODE_GPUS * (1 - gpu_share) / gpu_share)) if gpu_share else 0
        for i, rec in enumerate(logs):
            out.append(rec)
            if every and i % every == every - 1:
                out += next(polls)
        node += 1
    return out[:n]


def bodies(records: list[Record]) -> list[bytes]:
    """The request bodies the sender would POST for these records (collectors/send/sender.py)."""
    out = []
    for start in range(0, len(records), BATCH):
        lines = [encode(r) for r in records[start : start + BATCH]]
        out.append(gzip.compress(("\n".join(lines) + "\n").encode("utf-8"), compresslevel=3))
    return out


def describe(records: list[Record], payloads: list[bytes]) -> None:
    """The mix: records by kind, mean JSON bytes a record, compressed size."""
    kinds = collections.Counter(r.KIND for r in records)
    json_bytes = sum(len(encode(r)) + 1 for r in records)
    gz = sum(map(len, payloads))
    top = ", ".join(f"{k} {v / len(records):.1%}" for k, v in kinds.most_common())
    print(
        f"mix: {len(records)} records, {json_bytes / len(records):.0f} B of JSON a record "
        f"({json_bytes / 1e6:.1f} MB, {gz / 1e6:.1f} MB gzipped in {len(payloads)} batches)"
    )
    print(f"kinds: {top}")


# --- the stored rows (direct's input) -----------------------------------------------------


@dataclasses.dataclass
class StoredRows:
    """What a store holds for the records, table by table, for ``direct`` to write again."""

    series: list[tuple[Any, ...]]
    #: Per batch of BATCH records in id order: (``records`` rows, ``gpu_samples`` rows).
    batches: list[tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]]


def stored_rows(tmp: Path, records: list[Record]) -> StoredRows:
    """Write the records to a scratch SQLite store; read back every row it holds, in id order."""
    path = tmp / "scratch.sqlite"
    with open_store(path) as store:
        store.add(records)
    return read_rows(path, len(records))


def read_rows(path: Path, n: int) -> StoredRows:
    """Every row a scratch store of ``n`` records holds, in id order, in batches; then delete it."""
    conn = sqlite3.connect(path)
    rec = conn.execute(f"SELECT id, {_RECORD_COLS} FROM records ORDER BY id").fetchall()
    smp = conn.execute(f"SELECT {_SAMPLE_COLS} FROM gpu_samples ORDER BY id").fetchall()
    series = conn.execute(f"SELECT {_SERIES_COLS} FROM gpu_series ORDER BY id").fetchall()
    conn.close()
    path.unlink()
    if len(rec) + len(smp) != n:
        raise SystemExit(f"bench: the scratch store holds {len(rec) + len(smp)} of {n}")
    merged = sorted([(r[0], 0, r[1:]) for r in rec] + [(s[0], 1, s) for s in smp])
    batches = []
    for start in range(0, len(merged), BATCH):
        part = merged[start : start + BATCH]
        batches.append(([r for _, t, r in part if t == 0], [r for _, t, r in part if t == 1]))
    return StoredRows(series, batches)


def _insert_sql(table: str, cols: str, mark: str, ignore: str, tail: str) -> str:
    n = cols.count(",") + 1
    return f"INSERT {ignore}INTO {table} ({cols}) VALUES ({', '.join([mark] * n)}){tail}"


def direct_sqlite(path: Path, rows: StoredRows, batches: int | None = None) -> Direct:
    """Executemany the rows into a fresh store file, one transaction per batch: its times.

    The time in COMMIT is mostly SQLite's automatic checkpoints, which copy the WAL into the
    database file and wait for the disk to sync it (every 1,000 pages, about every third
    batch): this disk wait is the part of the baseline that moves most from round to round.
    ``batches``: only the first so many (``--instructions``' run without any).
    """
    open_store(path).close()  # the store's schema and WAL mode
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.executemany(_insert_sql("gpu_series", _SERIES_COLS, "?", "", ""), rows.series)
    ins_rec = _insert_sql("records", _RECORD_COLS, "?", "OR IGNORE ", "")
    ins_smp = _insert_sql("gpu_samples", _SAMPLE_COLS, "?", "", "")

    commit = 0.0

    def insert() -> None:
        nonlocal commit
        for rec, smp in rows.batches[:batches]:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(ins_rec, rec)
            conn.executemany(ins_smp, smp)
            t0 = time.perf_counter()
            conn.execute("COMMIT")
            commit += time.perf_counter() - t0

    cpu0 = time.process_time()
    seconds = timed(insert)
    cpu = time.process_time() - cpu0
    n = conn.execute("SELECT (SELECT COUNT(*) FROM records) + (SELECT COUNT(*) FROM gpu_samples)")
    stored = n.fetchone()[0]
    conn.close()
    if batches is None:
        _check(stored, rows)
    return Direct(seconds, cpu, commit)


def direct_postgres(url: str, rows: StoredRows) -> Direct:
    """Seconds to executemany the rows into a fresh PostgreSQL store, one transaction a batch."""
    import psycopg

    open_store(url).close()  # the store's schema
    conflict = " ON CONFLICT DO NOTHING"
    ins_rec = _insert_sql("records", _RECORD_COLS, "%s", "", conflict)
    ins_smp = _insert_sql("gpu_samples", _SAMPLE_COLS, "%s", "", "")
    with psycopg.connect(url) as conn:
        conn.cursor().executemany(
            _insert_sql("gpu_series", _SERIES_COLS, "%s", "", ""), rows.series
        )
        conn.commit()

        commit = 0.0

        def insert() -> None:
            nonlocal commit
            with conn.cursor() as cur:
                for rec, smp in rows.batches:
                    cur.executemany(ins_rec, rec)
                    if smp:
                        cur.executemany(ins_smp, smp)
                    t0 = time.perf_counter()
                    conn.commit()
                    commit += time.perf_counter() - t0

        seconds = timed(insert)
        found = conn.execute(
            "SELECT (SELECT COUNT(*) FROM records) + (SELECT COUNT(*) FROM gpu_samples)"
        ).fetchone()
    _check(found[0] if found else 0, rows)
    return Direct(seconds, None, commit)


def _check(stored: int, rows: StoredRows) -> None:
    want = sum(len(r) + len(s) for r, s in rows.batches)
    if stored != want:
        raise SystemExit(f"bench: direct stored {stored} of {want} rows")


# --- over HTTP ------------------------------------------------------------------------------


def timed(fn: Callable[[], object]) -> float:
    """Wall seconds of one call."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def over_http(
    tmp: Path, store: str, payloads: list[bytes], clients: int
) -> tuple[float, float, int]:
    """POST every body to a fresh ``dsmon serve``: seconds, its CPU seconds, records inserted."""
    server = IngestServer(tmp, store)
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
        cpu0 = cpu_seconds(server.proc.pid)
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - t0
        cpu = cpu_seconds(server.proc.pid) - cpu0
    finally:
        server.stop()
    if errors:
        raise SystemExit(f"bench: POST /v1/records answered {errors[0]}")
    return seconds, cpu, sum(inserted)


def stages(store_url: str, payloads: list[bytes]) -> dict[str, float]:
    """Seconds per stage of the server's work on the same bodies, run here in order."""
    names = ("inflate", "decode+check", "store.add")
    out = dict.fromkeys(names, 0.0)
    store = open_store(store_url)
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
        "decode, check (parse_batch_rows)": times["decode+check"],
        "store.add (SQL, bookkeeping)": times["store.add"],
    }
    rows["HTTP, ASGI, threads (the rest)"] = http_s - sum(rows.values())
    print(f"{'server stage (same bodies, in-process)':<40} {'seconds':>8} {'us/rec':>7} {'%':>6}")
    for name, sec in rows.items():
        print(f"{name:<40} {sec:8.2f} {sec / n * 1e6:7.1f} {sec / http_s * 100:6.1f}")


# --- instructions a record (callgrind) -----------------------------------------------------

#: The stages a callgrind run goes through, each including the ones before it.
CALLGRIND_LEVELS = ("none", "inflate", "decode+check", "store.add")
#: ``direct`` on the same records: its setup alone, then its inserts.
DIRECT_LEVELS = ("direct-none", "direct")
#: The batches counted: every fifth of the first 50 (the mix's kinds change along a batch's
#: copies of the runs), after the warm-up batch.
COUNTED_BATCHES = range(0, 50, 5)
WARM_BATCH = 1


def instructions(payloads: list[bytes], tmp: Path) -> dict[str, float]:
    """Instructions a record of each server stage, from callgrind runs of this script.

    Each run reaches one more stage on the same batches; its total minus the previous run's
    is the stage's. Imports, the store's opening and the warm-up batch are in every run alike.
    ``direct`` is counted alike on the rows a scratch store holds for the same batches.
    """
    if shutil.which("valgrind") is None:
        raise SystemExit("bench: --instructions needs valgrind (apt-get install valgrind)")
    counted = [payloads[i] for i in COUNTED_BATCHES if i < len(payloads)]
    path = tmp / "bodies.pickle"
    path.write_bytes(pickle.dumps([payloads[WARM_BATCH], *counted]))
    n = sum(len(inflate(b, "gzip", 1 << 30).splitlines()) for b in counted)
    with open_store(tmp / "scratch.sqlite") as store:
        for body in counted:
            store.add(parse_batch_rows(inflate(body, "gzip", 1 << 30)))
    (tmp / "rows.pickle").write_bytes(pickle.dumps(read_rows(tmp / "scratch.sqlite", n)))
    totals = []
    for level in (*CALLGRIND_LEVELS, *DIRECT_LEVELS):
        out = tmp / f"callgrind.{level}"
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
             __file__, "--callgrind-child", str(path), level],
            env={**os.environ, "PYTHONHASHSEED": "0"}, capture_output=True, text=True,
        )  # fmt: skip
        found = re.search(r"Collected : (\d+)", done.stderr)
        if done.returncode or found is None:
            raise SystemExit(f"bench: callgrind of {level} failed: {done.stderr[-2000:]}")
        totals.append(int(found.group(1)))
    server = totals[: len(CALLGRIND_LEVELS)]
    stages = {
        level: (total - before) / n
        for level, before, total in zip(CALLGRIND_LEVELS[1:], server[:-1], server[1:], strict=True)
    }
    stages["total"] = (server[-1] - server[0]) / n
    stages["direct"] = (totals[-1] - totals[-2]) / n
    print(f"instructions a record (callgrind, {len(counted)} batches, {n} records, in-process):")
    for name, value in stages.items():
        print(f"  {name:<14} {value / 1000:7.1f}k")
    print(f"  total/direct   {stages['total'] / stages['direct']:7.2f}x")
    return stages


def callgrind_child(path: Path, level: str) -> None:
    """What one callgrind run executes: the warm-up batch whole, the rest up to ``level``.

    A ``direct`` level executemanies the rows beside ``path`` instead (none of them first).
    """
    if level in DIRECT_LEVELS:
        rows = pickle.loads((path.parent / "rows.pickle").read_bytes())
        with tempfile.TemporaryDirectory(prefix="dsmon-callgrind-") as name:
            direct_sqlite(Path(name) / "direct.sqlite", rows, None if level == "direct" else 0)
        return
    warm, *counted = pickle.loads(path.read_bytes())
    reach = CALLGRIND_LEVELS.index(level)
    with tempfile.TemporaryDirectory(prefix="dsmon-callgrind-") as name:
        store = open_store(Path(name) / "store.sqlite")
        store.add(parse_batch_rows(inflate(warm, "gzip", 1 << 30)), live=True)
        for body in counted if reach else ():
            raw = inflate(body, "gzip", 1 << 30)
            if reach >= 2:
                rows = parse_batch_rows(raw)
                if reach >= 3:
                    store.add(rows, live=True)
        store.close()


# --- the databases of a round ---------------------------------------------------------------


class Databases:
    """Fresh databases for each round: files in a folder, or PostgreSQL databases."""

    def __init__(self, tmp: Path, pg_url: str | None) -> None:
        self.tmp = tmp
        self.pg_url = pg_url
        self._made: list[str] = []

    def fresh(self, name: str) -> str:
        """A new empty database's URL (a path for SQLite)."""
        if self.pg_url is None:
            return str(self.tmp / f"{name}.sqlite")
        import psycopg

        db = f"dsmon_bench_{name}"
        with psycopg.connect(self.pg_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db}")
            conn.execute(f"CREATE DATABASE {db}")
        self._made.append(db)
        parts = urlsplit(self.pg_url)
        return urlunsplit(parts._replace(path=f"/{db}"))

    def drop_all(self) -> None:
        """Drop the PostgreSQL databases made (files go with the folder)."""
        if not self._made:
            return
        import psycopg

        with psycopg.connect(self.pg_url or "", autocommit=True) as conn:
            for db in self._made:
                conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def rounds(args: argparse.Namespace, payloads: list[bytes], rows: StoredRows, tmp: Path) -> Timings:
    """Direct then HTTP, alternating, ``--rounds`` times, into fresh databases each."""
    out = Timings()
    dbs = Databases(tmp, args.store_url)
    try:
        for i in range(args.rounds):
            here = tmp / f"round{i}"
            here.mkdir()
            out.load.append(os.getloadavg()[0])
            target = dbs.fresh(f"direct{i}")
            if args.store_url is None:
                direct = direct_sqlite(Path(target), rows)
            else:
                direct = direct_postgres(target, rows)
            seconds, cpu, inserted = over_http(here, dbs.fresh(f"http{i}"), payloads, args.clients)
            out.direct.append(direct)
            out.http.append(seconds)
            out.http_cpu.append(cpu)
            out.inserted.append(inserted)
            direct_cpu = "" if direct.cpu is None else f" (CPU {direct.cpu:.2f})"
            print(
                f"round {i + 1}: load {out.load[-1]:.1f}; direct {direct.seconds:.2f} s"
                f"{direct_cpu}, {direct.commit:.2f} s of it in COMMIT; http {seconds:.2f} s "
                f"(server CPU {cpu:.2f}); ratio {direct.seconds / seconds:.3f}",
                flush=True,
            )
        if args.stages:
            out.stages = stages(dbs.fresh("stages"), payloads)
    finally:
        dbs.drop_all()
    return out


def report(args: argparse.Namespace, n: int, t: Timings) -> None:
    """Print the figure lines: medians of the rounds, their ratio and spread, the goal.

    The ratio of one run's medians moved from 0.35 to 0.59 between runs of the same code, so
    the spread is printed with it: each round's own ratio (its two halves ran one after the
    other, under about the same load), how many rounds met the goal's ratio, and the ratio
    of CPU seconds, which waiting for a core or the disk does not move. ``direct`` is one
    thread that also waits for the disk in its COMMITs (checkpoints); ``dsmon serve`` does
    its checkpoints in a thread of their own but needs a core for every step, so on a busy
    machine the wall-time ratio falls towards the CPU ratio, and on an idle one or with a
    slow disk it rises above it.
    """
    engine = "PostgreSQL" if args.store_url else "SQLite"
    print(
        f"ingest ({engine}): {n} records of the real mix, gzip batches of {BATCH}, "
        f"{args.clients} client(s), median of {args.rounds} alternated rounds"
    )
    direct_s = [d.seconds for d in t.direct]
    t_direct, t_http = statistics.median(direct_s), statistics.median(t.http)
    spread_d = f"{n / max(direct_s):.0f}-{n / min(direct_s):.0f}"
    spread_h = f"{n / max(t.http):.0f}-{n / min(t.http):.0f}"
    commit = statistics.median(d.commit / d.seconds for d in t.direct)
    cpus = [d.cpu for d in t.direct if d.cpu is not None]
    direct_cpu = f"; CPU {statistics.median(cpus) / n * 1e6:.1f} us a record" if cpus else ""
    print(
        f"baseline: direct executemany {n / t_direct:10.0f} records/s (rounds {spread_d})"
        f"{direct_cpu}; {commit:.0%} of its time in COMMIT (WAL checkpoints, disk syncs)"
    )
    print(
        f"figure:   http POST /v1/records {n / t_http:7.0f} records/s (rounds {spread_h}); "
        f"server CPU {statistics.median(t.http_cpu) / n * 1e6:.1f} us a record"
    )
    ratio = t_direct / t_http
    complete = all(i == n for i in t.inserted)
    print(f"ratio http/direct: {ratio:.3f}; every round inserted all {n}: {complete}")
    per_round = t.ratios()
    met_rounds = sum(r >= GOAL_RATIO for r in per_round)
    agree = "" if met_rounds in (0, len(per_round)) else " (the rounds disagree)"
    print(
        f"spread: ratio of each round {min(per_round):.3f}-{max(per_round):.3f} "
        f"(median {statistics.median(per_round):.3f}), {met_rounds} of {len(per_round)} "
        f"rounds >= {GOAL_RATIO}{agree}; load average {min(t.load):.1f}-{max(t.load):.1f}"
    )
    if cpus:
        cpu_ratios = [d / h for d, h in zip(cpus, t.http_cpu, strict=True)]
        print(
            f"CPU ratio direct/server: {statistics.median(cpu_ratios):.3f} "
            f"(rounds {min(cpu_ratios):.3f}-{max(cpu_ratios):.3f}; waits for a core or the "
            "disk do not move it)"
        )
    met = ratio >= GOAL_RATIO and n / t_http >= GOAL_RATE and complete
    print(
        f"goal: ratio >= {GOAL_RATIO} and >= {GOAL_RATE} records/s -> {'met' if met else 'NOT met'}"
    )
    if t.stages is not None:
        report_stages(t.stages, n, t_http)


def main() -> None:
    """Build the records, measure direct and HTTP alternately, print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000, help="records to store (100000)")
    ap.add_argument("--rounds", type=int, default=MIN_ROUNDS, help="alternated rounds (5)")
    ap.add_argument("--clients", type=int, default=1, help="concurrent POSTing connections (1)")
    ap.add_argument("--stages", action="store_true", help="also time the server's stages")
    ap.add_argument(
        "--gpu-share", type=float, default=0.1, help="share of GPU samples in the mix (0.1)"
    )
    ap.add_argument("--store-url", help="a PostgreSQL server's URL: measure it instead of SQLite")
    ap.add_argument(
        "--instructions",
        action="store_true",
        help="count the server stages' instructions a record with callgrind instead",
    )
    ap.add_argument("--callgrind-child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.callgrind_child:
        callgrind_child(Path(args.callgrind_child[0]), args.callgrind_child[1])
        return
    if args.rounds < MIN_ROUNDS:
        print(f"note: fewer than {MIN_ROUNDS} rounds: not a figure for bench/README.md")
    records = real_mix(args.records, args.gpu_share)
    payloads = bodies(records)
    describe(records, payloads)
    if args.instructions:
        with tempfile.TemporaryDirectory(prefix="dsmon-ingest-") as name:
            instructions(payloads, Path(name))
        return
    with tempfile.TemporaryDirectory(prefix="dsmon-ingest-") as name:
        tmp = Path(name)
        rows = stored_rows(tmp, records)
        del records
        report(args, args.records, rounds(args, payloads, rows, tmp))


if __name__ == "__main__":
    main()
