"""One poison line stops no log (issue 41, case 2), with real processes.

tests/data/megatron_poison_line is real Megatron-DeepSpeed output with ``nan``, ``inf`` and
``1e400`` put into memory and iteration lines. Each raised in the Megatron parser: ``dsmon
parse`` and ``dsmon import`` exited 1 and stored nothing of the file, and a live collector
read the same line again at every poll, for ever, so no later line of the log was delivered
(and the good line read with it was lost too). Here ``dsmon serve`` and ``dsmon collect``
run as processes while this test writes the log a few lines at a time; the store must end
with what ``dsmon import`` of the whole log stores, and both commands must exit 0.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from collect_support import Cluster, stored, wait_for
from locations import DATA

from dsmon.model.records import EventRecord
from dsmon.model.wire import decode, encode
from dsmon.store.store import open_store

pytestmark = pytest.mark.slow

POISONED = (DATA / "megatron_poison_line" / "megatron.log").read_bytes().splitlines(True)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.stop_all()


def dsmon(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "cli.main", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_import_and_parse_read_the_whole_poisoned_log(tmp_path: Path) -> None:
    log = DATA / "megatron_poison_line" / "megatron.log"
    parsed = dsmon("parse", str(log), "--run", "z2")
    assert parsed.returncode == 0, parsed.stderr
    assert "\n  value out of range: 4\n" in parsed.stderr  # values left out, not lines
    store = tmp_path / "s.sqlite"
    done = dsmon("import", str(log), "--run", "z2", "--store", str(store))
    assert done.returncode == 0, done.stderr
    with open_store(store) as s:
        assert sorted(encode(r) for r in s.records("z2")) == sorted(parsed.stdout.splitlines())


def test_the_collector_delivers_every_line_after_the_poison(cluster: Cluster) -> None:
    log = cluster.tmp / "run" / "train.log"
    log.parent.mkdir()
    log.write_bytes(b"")
    cluster.start_server()
    collector = cluster.collector(log, "n1")
    for i in range(0, len(POISONED), 3):  # the poisoned lines 12-14 and 31 among them
        with log.open("ab") as f:
            f.writelines(POISONED[i : i + 3])
        time.sleep(0.1)
    whole = dsmon("parse", str(log), "--run", "z2")
    # a read to the file's end tells the unparsed counts once more (src.sub 950 and up); a
    # collector following a live file never reaches an end to tell them at
    want = sorted(line for line in whole.stdout.splitlines() if not _told_at_the_end(line))
    last = max(decode(line).src.line or 0 for line in want)
    wait_for(
        "the last line's records",
        lambda: any(decode(r).src.line == last for r in stored(cluster.store, "z2")),
        [collector],
    )
    time.sleep(1.0)
    got = sorted(
        encode(r) for r in (decode(line) for line in stored(cluster.store, "z2"))
    )  # the collector's node: named in each record
    assert [_unnamed(line) for line in got] == sorted(_unnamed(line) for line in want)
    assert "parser raised" not in (cluster.tmp / "collect-n1.out").read_text()


def _told_at_the_end(line: str) -> bool:
    """An ``unparsed`` event a parser tells as it finishes a file (``dsmon.parse.unparsed``)."""
    rec = decode(line)
    return isinstance(rec, EventRecord) and rec.name == "unparsed" and rec.src.sub >= 950


def _unnamed(line: str) -> str:
    """A record's line without its node (``--node n1`` names it live, import does not)."""
    return line.replace('"node":"n1"', '"node":null')
