"""What one client, or a failing store, may cost the ingest server (issue 12, server side).

Real uvicorn servers on 127.0.0.1 and raw sockets, so that slow and stalled clients are slow
and stalled for real. Each test says what it guards against; before the hardening each one
failed (a hang, a 500, a 503 that invites endless retries, or a health check saying ok).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from server_support import TOKEN, auth, call, ndjson, post, small_batch, stop_later

from dsmon.model.records import Source, TimerRecord
from dsmon.serve.app import Limits
from dsmon.serve.run import IngestServer, start_ingest_server
from dsmon.store.errors import StoreDataError

QUICK = Limits(batches_in_hand=1, slot_wait_s=1.0, body_timeout_s=1.0, headers_timeout_s=0.5)


@pytest.fixture
def quick(tmp_path: Path) -> Iterator[IngestServer]:
    """A server with one body slot and short deadlines."""
    handle = start_ingest_server(str(tmp_path / "s.sqlite"), TOKEN, "127.0.0.1", 0, limits=QUICK)
    yield handle
    stop_later(handle)


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[IngestServer]:
    handle = start_ingest_server(str(tmp_path / "s.sqlite"), TOKEN, "127.0.0.1", 0)
    yield handle
    stop_later(handle)


def raw(srv: IngestServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    return sock


def post_head(body_len: int) -> bytes:
    """Request line and headers of a POST whose body follows separately."""
    return (
        f"POST /v1/records HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/x-ndjson\r\nContent-Length: {body_len}\r\n\r\n"
    ).encode()


def answer(sock: socket.socket) -> tuple[int, dict[str, str], Any]:
    """Read one HTTP response (with Content-Length) off a raw socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
    while len(rest) < int(headers["content-length"]):
        rest += sock.recv(65536)
    return int(lines[0].split()[1]), headers, json.loads(rest)


def gauges(srv: IngestServer) -> dict[str, float]:
    text = call(srv, "GET", "/metrics")[2].decode()
    return {
        s.name: s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name.startswith("dsmon_ingest_bodies")
    }


def closed_within(sock: socket.socket, seconds: float) -> float:
    """Seconds until the server closed ``sock``; fails if it is still open after ``seconds``."""
    sock.settimeout(seconds)
    start = time.monotonic()
    try:
        assert sock.recv(1024) == b""
    except TimeoutError:
        pytest.fail(f"connection still open after {seconds} s")
    return time.monotonic() - start


# --- 8: slow clients, bodies in flight --------------------------------------------------------


@pytest.mark.slow  # real time: waits out the 0.5 s headers deadline
def test_headers_that_never_complete_are_cut_off(quick: IngestServer) -> None:
    silent, trickle = raw(quick), raw(quick)
    trickle.sendall(b"POST /v1/records HTTP/1.1\r\nHost: t\r\n")  # no token, no end
    assert closed_within(silent, 5) < 3
    assert closed_within(trickle, 5) < 3


@pytest.mark.slow  # real time: idles past the headers deadline
def test_a_kept_alive_connection_outlives_the_headers_deadline(quick: IngestServer) -> None:
    """The deadline runs from a request's first byte, not while the connection idles."""
    sock = raw(quick)
    body = ndjson(small_batch(1))
    sock.sendall(post_head(len(body)) + body)
    assert answer(sock)[0] == 200
    time.sleep(1.0)  # twice the headers deadline, well within the keep-alive
    sock.sendall(post_head(len(body)) + body)
    assert answer(sock)[:1] == (200,)
    sock.close()


@pytest.mark.slow  # real time: waits out the 1 s body deadline
def test_a_stalled_body_gets_408_and_frees_its_slot(quick: IngestServer) -> None:
    body = ndjson(small_batch(3))
    sock = raw(quick)
    sock.sendall(post_head(len(body)) + body[:10])
    status, headers, data = answer(sock)
    assert (status, data) == (408, {"error": "body not received within 1 s"})
    assert headers["connection"] == "close"
    assert post(quick, small_batch(3)) == (200, {"accepted": 3, "inserted": 3})


@pytest.mark.slow  # real time: waits out the 1 s wait for a slot
def test_bodies_are_read_one_slot_at_a_time(tmp_path: Path) -> None:
    """With every slot taken, a further POST waits unread, then gets a retryable 503."""
    limits = Limits(batches_in_hand=1, slot_wait_s=1.0, body_timeout_s=10.0)
    with start_ingest_server(str(tmp_path / "s.sqlite"), TOKEN, port=0, limits=limits) as srv:
        _one_slot(srv)


def _one_slot(quick: IngestServer) -> None:
    body = ndjson(small_batch(3))
    holder = raw(quick)
    holder.sendall(post_head(len(body)) + body[:10])  # takes the only slot, sends slowly
    time.sleep(0.2)
    result: list[tuple[int, Any]] = []
    waiter = threading.Thread(target=lambda: result.append(post(quick, small_batch(2))))
    waiter.start()
    time.sleep(0.4)
    assert gauges(quick) == {
        "dsmon_ingest_bodies_in_hand": 1.0,
        "dsmon_ingest_bodies_waiting": 1.0,
    }
    waiter.join(10)
    assert result == [(503, {"error": "server busy: try again later"})]
    status, headers, _ = call(quick, "POST", "/v1/records", body, auth())
    assert (status, headers["retry-after"]) == (503, "5")
    holder.sendall(body[10:])
    assert answer(holder)[:1] == (200,)
    assert gauges(quick)["dsmon_ingest_bodies_in_hand"] == 0


