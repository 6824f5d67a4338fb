"""The sender and its spool against the real ingest server (uvicorn on 127.0.0.1, SQLite).

Records are the real ones of tests/data/z2/train.log. Every test ends by reading the store:
each record exactly once, however often the network failed in between.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_support import stop_later

from collectors.send.sender import Sender
from collectors.send.spool import Spool
from collectors.send.transport import HttpResponse, UrlTransport, ingest_url
from dsmon.model.records import Record, record_key
from dsmon.model.wire import encode
from dsmon.serve.run import IngestServer, start_ingest_server

TOKEN = "test-token-0123456789abcdef"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[IngestServer]:
    handle = start_ingest_server(str(tmp_path / "store.sqlite"), TOKEN, port=0)
    yield handle
    stop_later(handle)


def make_sender(url: str, tmp_path: Path, token: str = TOKEN, **kw: object) -> Sender:
    spool = Spool(tmp_path / "spool", **kw)  # type: ignore[arg-type]
    return Sender(UrlTransport(url, token), spool, rng=random.Random(7), clock=Clock())


def stored_keys(handle: IngestServer) -> list[tuple[object, ...]]:
    return [record_key(r) for r in handle.store.records("z2")]


def submit_in_batches(sender: Sender, recs: list[Record], size: int) -> list[int]:
    done: list[int] = []
    for i in range(0, len(recs), size):
        sender.submit(recs[i : i + size], lambda i=i: done.append(i))
    return done


def test_delivers_every_record_once_and_calls_back_in_order(
    server: IngestServer, tmp_path: Path, z2_log_records: list[Record]
) -> None:
    sender = make_sender(server.url, tmp_path)
    done = submit_in_batches(sender, z2_log_records, 50)
    sender.pump()
    assert done == list(range(0, len(z2_log_records), 50))
    assert stored_keys(server) == [record_key(r) for r in z2_log_records]
    assert (sender.stats.sent, sender.stats.inserted) == (len(z2_log_records),) * 2
    assert sender.spool.empty


def test_outage_spools_and_drains_when_the_server_is_back(
    tmp_path: Path, z2_log_records: list[Record]
) -> None:
    port = free_port()
    sender = make_sender(f"http://127.0.0.1:{port}", tmp_path)
    clock = sender._clock
    assert isinstance(clock, Clock)
    half = len(z2_log_records) // 2
    done = submit_in_batches(sender, z2_log_records[:half], 40)
    sender.pump()  # connection refused: spooled, and reported durable
    assert len(done) == -(-half // 40)
    assert sender.stats.spooled == half and sender.stats.failures == 1
    assert sender.spool.size_bytes > 0
    submit_in_batches(sender, z2_log_records[half:], 40)
    sender.pump()  # still backing off: straight to the spool, behind the first half
    assert sender.stats.spooled == len(z2_log_records)
    handle = start_ingest_server(str(tmp_path / "store.sqlite"), TOKEN, port=port)
    try:
        clock.now += 60
        sender.pump()
        assert stored_keys(handle) == [record_key(r) for r in z2_log_records]
    finally:
        stop_later(handle)
    assert sender.spool.empty
    assert list((tmp_path / "spool").iterdir()) == []


class LostAnswers:
    """The server stores the batch, then the answer is lost (server killed mid-reply)."""

    def __init__(self, inner: UrlTransport, lose: int) -> None:
        self.inner = inner
        self.url = inner.url
        self.lose = lose

    def abort(self) -> None:
        self.inner.abort()

    def post(self, body: bytes, timeout_s: float | None = None) -> HttpResponse:
        resp = self.inner.post(body, timeout_s)
        if self.lose > 0:
            self.lose -= 1
            raise OSError("connection reset by peer")
        return resp


def test_a_lost_answer_is_resent_and_stored_once(
    server: IngestServer, tmp_path: Path, z2_log_records: list[Record]
) -> None:
    spool = Spool(tmp_path / "spool")
    transport = LostAnswers(UrlTransport(server.url, TOKEN), lose=2)
    clock = Clock()
    sender = Sender(transport, spool, rng=random.Random(1), clock=clock)
    submit_in_batches(sender, z2_log_records, 100)
    sender.pump()
    clock.now += 60
    sender.pump()
    clock.now += 60
    sender.pump()
    assert spool.empty
    assert stored_keys(server) == [record_key(r) for r in z2_log_records]
    # The server received the batch three times; the answers of the first two were lost.
    assert (sender.stats.failures, sender.stats.sent, sender.stats.inserted) == (2, 118, 0)


def test_full_spool_holds_batches_and_pauses_reading_until_the_server_is_back(
    tmp_path: Path, z2_log_records: list[Record], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue: a full spool dropped batches for good. Now it keeps them, in order, and says
    ``blocked`` so the tail loop stops reading; once the server is back all arrive, once."""
    caplog.set_level(logging.WARNING, logger="collectors.send.sender")
    recs = z2_log_records[:60]
    size = sum(len(encode(r).encode()) + 1 for r in recs[:20])
    port = free_port()
    sender = make_sender(f"http://127.0.0.1:{port}", tmp_path, max_bytes=size)
    done = submit_in_batches(sender, recs[:30], 10)
    sender.submit(recs[30:33])  # GPU samples (no callback) cannot be read again: dropped
    sender.pump()
    assert done == [0, 10]  # the third batch waits: no callback, positions stay before it
    assert sender.blocked
    assert sender.stats.dropped == 3
    later = submit_in_batches(sender, recs[40:50], 10)  # read before the loop saw the pause
    sender.pump()
    assert (done, later) == ([0, 10], []) and sender.blocked
    paused = [m for r in caplog.records if "paused" in (m := r.getMessage())]
    assert paused == [
        f"dsmon: spool {tmp_path / 'spool'} cannot take more ({size} of {size} bytes): log "
        f"reading paused until http://127.0.0.1:{port}/v1/records takes records again"
    ]
    handle = start_ingest_server(str(tmp_path / "store.sqlite"), TOKEN, port=port)
    try:
        sender._clock.now += 60  # type: ignore[attr-defined]
        sender.pump()
        sender.pump()
        assert (done, later) == ([0, 10, 20], [0])
        assert not sender.blocked
        want = recs[:30] + recs[40:50]
        assert sorted(stored_keys(handle)) == sorted(record_key(r) for r in want)
    finally:
        stop_later(handle)
    assert "dsmon: the spool has room again: log reading resumed" in caplog.messages


