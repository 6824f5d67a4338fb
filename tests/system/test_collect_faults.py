"""The fault matrix, with real processes: every step stored once, with its step number.

``dsmon serve`` and ``dsmon collect`` run as processes on 127.0.0.1, as in
test_collect_e2e.py. This test is the trainer: it appends the real lines of
tests/data/z2/train.log (DeepSpeed 0.19.8, 30 optimizer steps) to a log followed through the
glob ``train.log*``, which also matches every rotated name, and meanwhile:

- kills the collector with SIGKILL mid-stream, and starts it again;
- renames the log while it keeps writing to the renamed file (as ``tee`` does), then a new
  log appears at the path;
- kills the server with SIGKILL and keeps it away while far more is written than the spool
  holds (``--spool-max-mb``), and the collector's files may not grow past 12 KiB each (the
  spool hits "file too large" as it would "no space left on device");
- rotates by copytruncate to a name the glob matches, then by rename in logrotate's naming.

Each generation of the log (what lived at the path between rotations) must be stored
exactly as an uninterrupted read of it gives (the one after the copytruncate going on from
where the truncated one stood: the same job's output), and the global timer line of each of the 30
steps (``fwd: ... | step: ...``, printed before the trainer's ``[train.py] step N`` line)
exactly once, with its step number. The rotations come just before a ``step=N`` line, so each
new file names its steps as it would in a real rotation of a long run. A generation's
``Source.file`` depends on when the collector saw it (``train.log#2`` if it read it at the
path, ``train.log.1`` if it first met it renamed), so generations are compared by content.
"""

from __future__ import annotations

import dataclasses
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from collect_support import Z2_LINES, Cluster, stored, wait_for

from dsmon.model.records import Record, TimerRecord
from dsmon.model.wire import decode, encode
from dsmon.parse.log import LogParser

pytestmark = pytest.mark.slow

#: A collector's files may not grow past this (the spool's segments included).
FILE_LIMIT = 12 << 10
#: The trainer's own count, the ground truth: "[train.py] step 7 loss ...".
TRAIN_STEP = re.compile(rb"^\[train\.py\] step (\d+) ")


def at_anchor(n: int) -> int:
    """Index of the line ``step=N`` (DeepSpeed's steps_per_print line) for step ``n``."""
    mark = f"] step={n}, skipped=".encode()
    return next(i for i, line in enumerate(Z2_LINES) if mark in line)


def expected(generations: list[list[bytes]], truncated: int | None = None) -> list[list[str]]:
    """What an uninterrupted read of each generation gives (file names left out).

    Generation ``truncated`` is the file truncated in place (copytruncate): the one after it
    is its output going on, parsed from where its parser stood.
    """
    out = []
    state: dict[str, Any] = {}
    for i, lines in enumerate(generations):
        parser = LogParser("z2", "", "n1")
        if state:
            parser.take_over(state)
        recs: list[Record] = []
        offset = 0
        for n, raw in enumerate(lines, start=1):
            recs += parser.feed(raw.decode(), offset=offset, line=n)
            offset += len(raw)
        out.append(sorted(encode(r) for r in recs))
        state = parser.handover() if i == truncated else {}
    return sorted(out)


def by_file(lines: list[str]) -> list[list[str]]:
    """Stored records grouped by their file (one group per generation), names left out."""
    groups: dict[str, list[str]] = {}
    for line in lines:
        r = decode(line)
        unnamed = dataclasses.replace(r, src=dataclasses.replace(r.src, file=""))
        groups.setdefault(r.src.file or "", []).append(encode(unnamed))
    return sorted(sorted(g) for g in groups.values())


def limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))


class Faults(Cluster):
    """The cluster of test_collect_e2e, with a collector whose files cannot grow far."""

    def follow(self, glob: str) -> subprocess.Popen[bytes]:
        args = [
            "collect", "--log", glob, "--server", f"http://127.0.0.1:{self.port}",
            "--token-file", str(self.token_file), "--node", "n1", "--run", "z2",
            "--state-dir", str(self.tmp / "state"), "--nvml-interval", "0",
            "--poll-interval", "0.1", "--retry-max", "0.5", "--spool-max-mb", "0.02",
        ]  # fmt: skip
        out = (self.tmp / "collect.out").open("ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=limit_file_size,
        )
        self.procs.append(proc)
        return proc


