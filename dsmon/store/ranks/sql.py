"""The SQL of the per-rank tables, written once for SQLite and PostgreSQL.

A 64-rank ``dsmon run`` job of 100k steps stores 6.4 million ``rank_step`` records, and a day
of it about 5.5 million heartbeats. Pages and rules never read them: each write brings its
new records into small tables (:mod:`dsmon.store.ranks.tables`), in the same transaction,
with the statements below: the write's new probe records are read once
(:func:`new_probe_records`), the rows of ``rank_steps``, ``rank_comm`` and the heartbeat
tables are made of them in Python (:mod:`dsmon.store.ranks.rows`, which decodes each body
once) and upserted, and the statistics and roll-ups of each step and bucket they touched are
recomputed here from those tables. The records stay in ``records`` as the record of truth
(export, ``after_id`` readers); these tables can always be rebuilt from them.

- ``rank_steps``: one narrow row per (step, rank), the last record of it: busy time
  (``total_ms - comm_ms``, see :mod:`dsmon.analysis.ranks`), step time, whether the rank was
  seen waiting, the engine's skipped-step count and loss scale, the phases' times, the time
  before its forwards (``input_ms``), its time in timed collectives (``coll_ms``), its loss
  and the gradient norm.
- ``rank_comm``: one row per step, collective op, size bucket and group size: the calls and
  bytes of one rank (every rank makes the same calls), the least time a rank spent in them
  (``wire_ms``: the last rank to arrive waits for no one) and the most (``max_ms``). Kept
  with two-sided MIN/MAX as records arrive, so a record stored twice changes nothing.
- ``rank_step_stats``: one row per step, recomputed from its ``rank_steps`` rows whenever a
  rank's record of it arrives: how many ranks reported, the slowest rank and its busy time,
  the median busy time and step time (window functions: neither engine has a median), the
  fastest rank's busy time, the step's wall time (the slowest rank's), the lowest rank's
  loss, the gradient norm, the step's wire time in collectives (``coll_wire_ms``, the sum of
  its ``rank_comm`` rows' ``wire_ms``) and the most time a rank spent in them
  (``coll_max_ms``). ``id`` is the newest
  record taken into the row, so a live reader asks for the rows changed since the id it last
  saw.
- ``rank_stat_blocks``: the ``rank_step_stats`` rows of each whole block of steps, packed in
  one value once the run is past it (:mod:`dsmon.store.blocks`): a first read of a million
  steps unpacks them instead of fetching a million rows (times as numbers, not text). A write
  that changes a step of a packed block drops it.
- ``rank_busy``: each rank's busy time per bucket of 8, 64, 512, 4096 and 32768 steps (count,
  sum, min, max) and the sums of its phases (fwd, bwd, step, the time before its forwards,
  its time in collectives, its step time), each level recomputed from the eight buckets of
  the level below it that the
  write touched: exact although a step's record can be replaced, and a page drawing 300
  buckets over a million steps reads a few thousand rows.
- ``rank_beats``: the id of each rank's newest heartbeat (by time, then line), and
  ``rank_beat_steps`` that of each step a rank was in: at a replay position, the newest
  heartbeat of each rank is that of the newest step up to it.
"""

from __future__ import annotations

import functools

from dsmon.store import blocks
from dsmon.store.dialect import Dialect

#: Steps of a run one :func:`update_stats` statement recomputes: a write's touched steps go
#: 64 to a statement, what is left 16, 4, then 1 at a time (a connection prepares four).
STATS_STEPS = (64, 16, 4, 1)
#: Step-bucket widths of ``rank_busy``, finest first: each is eight of the one before.
BUSY_LEVELS = (8, 64, 512, 4096, 32768)
#: Columns of ``rank_step_stats`` as a reader gets them, in this order.
STAT_COLUMNS = (
    "step",
    "id",
    "ts",
    "ranks",
    "slowest_rank",
    "slowest_ms",
    "median_ms",
    "fastest_ms",
    "wall_ms",
    "median_total_ms",
    "waited",
    "skipped_steps",
    "loss_scale",
    "loss",
    "grad_norm",
    "coll_wire_ms",
    "coll_max_ms",
)
#: The per-rank sums ``rank_busy`` keeps besides the busy time: ``rank_steps`` column ->
#: ``rank_busy`` column. A step without a phase's time adds 0.
PHASE_SUMS = {
    "fwd_ms": "fwd_sum",
    "bwd_ms": "bwd_sum",
    "step_ms": "step_sum",
    "input_ms": "input_sum",
    "coll_ms": "coll_sum",
    "total_ms": "total_sum",
}
#: Columns of ``rank_comm`` as a reader gets them.
COMM_COLUMNS = (
    "step",
    "op",
    "bucket_bytes",
    "group_size",
    "calls",
    "msg_bytes",
    "wire_ms",
    "max_ms",
)


