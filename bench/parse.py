"""Benchmark: `dsmon parse` throughput on a large real-content log, against a bare read loop.

Builds a log of at least ``--size-mb`` (default 500) MB, of one of two mixes (``--log``):

- ``mixed`` (default): the whole logs of the real DeepSpeed runs in ``tests/data`` (launcher
  lines, config dumps, timers, flops profiles, comms logs, memory lines, crashes), one after
  the other and again, as a job's output file that holds many runs;
- ``training``: the training section of the ZeRO-2 demo run bundled with dsmon (timer, step,
  throughput and flops profiler lines) repeated, steps renumbered so they keep increasing;

then measures in the same run:

- ``read``: a bare Python loop that only reads the same lines (text mode, like the parser);
- ``regex``: the same loop plus one precompiled regex search per line (the floor for any
  Python code that looks at each line);
- ``parse``: ``LogParser`` over the same lines (records built, nothing written);
- ``encode``: those records encoded as the command writes them, no parsing: the floor of any
  command that writes them as JSON lines (the first 200,000, the time scaled to all);
- ``cli``: the real ``dsmon parse FILE > /dev/null`` command (records encoded as JSON lines).

It prints CPU seconds (user + system, the command's child process included: on a shared
machine wall time also counts waiting for a core), MB/s and lines/s for each and the ratios
against ``read`` (the read loop is timed three times, its best kept), then the ``parse/read-loop ratio`` of the command against the
goal of issue 11: <= 10.

Usage: ``python bench/parse.py [--size-mb 500] [--log mixed|training] [--keep PATH]``
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from dsmon.model import wire
from dsmon.model.records import Record
from dsmon.parse.log import LogParser

ROOT = Path(__file__).resolve().parent.parent
DEMO_LOG = ROOT / "dsmon" / "data" / "demo" / "train.log"
#: Real DeepSpeed runs (DeepSpeed 0.19.8, CPU) the tests use, whole: the ``mixed`` log.
RUN_LOGS = sorted((ROOT / "tests" / "data").glob("*/train.log"))
GOAL = 10.0
#: Lines end at ``\n`` only, as ``dsmon parse`` reads them: text mode's universal newlines
#: would also split at every ``\r`` (tqdm's redraws), counting lines the command never sees.
LINE_END = "\n"
#: Records kept to time their encoding (about 1 KB each in memory), the time scaled to all.
ENCODE_SAMPLE = 200_000
_TIMER_FIELD = re.compile(r"\| (\w+): (\d+\.\d\d)")
_STEP_NUMBERS = re.compile(
    r"(step=|global_step=|micro_step=|\[train\.py\] step |global_steps )(\d+)"
)


def training_section(text: str) -> tuple[str, str, int]:
    """Split a log into its start-up part and its steps part; count the steps."""
    lines = text.splitlines(keepends=True)
    first = next(i for i, ln in enumerate(lines) if "time (ms) |" in ln)
    last = max(i for i, ln in enumerate(lines) if "| step:" in ln)
    section = lines[first : last + 1]
    steps = sum(1 for ln in section if "| step:" in ln)
    return "".join(lines[:first]), "".join(section), steps


def build_mixed(path: Path, size_bytes: int) -> int:
    """Write a log of at least ``size_bytes``: every real run's whole log in turn, repeated."""
    logs = [p.read_bytes() for p in RUN_LOGS]
    written = 0
    with path.open("wb") as out:
        while written < size_bytes:
            for log in logs:
                out.write(log)
                written += len(log)
    return path.stat().st_size


def build_log(path: Path, size_bytes: int) -> int:
    """Write a log of at least ``size_bytes``: the real header once, then renumbered sections."""
    text = DEMO_LOG.read_text(encoding="utf-8")
    header, chunk, steps = training_section(text)
    written = 0
    with path.open("w", encoding="utf-8") as out:
        out.write(header)
        rep = 0
        while written < size_bytes:
            shift = rep * steps

            def renumber(m: re.Match[str], shift: int = shift) -> str:
                return f"{m.group(1)}{int(m.group(2)) + shift}"

            out.write(_STEP_NUMBERS.sub(renumber, chunk) if rep else chunk)
            written += len(chunk)
            rep += 1
    return path.stat().st_size


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (user + system)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def time_it(fn: Callable[[], int]) -> tuple[float, int]:
    """CPU seconds of one call (its child process's included) and what it returned.

    CPU time, not wall time: on a machine shared with other jobs, waiting for a core is
    not the parser's cost, and wall times moved by 30 % from one run to the next.
    """
    t0 = cpu_seconds()
    n = fn()
    return cpu_seconds() - t0, n


