#!/usr/bin/env python3
"""Each recorded DeepSpeed scenario's verdict, as live showed it and as the post-mortem says it.

The scenarios of ``tests/scenarios.py`` were recorded into ``tests/data/verdict_*`` (and the
fp16 overflow run into the shared corpus: fp16 does not run on this CPU). For each folder this
prints the run's state, the headline and the first three findings (as ``dsmon check`` orders
them: failures first, the cause before its symptoms), twice:

- **live**: the folder's records stored as if the run's newest record came just now (the
  whole run moved in time at once, so a rank silent for 40 s before the end is silent for
  40 s now), then ``dsmon check --store`` judges it against the clock, as the server's
  watcher and the pages do;
- **post-mortem**: ``dsmon check FOLDER``, judged as of the end of the record.

Usage::

    .venv/bin/python scripts/verdict_table.py [FOLDER ...]   # a markdown table on stdout
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dsmon.load.files import plan, read_found  # noqa: E402 - after the path above
from dsmon.load.playback import TimeShifter  # noqa: E402
from dsmon.parse.base import Diagnostics  # noqa: E402
from dsmon.store.store import open_store  # noqa: E402

SCENARIOS = {
    "healthy": ROOT / "tests/data/verdict_healthy",
    "slow_rank": ROOT / "tests/data/verdict_slow_rank",
    "hang_then_kill": ROOT / "tests/data/verdict_hang_then_kill",
    "sigkill_rank": ROOT / "tests/data/verdict_sigkill_rank",
    "bf16": ROOT / "tests/data/verdict_bf16",
    "fp16_overflow": ROOT.parent / "shared/corpus/ds-cpu/fp16_zero2",
    "defaults": ROOT / "tests/data/verdict_defaults",
    "silent_start": ROOT / "tests/data/verdict_silent_start",
    "missing_optimizer": ROOT / "tests/data/verdict_missing_optimizer",
}
FINDING = re.compile(r"^(FAIL|WARN|UNKN)  (\S+)")


def check(*args: str) -> str:
    """``dsmon check``'s text output."""
    cmd = [sys.executable, "-m", "cli.main", "check", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False).stdout


def verdict(text: str) -> tuple[str, str, list[str]]:
    """The state, the headline and the first three findings of a ``dsmon check`` text."""
    lines = text.splitlines()
    state = next((ln.removeprefix("Run state: ") for ln in lines if ln.startswith("Run state")), "")
    head = next(
        (ln.removeprefix("What is wrong: ") for ln in lines if ln.startswith("What is")), ""
    )
    top = [f"{m[1]} {m[2]}" for ln in lines if (m := FINDING.match(ln))][:3]
    return state.split(":")[0], head, top


def live(folder: Path) -> str:
    """``dsmon check --store`` of the folder's records moved to end now."""
    diag = Diagnostics()
    records = [r for f in plan([folder], "run")["run"] for r in read_found(f, "run", diag)]
    with tempfile.TemporaryDirectory() as tmp:
        url = str(Path(tmp) / "s.sqlite")
        with open_store(url) as store:
            store.add(TimeShifter().shift(records, datetime.now()), live=True)
        return check("--store", url, "--run", "run")


def cell(text: str) -> str:
    """Text safe in a markdown table cell."""
    return text.replace("|", "\\|")


def main(argv: list[str] | None = None) -> int:
    """Print the table, a row per scenario and judgement."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=list(SCENARIOS), help="scenario names")
    args = ap.parse_args(argv)
    print("| scenario | when | state | headline | top findings |")
    print("|---|---|---|---|---|")
    for name in args.names:
        folder = SCENARIOS[name]
        for when, text in (("live", live(folder)), ("post-mortem", check(str(folder)))):
            state, head, top = verdict(text)
            print(f"| {name} | {when} | {state} | {cell(head)} | {cell(', '.join(top))} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