#: The table of ``rank_step_stats``'s packed blocks (:mod:`dsmon.store.blocks`).
STAT_BLOCKS = "rank_stat_blocks"


def ddl(d: Dialect) -> tuple[str, ...]:
    """The per-rank tables (see docs/store.md)."""
    i, r, t = d.integer, d.real, d.text  # ISO times compare as bytes
    return (
        f"""CREATE TABLE IF NOT EXISTS rank_steps (
            run {t} NOT NULL, step {i} NOT NULL, rank {i} NOT NULL, id {i} NOT NULL,
            ts {t}, busy_ms {r}, total_ms {r}, waited {i} NOT NULL,
            skipped_steps {i}, loss_scale {r}, fwd_ms {r}, bwd_ms {r}, step_ms {r},
            input_ms {r}, coll_ms {r}, loss {r}, grad_norm {r},
            PRIMARY KEY (run, step, rank)
        ){d.keyed}""",
        f"""CREATE TABLE IF NOT EXISTS rank_comm (
            run {t} NOT NULL, step {i} NOT NULL, op {t} NOT NULL, bucket_bytes {i} NOT NULL,
            group_size {i} NOT NULL, id {i} NOT NULL, calls {i}, msg_bytes {i},
            wire_ms {r}, max_ms {r},
            PRIMARY KEY (run, step, op, bucket_bytes, group_size)
        ){d.keyed}""",
        f"""CREATE TABLE IF NOT EXISTS rank_step_stats (
            run {t} NOT NULL, step {i} NOT NULL, id {i} NOT NULL, ts {t},
            ranks {i} NOT NULL, slowest_rank {i}, slowest_ms {r}, median_ms {r},
            fastest_ms {r}, wall_ms {r}, median_total_ms {r}, waited {i} NOT NULL,
            skipped_steps {i}, loss_scale {r}, loss {r}, grad_norm {r},
            coll_wire_ms {r}, coll_max_ms {r},
            PRIMARY KEY (run, step)
        ){d.keyed}""",
        "CREATE INDEX IF NOT EXISTS rank_step_stats_run_id ON rank_step_stats (run, id)",
        blocks.ddl(d, STAT_BLOCKS),
        f"""CREATE TABLE IF NOT EXISTS rank_busy (
            run {t} NOT NULL, width {i} NOT NULL, bucket {i} NOT NULL, rank {i} NOT NULL,
            n {i} NOT NULL, sum_ms {r}, min_ms {r}, max_ms {r},
            {", ".join(f"{c} {r}" for c in PHASE_SUMS.values())},
            PRIMARY KEY (run, width, bucket, rank)
        ){d.keyed}""",
        f"""CREATE TABLE IF NOT EXISTS rank_beats (
            run {t} NOT NULL, rank {i} NOT NULL, id {i} NOT NULL, ts {t} NOT NULL,
            line {i} NOT NULL,
            PRIMARY KEY (run, rank)
        ){d.keyed}""",
        f"""CREATE TABLE IF NOT EXISTS rank_beat_steps (
            run {t} NOT NULL, rank {i} NOT NULL, step {i} NOT NULL, id {i} NOT NULL,
            ts {t} NOT NULL, line {i} NOT NULL,
            PRIMARY KEY (run, rank, step)
        ){d.keyed}""",
    )


