"""Stopping a test's ingest server off the test's clock.

uvicorn notices ``should_exit`` at its next 0.1 s tick and then waits another 0.1 s for the
connections it asked to close, so every ``IngestServer.stop`` costs about 0.2 s of sleep.
A fixture, or a test at its end, that only needs its server gone stops it in a thread of its own,
and the next test runs meanwhile; at the end of the session :func:`finish_stops` waits for each
and returns what any raised, so a stop that fails still fails the run (tests/shared_fixtures.py).
"""

from __future__ import annotations

import gzip
import http.client
import json
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from dsmon.model import wire
from dsmon.model.check import encoded_record, parse_line
from dsmon.model.records import Record, Source, TimerRecord
from dsmon.model.wire import EncodedRecord, WireError
from dsmon.serve.body import BatchError
from dsmon.serve.rows import JSON_SPACE
from dsmon.serve.run import IngestServer
from dsmon.store.records.rows import RecordRow
from dsmon.store.store import RowBatch, stored_as

if TYPE_CHECKING:  # conftest imports this module: it must not load the server stack
    from dsmon.serve.run import IngestServer

_STOPPING: list[threading.Thread] = []
_ERRORS: list[BaseException] = []


def stop_later(handle: IngestServer) -> None:
    """Stop ``handle`` (and close its store) in a background thread."""

    def stop() -> None:
        try:
            handle.stop()
        except BaseException as exc:  # noqa: BLE001 - reported by finish_stops
            _ERRORS.append(exc)

    thread = threading.Thread(target=stop, name=f"stop-{handle.port}", daemon=True)
    thread.start()
    _STOPPING.append(thread)


def finish_stops(timeout_s: float = 30.0) -> list[str]:
    """Wait for every :func:`stop_later`; what went wrong, one line each (empty: all stopped)."""
    for thread in _STOPPING:
        thread.join(timeout_s)
    late = [f"{t.name}: not stopped within {timeout_s} s" for t in _STOPPING if t.is_alive()]
    return late + [repr(exc) for exc in _ERRORS]


TOKEN = "test-token-0123456789abcdef"


LIMIT = 64 * 1024


def call(
    srv: IngestServer,
    method: str,
    path: str,
    body: bytes | Iterable[bytes] | None = None,
    headers: dict[str, str] | None = None,
    *,
    chunked: bool = False,
) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(srv.url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {}, encode_chunked=chunked)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def auth(**extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-ndjson", **extra}


def ndjson(records: Iterable[Record]) -> bytes:
    return ("\n".join(wire.encode(r) for r in records) + "\n").encode()


def post(srv: IngestServer, records: list[Record], *, gz: bool = True) -> tuple[int, Any]:
    body = ndjson(records)
    headers = auth(**({"Content-Encoding": "gzip"} if gz else {}))
    status, _, data = call(srv, "POST", "/v1/records", gzip.compress(body) if gz else body, headers)
    return status, json.loads(data)


def small_batch(n: int = 5, run: str = "z2") -> list[Record]:
    return [
        TimerRecord(
            src=Source(
                run=run,
                file="train.log",
                line=184 + 4 * i,
                offset=20000 + 300 * i,
                node="node-a",
                rank=0,
            ),
            step=i + 1,
            group="global",
            values_ms={"fwd": 12.27, "bwd": 30.79, "step": 11.74},
        )
        for i in range(n)
    ]


def reference_batch(body: bytes) -> list[EncodedRecord]:
    """A batch decoded the slow, sure way: every line through ``parse_line``.

    The oracle the server's own path (``parse_batch_rows``, rows made without records where it
    can) is held against: the same batches refused with the same message, the same rows stored.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_line = body[: exc.start].count(b"\n") + 1
        raise BatchError(400, f"line {bad_line}: not UTF-8 at byte {exc.start}") from None
    out: list[EncodedRecord] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip(JSON_SPACE):  # a blank line: JSON's spaces only
            continue
        try:
            rec = parse_line(line)
        except WireError as exc:
            raise BatchError(400, f"line {number}: {exc}") from None
        out.append(encoded_record(rec, line))
    return out


def reference_rows(body: bytes) -> RowBatch:
    """What the store writes of a batch decoded the sure way (:func:`reference_batch`).

    The server's ``parse_batch_rows`` must make the same: ``records`` rows and GPU sample
    rows, each in line order.
    """
    made = [stored_as(e) for e in reference_batch(body)]
    return RowBatch(
        [r for r in made if isinstance(r, RecordRow)],
        [r for r in made if not isinstance(r, RecordRow)],
    )


def batch_records(body: bytes) -> list[Record]:
    """The records of a batch as the reference decoder reads them."""
    return [e.record for e in reference_batch(body)]
