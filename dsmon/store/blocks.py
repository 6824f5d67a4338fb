"""Rows of a summary table packed in one value, and unpacked by a reader in one go.

Reading a row from the database costs a reader about a microsecond a value: a million
steps of a per-step table, a dozen values each, took seconds, growing with the run, as the
records' pages they summarise did. So the timer tables and the per-rank tables keep each
whole block of steps as one value as well, once the run is past it (``timer_blocks``,
``rank_stat_blocks``), and a first read unpacks those instead of fetching their rows.

A block holds its row count, then its columns one after the other: integers (``q``) and
floats (``d``, NULL as NaN) as 8-byte numbers, texts (``t``: times) as one UTF-8 string of
lines (NULL as an empty line) after its byte length, padded to 8 bytes. It is packed with the
standard library (a store's writer needs no numpy), in the machine's byte order, as SQLite
and PostgreSQL keep their own files.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Collection, Sequence
from typing import Any

from dsmon.store.backend import Db
from dsmon.store.dialect import Dialect

INT, FLOAT, TEXT = "q", "d", "t"


def pack(rows: Sequence[Sequence[Any]], kinds: str) -> bytes:
    """``rows``, column ``i`` of kind ``kinds[i]`` (:data:`INT`, :data:`FLOAT`, :data:`TEXT`)."""
    out = [array("q", [len(rows)]).tobytes()]
    for col, kind in enumerate(kinds):
        if kind == INT:
            out.append(array("q", (int(r[col]) for r in rows)).tobytes())
        elif kind == FLOAT:
            values = (math.nan if r[col] is None else float(r[col]) for r in rows)
            out.append(array("d", values).tobytes())
        else:
            text = "\n".join("" if r[col] is None else str(r[col]) for r in rows).encode()
            out.append(array("q", [len(text)]).tobytes() + text + b"\0" * (-len(text) % 8))
    return b"".join(out)


def unpack(data: bytes, kinds: str) -> list[Any]:
    """The columns of a packed block: numpy arrays, and a list of str (None: NULL) per text."""
    import numpy as np

    n = int(np.frombuffer(data, dtype=np.int64, count=1)[0])
    at, cols = 8, list[Any]()
    for kind in kinds:
        if kind in (INT, FLOAT):
            dtype = np.int64 if kind == INT else np.float64
            cols.append(np.frombuffer(data, dtype=dtype, count=n, offset=at))
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
