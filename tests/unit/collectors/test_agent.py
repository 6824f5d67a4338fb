"""Stopping the collector agent: a final read, the parsers' held records, a bounded grace period.

Real files with real DeepSpeed lines (tests/data/), the real ingest server on 127.0.0.1. The
tail loop polls once when it starts and then waits far longer than any test runs, so lines
written after that first poll can reach the server only through the stop's final read. What
the server holds is compared with ``dsmon import`` of the same files.
"""

from __future__ import annotations

import dataclasses
import select
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from locations import DATA
from server_support import stop_later
from shared_fixtures import settled

from collectors.agent import Agent
from collectors.send.sender import Sender
from collectors.send.spool import Spool
from collectors.send.transport import UrlTransport
from collectors.tail.state import StateFile
from collectors.tail.tailer import Tailer
from dsmon.load.files import read_found
from dsmon.load.kinds import discover
from dsmon.model.records import Record
from dsmon.model.wire import decode, encode
from dsmon.parse.base import Diagnostics
from dsmon.parse.log import LogParser
from dsmon.serve.run import IngestServer, start_ingest_server

Z2 = (DATA / "z2" / "train.log").read_bytes().splitlines(keepends=True)
PROFILE = (DATA / "flops_detailed_file" / "flops_profile.txt").read_bytes()
TOKEN = "agent-stop-token-0123456789"
NEVER_S = 3600.0
DEADLINE_S = 60.0