@pytest.mark.slow  # real time: uploads trickling for seconds
def test_slow_uploads_cannot_hold_every_slot(srv: IngestServer) -> None:
    """Issue 41, case 7: four clients trickling their bodies held all four slots for 60 s, and
    a collector's POST waited 30 s for a 503. A body must now keep coming (5 s, plus a second
    per 64 KiB received): the trickles are cut off in seconds and the POST gets its slot."""
    body = ndjson(small_batch(3))
    slow = [raw(srv) for _ in range(Limits().batches_in_hand)]
    for sock in slow:
        sock.sendall(post_head(len(body)) + body[:1])
    stop = threading.Event()

    def trickle() -> None:
        for i in range(1, len(body)):
            if stop.wait(0.5):
                return
            for sock in slow:
                with contextlib.suppress(OSError):
                    sock.sendall(body[i : i + 1])

    dripping = threading.Thread(target=trickle)
    dripping.start()
    try:
        time.sleep(0.5)
        assert gauges(srv)["dsmon_ingest_bodies_in_hand"] == 4  # every slot taken
        start = time.monotonic()
        assert post(srv, small_batch(2)) == (200, {"accepted": 2, "inserted": 2})
        assert time.monotonic() - start < 10
        for sock in slow:
            status, _, data = answer(sock)
            assert status == 408 and data["error"].startswith("body not received within 5")
    finally:
        stop.set()
        dripping.join()
        for sock in slow:
            sock.close()


def test_many_empty_gzip_members_are_refused_at_once(srv: IngestServer) -> None:
    body = gzip.compress(b"") * 800_000  # 16 MB of empty members
    start = time.monotonic()
    status, _, data = call(srv, "POST", "/v1/records", body, auth(**{"Content-Encoding": "gzip"}))
    assert (status, json.loads(data)) == (400, {"error": "gzip body: more than 64 gzip members"})
    assert time.monotonic() - start < 5


# --- 9: permanent errors are 4xx, never 500 or a retryable 503 --------------------------------


def test_a_run_name_too_long_to_index_is_400(srv: IngestServer) -> None:
    rec = TimerRecord(
        src=Source(run="r" * 1500, file="train.log", line=1),
        step=1,
        group="global",
        values_ms={"fwd": 1.0},
    )
    status, data = post(srv, [rec])
    assert (status, data) == (
        400,
        {"error": "line 1: field 'src.run': 1500 bytes long, at most 1024"},
    )


@pytest.mark.parametrize("depth", [100, 100_000])
def test_deep_json_nesting_is_400(srv: IngestServer, depth: int) -> None:
    line = (
        '{"kind": "event", "src": {"run": "z2"}, "name": "x", "detail": {"d": '
        + "[" * depth
        + "]" * depth
        + "}}"
    )
    status, _, data = call(srv, "POST", "/v1/records", line.encode(), auth())
    assert (status, json.loads(data)) == (
        400,
        {"error": "line 1: not JSON: nested more than 64 levels deep"},
    )


def test_data_the_store_refuses_is_400_without_retry(
    srv: IngestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_: object, **__: object) -> int:
        raise StoreDataError("store pg: index row size 3016 exceeds btree version 4 maximum 2704")

    monkeypatch.setattr(srv.store, "add", refuse)
    status, headers, data = call(srv, "POST", "/v1/records", ndjson(small_batch(1)), auth())
    assert (status, json.loads(data)) == (
        400,
        {
            "error": "store refused the records: store pg: index row size 3016 exceeds "
            "btree version 4 maximum 2704"
        },
    )
    assert "retry-after" not in headers


def test_a_huge_since_is_400(srv: IngestServer) -> None:
    for since in ("9223372036854775808", "9" * 5000):
        status, _, data = call(srv, "GET", f"/v1/records?run=z2&since={since}", headers=auth())
        assert status == 400
        assert json.loads(data)["error"].startswith("query 'since': ")


# --- 7: /healthz tells whether writes work ----------------------------------------------------


def sql(srv: IngestServer, statement: str) -> None:
    """Run a statement on the server's own SQLite connection, between its requests."""
    backend: Any = srv.store.backend
    with backend._lock:
        backend._conn.execute(statement)


def test_healthz_fails_on_a_store_that_refuses_writes(srv: IngestServer) -> None:
    sql(srv, "PRAGMA query_only = 1")  # what a read-only file or mount does to writes
    status, _, data = call(srv, "GET", "/healthz")
    assert status == 503
    assert json.loads(data) == {
        "status": "error",
        "error": "store does not take writes: store "
        + srv.store.url
        + ": attempt to write a readonly database",
    }


def test_healthz_fails_after_a_write_failed_until_one_succeeds(srv: IngestServer) -> None:
    assert call(srv, "GET", "/healthz")[0] == 200
    pages = srv.store.backend._conn.execute("PRAGMA page_count").fetchone()[0]  # type: ignore[attr-defined]
    sql(srv, f"PRAGMA max_page_count = {pages}")  # the disk is full
    status, data = post(srv, small_batch(200))
    assert status == 503 and data["error"].endswith("database or disk is full")
    status, _, health = call(srv, "GET", "/healthz")
    assert status == 503
    assert json.loads(health)["error"].startswith("storing a batch failed 0 s ago: store ")
    sql(srv, "PRAGMA max_page_count = 1000000")  # space again
    assert post(srv, small_batch(200))[0] == 200
    assert call(srv, "GET", "/healthz")[0] == 200
