"""The ingest server over real sockets: a uvicorn server on 127.0.0.1, real HTTP requests."""

from __future__ import annotations

import gc
import gzip
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from server_support import LIMIT, TOKEN, auth, call, ndjson, post, small_batch, stop_later

from dsmon.model import wire
from dsmon.model.records import Record, Source, StepRecord
from dsmon.serve.run import (
    IngestServer,
    ServeError,
    bind_socket,
    freeze_start_up,
    start_ingest_server,
)
from dsmon.serve.seal import PageSealer
from dsmon.store.errors import StoreError
from dsmon.store.store import Store, open_store

GZIP = {"Content-Encoding": "gzip"}


def stored(srv: IngestServer, run: str = "z2") -> list[Record]:
    return srv.store.records(run)


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[IngestServer]:
    handle = start_ingest_server(
        str(tmp_path / "ingest.sqlite"), TOKEN, "127.0.0.1", 0, max_body_bytes=LIMIT
    )
    yield handle
    stop_later(handle)


def test_missing_or_wrong_token_is_401_and_stores_nothing(srv: IngestServer) -> None:
    body = ndjson(small_batch())
    for headers in (
        {},
        {"Authorization": "Bearer wrong-token-0123456789"},
        {"Authorization": f"Basic {TOKEN}"},
    ):
        status, hdrs, data = call(srv, "POST", "/v1/records", body, headers)
        assert status == 401
        assert hdrs["www-authenticate"] == "Bearer"
        assert json.loads(data) == {"error": "missing or wrong bearer token"}
    assert srv.store.last_id() == 0
    assert call(srv, "GET", "/v1/runs")[0] == 401
    assert call(srv, "GET", "/v1/records?run=z2")[0] == 401


def test_real_run_stored_exactly_once_and_replay_adds_nothing(
    srv: IngestServer, z2_log_records: list[Record]
) -> None:
    n = len(z2_log_records)
    assert n >= 13  # the z2 log yields at least its events, configs and flops profile
    assert post(srv, z2_log_records) == (200, {"accepted": n, "inserted": n})
    assert stored(srv) == z2_log_records
    # The sender lost the answer and sends the same batch again: nothing new.
    assert post(srv, z2_log_records, gz=False) == (200, {"accepted": n, "inserted": 0})
    assert stored(srv) == z2_log_records


def test_body_over_the_limit_is_413(srv: IngestServer) -> None:
    big = ndjson(small_batch(400))
    assert len(big) > LIMIT
    status, _, data = call(srv, "POST", "/v1/records", big, auth())
    assert status == 413
    assert json.loads(data) == {
        "error": f"body of {len(big)} bytes exceeds the limit of {LIMIT} bytes"
    }
    assert srv.store.last_id() == 0


def test_chunked_body_over_the_limit_is_413(srv: IngestServer) -> None:
    chunks = [b"x" * 16384] * 6  # no Content-Length: counted while streaming
    status, _, data = call(srv, "POST", "/v1/records", iter(chunks), auth(), chunked=True)
    assert status == 413
    assert json.loads(data) == {"error": f"body exceeds the limit of {LIMIT} bytes"}