class DiskFull:
    """Writes to the spool fail with ENOSPC after ``room`` bytes, as on a full disk."""

    def __init__(self, room: int) -> None:
        self.room = room

    def wrap(self, f: object) -> object:
        real_write = f.write  # type: ignore[attr-defined]

        def write(data: bytes) -> int:
            if len(data) > self.room:
                real_write(data[: self.room])  # a partial write, then the error
                f.flush()  # type: ignore[attr-defined]
                self.room = 0
                raise OSError(28, "No space left on device")
            self.room -= len(data)
            return int(real_write(data))

        f.write = write  # type: ignore[attr-defined]
        return f


def test_disk_full_holds_batches_and_leaves_no_torn_line(
    tmp_path: Path, z2_log_records: list[Record], monkeypatch: pytest.MonkeyPatch
) -> None:
    recs = z2_log_records[:40]
    port = free_port()
    sender = make_sender(f"http://127.0.0.1:{port}", tmp_path)
    disk = DiskFull(room=sum(len(encode(r).encode()) + 1 for r in recs[:15]))
    opener = Spool._open_segment
    monkeypatch.setattr(Spool, "_open_segment", lambda self: disk.wrap(opener(self)))
    done = submit_in_batches(sender, recs, 10)
    sender.pump()
    assert done == [0] and sender.blocked  # the second batch hit the full disk mid-write
    handle = start_ingest_server(str(tmp_path / "store.sqlite"), TOKEN, port=port)
    try:
        sender._clock.now += 60  # type: ignore[attr-defined]
        sender.pump()
        sender.pump()
        assert done == [0, 10, 20, 30]
        assert stored_keys(handle) == [record_key(r) for r in recs]
        assert (sender.stats.rejected, sender.stats.dropped) == (0, 0)  # no torn line sent
    finally:
        stop_later(handle)


