"""Two followed logs with one file name are two logs (issue 41, case 1), with real processes.

``dsmon collect --log job/node0/train.log --log job/node1/train.log`` (a natural way to follow
two nodes' logs) stored both under ``train.log`` with the same byte offsets: the second
log's records had the first's keys and were dropped as copies, 100 of 100, without a word.
``dsmon serve`` and ``dsmon collect`` run as processes; the writer is this test, appending
the real lines of tests/data/z2/train.log to both logs. The store must hold every record of
both, each under the name ``dsmon import job`` gives it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from collect_support import Z2_LINES, Cluster, stored, wait_for

from dsmon.load.files import import_paths
from dsmon.model.records import Record
from dsmon.model.wire import decode, encode
from dsmon.store.store import open_store

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.stop_all()


def imported(job: Path, tmp: Path) -> list[str]:
    """What ``dsmon import job --run z2`` stores, node left out (the collector names its own)."""
    with open_store(tmp / "imported.sqlite") as store:
        import_paths(store, [job], run="z2")
        return sorted(encode(r) for r in store.records("z2"))


def test_two_nodes_logs_of_one_name_are_both_stored(cluster: Cluster) -> None:
    job = cluster.tmp / "job"
    logs = [job / "node0" / "train.log", job / "node1" / "train.log"]
    for log in logs:
        log.parent.mkdir(parents=True)
        log.write_bytes(b"".join(Z2_LINES[:100]))
    cluster.start_server()
    collector = cluster.collector(logs[0], "n1", "--log", str(logs[1]))
    for i in range(100, len(Z2_LINES), 20):  # both nodes write on
        for log in logs:
            with log.open("ab") as f:
                f.writelines(Z2_LINES[i : i + 20])
        time.sleep(0.05)
    want = imported(job, cluster.tmp)
    wait_for("both logs", lambda: len(stored(cluster.store, "z2")) >= len(want), [collector])
    time.sleep(1.0)  # nothing more comes
    got = stored(cluster.store, "z2")
    files = {decode(line).src.file for line in got}
    assert files == {"node0/train.log", "node1/train.log"}
    assert sorted(encode(_without_node(decode(line))) for line in got) == want


def _without_node(rec: Record) -> Record:
    return dataclasses.replace(rec, src=dataclasses.replace(rec.src, node=None))