def test_a_sender_still_sending_past_the_limit_reads_the_413(srv: IngestServer) -> None:
    """16 times the limit, chunked: the client sends it all before it reads the answer.

    The server reads and drops the rest before it answers and closes; closing with unread
    data would reset the connection, and the sender would see a reset, not the 413.
    """
    chunks = [b"x" * 16384] * (16 * LIMIT // 16384)
    status, _, data = call(srv, "POST", "/v1/records", iter(chunks), auth(), chunked=True)
    assert status == 413
    assert json.loads(data) == {"error": f"body exceeds the limit of {LIMIT} bytes"}


def test_gzip_bomb_is_413(srv: IngestServer) -> None:
    bomb = gzip.compress(b"\n" * (64 * LIMIT))
    assert len(bomb) < LIMIT // 8
    status, _, data = call(srv, "POST", "/v1/records", bomb, auth(**{"Content-Encoding": "gzip"}))
    assert status == 413
    assert json.loads(data) == {"error": f"body inflates to more than the limit of {LIMIT} bytes"}


def test_bad_field_is_400_naming_line_and_field_and_stores_nothing(srv: IngestServer) -> None:
    good = [wire.encode(r) for r in small_batch(3)]
    bad = json.loads(good[1])
    bad["step"] = "abc"
    body = "\n".join([good[0], json.dumps(bad), good[2]]).encode()
    status, _, data = call(srv, "POST", "/v1/records", body, auth())
    assert status == 400
    assert json.loads(data) == {"error": "line 2: field 'step': expected int, got str"}
    missing = json.loads(good[0])
    del missing["group"]
    status, _, data = call(srv, "POST", "/v1/records", json.dumps(missing).encode(), auth())
    assert json.loads(data) == {
        "error": "line 1: field 'group': required by kind 'timer' but missing"
    }
    status, _, data = call(srv, "POST", "/v1/records", b"\n\n{not json\n", auth())
    assert status == 400
    assert json.loads(data)["error"].startswith("line 3: not JSON")
    assert srv.store.last_id() == 0


@pytest.fixture
def big(tmp_path: Path) -> Iterator[IngestServer]:
    """A server taking bodies of the default size (16 MiB)."""
    handle = start_ingest_server(str(tmp_path / "big.sqlite"), TOKEN, "127.0.0.1", 0)
    yield handle
    stop_later(handle)


def test_a_big_batch_is_stored_whole_or_not_at_all(
    big: IngestServer,
) -> None:
    """A bad line near the end of a batch of hundreds refuses it all, and sent again fixed
    it is stored whole."""
    n = 757
    good = [wire.encode(r) for r in small_batch(n)]
    bad = json.loads(good[-3])
    bad["step"] = "abc"
    body = "\n".join([*good[:-3], json.dumps(bad), *good[-2:]]).encode()
    status, _, data = call(big, "POST", "/v1/records", gzip.compress(body), auth(**GZIP))
    assert (status, json.loads(data)) == (
        400,
        {"error": f"line {n - 2}: field 'step': expected int, got str"},
    )
    assert big.store.last_id() == 0 and big.store.runs() == []
    assert post(big, small_batch(n)) == (200, {"accepted": n, "inserted": n})
    assert stored(big) == small_batch(n)
    assert post(big, small_batch(n)) == (200, {"accepted": n, "inserted": 0})


def test_unknown_encoding_is_415_and_corrupt_gzip_400(srv: IngestServer) -> None:
    body = ndjson(small_batch(1))
    assert call(srv, "POST", "/v1/records", body, auth(**{"Content-Encoding": "br"}))[0] == 415
    status, _, data = call(
        srv, "POST", "/v1/records", gzip.compress(body)[:-6], auth(**{"Content-Encoding": "gzip"})
    )
    assert (status, json.loads(data)) == (400, {"error": "gzip body: truncated stream"})


def test_get_runs_and_records_pages_by_id(srv: IngestServer) -> None:
    batch = small_batch(5)
    assert post(srv, batch)[0] == 200
    status, _, data = call(srv, "GET", "/v1/runs", headers=auth())
    (run,) = json.loads(data)["runs"]
    assert (status, run["name"], run["n_records"], run["kinds"], run["nodes"], run["ranks"]) == (
        200,
        "z2",
        5,
        {"timer": 5},
        ["node-a"],
        [0],
    )
    status, _, data = call(
        srv, "GET", "/v1/records?run=z2&kind=timer&since=0&limit=2", headers=auth()
    )
    page = json.loads(data)
    assert [r["id"] for r in page["records"]] == [1, 2]
    assert (page["next"], page["more"]) == (2, True)
    rest = json.loads(
        call(srv, "GET", f"/v1/records?run=z2&since={page['next']}", headers=auth())[2]
    )
    assert [r["id"] for r in rest["records"]] == [3, 4, 5]
    assert (rest["next"], rest["more"]) == (5, False)
    got = [
        wire.from_dict({k: v for k, v in r.items() if k != "id"})
        for r in page["records"] + rest["records"]
    ]
    assert got == batch
    empty = json.loads(call(srv, "GET", "/v1/records?run=z2&since=5", headers=auth())[2])
    assert empty == {"records": [], "next": 5, "more": False}


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("", "query 'run': required"),
        ("run=z2&kind=bogus", "query 'kind': unknown record kind 'bogus'"),
        ("run=z2&since=x", "query 'since': not an integer: 'x'"),
        ("run=z2&limit=0", "query 'limit': 0 outside 1..10000"),
    ],
)
def test_bad_query_is_400(srv: IngestServer, query: str, error: str) -> None:
    status, _, data = call(srv, "GET", f"/v1/records?{query}", headers=auth())
    assert (status, json.loads(data)) == (400, {"error": error})