def test_a_record_the_server_refuses_is_isolated_and_dropped(
    server: IngestServer, tmp_path: Path, z2_log_records: list[Record]
) -> None:
    recs = list(z2_log_records[:40])
    recs[17] = dataclasses.replace(recs[17], step="abc")  # type: ignore[arg-type]
    sender = make_sender(server.url, tmp_path)
    sender.submit(recs)
    sender.pump()
    assert sender.stats.rejected == 1
    assert stored_keys(server) == [record_key(r) for i, r in enumerate(recs) if i != 17]
    assert sender.spool.empty


def test_a_refused_token_keeps_the_records(
    server: IngestServer, tmp_path: Path, z2_log_records: list[Record]
) -> None:
    sender = make_sender(server.url, tmp_path, token="wrong-token-0123456789")
    sender.submit(z2_log_records[:10])
    sender.pump()
    assert stored_keys(server) == []
    assert sender.stats.spooled == 10 and sender.stats.rejected == 0
    assert (
        sender.stats.last_error
        == f"{server.url}/v1/records refused the token (401): check --token-file"
    )


def test_oversized_batches_are_split(tmp_path: Path, z2_log_records: list[Record]) -> None:
    handle = start_ingest_server(
        str(tmp_path / "store.sqlite"), TOKEN, port=0, max_body_bytes=20_000
    )
    try:
        sender = make_sender(handle.url, tmp_path)
        sender.submit(z2_log_records)
        sender.pump()
        assert stored_keys(handle) == [record_key(r) for r in z2_log_records]
        assert sender.stats.rejected == 0
    finally:
        stop_later(handle)


def test_backoff_doubles_with_jitter_up_to_the_cap(tmp_path: Path) -> None:
    sender = make_sender(f"http://127.0.0.1:{free_port()}", tmp_path)
    waits = []
    for _ in range(9):
        before = sender._clock()
        sender._failed("down")
        waits.append(sender._retry_at - before)
    for n, wait in enumerate(waits):
        base = min(30.0, 0.5 * 2**n)
        assert 0.5 * base <= wait <= 1.5 * base
    assert len(set(waits)) == len(waits)  # jittered: no two collectors retry in lockstep


def test_spool_left_by_a_killed_collector_is_drained(
    server: IngestServer, tmp_path: Path, z2_log_records: list[Record]
) -> None:
    old = Spool(tmp_path / "spool", segment_bytes=4096)
    for i in range(0, 100, 10):
        assert old.append([encode(r) for r in z2_log_records[i : i + 10]])
    # Killed during an append: a torn last line, never reported as spooled.
    with open(sorted((tmp_path / "spool").iterdir())[-1], "ab") as f:
        f.write(encode(z2_log_records[100]).encode()[:50])
    sender = make_sender(server.url, tmp_path)
    sender.pump()
    assert stored_keys(server) == [record_key(r) for r in z2_log_records[:100]]
    assert sender.spool.empty


def test_ingest_url_accepts_a_base_url() -> None:
    assert ingest_url("http://dash:8502") == "http://dash:8502/v1/records"
    assert ingest_url("dash:8502/") == "http://dash:8502/v1/records"
    assert ingest_url("https://x/v1/records") == "https://x/v1/records"
    with pytest.raises(ValueError, match="expected http"):
        ingest_url("ftp://x")


def test_a_url_that_is_not_the_ingest_server_keeps_the_records(
    server: IngestServer, tmp_path: Path, z2_log_records: list[Record]
) -> None:
    sender = make_sender(server.url + "/dashboard", tmp_path)
    sender.submit(z2_log_records[:10])
    sender.pump()
    assert (sender.stats.rejected, sender.stats.spooled) == (0, 10)
    assert sender.stats.last_error == f"{server.url}/dashboard/v1/records answered 404 Not Found"
