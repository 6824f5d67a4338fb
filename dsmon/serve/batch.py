"""One POSTed batch of records, from raw bytes to checked records, or a reason to refuse it.

The ingest server accepts bytes from the network, so everything here assumes hostile or broken
input: a body is bounded before and after gzip decompression (``dsmon.serve.body``, whose
names are re-exported here), and every line must pass the checks of
:func:`dsmon.model.check.parse_line` (types, depth, names, times) before anything is stored;
a batch is taken whole or not at all. The server's own path, :func:`parse_batch_rows`, runs
most lines through the faster :func:`dsmon.serve.rows.checked_row` and the rest through
``parse_line``, so it accepts and refuses exactly what ``parse_line`` does.
"""

from __future__ import annotations

from collections.abc import Iterator

from dsmon.model.check import (
    MAX_JSON_DEPTH,
    MAX_NAME_BYTES,
    check_record,
    encoded_record,
    parse_line,
)
from dsmon.model.records import Record
from dsmon.model.wire import EncodedRecord, WireError
from dsmon.serve.body import MAX_GZIP_MEMBERS, BatchError, check_length, inflate
from dsmon.serve.rows import checked_row
from dsmon.store.records.rows import RecordRow

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
    "parse_batch_rows",
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
    return [_checked(number, line) for number, line, _ in _lines(body)]


def parse_batch_rows(body: bytes) -> list[RecordRow | EncodedRecord]:
    """As :func:`parse_batch_encoded`, with the store's row instead of a record where it can.

    What the ingest server stores: a line that :func:`checked_row` accepts becomes its row
    without a record object being built; any other line is checked by ``parse_line`` (which
    refuses it naming the field at fault, or accepts it as a record).

    Raises:
        BatchError: 400 ``line N: field 'x': reason`` for the first bad line.
    """
    out: list[RecordRow | EncodedRecord] = []
    for number, line, bare in _lines(body):
        row = checked_row(bare)
        out.append(_checked(number, line) if row is None else row)
    return out


def _lines(body: bytes) -> Iterator[tuple[int, str, str]]:
    """The non-blank lines of ``body``: 1-based number, the line, the line stripped.

    ``parse_line`` is given the line as it came, so its messages' columns are the sender's.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_line = body[: exc.start].count(b"\n") + 1
        raise BatchError(400, f"line {bad_line}: not UTF-8 at byte {exc.start}") from None
    for number, line in enumerate(text.split("\n"), start=1):
        bare = line.strip()
        if bare:
            yield number, line, bare


def _checked(number: int, line: str) -> EncodedRecord:
    """Line ``number`` as a checked record with its body, or the 400 that says what is wrong."""
    try:
        rec = parse_line(line)
    except WireError as exc:
        raise BatchError(400, f"line {number}: {exc}") from None
    return encoded_record(rec, line)
