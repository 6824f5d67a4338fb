"""End to end with real processes: ``dsmon serve`` and ``dsmon collect`` on 127.0.0.1.

A writer (this test) appends the real lines of tests/data/z2/train.log to a log while a
collector process tails it. The collector is killed with SIGKILL mid-stream and restarted,
the ingest server is killed with SIGKILL and restarted while the log grows, and at the end the
store must hold exactly the records an uninterrupted read of the log gives: none missing,
none twice, every step number right. A collector stopped with SIGTERM right after the last
write must still deliver that write: the store then equals ``dsmon import`` of the run.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from collect_support import (
    PROFILE,
    TOKEN,
    Z2_LINES,
    Cluster,
    expected,
    free_port,
    stored,
    wait_for,
)
from fakes import eight_gpus_two_models

from cli.main import main
from collectors.agent import Agent, lock_state_dir
from collectors.gpu.nvml import NvmlPoller
from collectors.send.sender import Sender
from collectors.send.spool import Spool
from collectors.send.transport import UrlTransport
from collectors.tail.state import StateFile
from collectors.tail.tailer import Tailer
from dsmon.model.wire import decode, encode
from dsmon.serve.run import start_ingest_server
from dsmon.serve.tokens import write_token_file
from dsmon.store.store import open_store

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.stop_all()


def append(path: Path, lines: list[bytes]) -> None:
    with path.open("ab") as f:
        f.writelines(lines)


def test_kill_9_of_collector_and_server_loses_and_duplicates_nothing(cluster: Cluster) -> None:
    log = cluster.tmp / "run" / "train.log"
    log.parent.mkdir()
    want = expected("z2", "n1")
    cluster.start_server()
    assert cluster.server is not None
    append(log, Z2_LINES[:120])
    collector = cluster.collector(log, "n1")
    first = len(expected("z2", "n1", 120))
    wait_for("the first records", lambda: len(stored(cluster.store, "z2")) == first, [collector])
    for i in range(120, 250, 13):  # the writer goes on; the collector is killed mid-stream
        append(log, Z2_LINES[i : i + 13])
        time.sleep(0.02)
    collector.kill()
    collector.wait()
    append(log, Z2_LINES[250:300])
    collector = cluster.collector(log, "n1")
    upto_300 = len(expected("z2", "n1", 300))
    wait_for("lines up to 300", lambda: len(stored(cluster.store, "z2")) == upto_300, [collector])
    cluster.server.kill()  # the ingest server dies, perhaps with a batch in flight
    cluster.server.wait()
    append(log, Z2_LINES[300:])
    time.sleep(1.0)  # the log grows while the server is away: the collector spools
    cluster.start_server()
    wait_for("every record", lambda: len(stored(cluster.store, "z2")) >= len(want), [collector])
    got = stored(cluster.store, "z2")
    assert len(got) == len(set(got)) == len(want)
    assert set(got) == want
    collector.send_signal(signal.SIGTERM)
    assert collector.wait(timeout=30) == 0


def without_node(lines: list[str]) -> set[str]:
    """Stored records with the node left out: ``dsmon import`` does not know the node."""
    recs = [decode(line) for line in lines]
    return {encode(dataclasses.replace(r, src=dataclasses.replace(r.src, node=None))) for r in recs}


def test_sigterm_right_after_the_last_write_loses_nothing(cluster: Cluster) -> None:
    """A sidecar gets SIGTERM the moment the trainer exits; the trainer's last lines and its
    flops profile, written just before, must reach the server all the same."""
    run = cluster.tmp / "z2"
    run.mkdir()
    log, profile = run / "train.log", run / "flops_profile.txt"
    append(log, Z2_LINES[:100])
    cluster.start_server()
    # Polls once a minute: what follows the first poll can only come from the stop's final read.
    collector = cluster.collector(
        log, "n1", "--profile-file", str(profile), "--poll-interval", "60"
    )
    first = len(expected("z2", "n1", 100))
    wait_for("the first poll", lambda: len(stored(cluster.store, "z2")) == first, [collector])
    profile.write_bytes(PROFILE)  # DeepSpeed writes it at its profile step
    time.sleep(0.5)  # the file's creation wakes the tail loop; let that poll pass first
    for i in range(100, len(Z2_LINES), 25):  # the last steps, in bursts, then the exit
        append(log, Z2_LINES[i : i + 25])
    collector.send_signal(signal.SIGTERM)
    assert collector.wait(timeout=60) == 0
    assert main(["import", str(run), "--store", str(cluster.tmp / "imported.sqlite")]) == 0
    want = without_node(stored(cluster.tmp / "imported.sqlite", "z2"))
    assert len(want) == len(expected("z2", "n1")) + 1  # the log's, one profile
    assert without_node(stored(cluster.store, "z2")) == want


def test_three_nodes_report_into_one_server(cluster: Cluster) -> None:
    cluster.start_server()
    procs = []
    for node in ("n1", "n2", "n3"):
        log = cluster.tmp / node / "train.log"
        log.parent.mkdir()
        append(log, Z2_LINES)
        procs.append(cluster.collector(log, node))
    want = expected("z2", "n1") | expected("z2", "n2") | expected("z2", "n3")
    wait_for("three nodes' records", lambda: len(stored(cluster.store, "z2")) >= len(want), procs)
    got = stored(cluster.store, "z2")
    assert len(got) == len(want) and set(got) == want


def test_watch_runs_collector_and_dashboard_together(cluster: Cluster) -> None:
    log = cluster.tmp / "run" / "train.log"
    log.parent.mkdir()
    append(log, Z2_LINES)
    ui_port = free_port()
    watch = cluster._spawn(
        "watch", str(log), "--no-browser", "--port", str(ui_port), "--store", str(cluster.store),
        "--state-dir", str(cluster.tmp / "state"), "--nvml-interval", "0", "--node", "n1",
        name="watch",
    )  # fmt: skip
    want = expected("run", "n1")  # the run is named after the log's folder
    wait_for("the log's records", lambda: len(stored(cluster.store, "run")) >= len(want), [watch])
    assert set(stored(cluster.store, "run")) == want

    def dashboard_up() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/_stcore/health") as resp:
                return bool(resp.read() == b"ok")
        except OSError:
            return False

    wait_for("the dashboard", dashboard_up, [watch])
    watch.send_signal(signal.SIGTERM)
    assert watch.wait(timeout=60) == 0
    assert not dashboard_up()


def test_watch_takes_other_nodes_on_its_ingest_port(cluster: Cluster) -> None:
    """``dsmon watch --ingest-port``: a collector on another node sends to the same store."""
    log = cluster.tmp / "run" / "train.log"
    log.parent.mkdir()
    append(log, Z2_LINES)
    watch = cluster._spawn(
        "watch", str(log), "--no-browser", "--port", str(free_port()),
        "--store", str(cluster.store), "--state-dir", str(cluster.tmp / "state"),
        "--nvml-interval", "0", "--node", "n1", "--run", "z2",
        "--ingest-port", str(cluster.port), "--token-file", str(cluster.token_file),
        name="watch",
    )  # fmt: skip
    wait_for("the ingest port", cluster._listening, [watch])
    other = cluster.tmp / "n2" / "train.log"
    other.parent.mkdir()
    append(other, Z2_LINES)
    cluster.collector(other, "n2")
    want = expected("z2", "n1") | expected("z2", "n2")
    wait_for("both nodes' records", lambda: len(stored(cluster.store, "z2")) >= len(want), [watch])
    assert set(stored(cluster.store, "z2")) == want
    out = (cluster.tmp / "watch.out").read_text()
    assert f"ingest API on http://127.0.0.1:{cluster.port}" in out
    assert TOKEN not in out  # a token given in a file is never printed
    watch.send_signal(signal.SIGTERM)
    assert watch.wait(timeout=60) == 0


def test_agent_threads_deliver_logs_and_gpu_samples(tmp_path: Path) -> None:
    """In one process: the three named threads, fake NVML (8 GPUs), the real ingest server."""
    log = tmp_path / "run" / "train.log"
    log.parent.mkdir()
    append(log, Z2_LINES[:200])
    server = start_ingest_server(str(tmp_path / "store.sqlite"), TOKEN, port=0)
    poller = NvmlPoller(eight_gpus_two_models(), run="z2", node="n1")
    assert poller.start()
    state = StateFile(tmp_path / "state" / "tail.json")
    tailer = Tailer([str(log)], run="z2", node="n1", state=state)
    sender = Sender(UrlTransport(server.url, TOKEN), Spool(tmp_path / "state" / "spool"))
    agent = Agent(tailer, sender, poller, tail_interval_s=0.05, nvml_interval_s=0.05)
    try:
        agent.start()
        names = {t.name for t in threading.enumerate()}
        assert {"dsmon-tail", "dsmon-nvml", "dsmon-send"} <= names
        append(log, Z2_LINES[200:])
        want = expected("z2", "n1")

        def logs_stored() -> set[str]:
            return {encode(r) for r in server.store.records("z2") if r.KIND != "gpu"}

        wait_for("the log's records", lambda: logs_stored() == want, [])
        wait_for("GPU samples", lambda: len(server.store.records("z2", "gpu")) >= 16, [])
    finally:
        agent.stop()
        server.stop()
    assert not any(t.name.startswith("dsmon-") and t.is_alive() for t in threading.enumerate())
    (pos,) = state.load().files
    assert (pos.offset, pos.line) == (sum(map(len, Z2_LINES)), len(Z2_LINES))
    gpus = {
        (r.src.node, r.gpu_index)
        for r in open_store(tmp_path / "store.sqlite").records("z2", "gpu")
    }
    assert gpus == {("n1", i) for i in range(8)}


def test_collect_refuses_bad_setups_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = write_token_file(tmp_path / "token", TOKEN)
    base = ["collect", "--log", str(tmp_path / "train.log"), "--state-dir", str(tmp_path / "s")]
    assert main([*base, "--server", "http://127.0.0.1:1"]) == 1
    assert capsys.readouterr().err == (
        "dsmon: collect: no token: pass --token-file F or set $DSMON_TOKEN\n"
    )
    assert main([*base, "--server", "ftp://dash", "--token-file", str(token)]) == 1
    assert capsys.readouterr().err == (
        "dsmon: collect: --server: 'ftp://dash': expected http(s)://host[:port][/path]\n"
    )
    held = lock_state_dir(tmp_path / "s")
    try:
        assert main([*base, "--server", "http://127.0.0.1:1", "--token-file", str(token)]) == 1
    finally:
        held.close()
    assert capsys.readouterr().err == (
        f"dsmon: collect: {tmp_path / 's'} is in use by another collector\n"
    )