def wait_until(what: str, cond: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def append(path: Path, lines: list[bytes]) -> None:
    with path.open("ab") as f:
        f.writelines(lines)


def same_node(records: list[Record]) -> set[str]:
    """Records as wire lines, node left out: ``dsmon import`` does not know the node."""
    return {
        encode(dataclasses.replace(r, src=dataclasses.replace(r.src, node=None))) for r in records
    }


def imported(*paths: Path) -> set[str]:
    """What ``dsmon import`` of the files reads (a log's ``finish()`` included)."""
    out: list[Record] = []
    for path in paths:
        (found,) = discover(path)
        out += read_found(found, "z2", Diagnostics())
    return same_node(out)


def live_only(lines: list[bytes]) -> set[str]:
    """What a live read of the lines emits while the log may still grow (no ``finish()``)."""
    parser = LogParser("z2", "train.log", "n1", live=True)
    out: list[Record] = []
    offset = 0
    for n, raw in enumerate(lines, start=1):
        out += parser.feed(raw.decode(), offset=offset, line=n)
        offset += len(raw)
    return same_node(settled(out))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[IngestServer]:
    handle = start_ingest_server(str(tmp_path / "store.sqlite"), TOKEN, port=0)
    yield handle
    stop_later(handle)


def stored(server: IngestServer) -> set[str]:
    return same_node(server.store.records("z2"))


def agent_for(tmp_path: Path, log: Path, url: str, **kw: object) -> Agent:
    """An agent on one log whose tail loop never polls again after its first poll."""
    profiles = [str(p) for p in [kw.pop("profile", None)] if p is not None]
    state = tmp_path / "state"
    tailer = Tailer(
        [str(log)],
        run="z2",
        node="n1",
        state=StateFile(state / "tail.json"),
        profile_files=profiles,
    )
    sender = Sender(UrlTransport(url, TOKEN), Spool(state / "spool"), backoff_s=(0.05, 0.1))
    return Agent(tailer, sender, tail_interval_s=NEVER_S, watch=False, **kw)  # type: ignore[arg-type]


def saved_offset(tmp_path: Path) -> int:
    (pos,) = StateFile(tmp_path / "state" / "tail.json").load().files
    return pos.offset


def spooled(tmp_path: Path) -> set[str]:
    lines = []
    for segment in sorted((tmp_path / "state" / "spool").glob("*.jsonl")):
        lines += segment.read_text().splitlines()
    return same_node(settled(decode(line) for line in lines))


def test_stop_reads_what_was_written_after_the_last_poll(
    tmp_path: Path, server: IngestServer
) -> None:
    log, profile = tmp_path / "z2" / "train.log", tmp_path / "z2" / "flops_profile.txt"
    log.parent.mkdir()
    append(log, Z2[:100])
    agent = agent_for(tmp_path, log, server.url, profile=profile)
    agent.start()
    wait_until("the first poll's records", lambda: stored(server) == live_only(Z2[:100]))
    append(log, Z2[100:])  # the run's last lines, and its profile, just before the stop
    profile.write_bytes(PROFILE)
    agent.stop()
    assert stored(server) == imported(log, profile)
    assert len(stored(server)) == 118 + 1  # 118 log records, one flops profile
    assert saved_offset(tmp_path) == log.stat().st_size


@pytest.mark.parametrize(
    ("run", "cut", "unnumbered"),
    [
        # Stopped before its first step's end: the comm ops logged since line 28 have no step
        # number yet. The run has no wall_clock_breakdown, so they never get one.
        ("comms_logger_verbose", 240, 60),
        # ZeRO-3 with memory_breakdown, stopped during step 1: its memory lines wait for the
        # first global timer line, which numbers three of them step 1 after the restart.
        ("memory_breakdown", 180, 3),
    ],
)
@pytest.mark.parametrize("release", [False, True])
def test_records_waiting_for_a_step_are_sent_at_once_and_numbered_later(
    tmp_path: Path, server: IngestServer, release: bool, run: str, cut: int, unnumbered: int
) -> None:
    lines = (DATA / run / "train.log").read_bytes().splitlines(keepends=True)
    log = tmp_path / "z2" / "train.log"
    log.parent.mkdir()
    append(log, lines[:cut])
    agent = agent_for(tmp_path, log, server.url, release_at_stop=release)
    agent.start()
    agent.stop()
    # Nothing waits for a step number: stored at once, as an import of the cut log has them.
    assert stored(server) == live_only(lines[:cut])
    waiting = stored(server) - imported(log)
    assert not waiting  # the cut log's import has them without a step too
    kinds = ('{"kind":"comm_op"', '{"kind":"memory"')
    nulls = [ln for ln in stored(server) if '"step":null' in ln and ln.startswith(kinds)]
    assert len(nulls) == unnumbered
    # Started again on the same state folder while the run goes on, to its end: the step
    # numbers learned later are filled into the rows stored without them.
    append(log, lines[cut:])
    again = agent_for(tmp_path, log, server.url)
    again.start()
    again.stop()
    assert stored(server) == imported(log)


@pytest.mark.parametrize(
    ("lines", "part"),
    [
        # Mid-line: "[Rank 0] DeepSpeed info: version=0.19.8, git-hash=unknown, git-bra"
        (18, 130),
        # Inside the "DeepSpeedEngine configuration:" dump that starts on line 47.
        (49, 0),
    ],
)
def test_a_stop_and_restart_mid_run_stores_what_import_of_the_whole_log_gives(
    tmp_path: Path, server: IngestServer, lines: int, part: int
) -> None:
    """Issue: a graceful stop sent the cut line or open block as it was, and the store keeps
    the first copy, so the restarted collector could not store it whole."""
    log = tmp_path / "z2" / "train.log"
    log.parent.mkdir()
    append(log, [*Z2[:lines], Z2[lines][:part]])
    agent = agent_for(tmp_path, log, server.url)
    agent.start()
    agent.stop()
    append(log, [Z2[lines][part:], *Z2[lines + 1 :]])
    again = agent_for(tmp_path, log, server.url)
    again.start()
    again.stop()
    assert stored(server) == imported(log)


def test_release_at_stop_sends_an_unterminated_last_line(
    tmp_path: Path, server: IngestServer
) -> None:
    """For a log cut off for good (its writer killed mid-line): sent as ``import`` reads it."""
    log = tmp_path / "z2" / "train.log"
    log.parent.mkdir()
    append(log, [*Z2[:18], Z2[18][:130]])
    agent = agent_for(tmp_path, log, server.url, release_at_stop=True)
    agent.start()
    agent.stop()
    assert stored(server) == imported(log)
    assert saved_offset(tmp_path) == sum(map(len, Z2[:18]))  # a restart reads it again


def test_stop_with_the_server_away_spools_everything_and_saves_positions(
    tmp_path: Path,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    log = tmp_path / "z2" / "train.log"
    log.parent.mkdir()
    append(log, Z2[:100])
    agent = agent_for(tmp_path, log, f"http://127.0.0.1:{port}")
    agent.start()
    wait_until("the first batch spooled", lambda: spooled(tmp_path) == live_only(Z2[:100]))
    append(log, Z2[100:])
    agent.stop(timeout_s=5.0)
    assert spooled(tmp_path) == imported(log)
    assert saved_offset(tmp_path) == log.stat().st_size


@pytest.mark.slow  # real time: waits out the stop's 2 s grace period
def test_a_silent_server_cannot_hold_the_stop_past_its_grace_period(tmp_path: Path) -> None:
    """The server accepts the connection, then never answers (hung, or a black-holing proxy).

    The batch sent before the stop waits with the transport's own 10 s timeout; the stop's
    2 s grace period must cut it short and spool it, with the final read's records.
    """
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        log = tmp_path / "z2" / "train.log"
        log.parent.mkdir()
        append(log, Z2[:100])
        agent = agent_for(tmp_path, log, f"http://127.0.0.1:{listener.getsockname()[1]}")
        agent.start()
        # The sender has connected: its first POST now waits for an answer.
        wait_until("the first POST", lambda: bool(select.select([listener], [], [], 0)[0]))
        append(log, Z2[100:])
        agent.stop(timeout_s=2.0)
    assert spooled(tmp_path) == imported(log)
    assert saved_offset(tmp_path) == log.stat().st_size
    assert agent.sender.stats.failures >= 1


@pytest.mark.slow
def test_a_full_spool_pauses_reading_and_loses_nothing(tmp_path: Path) -> None:
    """Issue: with a small spool and an outage, batches that did not fit were dropped for
    good. Now the tail loop stops reading while the spool is full and resumes after.

    Slow (real threads, a real outage, about 3 s): the fast lane keeps the same issue's test
    on a fake clock (test_sender.py, test_full_spool_holds_batches_and_pauses_reading...) and
    the agent's paused stop below."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there until the server starts below
    log = tmp_path / "z2" / "train.log"
    log.parent.mkdir()
    state = tmp_path / "state"
    tailer = Tailer([str(log)], run="z2", node="n1", state=StateFile(state / "tail.json"))
    spool = Spool(state / "spool", max_bytes=16 << 10)  # room for a few dozen records
    url = f"http://127.0.0.1:{port}"
    sender = Sender(UrlTransport(url, TOKEN), spool, backoff_s=(0.05, 0.1))
    agent = Agent(tailer, sender, tail_interval_s=0.02, watch=False)
    agent.start()
    try:
        for i in range(0, 300, 20):  # the run goes on while the server is away
            append(log, Z2[i : i + 20])
            time.sleep(0.05)
        wait_until("the spool to fill", lambda: sender.blocked)
        time.sleep(0.3)  # a poll under way when the spool filled ends
        read_to = tailer.checkpoint().files[0].offset
        append(log, Z2[300:])
        time.sleep(0.5)
        assert tailer.checkpoint().files[0].offset == read_to < log.stat().st_size
        handle = start_ingest_server(str(tmp_path / "store.sqlite"), TOKEN, port=port)
        try:
            wait_until("every record", lambda: stored(handle) == live_only(Z2))
        finally:
            handle.stop()
    finally:
        agent.stop()
    assert not sender.blocked and sender.stats.dropped == 0


def test_a_rotation_is_saved_at_once_not_after_the_commit_interval(tmp_path: Path) -> None:
    """Positions are saved at most once a second, except when a generation appears: a
    collector killed right after sending a new generation's first records must resume it
    under the same label (its records' keys), not meet the file anew under another name."""
    log = tmp_path / "z2" / "train.log"
    log.parent.mkdir()
    append(log, Z2[:40])
    agent = agent_for(tmp_path, log, "http://127.0.0.1:9")
    first = agent.tailer.poll()
    agent._delivered(first.checkpoint)
    append(log, Z2[40:50])
    agent._delivered(agent.tailer.poll().checkpoint)  # within the second: not saved yet
    assert saved_offset(tmp_path) == sum(map(len, Z2[:40]))
    log.rename(log.with_name("train.log.1"))
    append(log, Z2[50:60])
    rotated = agent.tailer.poll().checkpoint
    agent._delivered(rotated)
    assert StateFile(tmp_path / "state" / "tail.json").load() == rotated
    assert {(p.label, p.gen) for p in rotated.files} == {("train.log", 0), ("train.log", 1)}
    agent.tailer.close()


@pytest.mark.slow  # real time: a stop's grace period with the server away
def test_a_stop_while_the_spool_is_full_leaves_the_rest_to_the_next_collector(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No final read while reading is paused (it could go nowhere, and may be huge): the
    positions stay where reading paused, and the next collector sends the rest, once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "z2" / "train.log"
    log.parent.mkdir()
    state = tmp_path / "state"

    def collector(url: str) -> Agent:
        tailer = Tailer([str(log)], run="z2", node="n1", state=StateFile(state / "tail.json"))
        spool = Spool(state / "spool", max_bytes=16 << 10)
        sender = Sender(UrlTransport(url, TOKEN), spool, backoff_s=(0.05, 0.1))
        return Agent(tailer, sender, tail_interval_s=0.02, watch=False)

    agent = collector(f"http://127.0.0.1:{port}")
    agent.start()
    for i in range(0, 300, 20):
        append(log, Z2[i : i + 20])
        time.sleep(0.05)
    wait_until("the spool to fill", lambda: agent.sender.blocked)
    append(log, Z2[300:])
    agent.stop(timeout_s=2.0)
    assert "dsmon: the spool is full: no final read" in caplog.text
    saved = StateFile(state / "tail.json").load().files  # none if nothing fitted at all
    assert all(pos.offset < log.stat().st_size for pos in saved)
    handle = start_ingest_server(str(tmp_path / "store.sqlite"), TOKEN, port=port)
    again = collector(handle.url)
    try:
        again.start()
        wait_until("every record", lambda: stored(handle) == live_only(Z2))
    finally:
        again.stop()
        stop_later(handle)
