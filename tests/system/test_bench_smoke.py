"""The live-collection benchmarks still run and print their figures (tiny sizes, no timing checks).

Each benchmark starts real processes (``dsmon serve``, ``dsmon collect``) on 127.0.0.1, so
this checks the whole chain works from a script; what the figures are is for bench/README.md.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from browser_support import CHROMIUM, missing
from locations import ROOT
from pg_support import create_schema, drop_schema

pytestmark = pytest.mark.slow

NUMBER = r"\d+(?:\.\d+)?"
VERDICT = r"-> (?:met|NOT met)$"


def bench(script: str, *args: str, tmp: Path | None = None) -> str:
    res = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp)} if tmp is not None else None,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def assert_lines(out: str, *patterns: str) -> None:
    for pattern in patterns:
        assert re.search(pattern, out, re.MULTILINE), f"no line matching {pattern!r} in:\n{out}"


def test_freshness_prints_percentiles_of_every_line() -> None:
    out = bench("freshness.py", "--seconds", "1", "--rate", "20", "--poll-every", "0.05")
    assert_lines(
        out,
        r"^freshness: 20 real timer lines appended at 20/s for 1 s;",
        rf"^freshness: visible 20/20; p50 {NUMBER} ms; p99 {NUMBER} ms; max {NUMBER} ms$",
        rf"^goal: p99 <= 1000 ms {VERDICT}",
    )


def test_collector_cost_prints_cpu_seconds_per_minute() -> None:
    out = bench("collector_cost.py", "--seconds", "2", "--rate", "50")
    assert_lines(
        out,
        r"^collector cost: 100 real log lines at 50/s \+ fake NVML \(8 GPUs\) at 1 Hz",
        rf"^collector cost: {NUMBER} CPU-s in {NUMBER} s = {NUMBER} CPU-s per minute = "
        rf"{NUMBER} % of one core; RSS {NUMBER} MiB$",
        rf"^control: a process that only wakes 10 times/s \(as an idle collector\) cost {NUMBER} ",
        rf"^goal: <= 0.6 CPU-s per minute \(1 % of a core\) {VERDICT}",
        r"^collector cost by thread, CPU-s per minute \(wake-ups per second\): .*dsmon-tail ",
        r"^collector cost: stored so far \d+ records: \{.*'gpu': \d+",
    )


def test_ingest_prints_both_rates_the_ratio_and_the_stages() -> None:
    out = bench("ingest.py", "--records", "3000", "--rounds", "1", "--stages")
    assert_lines(
        out,
        rf"^mix: 3000 records, {NUMBER} B of JSON a record \(.* in 2 batches\)$",
        r"^kinds: timer .*gpu ",
        r"^ingest \(SQLite\): 3000 records of the real mix, gzip batches of 2000, ",
        rf"^baseline: direct executemany +{NUMBER} records/s",
        rf"^figure: +http POST /v1/records +{NUMBER} records/s",
        rf"^ratio http/direct: {NUMBER}; every round inserted all 3000: True$",
        rf"^goal: ratio >= 0.5 and >= 50000 records/s {VERDICT}",
        rf"^decode, check \(parse_batch_rows\) +{NUMBER} ",
        rf"^store.add \(SQL, bookkeeping\) +{NUMBER} ",
    )


def test_probe_overhead_prints_the_cost_per_step() -> None:
    out = bench(
        "probe_overhead.py",
        "--steps",
        "200",
        "--rounds",
        "2",
        "--seconds",
        "1.5",
        "--step-ms",
        "50",
        "--side-steps",
        "5",
    )
    assert_lines(
        out,
        rf"^probe hot path: 200 optimizer steps of 1 micro-batch\(es\), 3 collectives each, "
        rf"stand-in tensors, thread CPU time, median of 2 alternating rounds: plain {NUMBER} "
        rf"us/step, probed "
        rf"{NUMBER} us/step -> {NUMBER} us per optimizer step$",
        rf"^probe writer thread: {NUMBER} CPU-s in 1.5 s for \d+ steps of 50 ms = ",
        rf"^side by side: 5 steps of 50 ms, median of 2 alternating rounds: median step plain "
        rf"{NUMBER} ms, probed {NUMBER} ms \([+-]{NUMBER} %\); mean step plain {NUMBER} ms, "
        rf"probed {NUMBER} ms \([+-]{NUMBER} %\)$",
        rf"^probe overhead: {NUMBER} us per step = {NUMBER} % of a 50 ms step; 1 % holds for "
        rf"steps >= {NUMBER} ms \(\d+ lines written\)$",
        rf"^goal: <= 1 % of step time {VERDICT}",
    )


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_gpu_page_prints_size_loads_and_ratios(backend: str, tmp_path: Path) -> None:
    url: list[str] = []
    writes = ["--live", "--gpm"]  # each node's second per add, as a live run posts them
    if backend == "postgresql":
        schema, pg = create_schema()
        url, writes = ["--store-url", pg], ["--batch-seconds", "10"]
    try:
        out = bench(
            "gpu_page.py", "--hours", "0.02", *writes, "--baseline-hours", "0.01", *url,
            tmp=tmp_path,
        )  # fmt: skip
    finally:
        if url:
            drop_schema(schema)
    assert_lines(
        out,
        rf"^store: {'PostgreSQL' if url else 'SQLite'}$",
        rf"^stored 4,608 samples in {NUMBER} s .*"
        + (
            "each node's second of samples per add \\(8 GPUs\\), with GPM metrics$"
            if not url
            else "10 s of samples per add$"
        ),
        rf"^typed layout: {NUMBER} bytes/sample as written, {NUMBER} compacted",
        rf"^first load \(all queries \+ figures\): {NUMBER} s, {NUMBER} MB of figures$",
        rf"^refresh after 64 new samples: {NUMBER} s",
        rf"^ratio bytes/sample typed/baseline: {NUMBER}$",
    )
    assert not list(tmp_path.iterdir()), "the benchmark left its stores behind"


def test_pages_prints_every_page_it_was_asked_for() -> None:
    out = bench("pages.py", "--steps", "300", "--gpu-hours", "0.01", "--pages", "health,gpus")
    assert_lines(
        out,
        r"^run: [\d,]+ records, last step 300$",
        # first ever (no chunk kept), first, refresh (median of the ticks), slowest tick, CPU,
        # MB sent, RSS
        rf"^health +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER} +\d+$",
        rf"^gpus +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER} +\d+$",
    )


def test_browser_pages_prints_each_page_both_ways_and_the_live_sample() -> None:
    """A chart page and the live GPU sample in Chromium (skipped without it)."""
    if not Path(CHROMIUM).exists():
        missing(f"no Chromium at {CHROMIUM}")
    args = ["--steps", "200", "--gpu-hours", "0.01", "--ranks", "2", "--rounds", "1"]
    res = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "browser_pages.py"), *args, "--pages", "gpus",
         "--live", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    row = rf"^gpus +(?:{NUMBER}|-) +{NUMBER} +{NUMBER}\*? +{NUMBER} .* {VERDICT}"
    assert len(re.findall(row, res.stdout, re.MULTILINE)) == 2, res.stdout  # new tab, menu
    assert_lines(
        res.stdout,
        r"^run bench: [\d,]+ records, last step 200;",
        rf"^plotly.js's module alone, imported in a new tab of autotuner: median {NUMBER} ms ",
        rf"^live GPU sample, commit to its time in the page's text: p50 {NUMBER} s, p99 "
        rf"{NUMBER} s, max {NUMBER} s \(2/2 seen; goal p99 <= 2.0 s\) {VERDICT}",
    )


def test_frame_chunks_prints_both_reads_and_their_ratio() -> None:
    """20,000 steps: 60,000 timer rows, so one page of 50,000 is sealed and kept."""
    out = bench("frame_chunks.py", "--steps", "20000")
    assert_lines(
        out,
        r"^store: SQLite$",
        r"^stored 20,000 steps \(60,000 timer, 20,000 step records\) in \d+ s$",
        rf"^timer and step frames from JSON: {NUMBER} s$",
        rf"^the same from kept chunks: {NUMBER} s \(frames equal\)$",
        rf"^keep_chunks with none kept: {NUMBER} s$",
        rf"^ratio json/chunks: {NUMBER}$",
    )


def test_soak_prints_each_process_slope() -> None:
    """One minute of the live set-up with a Chromium tab; needs Debian's chromium."""
    if not Path(CHROMIUM).exists():
        missing(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    out = bench("soak.py", "--short")
    seen = rf"{NUMBER} at start, {NUMBER} after warm-up, {NUMBER} at end, peak {NUMBER} MiB"
    change = rf"slope [+-]{NUMBER} MiB/min, [+-]{NUMBER} % over {NUMBER} min after warm-up"
    assert_lines(
        out,
        *(
            rf"^soak: {name} +RSS {seen}; {change}; CPU {NUMBER} s/min {VERDICT}"
            for name in ("serve", "collect", "dashboard")
        ),
        rf"^soak: browser +PSS {seen}; {change} \(not dsmon's: info\)$",
        rf"^soak: tab heap +JS heap {seen}; {change} \(not dsmon's: info\)$",
        r"^soak: \d+ page switches \(0 not found in the menu\)$",
        rf"^goal: each dsmon process within \+-10 % after 0.25 min of warm-up {VERDICT}",
        r"^soak: stored \d+ records of the run: \{.*'gpu': \d+.*'timer': \d+",
    )


def test_import_speed_prints_both_medians_and_the_ratio() -> None:
    out = bench("import_speed.py", "--mb", "0.3", "--rounds", "1")
    assert_lines(
        out,
        rf"^ +1 +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER}$",
        rf"^median: dsmon {NUMBER} CPU-s, peak {NUMBER} MiB; reference {NUMBER} CPU-s",
        rf"^CPU dsmon/reference: {NUMBER}x \(goal <= 2x\) {VERDICT}",
    )
