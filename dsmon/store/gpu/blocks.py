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

from typing import NamedTuple

from dsmon.store.backend import Db

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


class Block(NamedTuple):
    """A row of ``gpu_batches``: an id range of samples, how many, and their time range."""

    last_id: int
    first_id: int
    n: int
    t_min_ms: int
    t_max_ms: int


def note(db: Db, batch: Block) -> None:
    """Note a stored batch: in the newest block if it fits there, else as a block of its own.

    Its ids are above every stored one, so the newest block's range grows to take it. A
    late batch (an outage's samples sent afterwards) spans other times: a block of its own.
    """
    found = db.rows(
        "SELECT last_id, first_id, n, t_min_ms, t_max_ms FROM gpu_batches "
        "ORDER BY last_id DESC LIMIT 1"
    )
    if found:
        newest = Block(*(int(v) for v in found[0]))
        lo, hi = min(newest.t_min_ms, batch.t_min_ms), max(newest.t_max_ms, batch.t_max_ms)
        if hi - lo <= BLOCK_SPAN_MS and newest.n + batch.n <= BLOCK_ROWS:
            db.execute(
                "UPDATE gpu_batches SET last_id = ?, n = ?, t_min_ms = ?, t_max_ms = ? "
                "WHERE last_id = ?",
                (batch.last_id, newest.n + batch.n, lo, hi, newest.last_id),
            )
            return
    db.execute("INSERT INTO gpu_batches VALUES (?, ?, ?, ?, ?)", batch)


def id_ranges(db: Db, lo_ms: int | None, hi_ms: int | None) -> list[IdRange] | None:
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
    found = db.rows(
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


def max_id(db: Db) -> int:
    """The newest GPU sample id (0 when none)."""
    found = db.rows("SELECT MAX(last_id) FROM gpu_batches")
    return int(found[0][0] or 0) if found else 0


def after(db: Db, after_id: int, limit: int | None) -> tuple[int, int, int | None] | None:
    """Time range (ms) and id bound of the blocks stored after ``after_id`` (None: none).

    The id bound, when not None, is the last id of the blocks that hold ``limit`` new samples
    (a block partly read before counts none: it may hold fewer new ones than it counts).
    """
    batches = db.rows(
        "SELECT last_id, n, t_min_ms, t_max_ms, first_id FROM gpu_batches "
        "WHERE last_id > ? ORDER BY last_id",
        (after_id,),
    )
    if not batches:
        return None
    taken, total = [], 0
    for batch in batches:
        taken.append(batch)
        total += batch[1] if batch[4] > after_id else 0
        if limit is not None and total >= limit:
            break
    id_hi = taken[-1][0] if len(taken) < len(batches) else None
    return min(b[2] for b in taken), max(b[3] for b in taken), id_hi


def times_after(db: Db, after_id: int) -> tuple[int, int] | None:
    """First and last time (ms) of the samples stored after ``after_id``, of every run."""
    found = after(db, after_id, None)
    return None if found is None else (found[0], found[1])


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
