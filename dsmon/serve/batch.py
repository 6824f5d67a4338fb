"""One POSTed batch of records, from raw bytes to checked records, or a reason to refuse it.

The ingest server accepts bytes from the network, so everything here assumes hostile or broken
input: a body is bounded before and after gzip decompression (``dsmon.serve.body``, whose
names are re-exported here), and every line must pass :func:`dsmon.model.check.parse_line`
(types, depth, names, times), before anything is stored; a batch is taken whole or not at all.
"""

from __future__ import annotations

from dsmon.model.check import (
    MAX_JSON_DEPTH,
    MAX_NAME_BYTES,
    check_record,
    encoded_record,
    parse_line,
)
from dsmon.model.records import Record
from dsmon.model.wire import WireError
from dsmon.serve.body import MAX_GZIP_MEMBERS, BatchError, check_length, inflate
from dsmon.store.base import EncodedRecord

__all__ = [
    "MAX_GZIP_MEMBERS",
    "MAX_JSON_DEPTH",
    "MAX_NAME_BYTES",
    "BatchError",
    "check_length",
    "check_record",
    "encoded_record",
    "inflate",
    "parse_batch",
    "parse_batch_encoded",
    "parse_line",
]


def parse_batch(body: bytes) -> list[Record]:
    """Decode and check every JSON line of ``body``; blank lines are ignored.

    Raises:
        BatchError: 400 ``line N: field 'x': reason`` for the first bad line.
    """
    return [e.record for e in parse_batch_encoded(body)]


def parse_batch_encoded(body: bytes) -> list[EncodedRecord]:
    """As :func:`parse_batch`, each record with the line to store for it.

    The received line is stored as it came (it decodes to the record, as just checked),
    which spares re-encoding every record; a line holding a ``NaN``/``Infinity`` constant is
    re-encoded instead, so stored bodies stay strict JSON.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_line = body[: exc.start].count(b"\n") + 1
        raise BatchError(400, f"line {bad_line}: not UTF-8 at byte {exc.start}") from None
    records: list[EncodedRecord] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            rec = parse_line(line)
        except WireError as exc:
            raise BatchError(400, f"line {number}: {exc}") from None
        records.append(encoded_record(rec, line))
    return records
