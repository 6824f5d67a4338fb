"""Benchmark: `dsmon parse` throughput on a large real-content log, against a bare read loop.

Builds a log of at least ``--size-mb`` (default 500) MB by repeating the training section of a
real DeepSpeed run bundled with dsmon (the ZeRO-2 demo run), renumbering steps so they keep
increasing, then measures in the same run:

- ``read``: a bare Python loop that only reads the same lines (text mode, like the parser);
- ``regex``: the same loop plus one precompiled regex search per line (the floor for any
  Python code that looks at each line);
- ``parse``: ``LogParser`` over the same lines (records built, nothing written);
- ``cli``: the real ``dsmon parse FILE > /dev/null`` command (records encoded as JSON lines).

It prints MB/s and lines/s for each and the ratios against ``read``. The goal for ``cli`` is a
ratio <= 2.

Usage: ``python bench/parse.py [--size-mb 500] [--keep PATH]``
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from dsmon.parsers.log import LogParser

DEMO_LOG = Path(__file__).resolve().parent.parent / "dsmon" / "data" / "demo" / "train.log"
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


def time_it(fn: Callable[[], int]) -> tuple[float, int]:
    """Wall time of one call and what it returned."""
    t0 = time.perf_counter()
    n = fn()
    return time.perf_counter() - t0, n


def bare_read(path: Path) -> int:
    """The baseline: read every line and do nothing with it."""
    n = 0
    with path.open(encoding="utf-8", errors="replace") as f:
        for _ in f:
            n += 1
    return n


def regex_floor(path: Path) -> int:
    """A second baseline: read every line and run one precompiled regex search on it.

    This is the least any Python parser does per line; it shows how far the bare read is
    from anything that looks at a line's content.
    """
    n = 0
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            if _TIMER_FIELD.search(line) is not None:
                n += 1
    return n


def parse_only(path: Path) -> int:
    """LogParser over every line; returns the number of records."""
    parser = LogParser("bench", path.name)
    n = 0
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            n += len(parser.feed(line))
    return n + len(parser.finish())


def cli_parse(path: Path) -> int:
    """The real command, output discarded."""
    exe = Path(sys.executable).parent / "dsmon"
    cmd = [str(exe) if exe.exists() else "dsmon", "parse", str(path)]
    with open(os.devnull, "wb") as sink:
        subprocess.run(cmd, stdout=sink, stderr=subprocess.DEVNULL, check=True)
    return 0


def main() -> None:
    """Build the log, run the three measurements, print figures and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=500)
    ap.add_argument("--keep", type=Path, help="write the log here and keep it")
    args = ap.parse_args()
    tmp = tempfile.TemporaryDirectory()
    path = args.keep or Path(tmp.name) / "bench.log"
    size = build_log(path, args.size_mb * 1_000_000)
    mb = size / 1e6
    t_read, lines = time_it(lambda: bare_read(path))
    print(f"log: {path} {mb:.0f} MB, {lines} lines (from {DEMO_LOG.name}, steps renumbered)")
    t_floor, _ = time_it(lambda: regex_floor(path))
    t_parse, recs = time_it(lambda: parse_only(path))
    t_cli, _ = time_it(lambda: cli_parse(path))
    print(f"{'measure':<8} {'seconds':>8} {'MB/s':>8} {'lines/s':>11} {'ratio':>6}")
    rows = (("read", t_read), ("regex", t_floor), ("parse", t_parse), ("cli", t_cli))
    for name, t in rows:
        print(f"{name:<8} {t:8.2f} {mb / t:8.1f} {lines / t:11.0f} {t / t_read:6.2f}")
    print(f"records: {recs}; goal: cli ratio <= 2 -> {'met' if t_cli / t_read <= 2 else 'NOT met'}")
    tmp.cleanup()


if __name__ == "__main__":
    main()