def new_probe_records(d: Dialect) -> str:
    """The probe records a write stored after id ``?`` that can be placed, in id order.

    A ``rank_step`` needs a rank and a step, a heartbeat a rank and a time. Columns: kind,
    run, step, rank, id, ts, line, and a ``rank_step``'s body (its numbers are read in
    Python, :mod:`dsmon.store.ranks.rows`). The write's id range, not a (run, kind) index.
    """
    return f"""
SELECT kind, run, step, rank, id, ts, line, CASE WHEN kind = 'rank_step' THEN body END
FROM records{d.not_indexed}
WHERE id > ? AND rank IS NOT NULL AND (
    (kind = 'rank_step' AND step IS NOT NULL) OR (kind = 'heartbeat' AND ts IS NOT NULL)
)
ORDER BY id
"""


#: Columns of a ``rank_steps`` row as a write makes it (:func:`dsmon.store.ranks.rows.step_row`).
STEP_COLUMNS = (
    "run", "step", "rank", "id", "ts", "busy_ms", "total_ms", "waited", "skipped_steps",
    "loss_scale", "fwd_ms", "bwd_ms", "step_ms", "input_ms", "loss", "grad_norm", "coll_ms",
)  # fmt: skip
#: Key columns of a ``rank_comm`` row, and the values that follow them.
COMM_KEYS = ("run", "step", "op", "bucket_bytes", "group_size")
COMM_VALUES = ("id", "calls", "msg_bytes", "wire_ms", "max_ms")


def _marks(n: int) -> str:
    return ", ".join(["?"] * n)


def upsert_steps() -> str:
    """Upsert ``rank_steps`` rows (:data:`STEP_COLUMNS`): a step's record sent again wins."""
    cols = ", ".join(STEP_COLUMNS)
    updated = ", ".join(f"{c} = excluded.{c}" for c in STEP_COLUMNS[3:])
    return f"""
INSERT INTO rank_steps ({cols}) VALUES ({_marks(len(STEP_COLUMNS))})
ON CONFLICT (run, step, rank) DO UPDATE SET {updated}
"""


def upsert_comm(d: Dialect) -> str:
    """Merge ``rank_comm`` rows (:data:`COMM_KEYS`, :data:`COMM_VALUES`): least and most time.

    Every rank of a data-parallel group makes the same calls, so a step's calls and bytes are
    any one rank's (the most seen is kept); the times are each rank's, waiting included.
    Two-sided MIN and MAX make a record stored twice change nothing. An unknown size bucket
    or group size is kept as -1 (a key column cannot be NULL).
    """
    cols = ", ".join((*COMM_KEYS, *COMM_VALUES))
    return f"""
INSERT INTO rank_comm ({cols}) VALUES ({_marks(len(COMM_KEYS) + len(COMM_VALUES))})
ON CONFLICT ({", ".join(COMM_KEYS)}) DO UPDATE SET
    id = {d.greatest.format("rank_comm.id", "excluded.id")},
    calls = {d.greatest.format("rank_comm.calls", "excluded.calls")},
    msg_bytes = {d.greatest.format("rank_comm.msg_bytes", "excluded.msg_bytes")},
    wire_ms = {d.least.format("rank_comm.wire_ms", "excluded.wire_ms")},
    max_ms = {d.greatest.format("rank_comm.max_ms", "excluded.max_ms")}
"""


def _median(value: str, pos: str, count: str) -> str:
    """The median of ``value`` over a group whose rows are numbered ``pos`` of ``count``."""
    return (
        f"AVG(CASE WHEN {value} IS NOT NULL AND {pos} IN (({count} + 1) / 2, ({count} + 2) / 2) "
        f"THEN {value} END)"
    )