@pytest.fixture
def faults(tmp_path: Path) -> Iterator[Faults]:
    c = Faults(tmp_path)
    yield c
    c.stop_all()


def write(f: BinaryIO, lines: list[bytes], per_burst: int = 10) -> None:
    """The trainer: bursts of lines, flushed, a little apart."""
    for i in range(0, len(lines), per_burst):
        f.write(b"".join(lines[i : i + per_burst]))
        f.flush()
        time.sleep(0.03)


def test_every_step_is_stored_once_through_every_fault(faults: Faults) -> None:
    run = faults.tmp / "run"
    run.mkdir()
    log = run / "train.log"
    glob = str(run / "train.log*")
    faults.start_server()
    assert faults.server is not None
    a5, a10, a15, a25 = at_anchor(5), at_anchor(10), at_anchor(15), at_anchor(25)
    gens = [Z2_LINES[:a5], Z2_LINES[a5:a15], Z2_LINES[a15:a25], Z2_LINES[a25:]]

    def arrived(want: list[list[str]]) -> bool:
        return by_file(stored(faults.store, "z2")) == want

    # Generation 0: the collector is killed mid-stream and started again.
    writer = log.open("ab")
    write(writer, Z2_LINES[:100])
    collector = faults.follow(glob)
    wait_for("the first lines", lambda: len(stored(faults.store, "z2")) > 0, [collector])
    write(writer, Z2_LINES[100:150])
    collector.kill()
    collector.wait()
    write(writer, Z2_LINES[150:170])
    collector = faults.follow(glob)

    # Renamed while the trainer keeps writing to it (tee): read there, not again as .1.
    log.rename(run / "train.log.1")
    write(writer, Z2_LINES[170:a5])
    writer.close()
    with log.open("ab") as f:  # generation 1: a new file at the path
        write(f, Z2_LINES[a5:a10])
    want = expected([gens[0], Z2_LINES[a5:a10]])
    wait_for("two generations", lambda: arrived(want), [collector])

    # The server killed; far more written than the spool holds; two rotations meanwhile.
    faults.server.kill()
    faults.server.wait()
    with log.open("ab") as f:
        write(f, Z2_LINES[a10:a15])
    shutil.copyfile(log, run / "train.log-20261201")  # copytruncate, dateext naming
    os.truncate(log, 0)
    with log.open("ab") as f:  # generation 2, in the same file
        write(f, gens[2])
    (run / "train.log.1").rename(run / "train.log.2")  # logrotate's rename ("create")
    log.rename(run / "train.log.1")
    with log.open("ab") as f:  # generation 3
        write(f, gens[3])
    out = faults.tmp / "collect.out"
    wait_for("the pause", lambda: "log reading paused" in out.read_text(), [collector])
    time.sleep(2.0)  # an outage longer than the spool: the collector waits, reading nothing

    # Killed once more while paused, then the server is back: everything arrives, once.
    collector.kill()
    collector.wait()
    collector = faults.follow(glob)
    faults.start_server()
    want = expected(gens, truncated=1)  # generation 2 goes on from 1 (micro-step numbers)
    wait_for("every generation", lambda: arrived(want), [collector])
    time.sleep(1.0)  # anything sent twice would arrive now
    got = stored(faults.store, "z2")
    assert len(got) == len(set(got)) == sum(map(len, want))
    assert by_file(got) == want
    steps = sorted(
        r.step for r in map(decode, got) if isinstance(r, TimerRecord) and r.group == "global"
    )
    truth = [int(m.group(1)) for line in Z2_LINES if (m := TRAIN_STEP.match(line))]
    assert steps == truth == list(range(1, 31))
    collector.send_signal(signal.SIGTERM)
    assert collector.wait(timeout=30) == 0