def bare_read(path: Path) -> int:
    """The baseline: read every line and do nothing with it."""
    n = 0
    with path.open(encoding="utf-8", errors="replace", newline=LINE_END) as f:
        for _ in f:
            n += 1
    return n


def regex_floor(path: Path) -> int:
    """A second baseline: read every line and run one precompiled regex search on it.

    This is the least any Python parser does per line; it shows how far the bare read is
    from anything that looks at a line's content.
    """
    n = 0
    with path.open(encoding="utf-8", errors="replace", newline=LINE_END) as f:
        for line in f:
            if _TIMER_FIELD.search(line) is not None:
                n += 1
    return n


def parse_only(path: Path, kept: list[Record]) -> int:
    """LogParser over every line; returns the number of records.

    The first :data:`ENCODE_SAMPLE` records are kept in ``kept`` for :func:`encode_only`.
    """
    parser = LogParser("bench", path.name)
    n = 0
    with path.open(encoding="utf-8", errors="replace", newline=LINE_END) as f:
        for line in f:
            recs = parser.feed(line)
            n += len(recs)
            if len(kept) < ENCODE_SAMPLE:
                kept.extend(recs)
    last = parser.finish()
    kept.extend(last[: max(ENCODE_SAMPLE - len(kept), 0)])
    return n + len(last)


def encode_only(records: list[Record]) -> int:
    """Each record as the JSON line ``dsmon parse`` writes (``wire.encode_bytes``), no parsing.

    The least any ``dsmon parse`` that writes these records costs beyond reading: with
    orjson, the command's encoder, it alone was over 10 times the read loop on the
    ``training`` log, where more than half the lines make a record.
    """
    n = 0
    for rec in records:
        n += len(wire.encode_bytes(rec))
    return n


def cli_parse(path: Path) -> int:
    """The real command, output discarded."""
    exe = Path(sys.executable).parent / "dsmon"
    cmd = [str(exe) if exe.exists() else "dsmon", "parse", str(path)]
    with open(os.devnull, "wb") as sink:
        subprocess.run(cmd, stdout=sink, stderr=subprocess.DEVNULL, check=True)
    return 0


def main() -> None:
    """Build the log, run the measurements, print figures and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=500)
    ap.add_argument("--log", choices=("mixed", "training"), default="mixed")
    ap.add_argument("--keep", type=Path, help="write the log here and keep it")
    args = ap.parse_args()
    tmp = tempfile.TemporaryDirectory()
    path = args.keep or Path(tmp.name) / "bench.log"
    build = build_mixed if args.log == "mixed" else build_log
    size = build(path, args.size_mb * 1_000_000)
    mb = size / 1e6
    t_read, lines = min(time_it(lambda: bare_read(path)) for _ in range(3))
    what = f"{len(RUN_LOGS)} real runs" if args.log == "mixed" else f"{DEMO_LOG.name}, renumbered"
    print(f"log: {path} {mb:.0f} MB, {lines} lines ({args.log}: {what})")
    t_floor, _ = time_it(lambda: regex_floor(path))
    kept: list[Record] = []
    t_parse, recs = time_it(lambda: parse_only(path, kept))
    t_encode, _ = time_it(lambda: encode_only(kept))
    t_encode *= recs / max(len(kept), 1)  # the sample's time, scaled to every record
    kept.clear()
    t_cli, _ = time_it(lambda: cli_parse(path))
    print(f"{'measure':<8} {'CPU s':>8} {'MB/s':>8} {'lines/s':>11} {'ratio':>6}")
    rows = (
        ("read", t_read),
        ("regex", t_floor),
        ("parse", t_parse),
        ("encode", t_encode),
        ("cli", t_cli),
    )
    for name, t in rows:
        print(f"{name:<8} {t:8.2f} {mb / t:8.1f} {lines / t:11.0f} {t / t_read:6.2f}")
    ratio = t_cli / t_read
    print(f"records: {recs}")
    print(f"encode/read-loop ratio: {t_encode / t_read:.1f} (the records' JSON lines alone)")
    print(
        f"parse/read-loop ratio: {ratio:.1f} (dsmon parse {t_cli:.2f} CPU-s, read loop "
        f"{t_read:.3f} CPU-s); goal <= {GOAL:.0f} -> {'met' if ratio <= GOAL else 'NOT met'}"
    )
    tmp.cleanup()


if __name__ == "__main__":
    main()
