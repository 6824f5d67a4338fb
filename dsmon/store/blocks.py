"""Rows of a summary table packed in one value, and unpacked by a reader in one go.

Reading a row from the database costs a reader about a microsecond a value: a million
steps of a per-step table, a dozen values each, took seconds, growing with the run, as the
records' pages they summarise did. So the timer tables and the per-rank tables keep each
whole block of steps as one value as well, once the run is past it (``timer_blocks``,
``rank_stat_blocks``), and a first read unpacks those instead of fetching their rows.

A block holds its row count, then its columns one after the other: integers (``q``) and
floats (``d``, NULL as NaN) as 8-byte numbers; times (``n``, ISO 8601 text in the table) after
a word that says how: as 8-byte microseconds since 1970 (NULL as NaT's) when every time of
the block is a plain date and time (what the probe writes), read as ``datetime64[us]`` (the
unit pandas gives such text) without parsing a line; else as their text, one UTF-8 string of lines (NULL as an empty line)
after its byte length, padded to 8 bytes, which the reader parses as it parses the rows'.
Parsing a million times from text took a long run's first look a third of a second, and
grew with the run. A block is packed with the standard library (a store's writer needs no
numpy), in the machine's byte order, as SQLite and PostgreSQL keep their own files.
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dsmon.store.backend import Db
from dsmon.store.dialect import Dialect

if TYPE_CHECKING:  # pandas loads with the first read: the stores' writers never need it
    import pandas as pd

INT, FLOAT, TIME = "q", "d", "u"
#: How a time column is packed: the word before it.
_AS_US, _AS_TEXT = 1, 0
#: NaT as numpy holds it: the NULL of a time packed as microseconds.
NAT = -(2**63)
#: A time packed as microseconds: a plain date and time, to the microsecond at most (what
#: ``datetime.fromisoformat`` reads exactly, and pandas reads as the same moment).
_PLAIN_TIME = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?)?")
_EPOCH = datetime(1970, 1, 1)


def pack(rows: Sequence[Sequence[Any]], kinds: str) -> bytes:
    """``rows``, column ``i`` of kind ``kinds[i]`` (:data:`INT`, :data:`FLOAT`, :data:`TIME`)."""
    out = [array("q", [len(rows)]).tobytes()]
    for col, kind in enumerate(kinds):
        if kind == INT:
            out.append(array("q", (int(r[col]) for r in rows)).tobytes())
        elif kind == FLOAT:
            values = (math.nan if r[col] is None else float(r[col]) for r in rows)
            out.append(array("d", values).tobytes())
        else:
            out.append(_pack_times([r[col] for r in rows]))
    return b"".join(out)


def _pack_times(times: list[Any]) -> bytes:
    """A time column: as microseconds when every time is plain (see the module doc), else text."""
    us = [_microseconds(t) for t in times]
    known = [v for v in us if v is not None]
    if len(known) == len(us):
        return array("q", [_AS_US, *known]).tobytes()
    text = "\n".join("" if t is None else str(t) for t in times).encode()
    return array("q", [_AS_TEXT, len(text)]).tobytes() + text + b"\0" * (-len(text) % 8)


def _microseconds(time: Any) -> int | None:
    """A time's microseconds since 1970 (NULL: :data:`NAT`); None when it is not plain."""
    if time is None:
        return NAT
    if not isinstance(time, str) or not _PLAIN_TIME.fullmatch(time):
        return None
    try:
        since = datetime.fromisoformat(time) - _EPOCH
    except ValueError:  # a day no calendar has (refused before it is stored, but text works)
        return None
    return (since.days * 86_400 + since.seconds) * 1_000_000 + since.microseconds


def unpack(data: bytes, kinds: str) -> list[Any]:
    """The columns of a packed block: numpy arrays, or a list of str for times kept as text.

    Times packed as microseconds come as ``datetime64[us]``; as text, None stands for NULL.
    """
    import numpy as np

    n = int(np.frombuffer(data, dtype=np.int64, count=1)[0])
    at, cols = 8, list[Any]()
    for kind in kinds:
        if kind in (INT, FLOAT):
            dtype = np.int64 if kind == INT else np.float64
            cols.append(np.frombuffer(data, dtype=dtype, count=n, offset=at))
            at += 8 * n
            continue
        how = int(np.frombuffer(data, dtype=np.int64, count=1, offset=at)[0])
        at += 8
        if how == _AS_US:
            cols.append(np.frombuffer(data, dtype=np.int64, count=n, offset=at).view("M8[us]"))
            at += 8 * n
            continue
        size = int(np.frombuffer(data, dtype=np.int64, count=1, offset=at)[0])
        lines = bytes(data[at + 8 : at + 8 + size]).decode().split("\n") if n else []
        cols.append([line or None for line in lines])
        at += 8 + size + (-size % 8)
    return cols


