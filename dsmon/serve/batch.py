"""One POSTed batch of records, from raw bytes to checked rows, or a reason to refuse it.

The ingest server accepts bytes from the network, so everything here assumes hostile or broken
input: a body is bounded before and after gzip decompression (``dsmon.serve.body``, whose
names are re-exported here), and every line must pass the checks of
:func:`dsmon.model.check.parse_line` (types, depth, names, times) before anything is stored;
a batch is taken whole or not at all. The server's own path, :func:`parse_batch_rows`, runs
the lines through the faster :func:`dsmon.serve.rows.check_lines` and the few it leaves
through ``parse_line``, so it accepts and refuses exactly what ``parse_line`` does.
"""

from __future__ import annotations

from dsmon.model.check import (
    MAX_JSON_DEPTH,
    MAX_NAME_BYTES,
    check_record,
    encoded_record,
    parse_line,
)
from dsmon.model.wire import EncodedRecord, WireError
from dsmon.serve.body import MAX_GZIP_MEMBERS, BatchError, check_length, inflate
from dsmon.serve.rows import Other, check_lines
from dsmon.store.gpu.rows import SampleRow
from dsmon.store.records.rows import RecordRow, Row
from dsmon.store.store import RowBatch, stored_as

__all__ = [
    "MAX_GZIP_MEMBERS",
    "MAX_JSON_DEPTH",
    "MAX_NAME_BYTES",
    "BatchError",
    "check_length",
    "check_record",
    "encoded_record",
    "inflate",
    "parse_batch_rows",
    "parse_line",
]


def parse_batch_rows(body: bytes) -> RowBatch:
    """Decode and check every JSON line of ``body`` (blank lines ignored), as the store takes it.

    What the ingest server stores: the lines :func:`check_lines` vouches for become their rows
    without a record object being built; any other line is checked by ``parse_line`` (which
    refuses it naming the field at fault, or accepts it as a record, kept with its line: the
    received line is stored as it came, which spares re-encoding every record, unless it holds
    a ``NaN``/``Infinity`` constant, which is re-encoded so stored bodies stay strict JSON),
    and its row takes its line's place among the others.

    Raises:
        BatchError: 400 ``line N: field 'x': reason`` for the first bad line.
    """
    try:
        rows, samples, others, decoded = check_lines(body)
    except UnicodeDecodeError:  # one line's: the body's first fault is named as the body's
        _refuse_not_utf8(body)
        raise
    if others:  # a line check_lines makes no row of is never bad: the first bad one is here
        _place(rows, samples, others)
        decoded = {}  # rows moved: the store decodes the bodies itself
    return RowBatch(rows, samples, decoded)


def _refuse_not_utf8(body: bytes) -> None:
    """The 400 naming the line and byte of the body's first byte that is not UTF-8, if any."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_line = body[: exc.start].count(b"\n") + 1
        raise BatchError(400, f"line {bad_line}: not UTF-8 at byte {exc.start}") from None


def _place(rows: list[Row], samples: list[SampleRow], others: list[Other]) -> None:
    """Check the lines left over with ``parse_line``; put each one's row at its line's place."""
    made = [(other, stored_as(_checked(other.number, other.line))) for other in others]
    for other, row in reversed(made):  # from the last, so the earlier places stay put
        if isinstance(row, RecordRow):
            rows.insert(other.rows_before, row)
        else:
            samples.insert(other.samples_before, row)


def _checked(number: int, line: str) -> EncodedRecord:
    """Line ``number`` as a checked record with its body, or the 400 that says what is wrong."""
    try:
        rec = parse_line(line)
    except WireError as exc:
        raise BatchError(400, f"line {number}: {exc}") from None
    return encoded_record(rec, line)
