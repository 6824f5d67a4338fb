"""The row a record is stored as: its JSON line beside the columns reads filter on, and its key.

A record is stored as its JSON-lines form (:mod:`dsmon.model.wire`) next to a few columns
(run, kind, step, ts, node, rank, file, line) and a key of its identity
(:mod:`dsmon.store.records.keys`) under a UNIQUE constraint, so writing the same record twice
stores it once. The ingest server makes these rows of the lines it checked, without building
records (``dsmon.serve.rows``).
"""

from __future__ import annotations

from typing import Final, NamedTuple

from dsmon.model import wire
from dsmon.model.records import Record
from dsmon.model.wire import EncodedRecord
from dsmon.store.records.keys import key_digest


class RecordRow(NamedTuple):
    """The columns one record is stored as (order = the INSERT column order)."""

    key: bytes
    run: str
    kind: str
    step: int | None
    ts: str | None
    node: str | None
    rank: int | None
    file: str | None
    line: int | None
    body: str


ROW_COLUMNS = RecordRow._fields
#: Each column's position in a row: writers read the server's plain tuples (:data:`Row`) by
#: position, where a named tuple's field name would cost a lookup a row. Literals, so the
#: type checker knows each column's type (``tests/unit/store/test_store_tally.py`` checks
#: them against :data:`ROW_COLUMNS`).
KEY_AT: Final = 0
RUN_AT: Final = 1
KIND_AT: Final = 2
STEP_AT: Final = 3
TS_AT: Final = 4
RANK_AT: Final = 6
LINE_AT: Final = 8
BODY_AT: Final = 9

#: A row as a plain tuple of :class:`RecordRow`'s columns, in its order: what the ingest
#: server makes of a line, and what every writer takes (a :class:`RecordRow` is one). Building
#: a named tuple of a tuple costs a call and a copy, about a microsecond of the server's per
#: hundred rows, and the garbage collector keeps walking it, where it stops tracking a plain
#: tuple of strings and numbers at its first pass. Writers read a row by position.
Row = tuple[
    bytes, str, str, int | None, str | None, str | None, int | None, str | None, int | None, str
]


class Inserted(NamedTuple):
    """What a batch's insert did: how many of its rows were new, and where their ids start.

    ``first_id``: when every row was new and the backend numbered them in row order, the id
    of the first (row ``i`` got ``first_id + i``), so a write's summary tables take the new
    rows from the batch in hand instead of reading them back. None when some row was stored
    before, or the backend does not promise that order: the new rows are read back by their
    id range.
    """

    new: int
    first_id: int | None = None


def record_row(rec: Record, body: str | None = None) -> RecordRow:
    """The row under which ``rec`` is stored (``body``: its JSON line, if already encoded)."""
    s = rec.src
    if body is None:
        body = wire.encode(rec)
    return RecordRow(
        key_digest(rec), s.run, rec.KIND, rec.step, rec.ts, s.node, s.rank, s.file, s.line, body
    )


def as_row(item: Record | EncodedRecord | RecordRow) -> RecordRow:
    """The row of a record, of a record with its line, or a row made already (as it is)."""
    if isinstance(item, RecordRow):
        return item
    if isinstance(item, EncodedRecord):
        return record_row(*item)
    return record_row(item)


def row_record(body: str) -> Record:
    """Rebuild a record from its stored body."""
    return wire.decode(body)