# --- the blocks of a table: which are packed, packed as a write goes past them ---------------

#: Steps of a packed block.
BLOCK_STEPS = 4096
#: Steps a write must reach past a block's end before the block is packed: a rank's line of
#: a step may come after a later step's lines of another rank.
SEAL_AFTER = 64


def ddl(d: Dialect, table: str) -> str:
    """A table of packed blocks: one row per run and block (``block * BLOCK_STEPS`` on)."""
    i, t = d.integer, d.text
    return f"""CREATE TABLE IF NOT EXISTS {table} (
            run {t} NOT NULL, block {i} NOT NULL, n {i} NOT NULL, data {d.blob} NOT NULL,
            PRIMARY KEY (run, block)
        ){d.keyed}"""


#: The rows of a run's steps from one step to another (not included), to pack them.
RowsOf = Callable[[int, int], Sequence[Sequence[Any]]]


def repack(
    db: Db, table: str, run: str, steps: Collection[int], rows_of: RowsOf, kinds: str
) -> None:
    """Drop the packed blocks of ``steps`` (changed); pack the blocks the run is past now.

    Past: :data:`SEAL_AFTER` steps beyond the block's end, counted from the newest of
    ``steps``. From the block before the lowest of ``steps`` on: a block is packed by the
    first write past it, which may not touch it.
    """
    size = BLOCK_STEPS
    touched = sorted({step // size for step in steps})
    db.execute_many(f"DELETE FROM {table} WHERE run = ? AND block = ?", [(run, b) for b in touched])
    past = (max(steps) - SEAL_AFTER) // size  # blocks before it are whole
    first = touched[0] - 1
    if first >= past:
        return
    query = f"SELECT block FROM {table} WHERE run = ? AND block >= ? AND block <= ?"
    packed = {int(b) for (b,) in db.rows(query, (run, first, past - 1))}
    insert = f"INSERT INTO {table} (run, block, n, data) VALUES (?, ?, ?, ?)"
    for block in range(first, past):
        if block not in packed and (rows := rows_of(block * size, (block + 1) * size)):
            db.execute(insert, (run, block, len(rows), pack(rows, kinds)))


def packed_blocks(db: Db, table: str, run: str, step_end: int) -> list[tuple[int, bytes]]:
    """A run's packed blocks of steps before ``step_end``: (first step, data), in step order."""
    last = step_end // BLOCK_STEPS - 1  # the last block wholly before step_end
    query = f"SELECT block, data FROM {table} WHERE run = ? AND block <= ? ORDER BY block"
    return [(int(b) * BLOCK_STEPS, bytes(data)) for b, data in db.rows(query, (run, last))]


def joined(parts: Sequence[dict[str, Any]], columns: Sequence[str]) -> pd.DataFrame:
    """The rows of ``parts`` (each its ``columns``: arrays or series of one length) as a frame.

    The parts of a first read are a long run's packed blocks and the rows between them:
    joining a frame per part, or building one of the joined columns, copies every value
    twice, as pandas gathers the float columns into one block. Here the columns that are
    float arrays in every part are copied once, into that block; the others are joined by
    numpy when their parts share a type, else by pandas (times of several units or with a
    zone), as joining the parts' frames would.
    """
    import numpy as np
    import pandas as pd

    parts = [p for p in parts if len(p[columns[0]])] or list(parts[:1])
    floats = [
        c for c in columns
        if all(isinstance(p[c], np.ndarray) and p[c].dtype == np.float64 for p in parts)
    ]  # fmt: skip
    block = np.empty((len(floats), sum(len(p[columns[0]]) for p in parts)))
    at = 0
    for p in parts:
        n = len(p[columns[0]])
        for i, c in enumerate(floats):
            block[i, at : at + n] = p[c]
        at += n
    out = pd.DataFrame(block.T, columns=floats, copy=False)
    for pos, col in enumerate(columns):
        if col in floats:
            continue
        got = [p[col] for p in parts]
        if all(isinstance(g, np.ndarray) and g.dtype == got[0].dtype for g in got):
            out.insert(pos, col, np.concatenate(got) if len(got) > 1 else np.array(got[0]))
        else:
            out.insert(pos, col, pd.concat([pd.Series(g) for g in got], ignore_index=True))
    return out