def test_healthz_and_metrics(srv: IngestServer) -> None:
    assert json.loads(call(srv, "GET", "/healthz")[2]) == {"status": "ok", "last_id": 0}
    step = StepRecord(
        src=Source(run="z2", file="train.log", line=271, node="node-a", rank=0),
        step=10,
        skipped=0,
        lr=(0.0001,),
    )
    assert post(srv, [*small_batch(2), step])[0] == 200
    call(srv, "POST", "/v1/records", b"{}", auth())  # one 400
    status, hdrs, data = call(srv, "GET", "/metrics")
    assert status == 200
    assert hdrs["content-type"].startswith("text/plain")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(data.decode())
        for s in fam.samples
    }
    rank0 = (("node", "node-a"), ("rank", "0"), ("run", "z2"))
    assert samples[("dsmon_step", rank0)] == 10
    assert (
        samples[
            (
                "dsmon_timer_seconds",
                (("group", "global"), *rank0[:2], ("run", "z2"), ("timer", "fwd")),
            )
        ]
        == 0.01227
    )
    assert samples[("dsmon_ingest_requests_total", (("code", "200"),))] == 1
    assert samples[("dsmon_ingest_requests_total", (("code", "400"),))] == 1
    assert samples[("dsmon_ingest_records_total", (("outcome", "accepted"),))] == 3
    assert samples[("dsmon_records", (("kind", "step"), ("run", "z2")))] == 1
    assert json.loads(call(srv, "GET", "/healthz")[2])["last_id"] == 3


class FlakyStore:
    """A real SQLite store that fails while ``down`` is set, as a database restart would."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.down = threading.Event()

    def __getattr__(self, name: str) -> Any:
        if self.down.is_set():
            raise StoreError("store x: connection refused")
        return getattr(self.inner, name)


def test_store_failure_is_503_and_nothing_is_acknowledged(tmp_path: Path) -> None:
    import uvicorn

    from dsmon.serve.app import create_app

    flaky = FlakyStore(open_store(tmp_path / "f.sqlite"))
    app = create_app(flaky, TOKEN)  # type: ignore[arg-type]
    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        thread.join(0.01)
    handle = IngestServer(
        f"http://127.0.0.1:{sock.getsockname()[1]}", 0, flaky.inner, server, thread,
        PageSealer(flaky.inner),
    )  # fmt: skip
    try:
        flaky.down.set()
        status, hdrs, data = call(handle, "POST", "/v1/records", ndjson(small_batch(2)), auth())
        assert (status, json.loads(data), hdrs["retry-after"]) == (
            503,
            {"error": "store: store x: connection refused"},
            "5",
        )
        assert call(handle, "GET", "/healthz")[0] == 503
        assert call(handle, "GET", "/v1/runs", headers=auth())[0] == 503
        flaky.down.clear()
        assert post(handle, small_batch(2)) == (200, {"accepted": 2, "inserted": 2})
    finally:
        handle.stop()


def test_port_in_use_is_a_clear_error(srv: IngestServer, tmp_path: Path) -> None:
    with pytest.raises(ServeError, match=f"cannot listen on 127.0.0.1:{srv.port}"):
        start_ingest_server(str(tmp_path / "other.sqlite"), TOKEN, "127.0.0.1", srv.port)


def test_the_foreground_server_keeps_its_start_up_out_of_the_collectors_walks() -> None:
    gc.unfreeze()
    try:
        freeze_start_up()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