@functools.cache
def update_stats(d: Dialect, n: int = 1) -> str:
    """Recompute the ``rank_step_stats`` rows of ``n`` steps of a run (parameters: run, steps).

    Run for the steps a write's ``rank_step`` records touched, :data:`STATS_STEPS` to a
    statement: each step is a partition of the window functions and a group of the
    aggregate, so a statement recomputes each of its steps as one of its own would, and the
    windows' sorters are set up once per statement, not once per step. Non-null busy times are
    numbered in ascending order, ties by descending rank, so the last is the slowest rank
    (the lowest-numbered of equals, as pandas' ``idxmax`` picks). The step's loss is its
    lowest rank's (rank 0's, what DeepSpeed's own monitors write); its wire time in
    collectives sums its ``rank_comm`` rows (:func:`upsert_comm` runs first).
    """
    wire = (
        f"(SELECT {d.sum_value.format('c.wire_ms')} FROM rank_comm c "
        "WHERE c.run = r.run AND c.step = r.step)"
    )
    return f"""
WITH r AS (
    SELECT s.run, s.step, s.rank, s.id, s.ts, s.busy_ms, s.total_ms, s.waited,
        s.skipped_steps, s.loss_scale, s.loss, s.grad_norm, s.coll_ms,
        ROW_NUMBER() OVER (
            PARTITION BY s.step ORDER BY (s.busy_ms IS NULL), s.busy_ms, s.rank DESC
        ) AS bi,
        COUNT(s.busy_ms) OVER (PARTITION BY s.step) AS bn,
        ROW_NUMBER() OVER (PARTITION BY s.step ORDER BY (s.total_ms IS NULL), s.total_ms) AS ti,
        COUNT(s.total_ms) OVER (PARTITION BY s.step) AS tn,
        ROW_NUMBER() OVER (PARTITION BY s.step ORDER BY (s.loss IS NULL), s.rank) AS li
    FROM rank_steps s WHERE s.run = ? AND s.step IN ({_marks(n)})
)
INSERT INTO rank_step_stats (run, step, id, ts, ranks, slowest_rank, slowest_ms, median_ms,
    fastest_ms, wall_ms, median_total_ms, waited, skipped_steps, loss_scale, loss, grad_norm,
    coll_wire_ms, coll_max_ms)
SELECT run, step, MAX(id), MAX(ts), MAX(bn), MAX(CASE WHEN bi = bn THEN rank END),
    MAX(busy_ms), {_median("busy_ms", "bi", "bn")}, MIN(busy_ms), MAX(total_ms),
    {_median("total_ms", "ti", "tn")}, {d.sum_count.format("waited")},
    MAX(skipped_steps), MAX(loss_scale), MAX(CASE WHEN li = 1 THEN loss END),
    MAX(grad_norm), {wire}, MAX(coll_ms)
FROM r WHERE true GROUP BY run, step
ON CONFLICT (run, step) DO UPDATE SET
    id = excluded.id, ts = excluded.ts, ranks = excluded.ranks,
    slowest_rank = excluded.slowest_rank, slowest_ms = excluded.slowest_ms,
    median_ms = excluded.median_ms, fastest_ms = excluded.fastest_ms, wall_ms = excluded.wall_ms,
    median_total_ms = excluded.median_total_ms, waited = excluded.waited,
    skipped_steps = excluded.skipped_steps, loss_scale = excluded.loss_scale,
    loss = excluded.loss, grad_norm = excluded.grad_norm,
    coll_wire_ms = excluded.coll_wire_ms, coll_max_ms = excluded.coll_max_ms
"""


