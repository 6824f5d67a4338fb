"""Where a time range's GPU samples lie in id order: ``gpu_batches`` as a block index.

Samples are stored in id order, the order they arrive in, with no index on (GPU, time).
Keyed by GPU and time, a live run's 64 GPUs wrote into 64 places of the B-tree every second,
and SQLite's page splits left its pages 89 % full: 7 of the 66.6 bytes a sample took as
written were free space. Appended at the end of the table, pages fill.

A read of a time range finds its rows through ``gpu_batches``, whose rows are blocks: an
id range of samples and the time range they span, as PostgreSQL's BRIN indexes note each
block of a table. The blocks that overlap the range give the id ranges to scan; the time
condition is kept on the rows. A live run's batches join one block every 10 s, so a recent
window is one short id range; a collector sending an outage's samples late adds a block of
its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

#: Gaps of up to this many ids between two ranges are scanned through rather than kept apart.
MERGE_GAP = 4096
#: At most this many ranges in one read: beyond, the two closest are merged (more is scanned).
MAX_RANGES = 32
#: The batches by the time they end: those that can overlap a range starting at a given time.
BATCHES_INDEX = "gpu_batches_t"
BATCHES_INDEX_DDL = f"CREATE INDEX IF NOT EXISTS {BATCHES_INDEX} ON gpu_batches (t_max_ms)"

#: A batch joins the newest block while the block spans at most this long and holds at most
#: :data:`BLOCK_ROWS` samples. One row per batch took 3.5 bytes a sample when each node posts
#: its second of 8 GPUs; a block of 10 s, with its index entry, takes 0.07.
BLOCK_SPAN_MS = 10_000
BLOCK_ROWS = 4096

IdRange = tuple[int, int]


class Tables(Protocol):
    """The GPU tables' reads and writes (``?`` placeholders on both backends)."""

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """The rows of a read."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run a statement."""


class Block(NamedTuple):
    """A row of ``gpu_batches``: an id range of samples, how many, and their time range."""

    last_id: int
    first_id: int
    n: int
    t_min_ms: int
    t_max_ms: int


def note(tables: Tables, batch: Block) -> None:
    """Note a stored batch: in the newest block if it fits there, else as a block of its own.

    Its ids are above every stored one, so the newest block's range grows to take it. A
    late batch (an outage's samples sent afterwards) spans other times: a block of its own.
    """
    found = tables.rows(
        "SELECT last_id, first_id, n, t_min_ms, t_max_ms FROM gpu_batches "
        "ORDER BY last_id DESC LIMIT 1"
    )
    if found:
        newest = Block(*(int(v) for v in found[0]))
        lo, hi = min(newest.t_min_ms, batch.t_min_ms), max(newest.t_max_ms, batch.t_max_ms)
        if hi - lo <= BLOCK_SPAN_MS and newest.n + batch.n <= BLOCK_ROWS:
            tables.execute(
                "UPDATE gpu_batches SET last_id = ?, n = ?, t_min_ms = ?, t_max_ms = ? "
                "WHERE last_id = ?",
                (batch.last_id, newest.n + batch.n, lo, hi, newest.last_id),
            )
            return
    tables.execute("INSERT INTO gpu_batches VALUES (?, ?, ?, ?, ?)", batch)


def id_ranges(tables: Tables, lo_ms: int | None, hi_ms: int | None) -> list[IdRange] | None:
    """The id ranges that hold every sample timed in ``[lo_ms, hi_ms]``; None: the whole table.

    Times are the batches' own (ms since 1970, as stored in ``gpu_batches``).
    """
    if lo_ms is None and hi_ms is None:
        return None
    conds, params = [], []
    if lo_ms is not None:
        conds.append("t_max_ms >= ?")
        params.append(lo_ms)
    if hi_ms is not None:
        conds.append("t_min_ms <= ?")
        params.append(hi_ms)
    found = tables.rows(
        f"SELECT first_id, last_id FROM gpu_batches WHERE {' AND '.join(conds)}", params
    )
    return merged([(int(a), int(b)) for a, b in found])


def merged(spans: list[IdRange]) -> list[IdRange]:
    """``spans`` in id order, overlapping or close ones joined, at most :data:`MAX_RANGES`."""
    out: list[IdRange] = []
    for lo, hi in sorted(spans):
        if out and lo - out[-1][1] <= MERGE_GAP:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    while len(out) > MAX_RANGES:
        gaps = [out[i + 1][0] - out[i][1] for i in range(len(out) - 1)]
        i = gaps.index(min(gaps))
        out[i : i + 2] = [(out[i][0], max(out[i][1], out[i + 1][1]))]
    return out


def clipped(ranges: list[IdRange] | None, lo_id: int | None, hi_id: int | None) -> list[IdRange]:
    """``ranges`` (None: every id) cut to ``[lo_id, hi_id]`` (None: unbounded)."""
    lo = 0 if lo_id is None else lo_id
    hi = 2**62 if hi_id is None else hi_id
    spans = [(lo, hi)] if ranges is None else ranges
    return [(max(a, lo), min(b, hi)) for a, b in spans if max(a, lo) <= min(b, hi)]


def scan_from(ranges: list[IdRange] | None) -> tuple[str, str]:
    """The FROM head and id condition of a read of samples ``s`` over ``ranges``.

    The ranges come first as a VALUES list joined to the table by id (``CROSS JOIN`` keeps
    SQLite from planning it otherwise): each is one seek and a walk in id order. None scans
    the table; an empty list matches nothing.
    """
    if ranges is None:
        return "gpu_samples s", "1 = 1"
    if not ranges:
        return "gpu_samples s", "1 = 0"
    values = ", ".join(f"({int(a)}, {int(b)})" for a, b in ranges)
    return (
        f"(VALUES {values}) AS blk CROSS JOIN gpu_samples s",
        "s.id BETWEEN blk.column1 AND blk.column2",
    )