def update_busy(d: Dialect, width: int) -> str:
    """Recompute one ``rank_busy`` bucket of ``width`` steps a write touched.

    Parameters: the bucket, the run, and the range it sums: the finest level sums its steps
    of ``rank_steps``, each coarser one its eight buckets of the level below.
    """
    if width == BUSY_LEVELS[0]:
        source = "rank_steps s WHERE s.run = ? AND s.step >= ? AND s.step < ?"
        stats = "COUNT(s.busy_ms), SUM(s.busy_ms), MIN(s.busy_ms), MAX(s.busy_ms)"
        sums = ", ".join(
            d.sum_value.format(f"CASE WHEN s.busy_ms IS NULL THEN 0 ELSE COALESCE(s.{c}, 0) END")
            for c in PHASE_SUMS
        )
    else:
        source = (
            f"rank_busy s WHERE s.run = ? AND s.width = {width // 8} "
            "AND s.bucket >= ? AND s.bucket < ?"
        )
        stats = (
            f"{d.sum_count.format('s.n')}, {d.sum_value.format('s.sum_ms')}, "
            "MIN(s.min_ms), MAX(s.max_ms)"
        )
        sums = ", ".join(d.sum_value.format(f"s.{c}") for c in PHASE_SUMS.values())
    cols = ", ".join(PHASE_SUMS.values())
    updated = ", ".join(f"{c} = excluded.{c}" for c in PHASE_SUMS.values())
    return f"""
INSERT INTO rank_busy (run, width, bucket, rank, n, sum_ms, min_ms, max_ms, {cols})
SELECT s.run, {width}, CAST(? AS {d.integer}), s.rank, {stats}, {sums}
FROM {source}
GROUP BY s.run, s.rank
ON CONFLICT (run, width, bucket, rank) DO UPDATE SET
    n = excluded.n, sum_ms = excluded.sum_ms, min_ms = excluded.min_ms, max_ms = excluded.max_ms,
    {updated}
"""


#: Columns of a ``rank_beats`` row as a write makes it; ``rank_beat_steps`` has ``step``
#: after ``rank``.
BEAT_COLUMNS = ("run", "rank", "id", "ts", "line")


def upsert_beats(table: str = "rank_beats") -> str:
    """Keep each rank's newest heartbeat: by time, then line (as the checklist orders them).

    ``rank_beat_steps``: the newest of each step a rank was in, for a replay position. The
    rows are the write's newest of each (:mod:`dsmon.store.ranks.rows`); one replaces the
    stored row only if it is as new or newer.
    """
    key = "run, rank" if table == "rank_beats" else "run, rank, step"
    n = 5 if table == "rank_beats" else 6
    return f"""
INSERT INTO {table} ({key}, id, ts, line) VALUES ({_marks(n)})
ON CONFLICT ({key}) DO UPDATE SET id = excluded.id, ts = excluded.ts, line = excluded.line
WHERE excluded.ts > {table}.ts
    OR (excluded.ts = {table}.ts AND excluded.line >= {table}.line)
"""


# A live reader's rows changed since an id: few, found by the (run, id) index.
STATS_SINCE = f"""
SELECT {", ".join(STAT_COLUMNS)} FROM rank_step_stats
WHERE run = ? AND id > ? ORDER BY id
"""
# A first read, a page of steps at a time in step order (the primary key), up to a step.
STATS_PAGE = f"""
SELECT {", ".join(STAT_COLUMNS)} FROM rank_step_stats
WHERE run = ? AND step > ? AND step <= ? ORDER BY step LIMIT ?
"""
# The rows of a block of steps, to pack them (from one step, before another).
STATS_BLOCK = f"""
SELECT {", ".join(STAT_COLUMNS)} FROM rank_step_stats
WHERE run = ? AND step >= ? AND step < ? ORDER BY step
"""
# Each rank's newest heartbeat of the newest step it was in up to a step (a replay position).
BEAT_BODIES_UPTO = """
SELECT r.id, r.body FROM rank_beats b JOIN records r ON r.id = (
    SELECT s.id FROM rank_beat_steps s WHERE s.run = b.run AND s.rank = b.rank AND s.step <= ?
    ORDER BY s.step DESC LIMIT 1
)
WHERE b.run = ? ORDER BY b.rank
"""
BEAT_BODIES = """
SELECT r.id, r.body FROM rank_beats b JOIN records r ON r.id = b.id
WHERE b.run = ? ORDER BY b.rank
"""


def busy_read(
    d: Dialect, level: int | None, width: int, step_max: int | None = None
) -> tuple[str, int]:
    """Each rank's busy time per bucket of ``width`` steps, from the roll-up ``level``.

    ``level`` None: from ``rank_steps`` (a run short enough to draw step by step). Up to
    ``step_max`` (a replay position), the roll-up's buckets before it, then the next finer
    level's up to it, and so on, and the last few steps from ``rank_steps``: each part reads
    fewer than eight buckets a rank. Columns: rank, bucket (of ``width``), count, sum, min,
    max; with how many parameters the SQL takes (each part's one: the run).
    """
    parts = _busy_parts(level, width, step_max, _BUSY_ROLLED, _BUSY_STEPS)
    sql = f"""
SELECT rank, b, {d.sum_count.format("n")}, {d.sum_value.format("s")}, MIN(lo), MAX(hi)
FROM ({" UNION ALL ".join(parts)}) AS u GROUP BY rank, b ORDER BY rank, b
"""
    return sql, len(parts)


def phases_read(
    d: Dialect, level: int | None, width: int, step_max: int | None = None
) -> tuple[str, int]:
    """Each rank's phase sums per bucket of ``width`` steps (:data:`PHASE_SUMS`).

    Read as :func:`busy_read` reads its busy time. Columns: rank, bucket, count, then the
    sums in :data:`PHASE_SUMS` order; with how many parameters the SQL takes.
    """
    rolled = ", ".join(["n", *PHASE_SUMS.values()])
    timed = "CASE WHEN busy_ms IS NULL THEN {} ELSE {} END"
    stepped = ", ".join(
        [timed.format(0, 1) + " AS n"]
        + [f"{timed.format(0, f'COALESCE({c}, 0)')} AS {s}" for c, s in PHASE_SUMS.items()]
    )
    parts = _busy_parts(level, width, step_max, rolled, stepped)
    sums = ", ".join(d.sum_value.format(c) for c in PHASE_SUMS.values())
    sql = f"""
SELECT rank, b, {d.sum_count.format("n")}, {sums}
FROM ({" UNION ALL ".join(parts)}) AS u GROUP BY rank, b ORDER BY rank, b
"""
    return sql, len(parts)


#: What :func:`busy_read` takes from a roll-up row, and from a ``rank_steps`` row.
_BUSY_ROLLED = "n, sum_ms AS s, min_ms AS lo, max_ms AS hi"
_BUSY_STEPS = (
    "CASE WHEN busy_ms IS NULL THEN 0 ELSE 1 END AS n, busy_ms AS s, busy_ms AS lo, busy_ms AS hi"
)


def _busy_parts(
    level: int | None, width: int, step_max: int | None, rolled: str, stepped: str
) -> list[str]:
    """The parts of a roll-up read, each a SELECT of ``rank``, the bucket ``b`` and more.

    ``rolled``: the columns taken from a ``rank_busy`` level, ``stepped``: from ``rank_steps``.
    """
    end = None if step_max is None else int(step_max) + 1  # steps before it
    parts, start = [], 0
    for size in [w for w in BUSY_LEVELS if level is not None and w <= level][::-1]:
        stop = None if end is None else end // size * size
        upper = "" if stop is None else f" AND bucket < {stop // size}"
        parts.append(
            f"SELECT rank, bucket * {size} / {int(width)} AS b, {rolled} "
            f"FROM rank_busy WHERE run = ? AND width = {size} "
            f"AND bucket >= {start // size}{upper}"
        )
        if stop is None:
            return parts
        start = stop
    upper = "" if end is None else f" AND step < {end}"
    parts.append(
        f"SELECT rank, step / {int(width)} AS b, {stepped} FROM rank_steps WHERE run = ? "
        f"AND step >= {start}{upper}"
    )
    return parts


def comm_read(d: Dialect, width: int, step_max: int | None = None) -> str:
    """``rank_comm`` summed per bucket of ``width`` steps, op, size bucket and group size.

    Columns: bucket, op, bucket_bytes, group_size, steps (rows summed), calls, msg_bytes,
    wire_ms, max_ms; one parameter (the run).
    """
    upper = "" if step_max is None else f" AND step <= {int(step_max)}"
    return f"""
SELECT step / {int(width)} AS b, op, bucket_bytes, group_size, COUNT(*),
    {d.sum_count.format("calls")}, {d.sum_count.format("msg_bytes")},
    {d.sum_value.format("wire_ms")}, {d.sum_value.format("max_ms")}
FROM rank_comm WHERE run = ?{upper}
GROUP BY step / {int(width)}, op, bucket_bytes, group_size ORDER BY b, op, bucket_bytes
"""
